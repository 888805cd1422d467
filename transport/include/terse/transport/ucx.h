// The UCX backend: one ucp context and worker per transport, endpoints created on demand from
// worker addresses that the ranks exchange once at creation, tagged messages with
// ucp_tag_send_nbx / ucp_tag_recv_nbx. UCX reads its own variables (UCX_TLS, UCX_NET_DEVICES,
// thresholds) from the environment as usual; terse sets none of them. Large messages use UCX's
// rendezvous protocol, which is zero-copy wherever the chosen transport supports it.
//
// Wire tag: source rank in the high 24 bits, the user's 40-bit tag below; receives match the
// full 64 bits, so matching is per (source rank, tag).
//
// Two kinds of peers (docs/transport.md, "Shared memory on a node"):
//  - Peers on other nodes (or any peer when the topology is not given): endpoints use
//    UCP_ERR_HANDLING_MODE_PEER. When UCX reports an endpoint error for a peer, the peer is marked
//    failed: its pending receives are cancelled and they, the UCX-failed sends and every later
//    operation with it return kRemoteError naming its rank.
//  - Peers on this rank's node (same node in `nodeOfRank`, the same host and pid namespace, and a
//    UCX_TLS that allows shared memory; hosts emulated with TERSE_NODE are other nodes and keep
//    their own links): endpoints use UCP_ERR_HANDLING_MODE_NONE, because UCX 1.13 leaves its
//    shared-memory transports out of PEER mode, and are connected at creation. terse detects
//    their failures itself: a peer process that is gone (watched every 100 ms), or a peer that
//    aborts or closes its transport, which first sends an empty message on kFailureNoticeTag.
//    describe() names what UCX chose for them: "ucx(all; node: sysv,cma shared memory)".
// The caller's timeout bounds everything else.
#pragma once

#include "terse/transport/settings.h"
#include "terse/transport/transport.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace terse {

// Gathers every rank's opaque worker address: given this rank's, returns all ranks' in rank
// order. The communicator implements it over the rendezvous store; tests over shared memory.
using AddressAllGather = std::function<Result<std::vector<std::string>>(const std::string& mine)>;

// Creates the transport of `rank` in a world of `size` (1 <= size <= 2^24). `timeout` bounds the
// endpoint shutdown at destruction. `nodeOfRank` (empty, or one node number per rank, as
// Topology::nodeOfRank) says which peers share this rank's node. `settings`: the fault rules
// and TERSE_UCX_TCP_EAGER as the caller read them (transport/settings.h). Thread-safety as
// transport.h.
Result<std::unique_ptr<Transport>> createUcxTransport(
    int rank, int size, const AddressAllGather& allgather, std::chrono::milliseconds timeout,
    std::vector<int> nodeOfRank = {}, const TransportSettings& settings = TransportSettings());

}  // namespace terse
