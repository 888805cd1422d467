#!/usr/bin/env bash
# Does TERSE_NET_LOSSLESS pay? One-way bandwidth of the NCCL net plugin (terse-netplugin-bench)
# with lossless compression off and on, on the same link with the same payload, the two run
# alternately REPEATS times so the machine's load of the moment hits both alike. Links: loopback
# over UCX tcp and sm, and (as root) a TCP link shaped to R Gbit/s between two network namespaces
# (veth pairs on a bridge in its own namespace, tc tbf on both ends, as scripts/bench-network.sh
# builds them), torn down on every exit path.
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
delete_namespaces() {
  local ns pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(br|h1|h2)\$" || true); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || echo "bench-netplugin-lossless: could not delete $ns" >&2
  done
}
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  ((created)) && delete_namespaces
  [[ -n ${xdir:-} ]] && rm -rf "$xdir"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
xdir=$(mktemp -d /tmp/terse-nl-XXXXXX)

namespaces_ok() {
  [ "$(id -u)" -eq 0 ] || { echo "bench-netplugin-lossless: shaped links need root (network namespaces); skipped" >&2; return 1; }
  ip netns list >/dev/null 2>&1 || { echo "bench-netplugin-lossless: 'ip netns' does not work here; skipped" >&2; return 1; }
  if ip netns list 2>/dev/null | awk '{print $1}' | grep -qE "^${prefix}-"; then
    echo "bench-netplugin-lossless: namespaces $prefix-* exist (another run?); remove them with ip netns del" >&2
    return 1
  fi
  return 0
}

setup_namespaces() {
  created=1
  ip netns add "$prefix-br"
  ip -n "$prefix-br" link set lo up
  ip -n "$prefix-br" link add br0 type bridge
  ip -n "$prefix-br" link set br0 up
  local i
  for i in 1 2; do
    ip netns add "$prefix-h$i"
    ip -n "$prefix-h$i" link set lo up
    ip -n "$prefix-br" link add "p$i" type veth peer name eth0 netns "$prefix-h$i"
    ip -n "$prefix-br" link set "p$i" master br0 up
    ip -n "$prefix-h$i" addr add "10.214.0.$i/24" dev eth0
    ip -n "$prefix-h$i" link set eth0 up
  done
  local tries
  for ((tries = 0; tries < 50; tries++)); do
    err=$(ip netns exec "$prefix-h1" timeout 1 bash -c "exec 3<>/dev/tcp/10.214.0.2/9" 2>&1 || true)
    [[ $err == *refused* ]] && return 0
    sleep 0.1
  done
  echo "bench-netplugin-lossless: $prefix-h1 cannot reach 10.214.0.2: $err" >&2
  exit 1
}

shape() {  # rate in Gbit/s; 1 ms bucket (at least 256 KiB), 50 ms queue
  local rate=$1 burst i
  burst=$(awk -v r="$rate" 'BEGIN { b = r * 1e9 / 8 / 1000; if (b < 262144) b = 262144; printf "%d", b }')
  for i in 1 2; do
    tc -n "$prefix-h$i" qdisc replace dev eth0 root tbf rate "${rate}gbit" burst "$burst" latency 50ms
    tc -n "$prefix-br" qdisc replace dev "p$i" root tbf rate "${rate}gbit" burst "$burst" latency 50ms
  done
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
