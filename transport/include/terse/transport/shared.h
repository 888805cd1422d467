// A transport that several threads drive at once: the connections of a world shared by a
// communicator and the communicators split from it (api/), each with its own collective thread,
// so that calls on different communicators progress independently and may start in different
// orders on different ranks (issue #35: with one thread for all of them, a rank running the
// parent's call while its peer ran the child's waited for the full timeout).
//
// Every operation of the inner transport runs under one lock. wait() must not hold it while it
// blocks, or the other threads would stand still until it returns: while more than one driver is
// registered it polls test() and lets the lock go between turns; with a single driver it is the
// inner transport's own wait (no polling cost for a world that never splits).
#pragma once

#include "terse/transport/transport.h"

#include <atomic>
#include <memory>
#include <mutex>

namespace terse {

class SharedTransport final : public Transport {
 public:
  explicit SharedTransport(std::unique_ptr<Transport> inner);

  // Each thread that drives this transport (one per communicator) registers while it may.
  void addDriver() { drivers_.fetch_add(1, std::memory_order_acq_rel); }
  void removeDriver() { drivers_.fetch_sub(1, std::memory_order_acq_rel); }

  Transport& inner() { return *inner_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string describe() const override { return inner_->describe(); }
  Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
               TransportRequest** request) override;
  Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
               TransportRequest** request) override;
  Status test(TransportRequest* request, bool* done, size_t* bytes) override;
  Status wait(TransportRequest* request, size_t* bytes, std::chrono::milliseconds timeout) override;
  void cancel(TransportRequest* request) override;
  void progress() override;
  // Not under the lock: an abort comes from any thread and must not wait for a driver's turn.
  void abort(const Status& why) override { inner_->abort(why); }
  void disconnect(int peer, const Status& why) override;
  bool peerProcessGone(int peer) const override { return inner_->peerProcessGone(peer); }

 private:
  std::unique_ptr<Transport> inner_;
  std::mutex mutex_;
  std::atomic<int> drivers_{0};
};

}  // namespace terse
