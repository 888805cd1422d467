// The algorithm units on contexts of their own: each rank a thread over the in-process transport
// with its own Workspaces and CallCounters, no CollectiveEngine, no communicator, no agreement.
// What a unit computes is checked against an independent model (exact integer sums for the
// uncompressed units, reference.h's single-process model for the compressed ones), and what it
// reports through its context (bytes sent, arithmetic) against what the algorithm must do.
#include "algorithm.h"
#include "world.h"

#include "terse/collectives/reference.h"
#include "terse/transport/group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace terse {
namespace {

using detail::AlgorithmContext;
using detail::CallCounters;
using detail::Workspaces;

// A unit run on one rank's context.
using Unit = std::function<Status(const AlgorithmContext&, int rank)>;

struct RankRecord {
  Status status;
  CallCounters counters;
};

// Runs `unit` on n ranks, each on a context over its own transport, workspaces and counters.
std::vector<RankRecord> runUnit(int n, const Unit& unit, size_t segmentElements = 1 << 16,
                                CollectiveEngine::ArithmeticHook* hook = nullptr) {
  auto transports = testing::makeInProcWorld(n);
  std::vector<RankRecord> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Workspaces workspaces;
      AlgorithmContext::Settings settings;
      settings.timeout = testing::kCollTimeout;
      settings.segmentElements = segmentElements;
      AlgorithmContext ctx(*transports[r], settings, workspaces, out[r].counters, hook);
      out[r].status = unit(ctx, r);
    });
  for (auto& t : threads) t.join();
  return out;
}

// Small integers: every order of float32 summation gives the exact sum.
std::vector<float> integers(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(static_cast<int>((i * 7 + rank * 13) % 201) - 100);
  return v;
}

// The exact sum of every rank's integers(r, count).
std::vector<float> exactSum(int n, size_t count) {
  std::vector<float> sum(count, 0.0f);
  for (int r = 0; r < n; ++r) {
    auto in = integers(r, count);
    for (size_t i = 0; i < count; ++i) sum[i] += in[i];
  }
  return sum;
}

// An allreduce (sum) of float32 `in` into `out` with `codec`.
CollectiveOp allreduceOf(const std::vector<float>& in, std::vector<float>& out,
                         const Codec& codec) {
  CollectiveOp op;
  op.kind = CollectiveKind::kAllReduce;
  op.send = in.data();
  op.recv = out.data();
  op.count = in.size();
  op.codec = &codec;
  return op;
}

TEST(AlgorithmUnit, RingAndRecursiveDoublingSumExactlyOnTheirOwnContexts) {
  const int n = 4;
  const size_t count = n * 3000;  // equal chunks: the ring's volume is exact
  auto none = makeCodec("none").value();
  for (int which = 0; which < 2; ++which) {
    SCOPED_TRACE(which == 0 ? "ring" : "recursive doubling");
    std::vector<std::vector<float>> results(n, std::vector<float>(count));
    auto records = runUnit(n, [&](const AlgorithmContext& ctx, int r) {
      auto in = integers(r, count);
      CollectiveOp op = allreduceOf(in, results[r], *none);
      return which == 0 ? detail::ringAllreduce(ctx, op, 0)
                        : detail::recursiveDoublingAllreduce(ctx, op, 0);
    });
    const std::vector<float> want = exactSum(n, count);
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(records[r].status.isOk()) << records[r].status.toString();
      EXPECT_EQ(results[r], want) << "rank " << r;
      // A ring allreduce sends 2 (n - 1) chunks; recursive doubling log2(n) whole tensors.
      const uint64_t expected =
          which == 0 ? 2 * (n - 1) * (count / n) * sizeof(float) : 2 * count * sizeof(float);
      EXPECT_EQ(records[r].counters.bytesSent, expected) << "rank " << r;
    }
  }
}

TEST(AlgorithmUnit, RingReduceScatterAndAllgatherOnTheirOwnContexts) {
  const int n = 3;
  const size_t count = 10007;  // uneven chunks
  auto none = makeCodec("none").value();
  std::vector<std::vector<float>> scattered(n), gathered(n, std::vector<float>(count));
  auto records = runUnit(n, [&](const AlgorithmContext& ctx, int r) {
    auto in = integers(r, count);
    Range mine = chunkRange(count, n, r);
    scattered[r].resize(mine.length);
    CollectiveOp op;
    op.kind = CollectiveKind::kReduceScatter;
    op.send = in.data();
    op.recv = scattered[r].data();
    op.count = count;
    op.codec = none.get();
    TERSE_RETURN_IF_ERROR(detail::ringReduceScatter(ctx, op, 0));
    // Allgather each rank's reduced part back into the whole sum (its part in place first).
    std::memcpy(gathered[r].data() + mine.begin, scattered[r].data(), mine.length * 4);
    CollectiveOp ag = op;
    ag.kind = CollectiveKind::kAllGather;
    ag.send = gathered[r].data() + mine.begin;
    ag.recv = gathered[r].data();
    return detail::ringAllgather(ctx, ag, 1);
  });
  const std::vector<float> want = exactSum(n, count);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(records[r].status.isOk()) << records[r].status.toString();
    Range mine = chunkRange(count, n, r);
    EXPECT_EQ(scattered[r], std::vector<float>(want.begin() + mine.begin,
                                               want.begin() + mine.begin + mine.length))
        << "rank " << r;
    EXPECT_EQ(gathered[r], want) << "rank " << r;
  }
}

