#!/usr/bin/env bash
# Does TERSE_NET_LOSSLESS pay? One-way bandwidth of the NCCL net plugin (terse-netplugin-bench)
# with lossless compression off and on, on the same link with the same payload, the two run
# alternately REPEATS times so the machine's load of the moment hits both alike. Links: loopback
# over UCX tcp and sm, and (as root) a TCP link shaped to R Gbit/s between two network namespaces
# (veth pairs on a bridge in its own namespace, tc tbf on both ends: scripts/lib/netns.sh, as
# scripts/bench-network.sh uses it), torn down on every exit path.
#
#   scripts/bench-netplugin-lossless.sh                 # tcp, sm, 1 Gbit/s; 1 MiB; every payload
#   LINKS="tbf" RATES="1 10" PAYLOADS="sparse90 bf16" SIZES="512K 4M" REPEATS=5 \
#     scripts/bench-netplugin-lossless.sh
#   PLUGIN=/path/to/other/libnccl-net-terse.so ...   # measure another build of the plugin
#
# Payloads (terse-netplugin-bench --payload): fp32/fp16/bf16 gradients drawn from N(0, 1e-3),
# sparse90 (fp32, 90% zeros), random bytes. MB/s are MiB of message bytes per second (what NCCL
# moves), whatever went on the wire; "wire" is raw/wire bytes of the compressed run as the plugin
# counted them. Exit status 77: no namespaces here (the loopback rows are still printed).
set -euo pipefail
. "$(dirname "$0")/lib/netplugin-bench.sh"
. "$(dirname "$0")/lib/netns.sh"
netbench_priority "$@"
cd "$(dirname "$0")/.."
build_dir=${TERSE_BUILD_DIR:-build}
netbench_build
bench=$(realpath "$build_dir/bin/terse-netplugin-bench")

LINKS=${LINKS:-"tcp sm tbf"}
RATES=${RATES:-1}
PAYLOADS=${PAYLOADS:-"fp32 fp16 bf16 sparse90 random"}
SIZES=${SIZES:-1M}
REPEATS=${REPEATS:-3}
BYTES=${BYTES:-512M}  # per loopback measurement; shaped links move ~2 s worth at their rate
MIN_BYTES=${TERSE_NET_LOSSLESS_MIN_BYTES:-65536}
prefix=terse-nl
export UCX_WARN_UNUSED_ENV_VARS=n TERSE_NET_LOSSLESS_MIN_BYTES=$MIN_BYTES

mbps() { sed -n 's/^netplugin size=.*MBps=\([0-9.]*\).*/\1/p'; }
wire() { sed -n 's/^netplugin lossless:.*(\([0-9.]*\)x)$/\1/p'; }

# ---- namespaces (tbf links) --------------------------------------------------------------------
created=0
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  ((created)) && netns_delete "$prefix"
  [[ -n ${xdir:-} ]] && rm -rf "$xdir"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
xdir=$(mktemp -d /tmp/terse-nl-XXXXXX)

namespaces_ok() {
  netns_usable || { echo "bench-netplugin-lossless: shaped links skipped: $NETNS_ERROR" >&2; return 1; }
  if [[ -n $(netns_list "$prefix") ]]; then
    echo "bench-netplugin-lossless: namespaces $prefix-* exist (another run?); remove them with ip netns del" >&2
    return 1
  fi
  return 0
}

setup_namespaces() {
  created=1
  netns_setup "$prefix" 10.214.0 2 && netns_wait_reachable "$prefix" 10.214.0 2 ||
    { echo "bench-netplugin-lossless: $NETNS_ERROR" >&2; exit 1; }
}

shape() {  # rate in Gbit/s
  netns_shape "$prefix" 2 "$1" || { echo "bench-netplugin-lossless: $NETNS_ERROR" >&2; exit 1; }
}

# ---- one measurement ---------------------------------------------------------------------------
once() {  # link lossless payload size bytes -> the bench's stdout
  local link=$1 on=$2 payload=$3 size=$4 bytes=$5
  local args=(--sizes "$size" --bytes "$bytes" --payload "$payload" --warmup 8)
  [ -n "${PLUGIN:-}" ] && args+=(--plugin "$(realpath "$PLUGIN")")
  if [ "$link" = tbf ]; then
    local dir out
    dir=$(mktemp -d "$xdir/run-XXXXXX")  # fresh handles for every run
    local env=(env UCX_NET_DEVICES=eth0 UCX_TLS=tcp TERSE_NET_LOSSLESS="$on")
    ip netns exec "$prefix-h2" "${env[@]}" timeout 600 "$bench" "${args[@]}" --rank 1 --exchange "$dir" >/dev/null &
    local receiver=$!
    out=$(ip netns exec "$prefix-h1" "${env[@]}" timeout 600 "$bench" "${args[@]}" --rank 0 --exchange "$dir" || true)
    wait "$receiver" || true
    echo "$out"
  else
    UCX_NET_DEVICES=lo UCX_TLS=$link TERSE_NET_LOSSLESS=$on timeout 600 "$bench" "${args[@]}" || true
  fi
}

echo "# TERSE_NET_LOSSLESS off vs on ($(date -u +%F), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)," \
     "UCX $(ucx_info -v | sed -n 's/# Version //p'), zstd level 1, threshold $MIN_BYTES B)"
echo
echo "| link | payload | size | off MB/s (median of $REPEATS) | on MB/s (median) | on/off (median of paired) | wire ratio |"
echo "|---|---|---|---|---|---|---|"
skipped=0
links=()
for l in $LINKS; do
  if [ "$l" = tbf ]; then
    if namespaces_ok; then
      setup_namespaces
      for r in $RATES; do links+=("tbf:$r"); done
    else
      skipped=1
    fi
  else
    links+=("$l")
  fi
done
for l in "${links[@]}"; do
  link=${l%%:*}
  bytes=$BYTES
  label="loopback $link"
  if [ "$link" = tbf ]; then
    rate=${l#tbf:}
    shape "$rate"
    bytes=$(awk -v r="$rate" 'BEGIN { printf "%d", r * 1e9 / 8 * 2 }')
    label="tcp, tbf ${rate} Gbit/s"
  fi
  for payload in $PAYLOADS; do
    for size in $SIZES; do
      off=(); on=(); ratio=()
      for _ in $(seq 1 "$REPEATS"); do
        off+=("$(once "$link" 0 "$payload" "$size" "$bytes" | mbps)")
        o=$(once "$link" 1 "$payload" "$size" "$bytes")
        on+=("$(echo "$o" | mbps)")
        ratio+=("$(echo "$o" | wire)")
      done
      echo "raw $label $payload $size off: ${off[*]} on: ${on[*]} wire: ${ratio[*]}" >&2
      paired=$(for i in "${!off[@]}"; do
                 awk -v a="${on[$i]:-0}" -v b="${off[$i]:-0}" 'BEGIN { if (b > 0 && a > 0) printf "%.3f\n", a / b }'
               done | median)
      printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$label" "$payload" "$size" \
        "$(printf '%s\n' "${off[@]}" | median)" "$(printf '%s\n' "${on[@]}" | median)" \
        "$(awk -v p="$paired" 'BEGIN { if (p == "n/a") print p; else printf "%.2f", p }')" \
        "$(printf '%s\n' "${ratio[@]}" | median)"
    done
  done
done
((skipped)) && exit 77
exit 0
