#!/usr/bin/env bash
# Point-to-point bandwidth of terse's UCX transport next to `ucx_perftest -t tag_bw` on the same
# UCX transport, in the same run, loopback only (UCX_NET_DEVICES=lo).
#
#   scripts/bench-p2p.sh                      (terse from $TERSE_BUILD_DIR, default build)
#   TLS="tcp shm" SIZES="1048576 ..." REPEATS=3 WINDOW=16 scripts/bench-p2p.sh
#
# Each (transport, size) point runs both programs REPEATS times, alternating, and keeps each
# one's best: the host is shared and noisy, and the best run is the closest to what each can do.
# Prints a markdown table with the ratio terse / ucx_perftest.
set -euo pipefail
. "$(dirname "$0")/lib/perftest.sh"
cd "$(dirname "$0")/.."

[[ $# -eq 0 ]] || { echo "bench-p2p: no arguments; the build directory is \$TERSE_BUILD_DIR (default build)" >&2; exit 2; }
BUILD=${TERSE_BUILD_DIR:-build}
TLS=${TLS:-"tcp shm"}
SIZES=${SIZES:-"65536 1048576 4194304 16777216 67108864"}
REPEATS=${REPEATS:-3}
WINDOW=${WINDOW:-16}
BYTES_PER_POINT=${BYTES_PER_POINT:-$((1024 * 1024 * 1024))}

RUN="$BUILD/bin/terse-run"
BENCH="$BUILD/bin/terse-bench"
for tool in "$RUN" "$BENCH"; do
  [[ -x $tool ]] || { echo "bench-p2p: $tool not built (cmake --build $BUILD, or set TERSE_BUILD_DIR)" >&2; exit 1; }
done
command -v ucx_perftest >/dev/null || { echo "bench-p2p: ucx_perftest not found (apt install ucx-utils)" >&2; exit 1; }

export UCX_NET_DEVICES=lo

# MB/s of one terse-bench p2p run at one size.
terse_mbs() {
  local size=$1 iters=$2
  timeout 300 "$RUN" -n 2 "$BENCH" p2p -b "$size" -e "$size" -n "$iters" -w 20 -W "$WINDOW" |
    awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print $5 }'
}

max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b > a) ? b : a }'; }

echo "| UCX_TLS | bytes | messages | ucx_perftest tag_bw MB/s | terse p2p MB/s | terse / perftest |"
echo "|---|---:|---:|---:|---:|---:|"
for tls in $TLS; do
  export UCX_TLS=$tls
  for size in $SIZES; do
    iters=$((BYTES_PER_POINT / size))
    ((iters < 50)) && iters=50
    ((iters > 20000)) && iters=20000
    best_ucx="" best_terse=""
    for ((rep = 0; rep < REPEATS; ++rep)); do
      best_ucx=$(max "$best_ucx" "$(perftest_mbs "$size" "$iters" -w 20)")
      best_terse=$(max "$best_terse" "$(terse_mbs "$size" "$iters")")
    done
    ratio=$(awk -v t="$best_terse" -v u="$best_ucx" 'BEGIN { printf "%.2f", (u > 0) ? t / u : 0 }')
    printf "| %s | %d | %d | %.0f | %.0f | %s |\n" "$tls" "$size" "$iters" "$best_ucx" \
      "$best_terse" "$ratio"
  done
done
