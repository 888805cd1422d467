#!/usr/bin/env bash
# A world with more ranks on a host than the CPUs they may run on makes each rank's waits yield
# after every poll (transport/src/ucx.cc, choosePollsPerYield): a spinning rank would otherwise
# hold the CPU its sender needs. Pinned to one CPU, terse-run -n 2 is such a world; each rank
# says so at INFO and the allreduce completes.
#   oversubscribed_yield_test.sh TERSE_RUN TERSE_BENCH
set -euo pipefail
run=$1 bench=$2
command -v taskset >/dev/null || { echo "SKIP: no taskset"; exit 77; }
out=$(TERSE_DEBUG=INFO TERSE_DEBUG_SUBSYS=NET taskset -c 0 "$run" -n 2 -- \
  "$bench" allreduce -b 4K -e 4K --codec none -n 20 -w 2 2>&1) || {
  echo "$out"
  echo "FAIL: terse-run -n 2 terse-bench on one CPU failed"
  exit 1
}
status=0
for r in 0 1; do
  grep -E "rank $r: 2 ranks of this world on this host and 1 CPUs for this one: waits yield after every poll" <<<"$out" || {
    echo "FAIL: rank $r does not say its waits yield after every poll"
    status=1
  }
done
[ "$status" = 0 ] || echo "$out"
exit "$status"
