// Collectives over ranks-as-threads: every kind, type, op and codec across world sizes and
// awkward counts, checked against serial references (uncompressed and cast codecs) and against
// an independent single-process simulation of the scatter-reduce algorithm (onebit, topk).
#include "world.h"

#include "terse/collectives/reference.h"

#include "terse/kernels/element_type.h"
#include "terse/kernels/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

namespace terse {
namespace {

using testing::runWorld;

// A gradient-like input: rank r, element i, values in [-1, 1] with some structure.
float inputValue(int rank, size_t i, uint64_t step = 0) {
  uint64_t h = num::mix64((uint64_t(rank) << 40) ^ (i * 0x9e3779b97f4a7c15ull) ^ (step << 20));
  float u = static_cast<float>(h >> 40) / 16777216.0f;  // [0,1)
  return (2.0f * u - 1.0f) * (1.0f + 0.5f * std::sin(static_cast<float>(i) * 0.01f));
}

std::vector<uint8_t> makeInput(DataType dt, int rank, size_t count, uint64_t step = 0) {
  std::vector<uint8_t> out(count * dataTypeSize(dt));
  for (size_t i = 0; i < count; ++i) storeElement(dt, out.data(), i, inputValue(rank, i, step));
  return out;
}

float loadAt(const std::vector<uint8_t>& buf, DataType dt, size_t i) {
  return loadElement(dt, buf.data(), i);
}

std::shared_ptr<const Codec> codecOf(const std::string& spec) {
  auto c = makeCodec(spec);
  EXPECT_TRUE(c.isOk()) << c.status().toString();
  return c.value();
}

// Unit roundoff of a type.
double unitRoundoff(DataType dt) {
  return dt == DataType::kFloat32 ? 0x1p-24 : dt == DataType::kFloat16 ? 0x1p-11 : 0x1p-8;
}
double codecRoundoff(const std::string& spec) {
  // fp8 E4M3: half a step is 2^-4 relative; mxfp8 also clips the top binade above 448 X
  // (at most 1/8 of the block's largest value).
  if (spec == "fp8") return 0x1p-4;
  if (spec == "mxfp8") return 0x1p-3;
  return spec == "fp16" ? 0x1p-11 : spec == "bf16" ? 0x1p-8 : 0x1p-24;
}

struct Case {
  std::string codec;
  int ranks;
  size_t count;
  DataType dtype;
  ReduceOp op;
};

std::string caseName(const Case& c) {
  return c.codec + " n=" + std::to_string(c.ranks) + " count=" + std::to_string(c.count) + " " +
         dataTypeName(c.dtype) + " " + reduceOpName(c.op);
}

// Runs an allreduce on every rank (out of place, or in place), checks all ranks hold
// bit-identical results, and returns rank 0's result.
std::vector<uint8_t> runAllreduce(const Case& c, bool inPlace, size_t segmentBytes = 0) {
  auto codec = codecOf(c.codec);
  std::vector<std::vector<uint8_t>> in(c.ranks), out(c.ranks);
  for (int r = 0; r < c.ranks; ++r) {
    in[r] = makeInput(c.dtype, r, c.count);
    out[r].assign(in[r].size(), 0xEE);
  }
  auto statuses = runWorld(
      c.ranks,
      [&](int r, CollectiveEngine& e) {
        CollectiveOp op;
        op.kind = CollectiveKind::kAllReduce;
        if (inPlace) {
          out[r] = in[r];
          op.send = out[r].data();
        } else {
          op.send = in[r].data();
        }
        op.recv = out[r].data();
        op.count = c.count;
        op.dtype = c.dtype;
        op.op = c.op;
        op.codec = codec.get();
        return e.run(op);
      },
      segmentBytes);
  for (int r = 0; r < c.ranks; ++r)
    EXPECT_TRUE(statuses[r].isOk())
        << caseName(c) << " rank " << r << ": " << statuses[r].toString();
  for (int r = 1; r < c.ranks; ++r)
    EXPECT_TRUE(out[0].empty() || std::memcmp(out[0].data(), out[r].data(), out[0].size()) == 0)
        << caseName(c) << ": rank " << r << " differs from rank 0";
  return out[0];
}

// Serial reference in double.
std::vector<double> reference(const Case& c, std::vector<double>* sumAbs) {
  std::vector<double> ref(c.count, 0.0);
  sumAbs->assign(c.count, 0.0);
  for (int r = 0; r < c.ranks; ++r) {
    auto in = makeInput(c.dtype, r, c.count);
    for (size_t i = 0; i < c.count; ++i) {
      double v = loadAt(in, c.dtype, i);
      ref[i] += v;
      (*sumAbs)[i] += std::fabs(v);
    }
  }
  if (c.op == ReduceOp::kAvg)
    for (size_t i = 0; i < c.count; ++i) ref[i] /= c.ranks, (*sumAbs)[i] /= c.ranks;
  return ref;
}

// The scatter-reduce algorithm, simulated in one process with the codec directly
// (collectives/reference.h), carrying the residuals in *worker / *server when given.
std::vector<uint8_t> simulate(const Case& c, const Codec& codec, size_t segment,
                              std::vector<std::vector<float>>* worker,
                              std::vector<std::vector<float>>* server, uint64_t step = 0) {
  std::vector<std::vector<uint8_t>> in(c.ranks);
  std::vector<const void*> inputs(c.ranks);
  for (int r = 0; r < c.ranks; ++r) {
    in[r] = makeInput(c.dtype, r, c.count, step);
    inputs[r] = in[r].data();
  }
  SimulatedResiduals residuals;
  if (worker) residuals.worker = std::move(*worker);
  if (server) residuals.server = std::move(*server);
  auto got = simulateCompressedCollective(CollectiveKind::kAllReduce, inputs, c.count, c.dtype,
                                          c.op, codec, segment, worker ? &residuals : nullptr);
  if (worker) *worker = std::move(residuals.worker);
  if (server) *server = std::move(residuals.server);
  EXPECT_TRUE(got.isOk()) << got.status().toString();
  return got.isOk() ? got.value()[0] : std::vector<uint8_t>();
}

class AllreduceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AllreduceTest, SweepsWorldSizesCountsTypesAndOps) {
  const std::string spec = GetParam();
  auto codec = codecOf(spec);
  for (int n : {1, 2, 3, 4, 8}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, (size_t{1} << 20) + 3}) {
      if (count > 1000 && n != 3 && n != 4) continue;  // keep the large case to two world sizes
      for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          Case c{spec, n, count, dt, op};
          const bool inPlace = (count % 2) == 1;
          auto got = runAllreduce(c, inPlace, count > 1000 ? 256 * 1024 : 0);
          if (codec->wantsErrorFeedback()) {
            auto expected = simulate(c, *codec, 65536, nullptr, nullptr);
            // memcmp's pointers must not be null even for 0 bytes (UBSan): skip empty tensors.
            ASSERT_TRUE(got.empty() || std::memcmp(got.data(), expected.data(), got.size()) == 0)
                << caseName(c) << ": differs from the single-process simulation";
            continue;
          }
          std::vector<double> sumAbs;
          auto ref = reference(c, &sumAbs);
          double wireU = codecRoundoff(spec), outU = unitRoundoff(dt);
          for (size_t i = 0; i < count; ++i) {
            double v = loadAt(got, dt, i), tol;
            if (spec == "none") {
              // float32 sums in some order, plus a rounding to the wire type per ring hop.
              tol = (n * 0x1p-23 + n * outU) * sumAbs[i] + outU * std::fabs(ref[i]);
            } else if (spec.rfind("int8", 0) == 0) {
              // Each contribution off by at most its block's scale/2, the sum again.
              double maxIn = dt == DataType::kFloat32 ? 1.5 : 1.51;
              tol = (n * maxIn + n * maxIn) / 254.0 * (op == ReduceOp::kAvg ? 1.0 / n : 1.0) +
                    outU * std::fabs(ref[i]) + 1e-6;
            } else if (spec == "fp8" || spec == "mxfp8") {
              // Relative rounding per contribution and for the sum, plus E4M3's subnormal step
              // (2^-10 of a block scale below 1.51 / 2^8) each time.
              tol = 2 * wireU * (sumAbs[i] + std::fabs(ref[i])) + outU * std::fabs(ref[i]) +
                    2 * (n + 1) * 1.51 * 0x1p-18 + 1e-7;
            } else {
              // Every contribution rounded to the wire type once, the sum once more.
              tol = 2 * wireU * (sumAbs[i] + std::fabs(ref[i])) + outU * std::fabs(ref[i]) + 1e-7;
            }
            ASSERT_LE(std::fabs(v - ref[i]), tol) << caseName(c) << " element " << i;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, AllreduceTest,
                         ::testing::Values("none", "fp16", "bf16", "int8", "onebit", "topk", "fp8",
                                           "mxfp8", "mxfp4", "int4"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// With error feedback the scatter-reduce result equals the simulation step after step (worker
// and server residuals both carried), and the running average of the results approaches the
// running average of the true sums; without it the average stays biased.
TEST(AllreduceFeedback, MatchesSimulationAndConverges) {
  for (std::string spec : {"onebit", "topk:ratio=0.05"}) {
    const int n = 4;
    const size_t count = 20000;
    auto codec = codecOf(spec);
    Case c{spec, n, count, DataType::kFloat32, ReduceOp::kAvg};
    std::vector<ErrorFeedback> ef;
    for (int r = 0; r < n; ++r) ef.push_back(ErrorFeedback::create(codec->spec(), count).value());
    std::vector<std::vector<float>> simWorker(n, std::vector<float>(count, 0.0f)), simServer(n);
    std::vector<double> meanGot(count, 0.0), truth(count, 0.0);
    std::vector<std::vector<uint8_t>> in(n);
    for (int r = 0; r < n; ++r) in[r] = makeInput(DataType::kFloat32, r, count);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < n; ++r) truth[i] += loadAt(in[r], DataType::kFloat32, i) / n;
    }
    // EF's promise: the residuals stay bounded, so the error of the running average decays like
    // 1/T once they reach their steady state (top-k needs ~1/ratio steps to get there).
    const int steps = 200;
    double midErr = 0, lastErr = 0;
    for (int step = 0; step < steps; ++step) {
      std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(count * 4));
      auto st = runWorld(n, [&](int r, CollectiveEngine& e) {
        CollectiveOp op;
        op.send = in[r].data();
        op.recv = out[r].data();
        op.count = count;
        op.op = ReduceOp::kAvg;
        op.codec = codec.get();
        op.feedback = &ef[r];
        return e.run(op);
      });
      for (auto& s : st) ASSERT_TRUE(s.isOk()) << s.toString();
      auto expected = simulate(c, *codec, 65536 * 4, &simWorker, &simServer);
      ASSERT_EQ(std::memcmp(out[0].data(), expected.data(), expected.size()), 0)
          << spec << " step " << step << ": differs from the simulation with residuals";
      double err = 0;
      for (size_t i = 0; i < count; ++i) {
        meanGot[i] += (loadAt(out[0], DataType::kFloat32, i) - meanGot[i]) / (step + 1);
        err += std::fabs(meanGot[i] - truth[i]);
      }
      if (step == steps / 2 - 1) midErr = err;
      lastErr = err;
    }
    EXPECT_LT(lastErr, 0.65 * midErr) << spec << ": the averaged error does not decay like 1/T";

    // The same without residuals: the running average keeps its bias.
    std::vector<double> meanNoEf(count, 0.0);
    double noEfErr = 0;
    for (int step = 0; step < 5; ++step) {
      std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(count * 4));
      auto st = runWorld(n, [&](int r, CollectiveEngine& e) {
        CollectiveOp op;
        op.send = in[r].data();
        op.recv = out[r].data();
        op.count = count;
        op.op = ReduceOp::kAvg;
        op.codec = codec.get();
        return e.run(op);
      });
      for (auto& s : st) ASSERT_TRUE(s.isOk());
      noEfErr = 0;
      for (size_t i = 0; i < count; ++i) {
        meanNoEf[i] += (loadAt(out[0], DataType::kFloat32, i) - meanNoEf[i]) / (step + 1);
        noEfErr += std::fabs(meanNoEf[i] - truth[i]);
      }
    }
    EXPECT_LT(lastErr, 0.5 * noEfErr)
        << spec << ": with residuals the average should end well below the bias floor without";
  }
}

