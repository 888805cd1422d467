// The algorithm units on contexts of their own: each rank a thread over the in-process transport
// with its own Workspaces and CallCounters, no CollectiveEngine, no communicator, no agreement.
// What a unit computes is checked against an independent model (exact integer sums for the
// uncompressed units, reference.h's single-process model for the compressed ones), and what it
// reports through its context (bytes sent, arithmetic) against what the algorithm must do.
#include "algorithm.h"
#include "world.h"

#include "terse/collectives/reference.h"
#include "terse/kernels/element_type.h"
#include "terse/transport/group.h"
#include "terse/transport/shared.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdio>
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
                                ArithmeticHook* hook = nullptr) {
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
class CountingHook : public ArithmeticHook {
 public:
  bool take(Arithmetic what, size_t elements) override {
    (what == Arithmetic::kReduce ? reduced : converted) += elements;
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

// Rank r's part of the 2 nodes x 2 ranks layout the two-level tests run on: a TwoLevelLayout
// over the world's transport (its node's and cross-node group's transports, the step state a
// TwoLevelContext borrows), whose children the tests give workspaces, counters and hooks of
// their own, to see which child did what.
struct TwoByTwo {
  std::unique_ptr<detail::TwoLevelLayout> layout;
  uint32_t nodeSeq() const { return layout->localSeq; }
  uint32_t crossSeq() const { return layout->crossSeq; }

  Status open(Transport& world, int r) {
    std::string whyNot;
    TERSE_ASSIGN_OR_RETURN(layout,
                           detail::TwoLevelLayout::make(world, {0, 0, 1, 1}, 1, 2, &whyNot));
    if (!layout) return errorInternal("rank %d: no two-level layout: %s", r, whyNot.c_str());
    if (layout->node != r / 2 || layout->localIndex != r % 2)
      return errorInternal("rank %d: node %d, local index %d", r, layout->node, layout->localIndex);
    return Status::ok();
  }
  // Node steps over (nodeWs, nodeCounters, nodeHook), cross-node steps over their own.
  detail::TwoLevelContext context(const AlgorithmContext& world, Workspaces& nodeWs,
                                  CallCounters& nodeCounters, ArithmeticHook* nodeHook,
                                  Workspaces& crossWs, CallCounters& crossCounters,
                                  ArithmeticHook* crossHook, const Codec* none,
                                  StepLane* lane = nullptr) {
    detail::TwoLevelContext t = layout->context(world);
    t.node =
        AlgorithmContext(*layout->localTransport, world.settings(), nodeWs, nodeCounters, nodeHook);
    t.cross = AlgorithmContext(*layout->crossTransport, world.settings(), crossWs, crossCounters,
                               crossHook);
    t.none = none;
    t.lane = lane;
    return t;
  }
};

// Two-level on contexts of its own: 2 nodes x 2 ranks, the node and cross-node groups as group
// transports over the in-process world, no engine. Integer inputs make the node sums exact, so
// the model is simple: `none` gives the exact sum; int8 gives, for each slice, what the flat
// compressed allreduce model (reference.h) makes of the two nodes' sums of that slice.
TEST(AlgorithmUnit, TwoLevelComposesFlatUnitsOverChildContexts) {
  const int n = 4;
  const size_t count = 30011;
  for (const char* spec : {"none", "int8"}) {
    SCOPED_TRACE(spec);
    auto codec = makeCodec(spec).value();
    auto none = makeCodec("none").value();
    std::vector<std::vector<float>> results(n, std::vector<float>(count));
    std::vector<CallCounters> stepCounters(n);
    CountingHook hook, nodeHook, crossHook;  // the world's, the node's, the cross-node's
    auto records = runUnit(
        n,
        [&](const AlgorithmContext& world, int r) {
          // The child contexts over group transports of the world context's transport; their
          // steps count into their own counters here, where an engine shares its own.
          TwoByTwo layout;
          TERSE_RETURN_IF_ERROR(layout.open(world.transport(), r));
          Workspaces stepWorkspaces, crossWorkspaces;
          const detail::TwoLevelContext t =
              layout.context(world, stepWorkspaces, stepCounters[r], &nodeHook, crossWorkspaces,
                             stepCounters[r], &crossHook, none.get());
          auto in = integers(r, count);
          CollectiveOp op = allreduceOf(in, results[r], *codec);
          op.algorithm = Algorithm::kTwoLevel;
          TERSE_RETURN_IF_ERROR(detail::twoLevelAllreduce(t, op));
          // Three steps: two inside the node, one across.
          if (layout.nodeSeq() != 2 || layout.crossSeq() != 1)
            return errorInternal("steps: %u in the node, %u across", layout.nodeSeq(),
                                 layout.crossSeq());
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
    // float32 copy here, the caller's buffer not being ours): over the 4 ranks 4 x count on the
    // world's context. The node's ring sums in place in the widened copy and converts nothing
    // (before 2026-11-28 the node step copied the input again into the ring unit's own buffer
    // and its result out of it: 6 x count more on the node's contexts). The conversions out run
    // on the cross-node context, where the cross step ran (a lane's thread in the pipeline):
    // for `none` only each rank's chunk of its slice (count over the world; the ring's cores
    // run on the float32 sum), for compressed codecs each slice (2 x count) besides the flat
    // unit's own.
    const bool compressed = std::string(spec) != "none";
    EXPECT_EQ(hook.converted.load(), 4 * count);
    if (compressed) {
      EXPECT_GE(crossHook.converted.load(), 2 * count);
    } else {
      EXPECT_EQ(crossHook.converted.load(), count);
    }
    EXPECT_EQ(nodeHook.converted.load(), 0u);
    EXPECT_GT(nodeHook.reduced.load(), 0u);
  }
}

// The pipelined two-level allreduce on 2 nodes x 2 ranks: each rank's world transport is a
// SharedTransport over the in-process one (as a communicator's is), the child contexts run over
// group transports of it, and the cross-node steps run on `lane` (null: inline). What one rank
// ends with: its results after each call and its error-feedback residuals.
struct PipelineRun {
  std::vector<Status> status;
  std::vector<std::vector<std::vector<float>>> results;  // [rank][call]
  std::vector<std::vector<float>> worker;                // [rank]: residuals after the calls
  std::vector<std::vector<uint8_t>> state;  // [rank]: ErrorFeedback::serialize(), server's too
  std::vector<uint32_t> nodeSteps, crossSteps;
  std::vector<size_t> laneJobs;  // [rank]: jobs the given lane was handed
};

enum class LaneKind { kNone, kInline, kThread };

// A lane that counts the jobs it is handed and passes them on.
class CountingLane final : public StepLane {
 public:
  explicit CountingLane(std::unique_ptr<StepLane> inner) : inner_(std::move(inner)) {}
  void submit(std::function<Status()> job) override {
    ++jobs;
    inner_->submit(std::move(job));
  }
  Status collect() override { return inner_->collect(); }
  size_t jobs = 0;

 private:
  std::unique_ptr<StepLane> inner_;
};

PipelineRun runPipeline(const std::string& spec, size_t count, size_t segmentElements,
                        LaneKind laneKind, int calls, bool feedback,
                        std::chrono::milliseconds timeout = testing::kCollTimeout,
                        int absent = -1) {
  const int n = 4;
  auto inner = testing::makeInProcWorld(n);
  std::vector<std::unique_ptr<SharedTransport>> shared;
  for (auto& t : inner) shared.push_back(std::make_unique<SharedTransport>(std::move(t)));
  auto codec = makeCodec(spec).value();
  auto none = makeCodec("none").value();
  PipelineRun run;
  run.status.resize(n);
  run.results.assign(n, {});
  run.worker.resize(n);
  run.state.resize(n);
  run.nodeSteps.assign(n, 0);
  run.crossSteps.assign(n, 0);
  run.laneJobs.assign(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      SharedTransport& world = *shared[r];
      world.addDriver();
      if (r == absent) {
        // A rank that dies before the call: its peers must fail, not hang.
        world.abort(errorRemote("rank %d is gone", r));
        run.status[r] = errorRemote("absent");
        world.removeDriver();
        return;
      }
      run.status[r] = [&]() -> Status {
        AlgorithmContext::Settings settings;
        settings.timeout = timeout;
        settings.segmentElements = 1 << 16;
        settings.twoLevelSegmentElements = segmentElements;
        Workspaces workspaces, crossWorkspaces;
        CallCounters counters, crossCounters;
        TwoByTwo layout;
        TERSE_RETURN_IF_ERROR(layout.open(world, r));
        std::unique_ptr<CountingLane> lane;
        if (laneKind == LaneKind::kInline) lane = std::make_unique<CountingLane>(makeInlineLane());
        if (laneKind == LaneKind::kThread)
          lane = std::make_unique<CountingLane>(
              makeThreadLane([&] { world.addDriver(); }, [&] { world.removeDriver(); }));
        const AlgorithmContext worldContext(world, settings, workspaces, counters);
        const detail::TwoLevelContext t =
            layout.context(worldContext, workspaces, counters, nullptr, crossWorkspaces,
                           crossCounters, nullptr, none.get(), lane.get());
        TERSE_ASSIGN_OR_RETURN(ErrorFeedback ef, ErrorFeedback::create(spec, count));
        for (int call = 0; call < calls; ++call) {
          // Varies per call so that the residuals matter.
          auto in = integers(r + call, count);
          for (float& x : in) x *= 0.37f;
          run.results[r].emplace_back(count);
          CollectiveOp op = allreduceOf(in, run.results[r].back(), *codec);
          op.algorithm = Algorithm::kTwoLevel;
          if (feedback) {
            ef.prepareFor(codec->spec());
            op.feedback = &ef;
          }
          TERSE_RETURN_IF_ERROR(detail::twoLevelAllreduce(t, op));
        }
        run.nodeSteps[r] = layout.nodeSeq();
        run.crossSteps[r] = layout.crossSeq();
        run.laneJobs[r] = lane ? lane->jobs : 0;
        run.worker[r].assign(ef.worker(), ef.worker() + count);
        run.state[r] = ef.serialize();
        return Status::ok();
      }();
      world.removeDriver();
    });
  for (auto& t : threads) t.join();
  return run;
}

TEST(AlgorithmUnit, TwoLevelPipelineMatchesTheModelSegmentBySegment) {
  // Segments of 2 x 65536 elements (65536 per local rank); 3 whole segments and a ragged one.
  const size_t segment = 2 * 65536, count = 3 * segment + 4099;
  EXPECT_EQ(detail::twoLevelSegmentElements(segment + 100, 2, count), segment);
  EXPECT_EQ(detail::twoLevelSegmentElements(1000, 2, count), segment);  // at least one unit
  EXPECT_EQ(detail::twoLevelSegmentElements(segment, 2, 5000), 5000u);  // at most the count
  for (const char* spec : {"none", "int8"}) {
    SCOPED_TRACE(spec);
    auto codec = makeCodec(spec).value();
    // The independent model: integers scaled by 0.37 and summed inside each node in float32
    // (two addends: every order gives the same float), then per segment and per local index
    // the slice of the two node sums across nodes: for none their float32 sum, for int8
    // reference.h's model of the compressed allreduce of that slice.
    std::vector<std::vector<float>> nodeSum(2, std::vector<float>(count, 0.0f));
    for (int r = 0; r < 4; ++r) {
      auto in = integers(r, count);
      for (size_t i = 0; i < count; ++i) nodeSum[r / 2][i] += in[i] * 0.37f;
    }
    std::vector<float> want(count);
    for (size_t begin = 0; begin < count; begin += segment) {
      const size_t length = std::min(segment, count - begin);
      for (int c = 0; c < 2; ++c) {
        const Range slice = chunkRange(length, 2, c);
        const size_t at = begin + slice.begin;
        if (std::string(spec) == "none") {
          for (size_t i = at; i < at + slice.length; ++i) want[i] = nodeSum[0][i] + nodeSum[1][i];
          continue;
        }
        std::vector<const void*> in = {nodeSum[0].data() + at, nodeSum[1].data() + at};
        auto model = simulateCompressedCollective(CollectiveKind::kAllReduce, in, slice.length,
                                                  DataType::kFloat32, ReduceOp::kSum, *codec,
                                                  1 << 16, nullptr);
        ASSERT_TRUE(model.isOk()) << model.status().toString();
        std::memcpy(want.data() + at, model.value()[0].data(), slice.length * 4);
      }
    }
    for (LaneKind lane : {LaneKind::kNone, LaneKind::kThread}) {
      SCOPED_TRACE(lane == LaneKind::kNone ? "inline" : "thread lane");
      PipelineRun run = runPipeline(spec, count, segment, lane, 1, false);
      for (int r = 0; r < 4; ++r) {
        ASSERT_TRUE(run.status[r].isOk()) << run.status[r].toString();
        EXPECT_EQ(run.results[r][0], want) << "rank " << r;
        // Per segment two steps inside the node and one across, each cross step on the lane.
        EXPECT_EQ(run.nodeSteps[r], 8u);
        EXPECT_EQ(run.crossSteps[r], 4u);
        if (lane == LaneKind::kThread) {
          EXPECT_EQ(run.laneJobs[r], 4u);
        }
      }
    }
  }
}

TEST(AlgorithmUnit, TwoLevelOneSegmentRunsInlineBesideALane) {
  // A call of one segment has nothing to overlap: it must not go through the lane (a thread
  // hand-off and the shared transport's polling mode for nothing), and gives the same bytes.
  const size_t segment = 2 * 65536, count = segment - 999;
  PipelineRun threaded = runPipeline("int8", count, segment, LaneKind::kThread, 2, false);
  PipelineRun inlined = runPipeline("int8", count, segment, LaneKind::kNone, 2, false);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(threaded.status[r].isOk()) << threaded.status[r].toString();
    ASSERT_TRUE(inlined.status[r].isOk()) << inlined.status[r].toString();
    EXPECT_EQ(threaded.laneJobs[r], 0u) << "rank " << r;
    EXPECT_EQ(threaded.crossSteps[r], 2u) << "rank " << r;
    EXPECT_EQ(threaded.results[r], inlined.results[r]) << "rank " << r;
  }
}

TEST(AlgorithmUnit, TwoLevelPipelineOnAThreadGivesTheInlineBytesWithErrorFeedback) {
  // onebit with error feedback over three calls: the cross steps on a thread of their own,
  // overlapping the node steps, must leave the same results and residuals as the same
  // schedule run inline, on every rank, and every rank of the world the same results.
  const size_t segment = 2 * 65536, count = 2 * segment + 777;
  PipelineRun inlined = runPipeline("onebit", count, segment, LaneKind::kInline, 3, true);
  PipelineRun threaded = runPipeline("onebit", count, segment, LaneKind::kThread, 3, true);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(inlined.status[r].isOk()) << inlined.status[r].toString();
    ASSERT_TRUE(threaded.status[r].isOk()) << threaded.status[r].toString();
    for (int call = 0; call < 3; ++call) {
      EXPECT_EQ(threaded.results[r][call], inlined.results[r][call]) << "rank " << r;
      EXPECT_EQ(threaded.results[r][call], threaded.results[0][call]) << "rank " << r;
    }
    EXPECT_EQ(threaded.worker[r], inlined.worker[r]) << "rank " << r;
    EXPECT_EQ(threaded.state[r], inlined.state[r]) << "rank " << r;
    // The residuals are in use (the test would pass vacuously without them).
    EXPECT_TRUE(std::any_of(inlined.worker[r].begin(), inlined.worker[r].end(),
                            [](float x) { return x != 0.0f; }));
  }
  // And without error feedback the answers differ: the residuals changed something.
  PipelineRun plain = runPipeline("onebit", count, segment, LaneKind::kInline, 3, false);
  ASSERT_TRUE(plain.status[0].isOk());
  EXPECT_NE(plain.results[0][2], inlined.results[0][2]);
}

TEST(AlgorithmUnit, TwoLevelPipelineFailsOnEveryRankWhenARankIsGone) {
  // Rank 3 is gone before the call. Rank 2 (its node) fails in the node step; rank 1 (its
  // cross-node peer) on the lane; rank 0 waits for rank 2's cross steps until the timeout.
  // Each returns an error, after collecting every cross step it handed to the lane.
  const size_t segment = 2 * 65536, count = 4 * segment;
  const auto start = std::chrono::steady_clock::now();
  PipelineRun run = runPipeline("int8", count, segment, LaneKind::kThread, 1, false,
                                std::chrono::milliseconds(1500), 3);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(run.status[r].isOk()) << "rank " << r;
  EXPECT_NE(run.status[1].toString().find("across nodes"), std::string::npos)
      << run.status[1].toString();
  EXPECT_NE(run.status[2].toString().find("inside the node"), std::string::npos)
      << run.status[2].toString();
  // A hang would be the test's own timeout; this bound only says that no wait outlived a few
  // timeouts (rank 0 waits at most for two outstanding cross steps).
  EXPECT_LT(seconds, 30.0);
}

// A codec that counts the elements it handles and forwards to another: the codec's passes over
// the data (compress, decode, decode-and-add), which the arithmetic hook does not see.
class CountingCodec final : public Codec {
 public:
  explicit CountingCodec(std::shared_ptr<const Codec> inner) : inner_(std::move(inner)) {}
  CodecId id() const override { return inner_->id(); }
  std::string spec() const override { return inner_->spec(); }
  bool wantsErrorFeedback() const override { return inner_->wantsErrorFeedback(); }
  double wireBytesPerElement() const override { return inner_->wireBytesPerElement(); }
  size_t maxWireBytes(size_t n) const override { return inner_->maxWireBytes(n); }
  Result<size_t> compress(const void* in, DataType dt, size_t n, float* residual, void* wire,
                          size_t capacity, const CodecCall& call) const override {
    compressed += n;
    return inner_->compress(in, dt, n, residual, wire, capacity, call);
  }
  Status decompress(const void* wire, size_t bytes, void* out, DataType dt, size_t n,
                    const CodecCall& call) const override {
    decoded += n;
    return inner_->decompress(wire, bytes, out, dt, n, call);
  }
  Status decompressAccumulate(const void* wire, size_t bytes, float* acc, size_t n,
                              const CodecCall& call) const override {
    accumulated += n;
    return inner_->decompressAccumulate(wire, bytes, acc, n, call);
  }
  mutable std::atomic<size_t> compressed{0}, decoded{0}, accumulated{0};

 private:
  std::shared_ptr<const Codec> inner_;
};

// Memory passes per element of the tensor, per rank: how many times each algorithm's own
// arithmetic (conversions, float32 sums) and its codec calls go over the data, counted through
// the contexts' hooks and a counting codec, 4 ranks (2 nodes x 2 for two-level), 64 Ki elements
// per rank. The figures are docs/design.md's table ("Memory passes per algorithm"); this test
// prints the table and fails when a count changes.
TEST(AlgorithmUnit, MemoryPassesPerElementAreCounted) {
  const int n = 4;
  const size_t count = n * 65536;
  struct Case {
    const char* name;
    const char* codec;
    DataType dtype;
    // converted, reduced (own arithmetic); compressed, decoded, decoded-and-added (codec)
    std::array<double, 5> want;
  };
  const std::vector<Case> cases = {
      {"ring allreduce", "none", DataType::kFloat32, {1.25, 0.75, 0, 0, 0}},
      {"ring allreduce", "none", DataType::kFloat16, {2.0, 0.75, 0, 0, 0}},
      {"recursive doubling", "none", DataType::kFloat32, {2.0, 2.0, 0, 0, 0}},
      {"scatter-reduce allreduce", "int8", DataType::kFloat32, {0, 0, 1.25, 1.0, 1.0}},
      {"scatter-reduce allreduce", "int8", DataType::kFloat16, {0, 0, 1.25, 1.0, 1.0}},
      // Before 2026-11-28's cut the uncompressed cross step converted the slice into the
      // caller's type and a ring unit converted it back: 2.25 and 2.5 conversions.
      {"two-level allreduce", "none", DataType::kFloat32, {1.25, 0.75, 0, 0, 0}},
      {"two-level allreduce", "none", DataType::kFloat16, {1.5, 0.75, 0, 0, 0}},
      {"two-level allreduce", "int8", DataType::kFloat32, {1.5, 0.5, 0.75, 0.5, 0.5}},
      {"two-level allreduce", "int8", DataType::kFloat16, {1.5, 0.5, 0.75, 0.5, 0.5}},
  };
  std::printf(
      "| algorithm | codec | type | converted | summed | compressed | decoded | "
      "decoded and added |\n|---|---|---|---:|---:|---:|---:|---:|\n");
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " " + c.codec + " " + dataTypeName(c.dtype));
    auto codec = std::make_shared<CountingCodec>(makeCodec(c.codec).value());
    auto none = makeCodec("none").value();
    CountingHook hook;
    const std::string name = c.name;
    const size_t es = dataTypeSize(c.dtype);
    auto records = runUnit(
        n,
        [&](const AlgorithmContext& ctx, int r) -> Status {
          std::vector<uint8_t> in(count * es), out(count * es);
          auto values = integers(r, count);
          for (size_t i = 0; i < count; ++i) storeElement(c.dtype, in.data(), i, values[i]);
          CollectiveOp op;
          op.kind = CollectiveKind::kAllReduce;
          op.send = in.data();
          op.recv = out.data();
          op.count = count;
          op.dtype = c.dtype;
          op.codec = codec.get();
          if (name == "ring allreduce") return detail::ringAllreduce(ctx, op, 0);
          if (name == "recursive doubling") return detail::recursiveDoublingAllreduce(ctx, op, 0);
          if (name == "scatter-reduce allreduce") return detail::scatterReduce(ctx, op, 0);
          TwoByTwo layout;
          TERSE_RETURN_IF_ERROR(layout.open(ctx.transport(), r));
          Workspaces stepWorkspaces;
          CallCounters stepCounters;
          const detail::TwoLevelContext t =
              layout.context(ctx, stepWorkspaces, stepCounters, &hook, stepWorkspaces, stepCounters,
                             &hook, none.get());
          op.algorithm = Algorithm::kTwoLevel;
          return detail::twoLevelAllreduce(t, op);
        },
        1 << 16, &hook);
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(records[r].status.isOk()) << records[r].status.toString();
    const double total = static_cast<double>(n) * count;
    const std::array<double, 5> got = {hook.converted.load() / total, hook.reduced.load() / total,
                                       codec->compressed.load() / total,
                                       codec->decoded.load() / total,
                                       codec->accumulated.load() / total};
    std::printf("| %s | %s | %s | %.3g | %.3g | %.3g | %.3g | %.3g |\n", c.name, c.codec,
                dataTypeName(c.dtype), got[0], got[1], got[2], got[3], got[4]);
    for (int i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(got[i], c.want[i]) << "column " << i;
  }
}

}  // namespace
}  // namespace terse
