# shellcheck shell=bash disable=SC2034  # NETNS_ERROR is read by the sourcing scripts
# Emulated hosts on one machine, shared by scripts/bench-network.sh and
# scripts/bench-netplugin-lossless.sh (sourced, after `set -euo pipefail`; needs root).
#
# Topology: host i is namespace PREFIX-hi with an eth0 at NET.i/24; every eth0 is the far end of
# a veth pair whose near end is a port of the bridge br0 in namespace PREFIX-br. The pairs are
# born inside the bridge namespace and their far ends moved straight into the host namespaces,
# so no interface of ours ever exists in the caller's namespace and no benchmark traffic can
# leave the namespaces. Links are shaped with tc tbf on both ends (the host's eth0 shapes what
# it sends, the bridge port what it receives).
#
# Functions that can fail for a reason the caller may want to report as "cannot run here"
# (exit 77) return 1 and leave the reason in $NETNS_ERROR; they never exit themselves.

NETNS_ERROR=""

# The namespaces named PREFIX-br or PREFIX-hN, whoever made them (a previous, interrupted run).
netns_list() {
  local prefix=$1
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(br|h[0-9]+)\$" || true
}

# Ends the processes living inside the given namespaces (TERM, then KILL half a second later):
# only what was started in them, never anything outside.
netns_kill_processes() {
  local ns pids
  [[ $# -gt 0 ]] || return 0
  for ns in "$@"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z $pids ]] || kill -TERM $pids 2>/dev/null || true
  done
  sleep 0.5
  for ns in "$@"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
  done
}

# Removes every namespace of PREFIX and what runs in it; says which could not be deleted.
netns_delete() {
  local prefix=$1 names ns
  names=$(netns_list "$prefix")
  [[ -n $names ]] || return 0
  # shellcheck disable=SC2086
  netns_kill_processes $names
  for ns in $names; do
    ip netns del "$ns" 2>/dev/null || echo "netns: could not delete namespace $ns" >&2
  done
}

# Checks that this process can build namespaces at all (root, iproute2, ip netns).
netns_usable() {
  if [[ $(id -u) -ne 0 ]]; then
    NETNS_ERROR="must run as root: it creates network namespaces, veth pairs, a bridge and tc qdiscs"
    return 1
  fi
  command -v ip >/dev/null || { NETNS_ERROR="'ip' (iproute2) not found; install iproute2"; return 1; }
  command -v tc >/dev/null || { NETNS_ERROR="'tc' (iproute2) not found; install iproute2"; return 1; }
  ip netns list >/dev/null 2>&1 ||
    { NETNS_ERROR="'ip netns' does not work here: the kernel or container lacks network namespaces"; return 1; }
  return 0
}

# netns_setup PREFIX NET HOSTS: the bridge namespace and HOSTS host namespaces, host i at NET.i.
# Call netns_delete PREFIX on every exit path once this has been called, even if it failed.
netns_setup() {
  local prefix=$1 net=$2 hosts=$3 i ns br="$1-br"
  ip netns add "$br" 2>/dev/null ||
    { NETNS_ERROR="cannot create network namespace $br ('ip netns add' failed): this kernel or container does not allow network namespaces"; return 1; }
  ip -n "$br" link set lo up || { NETNS_ERROR="cannot bring up lo in $br"; return 1; }
  ip -n "$br" link add br0 type bridge 2>/dev/null ||
    { NETNS_ERROR="cannot create a bridge inside a namespace (kernel module 'bridge' missing?)"; return 1; }
  ip -n "$br" link set br0 up || { NETNS_ERROR="cannot bring up br0 in $br"; return 1; }
  for ((i = 1; i <= hosts; i++)); do
    ns="$prefix-h$i"
    ip netns add "$ns" || { NETNS_ERROR="cannot create network namespace $ns"; return 1; }
    ip -n "$ns" link set lo up || { NETNS_ERROR="cannot bring up lo in $ns"; return 1; }
    ip -n "$br" link add "p$i" type veth peer name eth0 netns "$ns" 2>/dev/null ||
      { NETNS_ERROR="cannot create veth pairs inside namespaces (kernel module 'veth' missing?)"; return 1; }
    ip -n "$br" link set "p$i" master br0 up || { NETNS_ERROR="cannot attach p$i to br0 in $br"; return 1; }
    ip -n "$ns" addr add "$net.$i/24" dev eth0 || { NETNS_ERROR="cannot address eth0 in $ns"; return 1; }
    ip -n "$ns" link set eth0 up || { NETNS_ERROR="cannot bring up eth0 in $ns"; return 1; }
  done
  return 0
}