TEST(ReduceScatterAllgather, MatchReferenceAndCompose) {
  for (std::string spec : {"none", "bf16", "int8", "onebit"}) {
    auto codec = codecOf(spec);
    for (int n : {1, 2, 3, 5}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{300001}}) {
        for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) {
          Case c{spec, n, count, dt, ReduceOp::kSum};
          std::vector<double> sumAbs;
          auto ref = reference(c, &sumAbs);
          const size_t es = dataTypeSize(dt);
          std::vector<std::vector<uint8_t>> parts(n), gathered(n);
          auto st = runWorld(n, [&](int r, CollectiveEngine& e) {
            auto in = makeInput(dt, r, count);
            Range mine = chunkRange(count, n, r);
            parts[r].assign(mine.length * es, 0);
            CollectiveOp rs;
            rs.kind = CollectiveKind::kReduceScatter;
            rs.send = in.data();
            rs.recv = parts[r].data();
            rs.count = count;
            rs.dtype = dt;
            rs.codec = codec.get();
            TERSE_RETURN_IF_ERROR(e.run(rs));
            gathered[r].assign(count * es, 0);
            CollectiveOp ag = rs;
            ag.kind = CollectiveKind::kAllGather;
            ag.send = parts[r].data();
            ag.recv = gathered[r].data();
            return e.run(ag);
          });
          for (int r = 0; r < n; ++r)
            ASSERT_TRUE(st[r].isOk()) << caseName(c) << ": " << st[r].toString();
          for (int r = 1; r < n; ++r)
            ASSERT_EQ(gathered[r], gathered[0])
                << caseName(c) << ": allgather differs on rank " << r;
          // Each rank's reduce-scatter part is its slice of the allgathered result, bit for bit,
          // for the lossless allgather; compressed ones round it once more.
          for (int r = 0; r < n; ++r) {
            Range mine = chunkRange(count, n, r);
            if (spec == "none") {
              ASSERT_TRUE(mine.length == 0 ||
                          std::memcmp(parts[r].data(), gathered[0].data() + mine.begin * es,
                                      mine.length * es) == 0);
            }
          }
          double tolScale = spec == "none"   ? n * 0x1p-22 + n * unitRoundoff(dt)
                            : spec == "bf16" ? 0x1p-6
                            : spec == "int8" ? 0.05
                                             : 10.0;  // onebit: only sign and scale survive
          for (size_t i = 0; i < count && spec != "onebit"; ++i) {
            double v = loadAt(gathered[0], dt, i);
            ASSERT_LE(std::fabs(v - ref[i]), tolScale * (sumAbs[i] + 1.0))
                << caseName(c) << " element " << i;
          }
        }
      }
    }
  }
}

