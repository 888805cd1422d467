#!/usr/bin/env bash
# The layouts of issue 44 (finding 7) on which terse-sim crashed: the put issuers of several
# hosts grew one receiver's mailbox pool at the same simulated time and two of them took the
# same mailbox (SimWorld::takeSlot, docs/simulation.md "The transport"). Each must exit 0,
# print its result row and write nothing to stderr (SimGrid's "Comm freed before its
# completion" warning, a backtrace or a crash all fail it). Before the fix (2026-11-29):
#   64 ranks, 8 a node, 64 MiB int8 two-level: abort, "corrupted size vs. prev_size" or
#     SimGrid's "Cannot copy 7 bytes: must be sizeof(void*)";
#   40 ranks, 8 a node, 16 MiB int8 two-level in 1 MiB segments: segmentation fault (the
#     smallest two-level layout found that crashed);
#   16 ranks, 8 a node, 64 MiB int8 auto: SimGrid's warning with a backtrace per freed get (the
#     smallest world; the user's machine crashed on it).
set -uo pipefail
sim=${1:?usage: layout_regression_test.sh TERSE_SIM}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Under LeakSanitizer (scripts/sanitize.sh): SimGrid's own leaks (tests/sim/lsan.supp) are
# suppressed too, merged with the suppressions already given, the one file LSan reads.
if [[ ${LSAN_OPTIONS:-}${ASAN_OPTIONS:-} == *=* ]]; then
  cat "$(dirname "$0")/lsan.supp" >"$tmp/lsan.supp"
  [[ ${LSAN_OPTIONS:-} =~ suppressions=([^:]*) ]] && cat "${BASH_REMATCH[1]}" >>"$tmp/lsan.supp"
  export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$tmp/lsan.supp"
fi
fails=0
check() { # [VAR=value...] -- terse-sim args...
  local env=()
  while [[ $1 != -- ]]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" "$sim" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 0 || -s $tmp/err ]] || ! grep -qE '^ +[0-9]+ +[0-9]+ +float' "$tmp/out"; then
    echo "FAIL (exit $rc): ${env[*]} terse-sim $*"
    head -c 2000 "$tmp/err"
    echo
    fails=$((fails + 1))
  else
    echo "ok: ${env[*]} terse-sim $*"
  fi
}
check -- --world 64 --ranks-per-node 8 --nic-gbit 100 --bytes 64M --codec int8 --algo twolevel
check TERSE_TWOLEVEL_SEGMENT_BYTES=1048576 -- --world 40 --ranks-per-node 8 --bytes 16M \
  --codec int8 --algo twolevel
check -- --world 16 --ranks-per-node 8 --bytes 64M --codec int8 --algo auto
[[ $fails -eq 0 ]] && echo PASS
[[ $fails -eq 0 ]]
