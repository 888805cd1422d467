#include "terse/transport/shared.h"

#include "request.h"

#include <sched.h>

namespace terse {

SharedTransport::SharedTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}

Status SharedTransport::isend(int peer, uint64_t tag, const void* data, size_t bytes,
                              TransportRequest** request) {
  std::lock_guard<std::mutex> hold(mutex_);
  return inner_->isend(peer, tag, data, bytes, request);
}

Status SharedTransport::irecv(int peer, uint64_t tag, void* data, size_t capacity,
                              TransportRequest** request) {
  std::lock_guard<std::mutex> hold(mutex_);
  return inner_->irecv(peer, tag, data, capacity, request);
}

Status SharedTransport::test(TransportRequest* request, bool* done, size_t* bytes) {
  std::lock_guard<std::mutex> hold(mutex_);
  return inner_->test(request, done, bytes);
}

Status SharedTransport::wait(TransportRequest* request, size_t* bytes,
                             std::chrono::milliseconds timeout) {
  if (request == nullptr) return errorInvalidArgument("wait: null request");
  if (drivers_.load(std::memory_order_acquire) <= 1) {
    // One driver: nobody else needs the lock while this blocks (a second driver is only made
    // by a split, which runs on this same thread).
    std::lock_guard<std::mutex> hold(mutex_);
    return inner_->wait(request, bytes, timeout);
  }
  // test() releases the request when it finishes: what the timeout names is read first.
  const int peer = request->peer;
  const uint64_t tag = request->tag;
  const char* verb = requestVerb(request);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (unsigned spin = 1;; ++spin) {
    bool done = false;
    TERSE_RETURN_IF_ERROR(test(request, &done, bytes));
    if (done) return Status::ok();
    if (spin % 64 == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        cancel(request);
        return errorTimeout(
            "%s rank %d (tag %llu) did not complete within %lld ms; rank %d may be stuck, dead "
            "or not posting the matching operation",
            verb, peer, static_cast<unsigned long long>(tag),
            static_cast<long long>(timeout.count()), peer);
      }
      // The other drivers (and, on a busy host, other ranks) get their turn.
      sched_yield();
    }
  }
}

void SharedTransport::cancel(TransportRequest* request) {
  std::lock_guard<std::mutex> hold(mutex_);
  inner_->cancel(request);
}

void SharedTransport::progress() {
  std::lock_guard<std::mutex> hold(mutex_);
  inner_->progress();
}

void SharedTransport::disconnect(int peer, const Status& why) {
  std::lock_guard<std::mutex> hold(mutex_);
  inner_->disconnect(peer, why);
}

}  // namespace terse