TEST(Collectives, DisagreeingRanksAllFail) {
  auto none = codecOf("none"), int8 = codecOf("int8");
  const int n = 3;
  struct Variant {
    const char* what;
    std::function<void(int, CollectiveOp&)> tweak;
  };
  std::vector<Variant> variants = {
      {"count", [](int r, CollectiveOp& op) { op.count = r == 2 ? 999 : 1000; }},
      {"dtype",
       [](int r, CollectiveOp& op) {
         op.dtype = r == 1 ? DataType::kFloat16 : DataType::kFloat32;
       }},
      {"codec", [&](int r, CollectiveOp& op) { op.codec = r == 0 ? int8.get() : none.get(); }},
      {"op", [](int r, CollectiveOp& op) { op.op = r == 1 ? ReduceOp::kAvg : ReduceOp::kSum; }},
      {"kind",
       [](int r, CollectiveOp& op) {
         op.kind = r == 1 ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
       }},
  };
  for (auto& v : variants) {
    auto st = runWorld(n, [&](int r, CollectiveEngine& e) {
      std::vector<float> in(1000, 1.0f), out(1000, 0.0f);
      CollectiveOp op;
      op.send = in.data();
      op.recv = out.data();
      op.count = 1000;
      op.codec = none.get();
      v.tweak(r, op);
      Status s = e.run(op);
      // The engine stays usable: a correct call afterwards works on every rank.
      CollectiveOp ok;
      ok.send = in.data();
      ok.recv = out.data();
      ok.count = 1000;
      ok.codec = none.get();
      Status after = e.run(ok);
      EXPECT_TRUE(after.isOk()) << v.what << ": " << after.toString();
      EXPECT_EQ(out[17], 3.0f);
      return s;
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(st[r].code(), StatusCode::kInvalidUsage)
          << v.what << " rank " << r << ": " << st[r].toString();
      EXPECT_NE(st[r].message().find("disagree"), std::string::npos) << st[r].message();
    }
  }
}

// Worlds above TERSE_AGREEMENT_DIRECT_RANKS agree by a dissemination of call summaries in
// ceil(log2 n) rounds instead of an all-to-all. Forced here on small worlds (5, 8 and 13 ranks:
// odd, a power of two, and one whose last round wraps far round): a disagreement, a rank that
// rejects its arguments and a barrier against a collective fail every rank with kInvalidUsage
// naming the first rank in rank order whose call differs from its own; agreeing calls run, and
// every rank sent exactly ceil(log2 n) summaries of 208 bytes per agreement.
TEST(Collectives, DisseminatedAgreementFailsEveryRankAndStaysInStep) {
  auto none = codecOf("none"), int8 = codecOf("int8");
  for (int n : {5, 8, 13}) {
    SCOPED_TRACE("world of " + std::to_string(n));
    int rounds = 0;
    while ((1 << rounds) < n) ++rounds;
    const int odd = n - 2;  // the one rank whose call differs
    std::vector<uint64_t> agreementBytes(n);
    auto st = runWorld(n, [&](int r, CollectiveEngine& e) -> Status {
      e.setDirectAgreementRanks(1);
      e.setTimeout(std::chrono::milliseconds(60000));
      std::vector<float> in(1000, static_cast<float>(r)), out(1000, 0.0f);
      CollectiveOp op;
      op.send = in.data();
      op.recv = out.data();
      op.count = 1000;
      op.codec = none.get();
      auto expectNames = [&](const Status& s, int named, const char* what) {
        EXPECT_EQ(s.code(), StatusCode::kInvalidUsage) << what << ": " << s.toString();
        EXPECT_NE(s.message().find("rank " + std::to_string(named) + " "), std::string::npos)
            << what << " on rank " << r << ": " << s.message();
      };
      // The first rank whose call differs: `odd` for the others, rank 0 for `odd`.
      const int differs = r == odd ? 0 : odd;
      // 1. One rank's count differs.
      op.count = r == odd ? 999 : 1000;
      expectNames(e.run(op), differs, "count");
      op.count = 1000;
      // 2. One rank rejects its arguments (a null send buffer).
      op.send = r == odd ? nullptr : in.data();
      Status rejected = e.run(op);
      if (r == odd) {
        EXPECT_EQ(rejected.code(), StatusCode::kInvalidArgument) << rejected.toString();
      } else {
        expectNames(rejected, odd, "rejected");
        EXPECT_NE(rejected.message().find("rejected its arguments"), std::string::npos);
      }
      op.send = in.data();
      // 3. One rank's codec differs (so does its wire format: no data may move).
      op.codec = r == odd ? int8.get() : none.get();
      expectNames(e.run(op), differs, "codec");
      op.codec = none.get();
      // 4. A barrier against an allreduce.
      expectNames(r == odd ? e.barrier() : e.run(op), differs, "barrier");
      // 5. Rank 0 is the one that differs (the summaries' lowest call is then the odd one),
      // and so does rank `odd`: rank 0 names rank 1, rank `odd` rank 0, the others rank 0.
      op.count = r == 0 ? 998 : r == odd ? 997 : 1000;
      expectNames(e.run(op), r == 0 ? 1 : 0, "rank 0's count");
      op.count = 1000;
      // Still in step: an agreed call and a barrier work, and the sum is right.
      const uint64_t before = e.bytesSent();
      TERSE_RETURN_IF_ERROR(e.barrier());
      agreementBytes[r] = e.bytesSent() - before;
      TERSE_RETURN_IF_ERROR(e.run(op));
      const float expected = static_cast<float>(n * (n - 1) / 2);
      for (float v : out)
        if (v != expected) return errorInternal("rank %d got %g, not %g", r, v, expected);
      return Status::ok();
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].toString();
      EXPECT_EQ(agreementBytes[r], static_cast<uint64_t>(rounds) * 208) << "rank " << r;
    }
  }
}

// TERSE_AGREEMENT_DIRECT_RANKS must be the same on every rank. Where one rank disseminates and
// the others send descriptors to all, the messages differ in size and tag: every rank fails its
// first call at once (a wrong-sized message, then the aborts of the ranks that saw one), none
// waits for its timeout or returns a result.
TEST(Collectives, RanksThatAgreeDifferentlyAllFailAtOnce) {
  auto none = codecOf("none");
  const auto timeout = std::chrono::milliseconds(60000);
  auto st = runWorld(4, [&](int r, CollectiveEngine& e) -> Status {
    e.setTimeout(timeout);
    if (r == 2) e.setDirectAgreementRanks(1);
    std::vector<float> in(100, 1.0f), out(100, 0.0f);
    CollectiveOp op;
    op.send = in.data();
    op.recv = out.data();
    op.count = in.size();
    op.codec = none.get();
    const auto start = std::chrono::steady_clock::now();
    Status s = e.run(op);
    EXPECT_LT(std::chrono::steady_clock::now() - start, timeout / 4) << "rank " << r;
    return s;
  });
  for (int r = 0; r < 4; ++r) EXPECT_FALSE(st[r].isOk()) << "rank " << r;
  // The disseminating rank got a descriptor where it expected a summary, and says why.
  EXPECT_NE(st[2].message().find("do all ranks set the same TERSE_AGREEMENT_DIRECT_RANKS?"),
            std::string::npos)
      << st[2].message();
}

TEST(Collectives, InvalidArgumentsAreErrors) {
  auto onebit = codecOf("onebit");
  auto st = runWorld(2, [&](int r, CollectiveEngine& e) {
    std::vector<float> buf(100, 1.0f);
    CollectiveOp op;
    op.send = nullptr;
    op.recv = buf.data();
    op.count = 100;
    op.codec = onebit.get();
    Status nullSend = e.run(op);
    EXPECT_EQ(nullSend.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(nullSend.message().find("send buffer is null"), std::string::npos)
        << nullSend.message();
    op.send = buf.data();
    op.codec = nullptr;
    EXPECT_EQ(e.run(op).code(), StatusCode::kInvalidArgument);
    op.codec = onebit.get();
    auto wrongSize = ErrorFeedback::create("onebit", 99).value();
    op.feedback = &wrongSize;
    Status ef = e.run(op);
    EXPECT_EQ(ef.code(), StatusCode::kInvalidArgument) << ef.toString();
    auto wrongCodec = ErrorFeedback::create("topk", 100).value();
    op.feedback = &wrongCodec;
    EXPECT_EQ(e.run(op).code(), StatusCode::kInvalidArgument);
    op.count = 0;  // zero elements: null buffers are fine
    op.send = op.recv = nullptr;
    op.feedback = nullptr;
    return e.run(op);
  });
  for (auto& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
}

TEST(Collectives, PipelineDepthChangesTimingNotResults) {
  // 4 ranks, ~2^20 elements, 65536-element segments: 4+ segments per chunk, so depths 1-5
  // give really different schedules (5 exceeds the segment count: all sent before any reduce).
  const size_t count = (size_t{1} << 20) + 3;
  for (const char* spec : {"onebit", "int8", "topk"}) {
    SCOPED_TRACE(spec);
    auto codec = codecOf(spec);
    std::vector<std::vector<float>> byDepth;
    for (size_t depth : {1, 2, 5}) {
      std::vector<std::vector<float>> out(4);
      auto st = runWorld(
          4,
          [&](int r, CollectiveEngine& e) -> Status {
            e.setPipelineDepth(depth);
            auto ef = ErrorFeedback::create(spec, count).value();
            for (uint64_t step = 0; step < 2; ++step) {
              auto in = makeInput(DataType::kFloat32, r, count, step);
              out[r].resize(count);
              CollectiveOp op;
              op.send = in.data();
              op.recv = out[r].data();
              op.count = count;
              op.op = ReduceOp::kAvg;
              op.codec = codec.get();
              op.feedback = &ef;
              TERSE_RETURN_IF_ERROR(e.run(op));
            }
            return Status::ok();
          },
          /*segmentBytes=*/65536 * 4);
      for (auto& s : st) ASSERT_TRUE(s.isOk()) << s.toString();
      for (int r = 1; r < 4; ++r) ASSERT_EQ(out[r], out[0]);
      byDepth.push_back(out[0]);
    }
    EXPECT_EQ(byDepth[1], byDepth[0]);
    EXPECT_EQ(byDepth[2], byDepth[0]);
  }
}

TEST(Collectives, ARankWithBadArgumentsFailsTheCallEverywhereAtOnce) {
  auto int8 = codecOf("int8");
  auto st = runWorld(3, [&](int r, CollectiveEngine& e) {
    e.setTimeout(std::chrono::milliseconds(60000));
    std::vector<float> buf(1000, 1.0f);
    CollectiveOp op;
    op.send = r == 1 ? nullptr : buf.data();  // only rank 1 is wrong
    op.recv = buf.data();
    op.count = buf.size();
    op.codec = int8.get();
    auto start = std::chrono::steady_clock::now();
    Status s = e.run(op);
    auto took = std::chrono::steady_clock::now() - start;
    if (r == 1) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidUsage) << s.toString();
      EXPECT_NE(s.message().find("rank 1 rejected its arguments"), std::string::npos)
          << s.message();
    }
    // Far below the timeout: nobody waited for rank 1's data.
    EXPECT_LT(took, std::chrono::milliseconds(30000));
    op.send = buf.data();  // the next call works on every rank: sequences stayed in step
    return e.run(op);
  });
  for (auto& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
}

// Forwards everything to the real transport but sends every data message of the collectives
// (reduce and gather phases; descriptors pass untouched) four bytes short: a peer that agreed on
// the call and then sent less than it promised.
class ShortSendingTransport : public Transport {
 public:
  explicit ShortSendingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string describe() const override { return inner_->describe(); }
  Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
               TransportRequest** request) override {
    const uint64_t phase = (tag >> 18) & 3;  // collectives/src/requests.h's tag layout
    bool dataPhase = phase == 0 || phase == 1;
    return inner_->isend(peer, tag, data, dataPhase && bytes >= 4 ? bytes - 4 : bytes, request);
  }
  Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
               TransportRequest** request) override {
    return inner_->irecv(peer, tag, data, capacity, request);
  }
  Status test(TransportRequest* request, bool* done, size_t* bytes) override {
    return inner_->test(request, done, bytes);
  }
  Status wait(TransportRequest* request, size_t* bytes,
              std::chrono::milliseconds timeout) override {
    return inner_->wait(request, bytes, timeout);
  }
  void cancel(TransportRequest* request) override { inner_->cancel(request); }
  void progress() override { inner_->progress(); }
  void abort(const Status& why) override { inner_->abort(why); }
  void disconnect(int peer, const Status& why) override { inner_->disconnect(peer, why); }

 private:
  std::unique_ptr<Transport> inner_;
};

