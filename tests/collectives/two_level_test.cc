// Two-level allreduce (collectives/src/two_level.cc) over in-process worlds laid out as nodes:
// every layout the issue names, including ranks of one node that are not contiguous. Compressed
// results must equal an independent single-process model of the three steps bit for bit (the
// model below reduces each node in float32 and runs the cross-node step through
// simulateCompressedCollective, which the flat tests check separately); `none` must be within
// float32 summation tolerance of a double reference; every rank must hold the same bytes.
#include "world.h"

#include "typed.h"

#include "terse/collectives/reference.h"
#include "terse/compressors/codec.h"
#include "terse/compressors/error_feedback.h"
#include "terse/kernels/element_type.h"
#include "terse/kernels/numeric.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

namespace terse {
namespace {

struct Layout {
  std::string name;
  std::vector<int> nodeOfRank;
};

// nodes x perNode, ranks of a node contiguous.
Layout blocks(int nodes, int perNode) {
  Layout l{std::to_string(nodes) + "x" + std::to_string(perNode), {}};
  for (int k = 0; k < nodes; ++k)
    for (int c = 0; c < perNode; ++c) l.nodeOfRank.push_back(k);
  return l;
}

// Runs fn(rank, engine) on one thread per rank, each engine given the layout.
std::vector<Status> runLayout(const Layout& layout,
                              const std::function<Status(int, CollectiveEngine&)>& fn,
                              size_t segmentBytes = 0) {
  return testing::runWorld(static_cast<int>(layout.nodeOfRank.size()), fn, segmentBytes,
                           &layout.nodeOfRank);
}

// Inputs whose float32 sums inside a node are exact in any order (multiples of 1/64 below 4 in
// magnitude, exact in float16 and bfloat16 too), so the model need not copy the ring's order of
// additions to be bit-exact. Different for every rank, element and step.
std::vector<uint8_t> exactInput(DataType dt, int rank, size_t count, int step = 0) {
  std::vector<uint8_t> out(count * dataTypeSize(dt));
  for (size_t i = 0; i < count; ++i) {
    uint64_t h = num::mix64((uint64_t(rank) << 44) ^ (uint64_t(step) << 36) ^ i);
    storeElement(dt, out.data(), i, static_cast<float>(static_cast<int>(h % 511) - 255) / 64.0f);
  }
  return out;
}

// The model of one pipeline segment (or of the whole tensor, unpipelined): nodes (ranks of
// each node in rank order), slices by local index, each node's float32 sum of each slice (times
// 1/n for avg), the slice's cross-node allreduce as the flat model computes it among the nodes,
// converted to the caller's type. residuals[c] carries the error feedback of local index c's
// cross-node group from call to call.
std::vector<uint8_t> segmentModel(const Layout& layout, const std::vector<std::vector<uint8_t>>& in,
                                  size_t count, DataType dt, ReduceOp op, const Codec& codec,
                                  size_t segment, std::map<int, SimulatedResiduals>* residuals) {
  const int n = static_cast<int>(layout.nodeOfRank.size());
  std::map<int, std::vector<int>> byNode;
  for (int r = 0; r < n; ++r) byNode[layout.nodeOfRank[r]].push_back(r);
  std::vector<std::vector<int>> nodes;
  for (auto& kv : byNode) nodes.push_back(kv.second);
  const int perNode = static_cast<int>(nodes[0].size());
  const size_t es = dataTypeSize(dt);
  std::vector<uint8_t> out(count * es);
  for (int c = 0; c < perNode; ++c) {
    Range slice = chunkRange(count, perNode, c);
    std::vector<std::vector<float>> sums(nodes.size(), std::vector<float>(slice.length, 0.0f));
    std::vector<const void*> inputs;
    for (size_t k = 0; k < nodes.size(); ++k) {
      for (int r : nodes[k])
        for (size_t i = 0; i < slice.length; ++i)
          sums[k][i] += loadElement(dt, in[r].data(), slice.begin + i);
      if (op == ReduceOp::kAvg)
        for (float& v : sums[k]) v *= 1.0f / static_cast<float>(n);
      inputs.push_back(sums[k].data());
    }
    SimulatedResiduals* res = nullptr;
    if (residuals) {
      res = &(*residuals)[c];
      if (res->worker.empty()) res->worker.assign(nodes.size(), std::vector<float>(slice.length));
    }
    auto got =
        simulateCompressedCollective(CollectiveKind::kAllReduce, inputs, slice.length,
                                     DataType::kFloat32, ReduceOp::kSum, codec, segment, res);
    EXPECT_TRUE(got.isOk()) << got.status().toString();
    if (!got.isOk()) return {};
    detail::fromFloat(reinterpret_cast<const float*>(got.value()[0].data()), 1.0f, dt,
                      out.data() + slice.begin * es, slice.length);
  }
  return out;
}

// The whole call: the tensor in pipeline segments of `pipeline` elements (0: one segment), each
// segment modelled alone; residuals[s * L + c] carries segment s's residuals of local index c.
std::vector<uint8_t> model(const Layout& layout, const std::vector<std::vector<uint8_t>>& in,
                           size_t count, DataType dt, ReduceOp op, const Codec& codec,
                           size_t segment, std::map<int, SimulatedResiduals>* residuals,
                           size_t pipeline = 0) {
  if (pipeline == 0 || pipeline >= count)
    return segmentModel(layout, in, count, dt, op, codec, segment, residuals);
  const int n = static_cast<int>(layout.nodeOfRank.size());
  const int perNode = static_cast<int>(
      std::count(layout.nodeOfRank.begin(), layout.nodeOfRank.end(), layout.nodeOfRank[0]));
  const size_t es = dataTypeSize(dt);
  std::vector<uint8_t> out(count * es);
  int s = 0;
  for (size_t begin = 0; begin < count; begin += pipeline, ++s) {
    const size_t length = std::min(pipeline, count - begin);
    std::vector<std::vector<uint8_t>> part(n);
    for (int r = 0; r < n; ++r)
      part[r].assign(in[r].begin() + begin * es, in[r].begin() + (begin + length) * es);
    std::map<int, SimulatedResiduals> mine;
    if (residuals)
      for (int c = 0; c < perNode; ++c) mine[c] = (*residuals)[s * perNode + c];
    auto got =
        segmentModel(layout, part, length, dt, op, codec, segment, residuals ? &mine : nullptr);
    if (got.size() != length * es) return {};
    std::copy(got.begin(), got.end(), out.begin() + begin * es);
    if (residuals)
      for (int c = 0; c < perNode; ++c) (*residuals)[s * perNode + c] = mine[c];
  }
  return out;
}

std::shared_ptr<const Codec> codecOf(const std::string& spec) {
  auto c = makeCodec(spec);
  EXPECT_TRUE(c.isOk()) << c.status().toString();
  return c.value();
}

std::string caseName(const Layout& l, const std::string& codec, size_t count, DataType dt,
                     ReduceOp op) {
  return l.name + " " + codec + " count=" + std::to_string(count) + " " + dataTypeName(dt) + " " +
         reduceOpName(op);
}

// One allreduce on every rank of the layout (in place for odd counts); checks every rank
// succeeded and holds the same bytes, and returns rank 0's result.
std::vector<uint8_t> runAllreduce(const Layout& layout, const std::vector<std::vector<uint8_t>>& in,
                                  size_t count, DataType dt, ReduceOp op, const Codec& codec,
                                  Algorithm algorithm, const std::string& what,
                                  std::vector<ErrorFeedback>* feedback = nullptr,
                                  size_t segmentBytes = 0, size_t pipelineBytes = 0) {
  const int n = static_cast<int>(layout.nodeOfRank.size());
  std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(count * dataTypeSize(dt), 0xEE));
  const bool inPlace = count % 2 == 1;
  auto st = runLayout(
      layout,
      [&](int r, CollectiveEngine& e) {
        CollectiveOp call;
        call.kind = CollectiveKind::kAllReduce;
        if (inPlace) out[r] = in[r];
        call.send = inPlace ? out[r].data() : in[r].data();
        call.recv = out[r].data();
        call.count = count;
        call.dtype = dt;
        call.op = op;
        call.codec = &codec;
        call.algorithm = algorithm;
        if (feedback) call.feedback = &(*feedback)[r];
        if (pipelineBytes) e.setTwoLevelSegmentBytes(pipelineBytes);
        return e.run(call);
      },
      segmentBytes);
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(st[r].isOk()) << what << " rank " << r << ": " << st[r].toString();
  for (int r = 1; r < n; ++r)
    EXPECT_TRUE(count == 0 || out[r] == out[0]) << what << ": rank " << r << " differs from rank 0";
  return out[0];
}

const std::vector<Layout>& twoLevelLayouts() {
  static const std::vector<Layout> layouts = {
      blocks(2, 2), blocks(2, 3), blocks(3, 2), blocks(4, 2),
      // Nodes whose ranks interleave (round-robin placement): local and cross groups are not
      // contiguous rank ranges.
      Layout{"2x2 interleaved", {0, 1, 0, 1}}, Layout{"3x2 interleaved", {2, 0, 1, 0, 2, 1}}};
  return layouts;
}

TEST(TwoLevel, LayoutsThatCannotRunTwoLevelSayWhy) {
  struct Expect {
    Layout layout;
    const char* why;
  };
  for (const Expect& e : {Expect{blocks(1, 1), "one node"}, Expect{blocks(1, 4), "one node"},
                          Expect{blocks(2, 1), "one rank"},
                          Expect{Layout{"3+2+2", {0, 0, 0, 1, 1, 2, 2}}, "3+2+2"}}) {
    auto st = runLayout(e.layout, [&](int, CollectiveEngine& engine) -> Status {
      EXPECT_NE(engine.twoLevelUnavailable().find(e.why), std::string::npos)
          << e.layout.name << ": " << engine.twoLevelUnavailable();
      CollectiveOp call;
      call.count = 10;
      TERSE_ASSIGN_OR_RETURN(Algorithm a, engine.resolveAlgorithm(call));
      EXPECT_EQ(a, Algorithm::kFlat) << e.layout.name;
      return Status::ok();
    });
    for (auto& s : st) EXPECT_TRUE(s.isOk()) << e.layout.name << ": " << s.toString();
  }
  for (const Layout& l : twoLevelLayouts()) {
    auto st = runLayout(l, [&](int, CollectiveEngine& engine) -> Status {
      EXPECT_EQ(engine.twoLevelUnavailable(), "") << l.name;
      CollectiveOp call;
      TERSE_ASSIGN_OR_RETURN(Algorithm a, engine.resolveAlgorithm(call));
      EXPECT_EQ(a, Algorithm::kTwoLevel) << l.name;
      call.kind = CollectiveKind::kReduceScatter;
      TERSE_ASSIGN_OR_RETURN(a, engine.resolveAlgorithm(call));
      EXPECT_EQ(a, Algorithm::kTwoLevel) << l.name;
      call.algorithm = Algorithm::kFlat;
      TERSE_ASSIGN_OR_RETURN(a, engine.resolveAlgorithm(call));
      EXPECT_EQ(a, Algorithm::kFlat) << l.name;
      return Status::ok();
    });
    for (auto& s : st) EXPECT_TRUE(s.isOk()) << l.name << ": " << s.toString();
  }
}

// Every compressed codec, layout, type and op, counts 0..2^20+3: bit-equal to the model.
class TwoLevelCodecTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TwoLevelCodecTest, MatchesTheModelBitForBit) {
  const std::string spec = GetParam();
  auto codec = codecOf(spec);
  int turn = 0;
  for (const Layout& layout : twoLevelLayouts()) {
    const int n = static_cast<int>(layout.nodeOfRank.size());
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, (size_t{1} << 20) + 3}) {
      if (count > 1000 && layout.name != "2x2" && layout.name != "3x2 interleaved") continue;
      // Types and ops take turns (every pair still meets every layout over the counts).
      const DataType dt = std::array<DataType, 3>{DataType::kFloat32, DataType::kFloat16,
                                                  DataType::kBFloat16}[turn % 3];
      const ReduceOp op = turn++ % 2 == 0 ? ReduceOp::kSum : ReduceOp::kAvg;
      const std::string what = caseName(layout, spec, count, dt, op);
      std::vector<std::vector<uint8_t>> in(n);
      for (int r = 0; r < n; ++r) in[r] = exactInput(dt, r, count);
      const size_t segmentBytes = count > 1000 ? 256 * 1024 : 0;
      auto got = runAllreduce(layout, in, count, dt, op, *codec, Algorithm::kTwoLevel, what,
                              nullptr, segmentBytes);
      auto want = model(layout, in, count, dt, op, *codec,
                        segmentBytes ? segmentBytes / 4 : 65536 * 4, nullptr);
      ASSERT_EQ(got.size(), want.size()) << what;
      ASSERT_TRUE(count == 0 || std::memcmp(got.data(), want.data(), got.size()) == 0)
          << what << ": differs from the two-level model";
    }
  }
}