// Random-ish inputs for the compressed units.
std::vector<float> noisy(int rank, size_t count) {
  std::vector<float> v(count);
  uint32_t x = 12345u + 977u * static_cast<uint32_t>(rank);
  for (size_t i = 0; i < count; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<float>(static_cast<int32_t>(x >> 8) % 100000) / 25000.0f;
  }
  return v;
}

TEST(AlgorithmUnit, CompressedUnitsMatchTheSingleProcessModelBitForBit) {
  const int n = 4;
  const size_t count = 50000;
  const size_t segment = 1 << 14;  // several segments a chunk
  for (const char* spec : {"int8", "fp16", "mxfp4"}) {
    auto codec = makeCodec(spec).value();
    for (auto kind :
         {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather}) {
      SCOPED_TRACE(std::string(spec) + " " + collectiveName(kind));
      std::vector<std::vector<float>> inputs(n);
      std::vector<std::vector<uint8_t>> results(n);
      for (int r = 0; r < n; ++r) {
        Range mine = chunkRange(count, n, r);
        inputs[r] = noisy(r, kind == CollectiveKind::kAllGather ? mine.length : count);
        results[r].resize(4 * (kind == CollectiveKind::kReduceScatter ? mine.length : count));
      }
      auto records = runUnit(
          n,
          [&](const AlgorithmContext& ctx, int r) {
            CollectiveOp op;
            op.kind = kind;
            op.send = inputs[r].data();
            op.recv = results[r].data();
            op.count = count;
            op.op = ReduceOp::kAvg;
            op.codec = codec.get();
            return kind == CollectiveKind::kAllGather ? detail::compressedAllgather(ctx, op, 0)
                                                      : detail::scatterReduce(ctx, op, 0);
          },
          segment);
      std::vector<const void*> in(n);
      for (int r = 0; r < n; ++r) in[r] = inputs[r].data();
      auto model = simulateCompressedCollective(kind, in, count, DataType::kFloat32, ReduceOp::kAvg,
                                                *codec, segment, nullptr);
      ASSERT_TRUE(model.isOk()) << model.status().toString();
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(records[r].status.isOk()) << records[r].status.toString();
        EXPECT_EQ(results[r], model.value()[r]) << "rank " << r;
        EXPECT_GT(records[r].counters.bytesSent, 0u);
        // fp16 and int8 at least halve what float32 would send: the codec ran on the wire.
        EXPECT_LT(records[r].counters.bytesSent, uint64_t{2} * count * 4) << "rank " << r;
      }
    }
  }
}

// Counts what a unit hands to the arithmetic hook, and lets it run.
class CountingHook : public CollectiveEngine::ArithmeticHook {
 public:
  bool take(detail::Arithmetic what, size_t elements) override {
    (what == detail::Arithmetic::kReduce ? reduced : converted) += elements;
    return false;
  }
  std::atomic<size_t> reduced{0}, converted{0};
};

TEST(AlgorithmUnit, TheContextsArithmeticHookSeesTheUnitsOwnArithmetic) {
  const int n = 2;
  const size_t count = 4096;
  auto none = makeCodec("none").value();
  CountingHook hook;
  std::vector<std::vector<uint16_t>> out(n, std::vector<uint16_t>(count));
  auto records = runUnit(
      n,
      [&](const AlgorithmContext& ctx, int r) {
        std::vector<uint16_t> in(count, r == 0 ? 0x3c00 : 0x4000);  // fp16 1.0 and 2.0
        CollectiveOp op;
        op.kind = CollectiveKind::kAllReduce;
        op.send = in.data();
        op.recv = out[r].data();
        op.count = count;
        op.dtype = DataType::kFloat16;
        op.codec = none.get();
        return detail::ringAllreduce(ctx, op, 0);
      },
      1 << 16, &hook);
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(records[r].status.isOk()) << records[r].status.toString();
    EXPECT_EQ(out[r], std::vector<uint16_t>(count, 0x4200)) << "rank " << r;  // fp16 3.0
  }
  // Each rank sums the other's half (count / 2 elements) and converts to and from float16.
  EXPECT_GE(hook.reduced.load(), size_t{n} * (count / 2));
  EXPECT_GE(hook.converted.load(), size_t{n} * count);
}