// Uncompressed calls know every message's exact size; a short one (stale bytes left in the
// receive buffer) must fail the call as corrupt, naming the sender, on every path: ring
// reduce-scatter and allgather, recursive doubling, and the plain allgather.
TEST(Collectives, AShortUncompressedMessageFailsTheCallNamingTheSender) {
  struct ShortCase {
    const char* name;
    CollectiveKind kind;
    size_t smallBytes;
  };
  const ShortCase cases[] = {{"ring allreduce", CollectiveKind::kAllReduce, 0},
                             {"recursive doubling", CollectiveKind::kAllReduce, size_t{1} << 30},
                             {"ring reduce-scatter", CollectiveKind::kReduceScatter, 0},
                             {"ring allgather", CollectiveKind::kAllGather, 0}};
  auto none = codecOf("none");
  for (const ShortCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int n = 3;
    std::vector<std::unique_ptr<Transport>> transports = testing::makeInProcWorld(n);
    transports[1] = std::make_unique<ShortSendingTransport>(std::move(transports[1]));
    std::vector<Status> st(n);
    std::vector<std::vector<float>> out(n, std::vector<float>(3 * 4096, -7.0f));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        CollectiveEngine e(*transports[r], std::chrono::milliseconds(60000));
        e.setSmallBytes(c.smallBytes);
        const size_t count = 3 * 4096;
        std::vector<float> send(count, 1.0f);
        CollectiveOp op;
        op.kind = c.kind;
        op.send = send.data();
        op.recv = out[r].data();
        op.count = count;
        op.codec = none.get();
        st[r] = e.run(op);
      });
    for (auto& t : threads) t.join();
    // A rank may finish before the damage reaches it (rank 1 itself received whole messages),
    // but then it must hold the exact result; at least one rank must see the corruption.
    const float expect = c.kind == CollectiveKind::kAllGather ? 1.0f : static_cast<float>(n);
    int corrupt = 0;
    for (int r = 0; r < n; ++r) {
      const size_t outCount = c.kind == CollectiveKind::kReduceScatter
                                  ? chunkRange(out[r].size(), n, r).length
                                  : out[r].size();
      if (st[r].isOk()) {
        for (size_t i = 0; i < outCount; ++i)
          ASSERT_EQ(out[r][i], expect) << "rank " << r << " reported success, element " << i;
      }
      if (st[r].code() == StatusCode::kCorrupt) {
        ++corrupt;
        EXPECT_NE(st[r].message().find("rank 1 sent a "), std::string::npos) << st[r].message();
      }
    }
    EXPECT_GE(corrupt, 1) << "no rank saw the short message as corrupt";
  }
}

TEST(Collectives, DeviceCallsWithoutADeviceAreUnsupported) {
  if (device::available())
    GTEST_SKIP() << "a CUDA device is present: tests/gpu covers device calls";
  auto int8 = codecOf("int8");
  auto st = runWorld(2, [&](int r, CollectiveEngine& e) {
    std::vector<float> buf(100, 1.0f);
    CollectiveOp op;
    op.send = op.recv = buf.data();
    op.count = 100;
    op.codec = int8.get();
    op.device = true;
    Status s = e.run(op);
    EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.toString();
    EXPECT_NE(s.message().find("device"), std::string::npos) << s.message();
    op.device = false;  // the engine stays usable and in step on both ranks
    return e.run(op);
  });
  for (auto& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
}

}  // namespace
}  // namespace terse