// int8 rounds to nearest by default, so the model replays it too (its stochastic rounding,
// seeded from the engine's call sequence, is not modelled).
INSTANTIATE_TEST_SUITE_P(Codecs, TwoLevelCodecTest,
                         ::testing::Values("fp16", "bf16", "int8", "onebit", "topk", "fp8", "mxfp8",
                                           "mxfp4", "int4"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// `none` and int8 on general inputs: within tolerance of a double reference, ranks identical,
// and the same answers as flat within the same tolerance.
TEST(TwoLevel, UncompressedAndInt8AreCloseToTheExactSum) {
  for (std::string spec : {"none", "int8"}) {
    auto codec = codecOf(spec);
    int turn = 0;
    for (const Layout& layout : twoLevelLayouts()) {
      const int n = static_cast<int>(layout.nodeOfRank.size());
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, (size_t{1} << 20) + 3}) {
        if (count > 1000 && layout.name != "4x2") continue;
        const DataType dt = std::array<DataType, 3>{DataType::kFloat32, DataType::kFloat16,
                                                    DataType::kBFloat16}[turn % 3];
        const ReduceOp op = turn++ % 2 == 0 ? ReduceOp::kSum : ReduceOp::kAvg;
        const std::string what = caseName(layout, spec, count, dt, op);
        std::vector<std::vector<uint8_t>> in(n);
        std::vector<double> ref(count, 0.0), sumAbs(count, 0.0);
        for (int r = 0; r < n; ++r) {
          in[r].resize(count * dataTypeSize(dt));
          for (size_t i = 0; i < count; ++i) {
            uint64_t h = num::mix64((uint64_t(r) << 40) ^ (i * 0x9e3779b97f4a7c15ull));
            float v = (2.0f * static_cast<float>(h >> 40) / 16777216.0f - 1.0f);
            storeElement(dt, in[r].data(), i, v);
            double stored = loadElement(dt, in[r].data(), i);
            ref[i] += stored;
            sumAbs[i] += std::fabs(stored);
          }
        }
        const double scale = op == ReduceOp::kAvg ? 1.0 / n : 1.0;
        auto got = runAllreduce(layout, in, count, dt, op, *codec, Algorithm::kTwoLevel, what);
        const double outU = dt == DataType::kFloat32   ? 0x1p-24
                            : dt == DataType::kFloat16 ? 0x1p-11
                                                       : 0x1p-8;
        for (size_t i = 0; i < count; ++i) {
          double v = loadElement(dt, got.data(), i), want = ref[i] * scale, tol;
          if (spec == "none") {
            // float32 sums in the node, then a ring across nodes that rounds to the caller's
            // type per hop, then the output's rounding.
            tol = (n * 0x1p-23 + n * outU) * sumAbs[i] * scale + outU * std::fabs(want);
          } else {
            // int8 across nodes: each node's sum (at most L in magnitude) off by its block's
            // scale/2, the reduced sum again.
            const double perNode = n;  // a loose bound on a node sum's block maximum
            tol = 2 * perNode * n / 254.0 * scale + outU * std::fabs(want) + 1e-6;
          }
          ASSERT_LE(std::fabs(v - want), tol) << what << " element " << i;
        }
      }
    }
  }
}

