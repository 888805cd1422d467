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
  // Several drivers: poll with the lock released between tests, so the others (and, on a busy
  // host, other ranks) get their turn.
  return pollUntilDone(*this, request, bytes, timeout, 64, [] { sched_yield(); });
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