# netns_shape PREFIX HOSTS RATE: every link to RATE Gbit/s in both directions. The bucket holds
# about 1 ms at the rate (at least 256 KiB) so high rates are not throttled by timer
# granularity; a 50 ms queue absorbs incast without tail drops.
netns_shape() {
  local prefix=$1 hosts=$2 rate=$3 burst i
  burst=$(awk -v r="$rate" 'BEGIN { b = r * 1e9 / 8 / 1000; if (b < 262144) b = 262144; printf "%d", b }')
  for ((i = 1; i <= hosts; i++)); do
    tc -n "$prefix-h$i" qdisc replace dev eth0 root tbf rate "${rate}gbit" burst "$burst" latency 50ms 2>/dev/null ||
      { NETNS_ERROR="tc cannot attach a tbf qdisc (kernel module sch_tbf missing?)"; return 1; }
    tc -n "$prefix-br" qdisc replace dev "p$i" root tbf rate "${rate}gbit" burst "$burst" latency 50ms 2>/dev/null ||
      { NETNS_ERROR="tc cannot attach a tbf qdisc to the bridge port p$i in $prefix-br"; return 1; }
  done
  return 0
}

# netns_unshape PREFIX HOSTS: every link back to no limit (a previous rate's tbf removed), so a
# run measures what the veth pairs carry at this machine's CPU speed.
netns_unshape() {
  local prefix=$1 hosts=$2 i
  for ((i = 1; i <= hosts; i++)); do
    # del fails when there is nothing to delete; what matters is that no tbf is left.
    tc -n "$prefix-h$i" qdisc del dev eth0 root 2>/dev/null || true
    tc -n "$prefix-br" qdisc del dev "p$i" root 2>/dev/null || true
    local host_q bridge_q
    if ! host_q=$(tc -n "$prefix-h$i" qdisc show dev eth0 2>&1) ||
      ! bridge_q=$(tc -n "$prefix-br" qdisc show dev "p$i" 2>&1); then
      NETNS_ERROR="cannot read the qdiscs of host $i's link: $host_q $bridge_q"
      return 1
    fi
    if [[ $host_q == *tbf* || $bridge_q == *tbf* ]]; then
      NETNS_ERROR="cannot remove the tbf qdisc of host $i's link"
      return 1
    fi
  done
  return 0
}

# netns_wait_reachable PREFIX NET HOSTS: proves the path host 1 -> every other host over the
# bridge (up to 5 s each) without any tool beyond bash: a TCP connect to a closed port is
# answered with a reset ("refused") only when the host is reachable.
netns_wait_reachable() {
  local prefix=$1 net=$2 hosts=$3 i tries err=""
  for ((i = 2; i <= hosts; i++)); do
    for ((tries = 0; tries < 50; tries++)); do
      err=$(ip netns exec "$prefix-h1" timeout 1 bash -c "exec 3<>/dev/tcp/$net.$i/9" 2>&1 || true)
      [[ $err == *refused* ]] && break
      sleep 0.1
    done
    ((tries < 50)) || { NETNS_ERROR="$prefix-h1 cannot reach $net.$i over the bridge: $err"; return 1; }
  done
  return 0
}