// With error feedback, the results equal the model's step after step (each cross-node group's
// worker and server residuals carried in the callers' ErrorFeedback at their slice's positions),
// and the running average of the results approaches the true average.
TEST(TwoLevel, ErrorFeedbackMatchesTheModelAndConverges) {
  for (std::string spec : {"onebit", "topk:ratio=0.05"}) {
    for (const Layout& layout : {blocks(2, 2), Layout{"3x2 interleaved", {2, 0, 1, 0, 2, 1}}}) {
      const int n = static_cast<int>(layout.nodeOfRank.size());
      const size_t count = 6000;
      auto codec = codecOf(spec);
      std::vector<ErrorFeedback> ef;
      for (int r = 0; r < n; ++r) ef.push_back(ErrorFeedback::create(codec->spec(), count).value());
      std::map<int, SimulatedResiduals> residuals;
      std::vector<std::vector<uint8_t>> in(n);
      std::vector<double> truth(count, 0.0), mean(count, 0.0);
      for (int r = 0; r < n; ++r) {
        in[r] = exactInput(DataType::kFloat32, r, count);
        for (size_t i = 0; i < count; ++i)
          truth[i] += loadElement(DataType::kFloat32, in[r].data(), i) / n;
      }
      const int steps = 60;
      double midErr = 0, lastErr = 0;
      for (int step = 0; step < steps; ++step) {
        const std::string what = layout.name + " " + spec + " step " + std::to_string(step);
        auto got = runAllreduce(layout, in, count, DataType::kFloat32, ReduceOp::kAvg, *codec,
                                Algorithm::kTwoLevel, what, &ef);
        auto want = model(layout, in, count, DataType::kFloat32, ReduceOp::kAvg, *codec, 65536 * 4,
                          &residuals);
        ASSERT_TRUE(got == want) << what << ": differs from the model with residuals";
        double err = 0;
        for (size_t i = 0; i < count; ++i) {
          mean[i] += (loadElement(DataType::kFloat32, got.data(), i) - mean[i]) / (step + 1);
          err += std::fabs(mean[i] - truth[i]);
        }
        if (step == steps / 2 - 1) midErr = err;
        lastErr = err;
      }
      EXPECT_LT(lastErr, 0.65 * midErr)
          << layout.name << " " << spec << ": the averaged error does not decay like 1/T";
    }
  }
}

