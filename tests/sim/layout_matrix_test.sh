#!/usr/bin/env bash
# terse-sim over a matrix of layouts: node counts x ranks per node x codecs x algorithms (flat,
# twolevel, auto), at small sizes cut into many segments (TERSE_SEGMENT_BYTES and
# TERSE_TWOLEVEL_SEGMENT_BYTES small), so that the pipelines, the agreement's dissemination
# (above TERSE_AGREEMENT_DIRECT_RANKS) and the transport's mailbox pools are all exercised.
# Every run must exit 0, print its result row and write nothing to stderr: SimGrid's warnings
# ("Comm freed before its completion", a backtrace) and terse-sim's errors both fail it, as
# does a crash. The simulated times are not checked here (they are deterministic; other tests
# check them), only that every layout runs.
#   layout_matrix_test.sh TERSE_SIM [quick]
# quick: a smaller matrix (the sanitizer stage, where each run is several times slower).
set -uo pipefail
sim=${1:?usage: layout_matrix_test.sh TERSE_SIM [quick]}
mode=${2:-full}

# Each entry: nodes ranks-per-node. Eight ranks a node is the layout users simulate first;
# 5 x 8 = 40 ranks puts the agreement above its direct limit of 32 and gave the race of
# SimWorld::takeSlot (docs/simulation.md) its crashes. quick stays at 16 ranks and below: under
# ASan every actor is an OS thread and each switch a hand-over between threads, 5-10x slower,
# and what ASan checks there is terse's code, which the small worlds run through the same paths
# (SimGrid's own accesses, where that race did its damage, are not instrumented).
if [[ $mode == quick ]]; then
  layouts=("2 1" "3 2" "2 4" "2 8")
  codecs=(none int8 onebit)
else
  layouts=("2 1" "4 1" "2 2" "3 2" "16 2" "2 4" "3 4" "6 4" "2 8" "3 8" "5 8" "8 8")
  codecs=(none fp16 int8 int4 topk onebit)
fi
algos=(flat twolevel auto)
bytes=1M
export TERSE_SEGMENT_BYTES=65536 TERSE_TWOLEVEL_SEGMENT_BYTES=65536

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Under LeakSanitizer (scripts/sanitize.sh): SimGrid's own leaks (tests/sim/lsan.supp) are
# suppressed too, merged with the suppressions already given, the one file LSan reads.
if [[ ${LSAN_OPTIONS:-}${ASAN_OPTIONS:-} == *=* ]]; then
  cat "$(dirname "$0")/lsan.supp" >"$tmp/lsan.supp"
  [[ ${LSAN_OPTIONS:-} =~ suppressions=([^:]*) ]] && cat "${BASH_REMATCH[1]}" >>"$tmp/lsan.supp"
  export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$tmp/lsan.supp"
fi
runs=0
fails=0
start=$(date +%s)
for layout in "${layouts[@]}"; do
  read -r nodes rpn <<<"$layout"
  world=$((nodes * rpn))
  for codec in "${codecs[@]}"; do
    for algo in "${algos[@]}"; do
      # Two-level needs several ranks on a node (terse-sim says so and fails otherwise).
      [[ $algo == twolevel && $rpn -eq 1 ]] && continue
      args=(--world "$world" --ranks-per-node "$rpn" --bytes "$bytes" --codec "$codec" --algo "$algo")
      runs=$((runs + 1))
      "$sim" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
      rc=$?
      if [[ $rc -ne 0 || -s $tmp/err ]] || ! grep -q '^ *1048576 ' "$tmp/out"; then
        fails=$((fails + 1))
        echo "FAIL (exit $rc): TERSE_SEGMENT_BYTES=65536 TERSE_TWOLEVEL_SEGMENT_BYTES=65536 $sim ${args[*]}"
        head -c 2000 "$tmp/err"
        echo
      fi
    done
  done
done
echo "$runs runs, $fails failed, $(($(date +%s) - start)) s"
[[ $fails -eq 0 ]] && echo PASS
[[ $fails -eq 0 ]]
