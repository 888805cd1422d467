#include "harness.h"

#include "terse/transport/inproc.h"
#include "terse/transport/ucx.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
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

std::vector<Backend> allBackends() {
  return {Backend::kInProc, Backend::kUcxTcp, Backend::kUcxShm};
}

void setUcxEnvironment(Backend b) {
  // Loopback only, whatever the host has.
  setenv("UCX_NET_DEVICES", "lo", 1);
  setenv("UCX_TLS", b == Backend::kUcxTcp ? "tcp" : "shm", 1);
}

Result<std::vector<std::string>> MemoryAllGather::operator()(int rank, const std::string& mine) {
  std::unique_lock<std::mutex> lock(mu_);
  values_[rank] = mine;
  if (++arrived_ == static_cast<int>(values_.size())) cv_.notify_all();
  if (!cv_.wait_for(lock, kTestTimeout,
                    [&] { return arrived_ == static_cast<int>(values_.size()); }))
    return errorTimeout("in-memory address exchange: only %d of %zu ranks arrived", arrived_,
                        values_.size());
  return values_;
}

void runThreads(Backend backend, int worldSize, const std::function<void(Transport&)>& fn,
                const TransportSettings& settings) {
  std::shared_ptr<InProcFabric> fabric;
  if (backend == Backend::kInProc) {
    auto f = makeInProcFabric(worldSize);
    ASSERT_TRUE(f.isOk()) << f.status().toString();
    fabric = *f;
  } else {
    setUcxEnvironment(backend);
  }
  MemoryAllGather exchange(worldSize);
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < worldSize; ++r) {
    threads.emplace_back([&, r] {
      Result<std::unique_ptr<Transport>> t =
          fabric ? createInProcTransport(fabric, r, settings)
                 : createUcxTransport(
                       r, worldSize, [&](const std::string& mine) { return exchange(r, mine); },
                       kTestTimeout, {}, settings);
      if (!t.isOk()) {
        ADD_FAILURE() << "rank " << r << ": " << t.status().toString();
        finished.fetch_add(1);
        return;
      }
      fn(**t);
      // Keep progressing until everyone is done: a peer's last operation may need ours.
      finished.fetch_add(1);
      auto deadline = std::chrono::steady_clock::now() + kTestTimeout;
      while (finished.load() < worldSize && std::chrono::steady_clock::now() < deadline) {
        (*t)->progress();
        std::this_thread::yield();
      }
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
