// The one definition of TransportRequest, shared by every backend so the opaque pointer in
// transport.h names a single type. Requests live in a per-transport pool and are recycled, so
// steady-state traffic allocates nothing.
#pragma once

#include "terse/common/status.h"
#include "terse/transport/transport.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace terse {

enum class RequestKind : uint8_t { kSend, kRecv };

// State moves pending -> (copying ->) done | failed. Only the owning transport releases a
// request, and only after it has observed a terminal state.
enum RequestState : int {
  kReqFree = 0,
  kReqPending = 1,
  kReqCopying = 2,
  kReqDone = 3,
  kReqFailed = 4
};

struct TransportRequest {
  RequestKind kind = RequestKind::kSend;
  int owner = -1;  // rank of the transport that issued it
  int peer = -1;
  uint64_t tag = 0;
  void* data = nullptr;
  size_t size = 0;   // send: bytes to send; recv: capacity
  size_t bytes = 0;  // transferred bytes once done
  std::atomic<int> state{kReqFree};
  Status error;                      // set before state becomes kReqFailed
  void* backend = nullptr;           // the UCX request handle, when there is one
  TransportRequest* next = nullptr;  // free list / in-process match queue link
  // UCX: the caller gave the request up (cancel/timeout) before UCX finished with it; the
  // completion callback returns it to the pool instead.
  bool orphan = false;
  int ucsStatus = 0;    // UCX: the completion status its callback saw
  void* ctx = nullptr;  // UCX: the owning transport, for callbacks
};

// A grow-only pool. acquire() allocates only when every request is in use, so a steady pattern
// of traffic reaches a fixed working set and then stops allocating.
class RequestPool {
 public:
  TransportRequest* acquire() {
    TransportRequest* r = free_;
    if (r != nullptr) {
      free_ = r->next;
    } else {
      all_.push_back(std::make_unique<TransportRequest>());
      r = all_.back().get();
    }
    r->next = nullptr;
    r->bytes = 0;
    r->backend = nullptr;
    r->error = Status::ok();
    r->orphan = false;
    r->ucsStatus = 0;
    r->state.store(kReqPending, std::memory_order_relaxed);
    return r;
  }
  void release(TransportRequest* r) {
    r->state.store(kReqFree, std::memory_order_relaxed);
    r->data = nullptr;
    r->next = free_;
    free_ = r;
  }
  const std::vector<std::unique_ptr<TransportRequest>>& all() const { return all_; }

 private:
  std::vector<std::unique_ptr<TransportRequest>> all_;
  TransportRequest* free_ = nullptr;
};

inline const char* requestVerb(const TransportRequest* r) {
  return r->kind == RequestKind::kSend ? "send to" : "receive from";
}

// wait() by polling: test() until `r` completes; past `timeout`, cancel it and say which peer and
// tag did not complete. Every `checkEvery` polls the clock is read and `idle()` runs, each
// backend's way of stepping aside (sched_yield, or sleeping until in-process activity). test()
// releases the request when it finishes, so what the error names is read first.
template <typename Transport_, typename Idle>
Status pollUntilDone(Transport_& transport, TransportRequest* r, size_t* bytes,
                     std::chrono::milliseconds timeout, unsigned checkEvery, Idle&& idle) {
  const int peer = r->peer;
  const uint64_t tag = r->tag;
  const char* verb = requestVerb(r);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (unsigned spin = 1;; ++spin) {
    bool done = false;
    TERSE_RETURN_IF_ERROR(transport.test(r, &done, bytes));
    if (done) return Status::ok();
    if (spin % checkEvery != 0) continue;
    if (std::chrono::steady_clock::now() >= deadline) {
      transport.cancel(r);
      return errorTimeout(
          "%s rank %d (tag %llu) did not complete within %lld ms; rank %d may be stuck, dead or "
          "not posting the matching operation",
          verb, peer, static_cast<unsigned long long>(tag), static_cast<long long>(timeout.count()),
          peer);
    }
    idle();
  }
}

}  // namespace terse

namespace terse {

// Argument checks every backend applies before touching a request.
inline Status checkTransferArgs(const char* what, int rank, int size, int peer, uint64_t tag,
                                const void* data, size_t bytes, TransportRequest** request) {
  if (request == nullptr) return errorInvalidArgument("%s: request output pointer is null", what);
  if (peer < 0 || peer >= size)
    return errorInvalidArgument("%s: peer %d is not a rank of this world (size %d)", what, peer,
                                size);
  if (tag > kMaxTransportTag)
    return errorInvalidArgument("%s: tag %llu exceeds kMaxTransportTag (2^40-1)", what,
                                static_cast<unsigned long long>(tag));
  if (data == nullptr && bytes > 0)
    return errorInvalidArgument("%s: null buffer with %zu bytes", what, bytes);
  (void)rank;
  return Status::ok();
}

}  // namespace terse