// The pipelined allreduce (segments of 65536 elements per local rank) against the model cut
// the same way, with error feedback over several calls: each segment's cross-node chunk keeps
// its own server residual (ErrorFeedback keeps several disjoint chunks). Before 2026-11-28's
// regions each segment's chunk replaced the last, so from the second call on the server
// residuals were zero and the results left the model.
TEST(TwoLevel, PipelinedSegmentsKeepTheirResidualsAndMatchTheModel) {
  for (std::string spec : {"onebit", "int8"}) {
    for (const Layout& layout : {blocks(2, 2), Layout{"3x2 interleaved", {2, 0, 1, 0, 2, 1}}}) {
      const int n = static_cast<int>(layout.nodeOfRank.size());
      const int perNode = 2;
      const size_t pipeline = 65536 * perNode;
      const size_t count = 2 * pipeline + 3001;  // two whole segments and a ragged one
      auto codec = codecOf(spec);
      std::vector<ErrorFeedback> ef;
      for (int r = 0; r < n; ++r) ef.push_back(ErrorFeedback::create(codec->spec(), count).value());
      std::map<int, SimulatedResiduals> residuals;
      for (int step = 0; step < 4; ++step) {
        std::vector<std::vector<uint8_t>> in(n);
        for (int r = 0; r < n; ++r) in[r] = exactInput(DataType::kFloat32, r, count, step);
        const std::string what = layout.name + " " + spec + " step " + std::to_string(step);
        auto got = runAllreduce(layout, in, count, DataType::kFloat32, ReduceOp::kSum, *codec,
                                Algorithm::kTwoLevel, what, &ef, 0, pipeline * 4);
        auto want = model(layout, in, count, DataType::kFloat32, ReduceOp::kSum, *codec, 1 << 20,
                          &residuals, pipeline);
        ASSERT_EQ(got.size(), want.size()) << what;
        ASSERT_TRUE(got == want) << what << ": differs from the model cut into segments";
      }
      // Each rank keeps a server chunk per segment where it owns one (onebit's 2048-element
      // blocks leave a rank of the ragged segment nothing).
      EXPECT_GE(ef[0].serverRegions(), 2u) << layout.name << " " << spec;
    }
  }
}

