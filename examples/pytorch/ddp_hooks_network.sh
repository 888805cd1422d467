#!/usr/bin/env bash
# ddp_hooks.py compare on emulated links: as root, builds one network namespace per rank joined
# by a bridge and shaped with tc tbf to RATE Gbit/s (scripts/bench-network.sh --probe-only --keep,
# which also measures one TCP stream over the link), runs every hook with each rank in its own
# namespace (one-process torchrun "nodes"), and deletes the namespaces on every exit path.
#
#   sudo examples/pytorch/ddp_hooks_network.sh [--rate GBIT] [--ranks N] [--out DIR] [--python PY]
#        [-- compare options]
#
# --python: the interpreter with torch (default /usr/bin/python3, Debian's torch 1.13; FSDP2's
# hooks, fsdp, fsdp-adamw, fsdp-terse:GRAD/WEIGHT and fsdp-sharded-adam:CODEC/WEIGHT, need torch
# 2.8 or later, e.g. scripts/torch-env.sh's).
#
# Exit status: ddp_hooks.py's; 77 when this machine cannot build namespaces (bench-network.sh's).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rate=1
ranks=4
prefix=tersepy
out="$root/bench-results/pytorch-network-$(date -u +%Y%m%d-%H%M%S)"
python=/usr/bin/python3
while (($#)); do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "ddp_hooks_network: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $ranks =~ ^[0-9]+$ ]] && ((ranks >= 2)) || { echo "ddp_hooks_network: --ranks must be at least 2" >&2; exit 2; }

our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(br|h[0-9]+)\$" || true
}

# Namespaces with our prefix that exist before we start belong to another run (or one that was
# killed): refuse rather than build beside them, and never delete what we did not create.
stale=$(our_namespaces)
if [[ -n $stale ]]; then
  echo "ddp_hooks_network: namespaces $(echo $stale) already exist: another run may be active;" \
    "if none is, remove them (ip netns del NAME) and start again" >&2
  exit 2
fi

created=0
teardown() {
  local rc=$? ns pids
  trap - EXIT INT TERM
  ((created)) || exit $rc
  for ns in $(our_namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || echo "ddp_hooks_network: could not delete namespace $ns" >&2
  done
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$out"
# (--keep: this script deletes the namespaces itself, in teardown.) From here on every namespace
# with our prefix is this run's.
created=1
"$root/scripts/bench-network.sh" --probe-only --keep --no-plot --ranks "$ranks" --rates "$rate" \
  --prefix "$prefix" --out "$out/probe" 2>&1 | grep -v -- "--keep: namespaces left up" |
  tee "$out/probe.log"
grep -q "one TCP stream measured" "$out/probe.log" ||
  { echo "ddp_hooks_network: the namespaces were not built (see above)" >&2; exit 77; }
"$python" "$root/examples/pytorch/ddp_hooks.py" compare --netns "$prefix" --nproc "$ranks" \
  --out "$out" "$@"
