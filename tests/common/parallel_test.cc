#include "terse/common/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
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

}  // namespace
}  // namespace terse
