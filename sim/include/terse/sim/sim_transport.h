// A Transport whose ranks are SimGrid actors: the collectives' own code runs unchanged on a
// simulated cluster, and every message, its size and its dependencies are the real ones. Only
// the time is simulated (SimGrid's flow model over the platform of platform.h).
//
// How transport.h's contract maps onto SimGrid (S4U, one actor per rank, one host per rank):
//  - Matching is the transport's own, in user space, not SimGrid's mailboxes: each receiving
//    rank keeps FIFO queues of unmatched sends and of posted receives per (source, tag). A
//    mailbox per (source, destination) pair would be 16.7 million mailboxes at 4096 ranks, and
//    S4U 3.32 has no tag matching on asynchronous mailbox gets.
//  - When a send meets its receive (whichever is posted last), the bytes move at once in memory
//    (or not at all in sizing mode, below) and a SimGrid communication of the message's size
//    starts from the sender's host to the receiver's: a put into the receiver's mailbox, which
//    has a permanent receiver so that the put starts at once, issued at the same simulated
//    time by an actor on the sender's host (sim_transport.cc says why that actor, and why not
//    Comm::sendto). Both requests complete when it ends. This is a rendezvous protocol without
//    the handshake's own latency: a send posted before its receive starts moving when the
//    receive is posted, as UCX's rendezvous does for large messages.
//  - A message to oneself completes at the match, with no network transfer.
//  - wait() blocks in simulated time: on the rank's condition variable while the request is
//    unmatched (the timeout, in simulated seconds, bounds this), then on the transfer, which
//    always ends (the simulated network never fails).
//  - test() that finds a request unfinished lets 1 us of simulated time pass (pollSeconds),
//    as SMPI does for MPI_Test, so that a caller polling in a loop cannot stop the clock.
//  - abort() and disconnect() fail the pending and later operations of both sides at once (as
//    the in-process fabric does) and wake the ranks waiting on them.
//
// Every rank of a SimWorld runs in one OS thread (SimGrid's contexts), so the shared state
// needs no locks; abort() from a thread outside the simulation is not supported.
#pragma once

#include "terse/transport/transport.h"

#include <cstddef>
#include <memory>
#include <vector>

namespace simgrid::s4u {
class Host;
}

namespace terse::sim {

struct SimTransportOptions {
  // Copy message bytes from the send buffer to the receive buffer. Off in the sizing mode of
  // the simulation (codecs sized, not computed): then only messages of at most copyBelow bytes
  // are copied, which keeps the collectives' call descriptors (96 bytes per rank, or 208-byte
  // summaries of them) real while payloads are never touched.
  bool copyPayload = true;
  size_t copyBelow = 4096;
  // Simulated time an unsuccessful test() lets pass.
  double pollSeconds = 1e-6;
  // Host time each isend() and irecv() costs the rank that posts it, before the message is
  // offered: the software's per-message cost (posting, matching, completing; about a
  // microsecond in UCX), which the platform's links do not carry. 0, the default, leaves it
  // out, as the validation against measurement did; it decides between few large and many
  // small messages (an all-to-all of call descriptors against their dissemination).
  double postSeconds = 0;
};

// The shared state of one simulated world: the hosts of its ranks and the match queues.
class SimWorld;

// hosts[r] is rank r's host. Call before the simulation runs (from main or one actor).
std::shared_ptr<SimWorld> makeSimWorld(std::vector<simgrid::s4u::Host*> hosts,
                                       SimTransportOptions options = {});

// The transport of `rank`: create and drive it from that rank's actor.
Result<std::unique_ptr<Transport>> createSimTransport(std::shared_ptr<SimWorld> world, int rank);

// Counters of one rank's traffic (what the simulation reports as bytes per NIC).
struct SimTraffic {
  uint64_t messagesSent = 0;
  uint64_t bytesSent = 0;
  uint64_t messagesReceived = 0;
  uint64_t bytesReceived = 0;
  // Sends and receives whose peer is on another node (per platform.h's node of each host).
  uint64_t bytesSentOffNode = 0;
  uint64_t bytesReceivedOffNode = 0;
};
// Per rank, counted at the match of each message (so cancelled, unmatched sends do not count).
const std::vector<SimTraffic>& simTraffic(const SimWorld& world);

// The node of each rank, for the off-node counters (default: every rank its own node).
void setSimNodes(SimWorld& world, std::vector<int> nodeOfRank);

}  // namespace terse::sim