// Reduce-scatter and allgather: each rank's part of the world's split, through the packed
// two-level layout. The model packs the same way and runs each cross-node step as the flat model
// computes it; residuals stay at the tensor's positions (padding ones start at zero each call).
struct PackedLayout {
  std::vector<std::vector<int>> nodes;
  size_t perNode = 0, m = 0;
};
PackedLayout packedLayout(const Layout& layout, size_t count) {
  std::map<int, std::vector<int>> byNode;
  const int n = static_cast<int>(layout.nodeOfRank.size());
  for (int r = 0; r < n; ++r) byNode[layout.nodeOfRank[r]].push_back(r);
  PackedLayout p;
  for (auto& kv : byNode) p.nodes.push_back(kv.second);
  p.perNode = p.nodes[0].size();
  p.m = (count + n - 1) / n;
  return p;
}

// Rank r's reduce-scatter result (its part, caller's type) per the model, with per-rank worker
// residuals over the tensor in `worker` when given.
std::vector<std::vector<uint8_t>> modelReduceScatter(const Layout& layout,
                                                     const std::vector<std::vector<uint8_t>>& in,
                                                     size_t count, DataType dt, ReduceOp op,
                                                     const Codec& codec, size_t segment,
                                                     std::vector<std::vector<float>>* worker) {
  const int n = static_cast<int>(layout.nodeOfRank.size());
  PackedLayout p = packedLayout(layout, count);
  const size_t nodes = p.nodes.size(), m = p.m, es = dataTypeSize(dt);
  std::vector<std::vector<uint8_t>> out(n);
  for (size_t c = 0; c < p.perNode; ++c) {
    std::vector<std::vector<float>> sums(nodes, std::vector<float>(nodes * m, 0.0f));
    std::vector<const void*> inputs;
    SimulatedResiduals res;
    for (size_t k = 0; k < nodes; ++k) {
      for (size_t kk = 0; kk < nodes; ++kk) {
        Range part = chunkRange(count, n, p.nodes[kk][c]);
        for (int r : p.nodes[k])
          for (size_t i = 0; i < part.length; ++i)
            sums[k][kk * m + i] += loadElement(dt, in[r].data(), part.begin + i);
      }
      if (op == ReduceOp::kAvg)
        for (float& v : sums[k]) v *= 1.0f / static_cast<float>(n);
      inputs.push_back(sums[k].data());
      if (worker) {  // rank (c, k)'s residuals, packed
        std::vector<float> packed(nodes * m, 0.0f);
        for (size_t kk = 0; kk < nodes; ++kk) {
          Range part = chunkRange(count, n, p.nodes[kk][c]);
          std::copy_n((*worker)[p.nodes[k][c]].begin() + part.begin, part.length,
                      packed.begin() + kk * m);
        }
        res.worker.push_back(std::move(packed));
      }
    }
    auto got = simulateCompressedCollective(CollectiveKind::kReduceScatter, inputs, nodes * m,
                                            DataType::kFloat32, ReduceOp::kSum, codec, segment,
                                            worker ? &res : nullptr);
    EXPECT_TRUE(got.isOk()) << got.status().toString();
    if (!got.isOk()) return {};
    for (size_t k = 0; k < nodes; ++k) {
      const int r = p.nodes[k][c];
      Range mine = chunkRange(count, n, r);
      out[r].resize(mine.length * es);
      detail::fromFloat(reinterpret_cast<const float*>(got.value()[k].data()), 1.0f, dt,
                        out[r].data(), mine.length);
      if (worker)
        for (size_t kk = 0; kk < nodes; ++kk) {
          Range part = chunkRange(count, n, p.nodes[kk][c]);
          std::copy_n(res.worker[k].begin() + kk * m, part.length,
                      (*worker)[r].begin() + part.begin);
        }
    }
  }
  return out;
}

