// Communicator::stats() (issue #23): its byte counts against the transport's own count of what
// it was handed, for every codec and collective; calls, failures, barriers and auto's picks.
// Ranks are threads over the in-process backend, each wrapped in a byte-counting transport.
#include "../transport/byte_counting_transport.h"
#include "terse/api/internal.h"
#include "terse/common/logging.h"
#include "terse/communicator.h"
#include "terse/transport/inproc.h"
#include "terse/transport/transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace terse {
namespace {

using std::chrono::milliseconds;

using testing::ByteCountingTransport;

struct World {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::atomic<uint64_t>> sent;
  explicit World(int n) : sent(n) {
    auto fabric = makeInProcFabric(n);
    EXPECT_TRUE(fabric.isOk());
    for (int r = 0; r < n; ++r) {
      sent[r] = 0;
      auto t = createInProcTransport(fabric.value(), r);
      EXPECT_TRUE(t.isOk());
      comms.push_back(communicatorFromTransport(
          std::make_unique<ByteCountingTransport>(std::move(t).value(), &sent[r]),
          milliseconds(60000)));
    }
  }
  void onEachRank(const std::function<void(int, Communicator&)>& fn) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < comms.size(); ++r)
      threads.emplace_back([&, r] { fn(static_cast<int>(r), *comms[r]); });
    for (auto& t : threads) t.join();
  }
};

TEST(Stats, WireBytesAreWhatTheTransportWasHandedForEveryCodec) {
  // Each codec in a world of its own, so every figure is checked per codec: the bytes stats()
  // attributes to the calls are exactly those the transport was handed.
  const int n = 3;
  const size_t count = 100003;
  const char* codecs[] = {"none",
                          "fp16",
                          "bf16",
                          "int8",
                          "onebit",
                          "fp8:format=e4m3",
                          "fp8:format=e5m2,block=64",
                          "mxfp8",
                          "mxfp4",
                          "int4",
                          "topk:ratio=0.05"};
  for (const char* codec : codecs) {
    SCOPED_TRACE(codec);
    World w(n);
    w.onEachRank([&](int, Communicator& c) {
      std::vector<float> in(count, 0.5f), out(count);
      CollectiveOptions o{codec};
      EXPECT_TRUE(
          c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, o).isOk());
      std::vector<uint16_t> half(count, 0x3c00), part(c.partOf(count).second);
      EXPECT_TRUE(
          c.reduceScatter(half.data(), part.data(), count, DataType::kFloat16, ReduceOp::kAvg, o)
              .isOk());
      EXPECT_TRUE(c.allgather(part.data(), half.data(), count, DataType::kFloat16, o).isOk());
    });
    w.onEachRank([&](int, Communicator& c) { EXPECT_TRUE(c.barrier().isOk()); });
    for (int r = 0; r < n; ++r) {
      const CollectiveStats st = w.comms[r]->stats();
      const uint64_t wire = st.allreduce.wireBytes + st.reduceScatter.wireBytes +
                            st.allgather.wireBytes + st.autoPolicy.wireBytes;
      // Every byte the transport was handed belongs to one call's row, the barrier's
      // descriptors aside (a barrier has no row): 2 x 96-byte descriptors per barrier on 3 ranks.
      EXPECT_EQ(wire + st.barriers * (n - 1) * 96, w.sent[r].load()) << "rank " << r;
      EXPECT_EQ(wire, w.comms[r]->bytesSent() - st.barriers * (n - 1) * 96);
      EXPECT_GT(st.allreduce.wireBytes, 0u);
      EXPECT_GT(st.reduceScatter.wireBytes, 0u);
      EXPECT_GT(st.allgather.wireBytes, 0u);
      EXPECT_EQ(st.allreduce.calls, 1u);
      EXPECT_EQ(st.reduceScatter.calls, 1u);
      EXPECT_EQ(st.allgather.calls, 1u);
      EXPECT_EQ(st.allreduce.rawBytes, count * 4);
      EXPECT_EQ(st.reduceScatter.rawBytes, count * 2);
      EXPECT_EQ(st.allgather.rawBytes, count * 2);
      EXPECT_EQ(st.allreduce.failures + st.reduceScatter.failures + st.allgather.failures, 0u);
      EXPECT_EQ(st.barriers, 1u);
      EXPECT_GT(st.allreduce.seconds, 0.0);
      if (std::string(codec) != "none") {
        EXPECT_GT(st.allreduce.compressSeconds, 0.0) << "the compressed calls compress";
      }
      EXPECT_GT(st.allreduce.reduceSeconds, 0.0);
      EXPECT_LE(st.allreduce.compressSeconds + st.allreduce.reduceSeconds, st.allreduce.seconds);
    }
  }
}

// With TERSE_DEBUG=INFO a communicator prints its figures when it is destroyed: one line per
// kind of call that ran, and auto's picks. Ranks log from their own worker threads, so the sink
// locks.
std::mutex capturedMutex;
std::vector<std::string>* capturedLines = nullptr;
void captureLine(LogLevel, uint64_t, const char*, int, const char* message) {
  std::lock_guard<std::mutex> lock(capturedMutex);
  if (capturedLines) capturedLines->push_back(message);
}

