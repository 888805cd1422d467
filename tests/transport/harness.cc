#include "harness.h"

#include "terse/transport/inproc.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

namespace terse::testing {

const char* backendName(Backend b) {
  switch (b) {
    case Backend::kInProc: return "inproc";
    case Backend::kUcxTcp: return "ucx_tcp";
    case Backend::kUcxShm: return "ucx_shm";
  }
  return "?";
}

std::vector<Backend> allBackends() { return {Backend::kInProc}; }

namespace {

class ThreadBarrier {
 public:
  explicit ThreadBarrier(int n) : n_(n) {}
  void arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    int gen = generation_;
    if (++count_ == n_) {
      count_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen != generation_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int count_ = 0;
  int generation_ = 0;
};

}  // namespace

void runThreads(Backend backend, int worldSize, const std::function<void(Transport&)>& fn) {
  std::vector<std::unique_ptr<Transport>> transports(worldSize);
  if (backend == Backend::kInProc) {
    auto fabric = makeInProcFabric(worldSize);
    ASSERT_TRUE(fabric.isOk()) << fabric.status().toString();
    for (int r = 0; r < worldSize; ++r) {
      auto t = createInProcTransport(*fabric, r);
      ASSERT_TRUE(t.isOk()) << t.status().toString();
      transports[r] = std::move(*t);
    }
  } else {
    GTEST_SKIP() << backendName(backend) << " is not built yet";
  }
  ThreadBarrier barrier(worldSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < worldSize; ++r) {
    threads.emplace_back([&, r] {
      fn(*transports[r]);
      barrier.arrive();
      // Keep progressing nothing here: every rank has finished its operations.
    });
  }
  for (auto& th : threads) th.join();
}

void fillPattern(std::vector<uint8_t>& buf, int src, int dst, uint64_t seq) {
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = patternByte(src, dst, seq, i);
}

long long firstMismatch(const std::vector<uint8_t>& buf, size_t bytes, int src, int dst,
                        uint64_t seq) {
  for (size_t i = 0; i < bytes; ++i)
    if (buf[i] != patternByte(src, dst, seq, i)) return static_cast<long long>(i);
  return -1;
}

size_t waitOk(Transport& t, TransportRequest* r) {
  size_t bytes = 0;
  Status s = t.wait(r, &bytes, kTestTimeout);
  EXPECT_TRUE(s.isOk()) << "rank " << t.rank() << ": " << s.toString();
  return bytes;
}

}  // namespace terse::testing
