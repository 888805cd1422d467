#!/usr/bin/env bash
# terse's torch.distributed backend against gloo: all_reduce, all_gather_into_tensor and
# reduce_scatter_tensor of 64 MiB float32 and DDP steps/s of a small MLP, 4 ranks, gloo and terse
# (exact, and an int8 group) in turn in one run, with the speed-ups over gloo
# (bench/torch_backend_bench.py; docs/pytorch.md, "The backend against gloo").
#   scripts/bench-torch-backend.sh [--network GBITS] [--ranks N] [--size 64M] [--rounds N]
#                                  [--backends "gloo terse terse:int8"] [--prefix P]
#                                  [-- extra torch_backend_bench.py drive flags]
# Without --network: one machine, the ranks under torchrun, terse on UCX's shared memory and gloo
# on TCP over loopback. --network R: one rank per emulated host (a network namespace each, veth
# pairs on a bridge, every link shaped to R Gbit/s with tc tbf: scripts/lib/netns.sh), torch's
# store at rank 0's host address, gloo and terse (UCX tcp) over the shaped links; needs root
# (exit 77 otherwise, or where namespaces cannot be made); everything it creates is deleted on
# exit, and no traffic leaves the namespaces. --rounds N alternates the backends N times and
# prints the median ratio.
set -euo pipefail
kSkip=77
root_dir=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${TERSE_BUILD_DIR:-$root_dir/build}
[[ $build_dir = /* ]] || build_dir="$root_dir/$build_dir"
python=${TERSE_TORCH_PYTHON:-$(cat /tmp/torch_python 2>/dev/null || echo python3)}
ranks=4 size=64M rounds=1 network="" prefix=tersetb backends="gloo terse terse:int8"
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --network) network=$2; shift ;;
    --ranks) ranks=$2; shift ;;
    --size) size=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --backends) backends=$2; shift ;;
    --prefix) prefix=$2; shift ;;
    --python) python=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench-torch-backend: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $ranks =~ ^[1-9][0-9]*$ && $rounds =~ ^[1-9][0-9]*$ ]] ||
  { echo "bench-torch-backend: --ranks and --rounds take a positive integer" >&2; exit 2; }
if [[ -n $network ]] && ! awk -v r="$network" 'BEGIN { exit !(r + 0 > 0 && r ~ /^[0-9.]+$/) }'; then
  echo "bench-torch-backend: --network takes a rate in Gbit/s, e.g. 1" >&2
  exit 2
fi
"$python" -c 'import torch' 2>/dev/null ||
  { echo "bench-torch-backend: SKIP: $python cannot import torch (set TERSE_TORCH_PYTHON)" >&2; exit $kSkip; }
# The backend's library: the build's, unless the caller names one.
if [[ -z ${TERSE_LIBRARY:-} ]]; then
  [[ -e $build_dir/lib/libterse.so ]] ||
    { echo "bench-torch-backend: $build_dir/lib/libterse.so not found: build target terse_c first" >&2; exit 1; }
  export TERSE_LIBRARY=$build_dir/lib/libterse.so
fi
bench=("$python" "$root_dir/bench/torch_backend_bench.py" drive --world "$ranks" --size "$size"
       --rounds "$rounds" --backends "$backends")

if [[ -z $network ]]; then
  # terse on UCX's shared-memory transports, as scripts/bench-allreduce.sh; gloo has TCP only.
  export UCX_NET_DEVICES=lo
  export UCX_TLS=${UCX_TLS:-posix,cma,self}
  export GLOO_SOCKET_IFNAME=lo
  exec "${bench[@]}" "${extra[@]}"
fi

# shellcheck source=scripts/lib/netns.sh
. "$root_dir/scripts/lib/netns.sh"
netns_usable || { echo "bench-torch-backend: SKIP: $NETNS_ERROR" >&2; exit $kSkip; }
stale=$(netns_list "$prefix")
[[ -z $stale ]] || { echo "bench-torch-backend: SKIP: namespaces of an earlier run still exist ($(tr '\n' ' ' <<<"$stale")); another run may be active, or delete them (ip netns del NAME) or pick another --prefix" >&2; exit $kSkip; }
net=10.214.0 # host i is $net.i on a bridge of our own; nothing routes to or from it
created=0
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if ((created)); then
    netns_delete "$prefix"
    left=$(netns_list "$prefix")
    [[ -z $left ]] || echo "bench-torch-backend: namespaces still present after teardown: $left" >&2
  fi
  exit $rc
}
trap teardown EXIT
trap 'echo "bench-torch-backend: interrupted, tearing down" >&2; exit 130' INT
trap 'echo "bench-torch-backend: terminated, tearing down" >&2; exit 143' TERM
created=1
netns_setup "$prefix" "$net" "$ranks" || { echo "bench-torch-backend: SKIP: $NETNS_ERROR" >&2; exit $kSkip; }
netns_shape "$prefix" "$ranks" "$network" || { echo "bench-torch-backend: SKIP: $NETNS_ERROR" >&2; exit $kSkip; }
netns_wait_reachable "$prefix" "$net" "$ranks" || { echo "bench-torch-backend: $NETNS_ERROR" >&2; exit 1; }
unset UCX_TLS UCX_NET_DEVICES GLOO_SOCKET_IFNAME # the driver sets each rank's (eth0, tcp)
"${bench[@]}" --netns "$prefix" --net "$net" --link "$network Gbit/s" "${extra[@]}"
