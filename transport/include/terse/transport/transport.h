// The byte transport: tagged, nonblocking, ordered point-to-point messages between the ranks of
// one world. It knows nothing about codecs or collectives.
//
// Semantics every backend guarantees (tests/transport checks them on each):
//  - Messages from one sender to one receiver with the same tag complete in posting order
//    (FIFO per (peer, tag)); different tags never match each other.
//  - A receive's capacity may exceed the message; a message larger than the capacity fails the
//    receive with kInvalidUsage (truncation is never silent). test/wait report received bytes.
//  - Buffers stay owned by the caller and must stay valid until the request completes.
//  - When a peer dies or its connection breaks, every pending and later operation involving it
//    fails with kRemoteError naming the peer's rank; an operation that exceeds the timeout
//    fails with kTimeout naming the peer. Nothing hangs.
//  - Requests are recycled by the transport (no allocation per message in steady state).
//
// Thread-safety: one thread drives a Transport at a time (collectives run on the caller's
// thread). abort() may be called from any thread. SharedTransport (shared.h) wraps one for
// several threads at once.
#pragma once

#include "terse/common/status.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace terse {

// Opaque, owned by the transport. Valid from isend/irecv until test() reports done or an
// error, or until cancel().
struct TransportRequest;

// User tags are 40 bits; the backends use the remaining bits for the source rank.
constexpr uint64_t kMaxTransportTag = (uint64_t{1} << 40) - 1;
// The last tag carries failure notices: a rank that gives up on a collective tells its peers
// why before it drops its connections (give_up.h). Nothing else may use it.
constexpr uint64_t kFailureNoticeTag = kMaxTransportTag;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "ucx(tcp)", "ucx(posix,cma)", "inproc": for logs and benchmark tables.
  virtual std::string describe() const = 0;

  virtual Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
                       TransportRequest** request) = 0;
  virtual Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
                       TransportRequest** request) = 0;

  // Makes progress and reports whether `request` finished. On done (or on error) the request is
  // released and must not be used again. *bytes gets the transferred size on done.
  virtual Status test(TransportRequest* request, bool* done, size_t* bytes) = 0;

  // Blocks (progressing) until done, failing with kTimeout after `timeout`.
  virtual Status wait(TransportRequest* request, size_t* bytes,
                      std::chrono::milliseconds timeout) = 0;

  // Abandons a request (used when a collective fails half-way); its buffer may be reused once
  // cancel returns.
  virtual void cancel(TransportRequest* request) = 0;

  // Drives background work (UCX worker progress). Cheap when idle.
  virtual void progress() = 0;

  // Fails every pending and later operation with `why` (also from another thread).
  virtual void abort(const Status& why) = 0;

  // Closes the connection to `peer` as if it had broken (fault injection, a caller that gives up
  // on one peer): every pending and later operation with it fails with kRemoteError carrying
  // `why`. The in-process fabric tells the peer at once; over UCX the peer is not told (as with
  // a link that fails silently) and its operations with this rank run into their timeout.
  // Driving thread only.
  virtual void disconnect(int peer, const Status& why) = 0;

  // Whether this process can see that `peer`'s process has ended: only for a peer on this host
  // (same host and pid namespace), whose pid it learned at creation; false when it cannot tell.
  // Evidence for a shrink (Communicator::shrink), which then need not wait out its timeout for
  // that rank. Any thread; valid after abort().
  virtual bool peerProcessGone(int /*peer*/) const { return false; }
};

}  // namespace terse