// Two-level on contexts of its own: 2 nodes x 2 ranks, the node and cross-node groups as group
// transports over the in-process world, no engine. Integer inputs make the node sums exact, so
// the model is simple: `none` gives the exact sum; int8 gives, for each slice, what the flat
// compressed allreduce model (reference.h) makes of the two nodes' sums of that slice.
TEST(AlgorithmUnit, TwoLevelComposesFlatUnitsOverChildContexts) {
  const int n = 4;
  const std::vector<std::vector<int>> nodes = {{0, 1}, {2, 3}};
  const size_t count = 30011;
  for (const char* spec : {"none", "int8"}) {
    SCOPED_TRACE(spec);
    auto codec = makeCodec(spec).value();
    auto none = makeCodec("none").value();
    std::vector<std::vector<float>> results(n, std::vector<float>(count));
    std::vector<CallCounters> stepCounters(n);
    CountingHook hook, nodeHook;  // the world context's, the node context's
    auto records = runUnit(
        n,
        [&](const AlgorithmContext& world, int r) {
          // The child contexts over group transports of the world context's transport; their
          // steps count into their own counters here, where an engine shares its own.
          const int node = r / 2, local = r % 2;
          TERSE_ASSIGN_OR_RETURN(auto nodeT,
                                 createGroupTransport(world.transport(), nodes[node], 1));
          TERSE_ASSIGN_OR_RETURN(
              auto crossT,
              createGroupTransport(world.transport(), {nodes[0][local], nodes[1][local]}, 2));
          Workspaces stepWorkspaces;
          ErrorFeedback stepFeedback;
          uint32_t nodeSeq = 0, crossSeq = 0;
          const detail::TwoLevelContext t{
              world,
              AlgorithmContext(*nodeT, world.settings(), stepWorkspaces, stepCounters[r],
                               &nodeHook),
              AlgorithmContext(*crossT, world.settings(), stepWorkspaces, stepCounters[r]),
              &nodes,
              node,
              local,
              none.get(),
              &stepFeedback,
              &nodeSeq,
              &crossSeq};
          auto in = integers(r, count);
          CollectiveOp op = allreduceOf(in, results[r], *codec);
          op.algorithm = Algorithm::kTwoLevel;
          TERSE_RETURN_IF_ERROR(detail::twoLevelAllreduce(t, op));
          // Three steps: two inside the node, one across.
          if (nodeSeq != 2 || crossSeq != 1)
            return errorInternal("steps: %u in the node, %u across", nodeSeq, crossSeq);
          return Status::ok();
        },
        1 << 16, &hook);
    std::vector<std::vector<float>> nodeSum(2, std::vector<float>(count, 0.0f));
    for (int r = 0; r < n; ++r) {
      auto in = integers(r, count);
      for (size_t i = 0; i < count; ++i) nodeSum[r / 2][i] += in[i];
    }
    std::vector<float> want = exactSum(n, count);
    if (std::string(spec) != "none") {
      for (int c = 0; c < 2; ++c) {
        Range slice = chunkRange(count, 2, c);
        std::vector<const void*> in = {nodeSum[0].data() + slice.begin,
                                       nodeSum[1].data() + slice.begin};
        auto model = simulateCompressedCollective(
            CollectiveKind::kAllReduce, in, slice.length, DataType::kFloat32, ReduceOp::kSum,
            *codec, AlgorithmContext::Settings{}.segmentElements, nullptr);
        ASSERT_TRUE(model.isOk()) << model.status().toString();
        std::memcpy(want.data() + slice.begin, model.value()[0].data(), slice.length * 4);
      }
    }
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(records[r].status.isOk()) << records[r].status.toString();
      EXPECT_EQ(results[r], want) << "rank " << r;
      EXPECT_GT(stepCounters[r].bytesSent, 0u);
    }
    // Memory passes of the unit's own conversions: each element widened once on the way in (a
    // float32 copy here, the caller's buffer not being ours), each rank's slice converted once
    // on the way out: over the 4 ranks 4 x count + 2 nodes x count. The node's ring sums in
    // place in the widened copy and converts nothing (before 2026-11-28 the node step copied
    // the input again into the ring unit's own buffer and its result out of it: 6 x count more
    // on the node's contexts). The cross step's own passes are the flat unit's.
    EXPECT_EQ(hook.converted.load(), 6 * count);
    EXPECT_EQ(nodeHook.converted.load(), 0u);
    EXPECT_GT(nodeHook.reduced.load(), 0u);
  }
}

}  // namespace
}  // namespace terse
