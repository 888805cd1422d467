#!/usr/bin/env bash
# Issue #18: `terse-run -n 2` with no UCX_* variables puts its two ranks on shared memory, as
# terse's own transport report says: each rank's INFO line names the transports UCX chose for
# its same-node peer, and terse-bench prints the transport in its header.
#   default_shm_test.sh TERSE_RUN TERSE_BENCH
set -euo pipefail
run=$1 bench=$2
# What a user who set no UCX variable runs with (ctest or the CI may have set some).
for v in $(env | sed -n 's/^\(UCX_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
out=$(TERSE_DEBUG=INFO TERSE_DEBUG_SUBSYS=NET "$run" -n 2 -- \
  "$bench" allreduce -b 4K -e 4K --codec none -n 2 -w 1 2>&1) || {
  echo "$out"
  echo "FAIL: terse-run -n 2 terse-bench failed"
  exit 1
}
status=0
for r in 0 1; do
  line=$(grep -E "rank $r: same-node ranks $((1 - r)) over [a-z0-9_,]+ \(shared memory\)" <<<"$out") || {
    echo "FAIL: rank $r does not report shared memory to rank $((1 - r))"
    status=1
  }
  echo "${line:-}"
done
grep -E "^\[0\] # terse-bench allreduce: 2 ranks over ucx\(all; node: [a-z0-9_,]+ shared memory\)" <<<"$out" || {
  echo "FAIL: terse-bench's header does not show shared memory"
  status=1
}
[ "$status" = 0 ] || echo "$out"
exit "$status"