// The gathered tensor per the model; in[r] is rank r's part.
std::vector<uint8_t> modelAllgather(const Layout& layout,
                                    const std::vector<std::vector<uint8_t>>& in, size_t count,
                                    DataType dt, const Codec& codec, size_t segment) {
  const int n = static_cast<int>(layout.nodeOfRank.size());
  PackedLayout p = packedLayout(layout, count);
  const size_t nodes = p.nodes.size(), m = p.m, es = dataTypeSize(dt);
  std::vector<uint8_t> out(count * es);
  for (size_t c = 0; c < p.perNode; ++c) {
    std::vector<std::vector<uint8_t>> padded(nodes, std::vector<uint8_t>(m * es, 0));
    std::vector<const void*> inputs;
    for (size_t k = 0; k < nodes; ++k) {
      std::copy(in[p.nodes[k][c]].begin(), in[p.nodes[k][c]].end(), padded[k].begin());
      inputs.push_back(padded[k].data());
    }
    auto got = simulateCompressedCollective(CollectiveKind::kAllGather, inputs, nodes * m, dt,
                                            ReduceOp::kSum, codec, segment, nullptr);
    EXPECT_TRUE(got.isOk()) << got.status().toString();
    if (!got.isOk()) return {};
    for (size_t k = 0; k < nodes; ++k) {
      Range part = chunkRange(count, n, p.nodes[k][c]);
      std::copy_n(got.value()[0].begin() + k * m * es, part.length * es,
                  out.begin() + part.begin * es);
    }
  }
  return out;
}

class TwoLevelPartsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TwoLevelPartsTest, ReduceScatterAndAllgatherMatchTheModel) {
  const std::string spec = GetParam();
  auto codec = codecOf(spec);
  const bool exact = spec != "none";  // none: tolerance (ring hops round to the caller's type)
  int turn = 0;
  for (const Layout& layout : twoLevelLayouts()) {
    const int n = static_cast<int>(layout.nodeOfRank.size());
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{300001}}) {
      if (count > 1000 && layout.name != "3x2 interleaved") continue;
      const DataType dt = std::array<DataType, 3>{DataType::kFloat32, DataType::kFloat16,
                                                  DataType::kBFloat16}[turn % 3];
      const ReduceOp op = turn++ % 2 == 0 ? ReduceOp::kSum : ReduceOp::kAvg;
      const std::string what = caseName(layout, spec, count, dt, op);
      const size_t es = dataTypeSize(dt);
      std::vector<std::vector<uint8_t>> in(n), parts(n), gathered(n), partIn(n);
      for (int r = 0; r < n; ++r) {
        in[r] = exactInput(dt, r, count);
        Range mine = chunkRange(count, n, r);
        partIn[r] = exactInput(dt, r + 100, mine.length);
      }
      auto st = runLayout(layout, [&](int r, CollectiveEngine& e) -> Status {
        Range mine = chunkRange(count, n, r);
        parts[r].assign(mine.length * es, 0xEE);
        CollectiveOp rs;
        rs.kind = CollectiveKind::kReduceScatter;
        rs.send = in[r].data();
        rs.recv = parts[r].data();
        rs.count = count;
        rs.dtype = dt;
        rs.op = op;
        rs.codec = codec.get();
        rs.algorithm = Algorithm::kTwoLevel;
        TERSE_RETURN_IF_ERROR(e.run(rs));
        gathered[r].assign(count * es, 0xEE);
        CollectiveOp ag = rs;
        ag.kind = CollectiveKind::kAllGather;
        ag.send = partIn[r].data();
        ag.recv = gathered[r].data();
        return e.run(ag);
      });
      for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].isOk()) << what << ": " << st[r].toString();
      for (int r = 1; r < n; ++r) ASSERT_EQ(gathered[r], gathered[0]) << what << " rank " << r;
      auto wantParts = modelReduceScatter(layout, in, count, dt, op, *codec, 65536 * 4, nullptr);
      auto wantGathered = modelAllgather(layout, partIn, count, dt, *codec, 65536 * 4);
      if (exact) {
        for (int r = 0; r < n; ++r)
          ASSERT_EQ(parts[r], wantParts[r]) << what << ": rank " << r << "'s reduce-scatter part";
        ASSERT_EQ(gathered[0], wantGathered) << what << ": allgather";
        continue;
      }
      // none: the node sums are exact, the ring across nodes rounds to the type per hop.
      const double u = dt == DataType::kFloat32   ? 0x1p-24
                       : dt == DataType::kFloat16 ? 0x1p-11
                                                  : 0x1p-8;
      for (int r = 0; r < n; ++r) {
        Range mine = chunkRange(count, n, r);
        for (size_t i = 0; i < mine.length; ++i) {
          double got = loadElement(dt, parts[r].data(), i);
          double want = loadElement(dt, wantParts[r].data(), i);
          ASSERT_LE(std::fabs(got - want), 4 * n * u * (std::fabs(want) + 4.0))
              << what << ": rank " << r << " element " << i;
        }
      }
      // Uncompressed allgather copies bytes: exact.
      std::vector<uint8_t> concat;
      for (int r = 0; r < n; ++r) concat.insert(concat.end(), partIn[r].begin(), partIn[r].end());
      ASSERT_EQ(gathered[0], concat) << what << ": allgather";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, TwoLevelPartsTest,
                         ::testing::Values("none", "bf16", "int8", "onebit", "topk", "mxfp4"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// Reduce-scatter with error feedback: the caller's residuals at the tensor's positions, step
// after step equal to the model's.
TEST(TwoLevel, ReduceScatterErrorFeedbackMatchesTheModel) {
  const Layout layout{"3x2 interleaved", {2, 0, 1, 0, 2, 1}};
  const int n = 6;
  const size_t count = 30001;
  auto codec = codecOf("onebit");
  std::vector<ErrorFeedback> ef;
  for (int r = 0; r < n; ++r) ef.push_back(ErrorFeedback::create("onebit", count).value());
  std::vector<std::vector<float>> worker(n, std::vector<float>(count, 0.0f));
  for (int step = 0; step < 5; ++step) {
    std::vector<std::vector<uint8_t>> in(n), parts(n);
    for (int r = 0; r < n; ++r) in[r] = exactInput(DataType::kFloat32, r, count, step);
    auto st = runLayout(layout, [&](int r, CollectiveEngine& e) -> Status {
      parts[r].assign(chunkRange(count, n, r).length * 4, 0xEE);
      CollectiveOp rs;
      rs.kind = CollectiveKind::kReduceScatter;
      rs.send = in[r].data();
      rs.recv = parts[r].data();
      rs.count = count;
      rs.codec = codec.get();
      rs.feedback = &ef[r];
      rs.algorithm = Algorithm::kTwoLevel;  // auto could measure flat faster here
      return e.run(rs);
    });
    for (auto& s : st) ASSERT_TRUE(s.isOk()) << s.toString();
    auto want = modelReduceScatter(layout, in, count, DataType::kFloat32, ReduceOp::kSum, *codec,
                                   65536 * 4, &worker);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(parts[r], want[r]) << "step " << step << " rank " << r;
      ASSERT_TRUE(std::equal(worker[r].begin(), worker[r].end(), ef[r].worker()))
          << "step " << step << " rank " << r << ": residuals differ from the model's";
    }
  }
}

