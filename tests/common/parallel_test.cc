#include "terse/common/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace terse {
namespace {

// Every index covered exactly once, pieces aligned, for sizes around the edges.
TEST(ParallelFor, CoversRangeOnceWithAlignedPieces) {
  for (size_t n : {0ul, 1ul, 7ul, 1000ul, 1ul << 20, (1ul << 20) + 3}) {
    for (size_t align : {1ul, 32ul, 256ul}) {
      std::vector<std::atomic<int>> hits(n);
      std::mutex m;
      std::vector<std::pair<size_t, size_t>> pieces;
      parallelFor(n, align, 16, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) hits[i]++;
        std::lock_guard<std::mutex> lock(m);
        pieces.emplace_back(b, e);
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      for (auto [b, e] : pieces) EXPECT_EQ(b % align, 0u) << "piece start must be aligned";
    }
  }
}

TEST(ParallelFor, ConcurrentAndNestedCallsComplete) {
  std::atomic<size_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r)
        parallelFor(10000, 1, 100, [&](size_t b, size_t e) {
          parallelFor(e - b, 1, 1, [&](size_t b2, size_t e2) { total += e2 - b2; });
        });
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 4u * 50u * 10000u);
  EXPECT_GE(parallelThreads(), 1u);
}

// A piece that throws (bad_alloc in a codec, say) hands its exception to parallelFor's caller,
// on whichever thread it ran: before, one thrown on a pool worker ended the process (issue #22).
// Many runs, so that pool workers certainly run some of the throwing pieces; the pool must go on
// working afterwards.
TEST(ParallelFor, APiecesExceptionReachesTheCaller) {
  if (parallelThreads() < 2) GTEST_SKIP() << "a pool of one thread runs every piece inline";
  std::atomic<int> onOtherThreads{0};
  const auto caller = std::this_thread::get_id();
  for (int run = 0; run < 50; ++run) {
    std::atomic<int> started{0};
    EXPECT_THROW(
        parallelFor(1 << 16, 1, 16,
                    [&](size_t b, size_t) {
                      started++;
                      if (std::this_thread::get_id() != caller) onOtherThreads++;
                      if (b > 0) throw std::runtime_error("piece failed");
                      // The first piece waits (briefly) for another thread to take a
                      // second one, so that the throwing pieces run on pool workers.
                      auto until =
                          std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
                      while (started.load() < 2 && std::chrono::steady_clock::now() < until)
                        std::this_thread::yield();
                    }),
        std::runtime_error);
  }
  EXPECT_GT(onOtherThreads.load(), 0) << "no piece ran on a pool worker: the test proves nothing";
  std::atomic<size_t> total{0};
  parallelFor(10000, 1, 100, [&](size_t b, size_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 10000u);
}

}  // namespace
}  // namespace terse
