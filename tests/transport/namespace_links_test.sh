#!/usr/bin/env bash
# Issue #18: only the topology decides what is shared memory. Two hosts emulated on this machine
# as network namespaces joined by a veth pair (their "link"), two ranks in each, TERSE_NODE naming
# the host, no UCX_* variables: the two ranks of a host report shared memory between them, and
# the traffic between the hosts crosses the veth link. Loopback inside each namespace carries
# next to nothing (the in-host bytes go through memory, not TCP). Needs root and network
# namespaces; skips (77) with the reason otherwise.
#   namespace_links_test.sh TERSE_BENCH
set -uo pipefail
bench=$1
tag=tsl$$
a=$tag-a b=$tag-b
skip() {
  echo "SKIP: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root for ip netns"
command -v ip >/dev/null || skip "no ip command"
ip netns add "$a" 2>/dev/null || skip "ip netns add failed (no network namespaces here)"
cleanup() {
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$logs"
}
logs=$(mktemp -d)
trap cleanup EXIT
ip netns add "$b" || skip "ip netns add failed"
ip link add "${tag}va" type veth peer name "${tag}vb" || skip "no veth pairs here"
ip link set "${tag}va" netns "$a" && ip link set "${tag}vb" netns "$b" &&
  ip -n "$a" addr add 10.77.0.1/24 dev "${tag}va" && ip -n "$b" addr add 10.77.0.2/24 dev "${tag}vb" &&
  ip -n "$a" link set lo up && ip -n "$b" link set lo up &&
  ip -n "$a" link set "${tag}va" up && ip -n "$b" link set "${tag}vb" up || {
  echo "FAIL: could not set up the link"
  exit 1
}
bytes() { # namespace device direction(rx|tx)
  ip netns exec "$1" cat /sys/class/net/"$2"/statistics/"$3"_bytes
}
tx0=$(bytes "$a" "${tag}va" tx)
lo_a0=$(bytes "$a" lo tx) lo_b0=$(bytes "$b" lo tx)
size=16M calls=4
pids=()
for r in 0 1 2 3; do
  ns=$a node=hostA
  [ "$r" -ge 2 ] && ns=$b node=hostB
  # env -i: no UCX_* variable (nor anything else of the caller's).
  ip netns exec "$ns" env -i PATH="$PATH" TERSE_RANK=$r TERSE_WORLD_SIZE=4 \
    TERSE_STORE=10.77.0.1:29613 TERSE_NODE=$node TERSE_TIMEOUT_MS=30000 \
    TERSE_DEBUG=INFO TERSE_DEBUG_SUBSYS=NET \
    timeout 90 "$bench" allreduce -b $size -e $size --codec none -n $((calls - 1)) -w 1 \
    >"$logs/rank$r.log" 2>&1 &
  pids+=($!)
done
status=0
for r in 0 1 2 3; do
  wait "${pids[$r]}" || {
    echo "FAIL: rank $r exited non-zero"
    status=1
  }
done
for r in 0 1 2 3; do
  peer=$((r ^ 1))
  grep -qE "rank $r: same-node ranks $peer over [a-z0-9_,]+ \(shared memory\)" "$logs/rank$r.log" || {
    echo "FAIL: rank $r does not report shared memory to rank $peer (its host)"
    status=1
  }
done
tx=$(($(bytes "$a" "${tag}va" tx) - tx0))
lo_a=$(($(bytes "$a" lo tx) - lo_a0)) lo_b=$(($(bytes "$b" lo tx) - lo_b0))
echo "host A -> host B over the link: $tx bytes; loopback: host A $lo_a, host B $lo_b bytes"
# Each call moves at least a quarter of the 16 MiB between the hosts whatever the algorithm (flat
# ring: 24 MiB per direction; two-level: 8 MiB); 4 calls. Loopback: the store's few KiB only.
if [ "$tx" -lt $((4 << 20)) ]; then
  echo "FAIL: only $tx bytes crossed the link between the hosts"
  status=1
fi
if [ "$lo_a" -gt $((4 << 20)) ] || [ "$lo_b" -gt $((4 << 20)) ]; then
  echo "FAIL: loopback carried bulk data: the ranks of a host talked over TCP, not shared memory"
  status=1
fi
[ "$status" = 0 ] || tail -n 20 "$logs"/rank*.log
exit "$status"