// Checkpointed residuals move between topologies of the same world size: 4 nodes x 1 (flat),
// then 2 x 2 (two-level), then 1 x 4 (flat, one node), each phase resuming from the previous
// phase's serialized ErrorFeedback. Every call works, the ranks agree, and the running average
// keeps converging across the moves.
TEST(TwoLevel, ErrorFeedbackCheckpointsMoveBetweenTopologies) {
  const std::string spec = "onebit";
  const int n = 4;
  const size_t count = 20000;
  auto codec = codecOf(spec);
  std::vector<std::vector<uint8_t>> checkpoints(n);
  for (int r = 0; r < n; ++r)
    checkpoints[r] = ErrorFeedback::create(codec->spec(), count).value().serialize();
  std::vector<std::vector<uint8_t>> in(n);
  std::vector<double> truth(count, 0.0), mean(count, 0.0);
  for (int r = 0; r < n; ++r) {
    in[r] = exactInput(DataType::kFloat32, r, count);
    for (size_t i = 0; i < count; ++i)
      truth[i] += loadElement(DataType::kFloat32, in[r].data(), i) / n;
  }
  int step = 0;
  double firstPhaseErr = 0, lastErr = 0, phaseStartErr = 0;
  for (const Layout& layout : {blocks(4, 1), blocks(2, 2), blocks(1, 4)}) {
    std::vector<ErrorFeedback> ef;
    for (int r = 0; r < n; ++r) {
      auto loaded = ErrorFeedback::deserialize(checkpoints[r].data(), checkpoints[r].size());
      ASSERT_TRUE(loaded.isOk()) << layout.name << ": " << loaded.status().toString();
      ef.push_back(std::move(loaded).value());
    }
    for (int i = 0; i < 40; ++i, ++step) {
      // Two-level where the layout allows it, named: each step's engines are new, and auto
      // would measure afresh every step (a communicator keeps its choice per size class).
      const Algorithm algo = layout.name == "2x2" ? Algorithm::kTwoLevel : Algorithm::kAuto;
      auto got = runAllreduce(layout, in, count, DataType::kFloat32, ReduceOp::kAvg, *codec, algo,
                              layout.name + " step " + std::to_string(step), &ef);
      ASSERT_EQ(got.size(), count * 4);
      double err = 0;
      for (size_t k = 0; k < count; ++k) {
        mean[k] += (loadElement(DataType::kFloat32, got.data(), k) - mean[k]) / (step + 1);
        err += std::fabs(mean[k] - truth[k]);
      }
      if (i == 9) phaseStartErr = err;
      lastErr = err;
    }
    // Each move drops the server residuals and the worker residual's positions the new layout
    // does not send, a one-time bias that the running average then dilutes like 1/T.
    EXPECT_LT(lastErr, 0.9 * phaseStartErr) << layout.name << ": no convergence in this phase";
    if (firstPhaseErr == 0) firstPhaseErr = lastErr;
    for (int r = 0; r < n; ++r) checkpoints[r] = ef[r].serialize();
  }
  EXPECT_LT(lastErr, 0.8 * firstPhaseErr)
      << "the running average stopped converging after the residuals moved between topologies";
}

// Flat and two-level on the same engines, one after the other and interleaved with the other
// collectives: both work, and a rank that asks for another algorithm than its peers gets an
// error on every rank, after which all of them go on.
TEST(TwoLevel, AlgorithmChoiceIsAgreedOn) {
  const Layout layout = blocks(2, 2);
  auto none = codecOf("none");
  auto st = runLayout(layout, [&](int r, CollectiveEngine& e) -> Status {
    std::vector<float> in(1000, static_cast<float>(r + 1)), out(1000, 0.0f);
    CollectiveOp call;
    call.send = in.data();
    call.recv = out.data();
    call.count = in.size();
    call.codec = none.get();
    for (Algorithm a : {Algorithm::kFlat, Algorithm::kTwoLevel, Algorithm::kAuto}) {
      call.algorithm = a;
      std::fill(out.begin(), out.end(), 0.0f);
      TERSE_RETURN_IF_ERROR(e.run(call));
      EXPECT_EQ(out[999], 10.0f) << algorithmName(a);
    }
    call.algorithm = r == 3 ? Algorithm::kFlat : Algorithm::kTwoLevel;
    Status s = e.run(call);
    EXPECT_EQ(s.code(), StatusCode::kInvalidUsage) << s.toString();
    EXPECT_NE(s.message().find("twolevel"), std::string::npos) << s.toString();
    call.algorithm = Algorithm::kAuto;
    std::fill(out.begin(), out.end(), 0.0f);
    TERSE_RETURN_IF_ERROR(e.run(call));
    EXPECT_EQ(out[0], 10.0f);
    return Status::ok();
  });
  for (auto& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
}

// Asking for two-level where the layout cannot run it fails on every rank, naming why, and
// leaves the ranks in step.
TEST(TwoLevel, ForcedOnAnUnevenLayoutIsAnErrorOnEveryRank) {
  const Layout layout{"3+2+2", {0, 0, 0, 1, 1, 2, 2}};
  auto none = codecOf("none");
  auto st = runLayout(layout, [&](int, CollectiveEngine& e) -> Status {
    std::vector<float> in(100, 1.0f), out(100, 0.0f);
    CollectiveOp call;
    call.send = in.data();
    call.recv = out.data();
    call.count = in.size();
    call.codec = none.get();
    call.algorithm = Algorithm::kTwoLevel;
    Status s = e.run(call);
    EXPECT_EQ(s.code(), StatusCode::kInvalidUsage) << s.toString();
    call.algorithm = Algorithm::kAuto;
    TERSE_RETURN_IF_ERROR(e.run(call));
    EXPECT_EQ(out[0], 7.0f);
    return Status::ok();
  });
  for (auto& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
}

}  // namespace
}  // namespace terse
