// Ranks as threads over the in-process transport, each with its own CollectiveEngine.
#pragma once

#include "terse/collectives/engine.h"
#include "terse/transport/inproc.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace terse::testing {

constexpr std::chrono::milliseconds kCollTimeout{120000};

// One in-process transport per rank of an `n`-rank world, in rank order.
inline std::vector<std::unique_ptr<Transport>> makeInProcWorld(int n) {
  auto fabric = makeInProcFabric(n);
  EXPECT_TRUE(fabric.isOk()) << fabric.status().toString();
  std::vector<std::unique_ptr<Transport>> transports(n);
  for (int r = 0; r < n; ++r) {
    auto t = createInProcTransport(fabric.value(), r);
    EXPECT_TRUE(t.isOk()) << t.status().toString();
    transports[r] = std::move(t).value();
  }
  return transports;
}

// Runs fn(rank, engine) on `n` threads and returns each rank's status in rank order. With
// `nodeOfRank`, the engines get that node layout (two-level calls, in tag spaces 1 and 2).
inline std::vector<Status> runWorld(int n, const std::function<Status(int, CollectiveEngine&)>& fn,
                                    size_t segmentBytes = 0,
                                    const std::vector<int>* nodeOfRank = nullptr) {
  std::vector<std::unique_ptr<Transport>> transports = makeInProcWorld(n);
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      CollectiveEngine engine(*transports[r], kCollTimeout);
      if (nodeOfRank) results[r] = engine.enableTwoLevel(*nodeOfRank, 1, 2);
      if (segmentBytes) engine.setSegmentBytes(segmentBytes);
      if (results[r].isOk()) results[r] = fn(r, engine);
    });
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace terse::testing
