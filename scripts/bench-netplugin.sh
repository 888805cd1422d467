#!/usr/bin/env bash
# Bandwidth of the NCCL net plugin against `ucx_perftest -t tag_bw` on the same UCX transport,
# loopback only. For each transport and size the two run alternately REPEATS times (so load
# from other processes hits both alike); the table shows medians and plugin/perftest.
#
#   scripts/bench-netplugin.sh                      # tcp and sm, 1 MiB / 4 MiB / 16 MiB
#   TLS_LIST=tcp SIZES="1M 8M" REPEATS=7 scripts/bench-netplugin.sh
#   PERFTEST_FLAGS="-M serialized" ...   # perftest in the worker thread mode the plugin uses
#
# Both sides get the same UCX settings: UCX_NET_DEVICES=lo, UCX_TLS, UCX_RNDV_SCHEME=put_zcopy
# (the plugin's default; see docs/nccl-plugin.md), a window of 32 messages in flight, and peer
# error handling where the plugin uses it (tcp; UCX 1.13's shared memory has none).
set -euo pipefail
. "$(dirname "$0")/lib/netplugin-bench.sh"
. "$(dirname "$0")/lib/perftest.sh"
netbench_priority "$@"
cd "$(dirname "$0")/.."
build_dir=${TERSE_BUILD_DIR:-build}
netbench_build

TLS_LIST=${TLS_LIST:-"tcp sm"}
SIZES=${SIZES:-"1M 4M 16M"}
REPEATS=${REPEATS:-5}
BYTES=${BYTES:-1G}   # per measurement
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n UCX_RNDV_SCHEME=${UCX_RNDV_SCHEME:-put_zcopy}

bytes_of() {
  case $1 in
    *K|*k) echo $(( ${1%[Kk]} * 1024 ));;
    *M|*m) echo $(( ${1%[Mm]} * 1048576 ));;
    *G|*g) echo $(( ${1%[Gg]} * 1073741824 ));;
    *) echo "$1";;
  esac
}

perftest_once() {  # tls size iters -> MB/s (overall); "" when ucx_perftest never ran
  local flags=(-w 16 -O 32)
  [ "$1" = tcp ] && flags+=(-e)
  # shellcheck disable=SC2086
  UCX_TLS=$1 perftest_mbs "$2" "$3" "${flags[@]}" ${PERFTEST_FLAGS:-} || true
}

plugin_once() {  # tls size -> MB/s
  UCX_TLS=$1 "$build_dir/bin/terse-netplugin-bench" --sizes "$2" --bytes "$BYTES" 2>/dev/null |
    sed -n 's/.*MBps=\([0-9.]*\).*/\1/p'
}

echo "# terse NCCL net plugin vs ucx_perftest tag_bw ${PERFTEST_FLAGS:-}, loopback ($(date -u +%F), $(nproc) cores," \
     "load $(cut -d' ' -f1 /proc/loadavg), UCX $(ucx_info -v | sed -n 's/# Version //p'))"
echo
echo "| UCX_TLS | size | plugin MB/s (median of $REPEATS) | ucx_perftest MB/s (median) | ratio of medians | median of paired ratios |"
echo "|---|---|---|---|---|---|"
for tls in $TLS_LIST; do
  for s in $SIZES; do
    size=$(bytes_of "$s")
    iters=$(( $(bytes_of "$BYTES") / size ))
    [ "$iters" -lt 20 ] && iters=20
    p=(); q=()
    for _ in $(seq 1 "$REPEATS"); do
      p+=("$(plugin_once "$tls" "$size")")
      q+=("$(perftest_once "$tls" "$size" "$iters")")
    done
    echo "raw $tls $s plugin: ${p[*]} perftest: ${q[*]}" >&2
    pm=$(printf '%s\n' "${p[@]}" | median)
    qm=$(printf '%s\n' "${q[@]}" | median)
    ratio=$(awk -v a="$pm" -v b="$qm" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
    # Each plugin run and the perftest run right after it share the machine's load of the moment.
    paired=$(for i in "${!p[@]}"; do
               awk -v a="${p[$i]}" -v b="${q[$i]}" 'BEGIN { if (b > 0) printf "%.3f\n", a / b }'
             done | median)
    echo "| $tls | $s | $pm | $qm | $ratio | $(printf '%.2f' "$paired") |"
  done
done
