// A Transport decorator that counts the bytes of every send posted through it: the transport's
// own ledger, which tests check the statistics terse reports against (tests/api/stats_test.cc,
// tests/plugin/collnet_plugin_test.cc).
#pragma once

#include "terse/transport/transport.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace terse::testing {

class ByteCountingTransport final : public Transport {
 public:
  ByteCountingTransport(std::unique_ptr<Transport> inner, std::atomic<uint64_t>* sent)
      : inner_(std::move(inner)), sent_(sent) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string describe() const override { return inner_->describe(); }
  Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
               TransportRequest** request) override {
    Status s = inner_->isend(peer, tag, data, bytes, request);
    if (s.isOk()) *sent_ += bytes;
    return s;
  }
  Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
               TransportRequest** request) override {
    return inner_->irecv(peer, tag, data, capacity, request);
  }
  Status test(TransportRequest* r, bool* done, size_t* bytes) override {
    return inner_->test(r, done, bytes);
  }
  Status wait(TransportRequest* r, size_t* bytes, std::chrono::milliseconds timeout) override {
    return inner_->wait(r, bytes, timeout);
  }
  void cancel(TransportRequest* r) override { inner_->cancel(r); }
  void progress() override { inner_->progress(); }
  void abort(const Status& why) override { inner_->abort(why); }
  void disconnect(int peer, const Status& why) override { inner_->disconnect(peer, why); }

 private:
  std::unique_ptr<Transport> inner_;
  std::atomic<uint64_t>* sent_;
};

}  // namespace terse::testing
