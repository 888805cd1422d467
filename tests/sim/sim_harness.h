// Helpers of the simulation tests: a simulation in a forked child (SimGrid allows one engine per
// process) and a transport that records the messages it sends.
#pragma once

#include "terse/sim/runner.h"
#include "terse/transport/transport.h"

#include <functional>
#include <string>
#include <vector>

namespace terse::testing {

// Runs body() in a forked child and returns what it returned. A gtest failure, an exception or
// a crash in the child fails the calling test.
std::string inChild(const std::function<std::string()>& body);

// Forwards to `inner` and records every send posted: (peer, bytes), in posting order.
class RecordingTransport final : public Transport {
 public:
  explicit RecordingTransport(Transport& inner) : t_(inner) {}
  struct Send {
    int peer;
    size_t bytes;
  };
  const std::vector<Send>& sends() const { return sends_; }

  int rank() const override { return t_.rank(); }
  int size() const override { return t_.size(); }
  std::string describe() const override { return "recording(" + t_.describe() + ")"; }
  Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
               TransportRequest** request) override {
    sends_.push_back({peer, bytes});
    return t_.isend(peer, tag, data, bytes, request);
  }
  Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
               TransportRequest** request) override {
    return t_.irecv(peer, tag, data, capacity, request);
  }
  Status test(TransportRequest* r, bool* done, size_t* bytes) override {
    return t_.test(r, done, bytes);
  }
  Status wait(TransportRequest* r, size_t* bytes, std::chrono::milliseconds timeout) override {
    return t_.wait(r, bytes, timeout);
  }
  void cancel(TransportRequest* r) override { t_.cancel(r); }
  void progress() override { t_.progress(); }
  void abort(const Status& why) override { t_.abort(why); }
  void disconnect(int peer, const Status& why) override { t_.disconnect(peer, why); }

 private:
  Transport& t_;
  std::vector<Send> sends_;
};

// A small cluster for the contract tests: `n` ranks, 2 per node, 10 Gbit/s NICs.
sim::PlatformSpec testPlatform(int n);

}  // namespace terse::testing