TEST(Stats, DestroyPrintsTheFiguresAtInfo) {
  std::vector<std::string> lines;
  setenv("TERSE_DEBUG", "INFO", 1);
  reloadLogConfig();
  {
    std::lock_guard<std::mutex> lock(capturedMutex);
    capturedLines = &lines;
  }
  setLogSink(captureLine);
  {
    World w(2);
    w.onEachRank([&](int, Communicator& c) {
      std::vector<float> in(4096, 1.0f), out(4096);
      EXPECT_TRUE(c.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum,
                              CollectiveOptions{"int8"})
                      .isOk());
      EXPECT_TRUE(c.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum,
                              CollectiveOptions{"auto:max=onebit"})
                      .isOk());
    });
    std::lock_guard<std::mutex> lock(capturedMutex);
    lines.clear();  // from here on: what the destruction prints
  }
  setLogSink(nullptr);
  {
    std::lock_guard<std::mutex> lock(capturedMutex);
    capturedLines = nullptr;
  }
  unsetenv("TERSE_DEBUG");
  reloadLogConfig();
  for (int r = 0; r < 2; ++r) {
    const std::string prefix = "rank " + std::to_string(r) + " stats: ";
    bool allreduce = false, pick = false;
    for (const auto& l : lines) {
      allreduce |= l.rfind(prefix + "allreduce 2 calls (0 failed), 32768 bytes -> ", 0) == 0;
      pick |= l.rfind(prefix + "auto ran 1 calls with ", 0) == 0;
    }
    EXPECT_TRUE(allreduce) << "no allreduce line for rank " << r;
    EXPECT_TRUE(pick) << "no auto pick line for rank " << r;
  }
}

TEST(Stats, PerCodecWireBytesFollowTheCodec) {
  // One codec per fresh world: onebit sends far fewer bytes than none for the same call.
  auto wireOf = [](const char* codec) {
    World w(2);
    w.onEachRank([&](int, Communicator& c) {
      std::vector<float> in(1 << 18, 1.0f), out(1 << 18);
      EXPECT_TRUE(c.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum,
                              CollectiveOptions{codec})
                      .isOk());
    });
    const CollectiveStats st = w.comms[0]->stats();
    EXPECT_EQ(st.allreduce.wireBytes, w.sent[0].load()) << codec;
    return st.allreduce.wireBytes;
  };
  const uint64_t none = wireOf("none"), onebit = wireOf("onebit"), fp16 = wireOf("fp16");
  EXPECT_GT(none, 10 * onebit);
  EXPECT_LT(fp16, none * 6 / 10);
  EXPECT_GT(fp16, none * 4 / 10);
}

TEST(Stats, FailuresAndAutoPicksAreCounted) {
  World w(2);
  w.onEachRank([&](int r, Communicator& c) {
    std::vector<float> in(4096, 1.0f), out(4096);
    // A refused call on rank 1, and its peer's failed call on rank 0.
    Status s = c.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum,
                           CollectiveOptions{r ? "bogus" : "none"});
    EXPECT_FALSE(s.isOk());
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(c.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum,
                              CollectiveOptions{"auto:max=onebit"})
                      .isOk());
  });
  for (int r = 0; r < 2; ++r) {
    const CollectiveStats st = w.comms[r]->stats();
    EXPECT_EQ(st.allreduce.failures, 1u);
    EXPECT_EQ(st.allreduce.calls, 3u) << "the caller's calls only";
    EXPECT_GT(st.autoPolicy.calls, 0u) << "auto's calibration runs calls of its own";
    EXPECT_GT(st.autoPolicy.wireBytes, 0u);
    uint64_t picks = 0;
    for (const auto& p : st.autoPicks) picks += p.second;
    EXPECT_EQ(picks, 3u);
  }
}

// auto models the algorithm the call runs (issue #18): on a two-level layout, a call that asks
// for flat calibrates flat collectives, and one that runs two-level calibrates those; each
// algorithm is calibrated once. Seen through the calls auto runs for itself (autoPolicy), all of
// them below the size that is measured per class. Before, the first call's calibration (of the
// default algorithm, two-level) served every later call, whatever it asked for.
TEST(Stats, AutoCalibratesTheAlgorithmTheCallRuns) {
  auto made = createInProcWorld({"a", "a", "b", "b"}, milliseconds(60000));
  ASSERT_TRUE(made.isOk()) << made.status().toString();
  auto& comms = made.value();
  ASSERT_TRUE(comms[0]->twoLevelUnavailable().empty()) << comms[0]->twoLevelUnavailable();
  std::vector<std::vector<uint64_t>> policyCalls(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      Communicator& c = *comms[r];
      std::vector<float> in(4096, 1.0f), out(4096);
      for (const char* algo : {"flat", "flat", "twolevel", "auto", "flat"}) {
        CollectiveOptions o{"auto:max=onebit"};
        o.algorithm = algo;
        EXPECT_TRUE(
            c.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum, o)
                .isOk())
            << algo;
        policyCalls[r].push_back(c.stats().autoPolicy.calls);
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) {
    const auto& p = policyCalls[r];
    ASSERT_EQ(p.size(), 5u);
    EXPECT_GT(p[0], 0u) << "the first flat call calibrates flat";
    EXPECT_EQ(p[1], p[0]) << "flat again: already calibrated";
    EXPECT_GT(p[2], p[1]) << "the first two-level call calibrates two-level";
    EXPECT_EQ(p[2] - p[1], p[0]) << "the same calibration, of the other algorithm";
    // auto: the codec's calibration is two-level's (already made); the engine then chooses the
    // algorithm for the picked codec by its own trials: 3 rounds of flat and two-level and one
    // gather of the times (collectives' AlgorithmChoice tests).
    EXPECT_EQ(p[3] - p[2], 7u) << "auto: only the algorithm choice's trials are new";
    EXPECT_EQ(p[4], p[3]) << "flat once more: already calibrated";
  }
}

}  // namespace
}  // namespace terse
