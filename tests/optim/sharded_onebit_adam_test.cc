// ShardedOneBitAdam (ZeRO-1/2 style OneBitAdam) against an independent AdamW written here
// (double precision) and against OneBitAdam itself: warm-up is AdamW on the averaged gradient;
// the lossless `none` codec after the freeze is AdamW with the frozen variance; onebit trains a
// small non-IID task within 2% of OneBitAdam and fails that bound without error feedback; the
// compressed phase really sends compressed bytes; state per rank is measured; checkpoints
// re-shard to another world size. Ranks are threads over the in-process transport.
#include "adam_reference.h"
#include "terse/api/internal.h"
#include "terse/collectives/partition.h"
#include "terse/kernels/device.h"
#include "terse/optim/adam_math.h"
#include "terse/optim/onebit_adam.h"
#include "terse/optim/sharded_onebit_adam.h"

#include <terse/communicator.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace terse {
namespace {

using namespace adam_reference;  // Vec, the gradients and the reference AdamW
using GradFn = std::function<Vec(int rank, int step, const Vec& params)>;

struct RunResult {
  std::vector<Vec> params;
  std::vector<uint64_t> bytesSent;  // per rank, during the run
};

// body(rank, comm) on `world` thread-ranks over a fresh in-process world.
void onThreadRanks(int world, const std::function<void(int rank, Communicator& comm)>& body) {
  auto comms = createInProcWorld(world, std::chrono::milliseconds(20000));
  ASSERT_TRUE(comms.isOk()) << comms.status().toString();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { body(r, *comms.value()[r]); });
  for (auto& t : threads) t.join();
}

// `steps` steps of ShardedOneBitAdam on `world` thread-ranks from `start` (one replica per rank).
RunResult runSharded(int world, std::vector<Vec> start, int steps, int firstStep, float lr,
                     std::vector<ShardedOneBitAdam>& opts, const GradFn& grad) {
  auto comms = createInProcWorld(world, std::chrono::milliseconds(20000));
  EXPECT_TRUE(comms.isOk()) << comms.status().toString();
  RunResult out{std::move(start), std::vector<uint64_t>(world, 0)};
  std::vector<Status> result(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Communicator& c = *comms.value()[r];
      uint64_t before = c.bytesSent();
      for (int s = firstStep; s < firstStep + steps; ++s) {
        Vec g = grad(r, s, out.params[r]);
        Status st = opts[r].step(c, out.params[r].data(), g.data(), lr);
        if (!st.isOk()) {
          result[r] = st;
          return;
        }
      }
      out.bytesSent[r] = c.bytesSent() - before;
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(result[r].isOk()) << result[r].toString();
  return out;
}

std::vector<ShardedOneBitAdam> makeSharded(int world, size_t n, const ShardedOneBitAdamOptions& o) {
  std::vector<ShardedOneBitAdam> v;
  for (int r = 0; r < world; ++r) {
    auto made = ShardedOneBitAdam::create(n, world, r, o);
    EXPECT_TRUE(made.isOk()) << made.status().toString();
    v.push_back(std::move(made).value());
  }
  return v;
}

ShardedOneBitAdamOptions baseOptions(const std::string& codec, int warmup) {
  ShardedOneBitAdamOptions o;
  o.codec = codec;
  o.errorFeedback = codec == "onebit";  // the biased codec needs it (not the default)
  o.warmupSteps = warmup;
  o.weightDecay = 0.1f;
  return o;
}

GradFn noiseGrads(size_t n) {
  return [n](int r, int s, const Vec&) { return noiseGradient(r, s, n); };
}

// `steps` steps of `opts` (one per rank) from initialParams(n) on noiseGrads(n), at lr 1e-3:
// the run the checkpoint tests save.
RunResult runFromStart(std::vector<ShardedOneBitAdam>& opts, size_t n, int steps) {
  const int world = static_cast<int>(opts.size());
  return runSharded(world, std::vector<Vec>(world, initialParams(n)), steps, 1, 1e-3f, opts,
                    noiseGrads(n));
}

TEST(ShardedOneBitAdam, WarmupIsAdamWOnTheFullTensor) {
  const size_t n = 5003;  // not a multiple of the world size: uneven shards
  auto o = baseOptions("onebit", 1000);
  auto opts = makeSharded(4, n, o);
  auto got =
      runSharded(4, std::vector<Vec>(4, initialParams(n)), 30, 1, 1e-2f, opts, noiseGrads(n));
  Vec want = referenceAdamW(4, n, 30, o, 1e-2, 0);
  for (int r = 0; r < 4; ++r) {
    EXPECT_LT(maxAbsDiff(got.params[r], want), 2e-5) << "rank " << r;
    EXPECT_TRUE(bitEqual(got.params[r], got.params[0])) << "rank " << r;
  }
  EXPECT_GT(maxAbsDiff(want, initialParams(n)), 0.1);  // it moved: the comparison means something
  EXPECT_FALSE(opts[0].frozen());
}

// 40 steps of 4 ranks with options `o` (codec none, warm-up 10) against the double-precision
// AdamW whose variance froze at step 10; the frozen and the live references must differ, so the
// comparison tells them apart.
void expectAdamWWithVarianceFrozenAtTen(const ShardedOneBitAdamOptions& o) {
  const size_t n = 5003;
  auto opts = makeSharded(4, n, o);
  auto got =
      runSharded(4, std::vector<Vec>(4, initialParams(n)), 40, 1, 1e-2f, opts, noiseGrads(n));
  EXPECT_EQ(opts[0].frozenAt(), 10);
  Vec frozen = referenceAdamW(4, n, 40, o, 1e-2, 10);
  Vec live = referenceAdamW(4, n, 40, o, 1e-2, 0);
  for (int r = 0; r < 4; ++r) {
    EXPECT_LT(maxAbsDiff(got.params[r], frozen), 5e-5) << "rank " << r;
    EXPECT_TRUE(bitEqual(got.params[r], got.params[0])) << "rank " << r;
  }
  EXPECT_GT(maxAbsDiff(frozen, live), 1e-3);
}

TEST(ShardedOneBitAdam, NoneCodecIsAdamWWithFrozenVariance) {
  expectAdamWWithVarianceFrozenAtTen(baseOptions("none", 10));
}

// A small non-IID task where Adam's preconditioning matters: rank r's loss is
// 0.5 sum_j h_j (p_j - c_rj)^2 / n with curvatures h_j spread over five decades and per-rank
// targets, plus gradient noise. The global loss (the ranks' average) has a nonzero minimum.
struct Task {
  size_t n;
  int world;
  Vec h;
  std::vector<Vec> c;
  Task(size_t n_, int world_) : n(n_), world(world_), h(n_), c(world_, Vec(n_)) {
    std::mt19937 gen(42);
    std::uniform_real_distribution<float> u(-3.0f, 2.0f), t(-1.0f, 1.0f);
    for (size_t j = 0; j < n; ++j) h[j] = std::pow(10.0f, u(gen));
    for (int r = 0; r < world; ++r)
      for (size_t j = 0; j < n; ++j) c[r][j] = t(gen) + 0.5f * static_cast<float>(r % 2);
  }
  GradFn grads() const {
    return [this](int r, int s, const Vec& p) {
      std::mt19937 gen(static_cast<uint32_t>(977 * s + 13 * r));
      std::normal_distribution<float> noise(0.0f, 1.0f);
      Vec g(n);
      for (size_t j = 0; j < n; ++j)
        g[j] = h[j] * (p[j] - c[r][j]) + 0.3f * std::sqrt(h[j]) * noise(gen);
      return g;
    };
  }
  double loss(const Vec& p) const {
    double l = 0.0;
    for (int r = 0; r < world; ++r)
      for (size_t j = 0; j < n; ++j) {
        double d = static_cast<double>(p[j]) - c[r][j];
        l += 0.5 * h[j] * d * d;
      }
    return l / (world * static_cast<double>(n));
  }
};

constexpr int kTaskSteps = 300;
constexpr int kTaskWarmup = 60;
constexpr float kTaskLr = 1e-2f;

double taskLossOneBitAdam(const Task& task, const std::string& codec, int warmup) {
  auto comms = createInProcWorld(task.world, std::chrono::milliseconds(20000));
  EXPECT_TRUE(comms.isOk());
  std::vector<Vec> params(task.world, Vec(task.n, 0.0f));
  std::vector<std::thread> threads;
  std::vector<Status> st(task.world);
  GradFn grad = task.grads();
  for (int r = 0; r < task.world; ++r)
    threads.emplace_back([&, r] {
      OneBitAdamOptions o;
      o.codec = codec;
      o.warmupSteps = warmup;
      o.weightDecay = 0.0f;
      auto a = OneBitAdam::create(task.n, o);
      for (int s = 1; s <= kTaskSteps && a.isOk() && st[r].isOk(); ++s) {
        Vec g = grad(r, s, params[r]);
        st[r] = a->step(*comms.value()[r], params[r].data(), g.data(), kTaskLr);
      }
    });
  for (auto& t : threads) t.join();
  for (auto& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
  return task.loss(params[0]);
}

RunResult taskRunSharded(const Task& task, const std::string& codec, bool errorFeedback,
                         std::vector<ShardedOneBitAdam>* keep = nullptr,
                         bool localMomentum = false) {
  ShardedOneBitAdamOptions o;
  o.codec = codec;
  o.warmupSteps = kTaskWarmup;
  o.weightDecay = 0.0f;
  o.errorFeedback = errorFeedback;
  o.localMomentum = localMomentum;
  auto opts = makeSharded(task.world, task.n, o);
  auto out = runSharded(task.world, std::vector<Vec>(task.world, Vec(task.n, 0.0f)), kTaskSteps, 1,
                        kTaskLr, opts, task.grads());
  if (keep) *keep = std::move(opts);
  return out;
}

TEST(ShardedOneBitAdam, OnebitTrainsWithin2PercentOfOneBitAdamAndFailsWithoutFeedback) {
  const Task task(16384, 4);
  const double floor = [&] {  // the minimum of the global loss: p = the targets' mean
    Vec best(task.n, 0.0f);
    for (size_t j = 0; j < task.n; ++j) {
      double s = 0.0;
      for (int r = 0; r < task.world; ++r) s += task.c[r][j];
      best[j] = static_cast<float>(s / task.world);
    }
    return task.loss(best);
  }();
  const double adamw = taskLossOneBitAdam(task, "onebit", kTaskSteps + 1);  // never freezes
  const double onebitAdam = taskLossOneBitAdam(task, "onebit", kTaskWarmup);
  auto sharded = taskRunSharded(task, "onebit", true);
  auto noFeedback = taskRunSharded(task, "onebit", false);
  const double shardedLoss = task.loss(sharded.params[0]);
  const double brokenLoss = task.loss(noFeedback.params[0]);
  const double int8Loss = task.loss(taskRunSharded(task, "int8", false).params[0]);
  std::printf(
      "excess over the minimum: AdamW %.6f, OneBitAdam %.6f, sharded onebit %.6f, "
      "sharded int8 without feedback %.6f (loss %.6f)\n",
      adamw - floor, onebitAdam - floor, shardedLoss - floor, int8Loss - floor, int8Loss);
  std::printf(
      "task loss (minimum %.6f): AdamW %.6f, OneBitAdam onebit %.6f, ShardedOneBitAdam onebit "
      "%.6f (%+.2f%% vs OneBitAdam), without error feedback %.6f (%+.2f%%)\n",
      floor, adamw, onebitAdam, shardedLoss, 100.0 * (shardedLoss / onebitAdam - 1.0), brokenLoss,
      100.0 * (brokenLoss / onebitAdam - 1.0));
  for (int r = 1; r < task.world; ++r)
    EXPECT_TRUE(bitEqual(sharded.params[r], sharded.params[0])) << "rank " << r;
  EXPECT_LT(shardedLoss, 1.02 * onebitAdam);
  // The bound discriminates: onebit without its error feedback (compression broken) misses it.
  EXPECT_GT(brokenLoss, 1.02 * onebitAdam);
  // And training happened: the excess over the minimum is a small part of the start's.
  EXPECT_LT(shardedLoss - floor, 0.05 * (task.loss(Vec(task.n, 0.0f)) - floor));
}

TEST(ShardedOneBitAdam, CompressedPhaseSendsCompressedBytes) {
  // 40 steps after a 1-step warm-up: the run's traffic is dominated by the compressed phase's
  // reduce-scatter plus the exact parameter all-gather. Switching compression off (codec none)
  // must show: onebit's reduce-scatter moves ~1/32 of the bytes, so the whole step ~half.
  const size_t n = 65536;
  auto run = [&](const std::string& codec) {
    auto opts = makeSharded(4, n, baseOptions(codec, 1));
    auto out = runFromStart(opts, n, 40);
    return out.bytesSent[0];
  };
  uint64_t none = run("none"), onebit = run("onebit");
  std::printf("bytes sent by rank 0 in 40 steps: none %llu, onebit %llu (%.3fx)\n",
              static_cast<unsigned long long>(none), static_cast<unsigned long long>(onebit),
              static_cast<double>(onebit) / static_cast<double>(none));
  EXPECT_LT(static_cast<double>(onebit), 0.6 * static_cast<double>(none));
}

TEST(ShardedOneBitAdam, StateBytesPerRankAreAQuarterOfOneBitAdamsAtFourRanks) {
  const size_t n = 1 << 20;
  // Both optimizers after one compressed step (so every residual exists), 4 ranks.
  std::vector<OneBitAdam> full;
  for (int r = 0; r < 4; ++r) {
    OneBitAdamOptions o;
    o.warmupSteps = 1;
    full.push_back(OneBitAdam::create(n, o).value());
  }
  auto withEf = makeSharded(4, n, baseOptions("onebit", 1));
  auto noEfOptions = baseOptions("int8", 1);
  noEfOptions.errorFeedback = false;
  auto noEf = makeSharded(4, n, noEfOptions);
  onThreadRanks(4, [&](int r, Communicator& c) {
    Vec p = initialParams(n);
    for (int s = 1; s <= 2; ++s) {
      Vec g = noiseGradient(r, s, n);
      EXPECT_TRUE(full[r].step(c, p.data(), g.data(), 1e-3f).isOk());
    }
    for (auto* set : {&withEf, &noEf}) {
      Vec q = initialParams(n);
      for (int s = 1; s <= 2; ++s) {
        Vec g = noiseGradient(r, s, n);
        EXPECT_TRUE((*set)[r].step(c, q.data(), g.data(), 1e-3f).isOk());
      }
    }
  });
  const ErrorFeedback& fb = full[0].feedback();
  const double fullBytes = 4.0 * (full[0].momentum().size() + full[0].variance().size() +
                                  fb.count() + fb.serverLength());
  const double ef = static_cast<double>(withEf[0].stateBytes());
  const double plain = static_cast<double>(noEf[0].stateBytes());
  std::printf(
      "optimizer state per rank, %zu parameters, 4 ranks: OneBitAdam %.0f bytes; "
      "ShardedOneBitAdam onebit + error feedback %.0f (%.3fx), int8 without feedback %.0f "
      "(%.3fx)\n",
      n, fullBytes, ef, ef / fullBytes, plain, plain / fullBytes);
  // m, v: 2 x 4n/4; exponents: n; (+ worker residual 4n). OneBitAdam: 3 x 4n + 4n/4.
  EXPECT_EQ(noEf[0].stateBytes(), 2 * 4 * (n / 4) + n);
  EXPECT_EQ(withEf[0].stateBytes(), 2 * 4 * (n / 4) + n + 4 * n);
  EXPECT_LT(plain / fullBytes, 0.25);
  EXPECT_LT(ef / fullBytes, 0.55);
}

// The buddy copy (issue #48): one partner's non-replicated state. Without error feedback and
// local momentum that is its m and v shard, 8 bytes x count / world; with them, their 8 x count
// more. A step's parameters come out as without the copy (it only copies).
TEST(ShardedOneBitAdam, BuddyCopyCostsOnePartnersShard) {
  const size_t n = 1 << 20;
  auto plainOptions = baseOptions("int8", 1);
  plainOptions.errorFeedback = false;
  auto buddyOptions = plainOptions;
  buddyOptions.buddyCopy = true;
  auto richOptions = baseOptions("onebit", 1);
  richOptions.localMomentum = true;
  richOptions.buddyCopy = true;
  auto plain = makeSharded(4, n, plainOptions);
  auto buddy = makeSharded(4, n, buddyOptions);
  auto rich = makeSharded(4, n, richOptions);
  std::vector<Vec> plainParams(4), buddyParams(4);
  onThreadRanks(4, [&](int r, Communicator& c) {
    Vec p = initialParams(n), q = p, x = p;
    for (int s = 1; s <= 3; ++s) {
      Vec g = noiseGradient(r, s, n);
      EXPECT_TRUE(plain[r].step(c, p.data(), g.data(), 1e-3f).isOk());
      EXPECT_TRUE(buddy[r].step(c, q.data(), g.data(), 1e-3f).isOk());
      EXPECT_TRUE(rich[r].step(c, x.data(), g.data(), 1e-3f).isOk());
    }
    plainParams[r] = p;
    buddyParams[r] = q;
  });
  EXPECT_EQ(plainParams, buddyParams);
  std::printf(
      "buddy copy, %zu parameters, 4 ranks (stateBytes): int8 %zu -> %zu bytes (+%zu, one "
      "partner's m and v shard); onebit + error feedback + local momentum: +%zu of %zu\n",
      n, plain[0].stateBytes(), buddy[0].stateBytes(), buddy[0].buddyBytes(), rich[0].buddyBytes(),
      rich[0].stateBytes());
  EXPECT_EQ(buddy[0].buddyBytes(), 2 * 4 * (n / 4));
  EXPECT_EQ(buddy[0].stateBytes(), plain[0].stateBytes() + 2 * 4 * (n / 4));
  EXPECT_EQ(rich[0].buddyBytes(), 2 * 4 * (n / 4) + 2 * 4 * n);
}

// Continues `a` and `b` (the saved optimizers and those loaded back, say) from the same
// parameters for `steps` steps from step `firstStep` on noiseGrads(n): every rank's parameters
// must come out bit-identical. Returns a's run.
RunResult expectSameContinuation(std::vector<ShardedOneBitAdam>& a,
                                 std::vector<ShardedOneBitAdam>& b, const std::vector<Vec>& from,
                                 int steps, int firstStep, size_t n) {
  const int world = static_cast<int>(a.size());
  RunResult ra = runSharded(world, from, steps, firstStep, 1e-3f, a, noiseGrads(n));
  RunResult rb = runSharded(world, from, steps, firstStep, 1e-3f, b, noiseGrads(n));
  for (int r = 0; r < world; ++r) EXPECT_TRUE(bitEqual(ra.params[r], rb.params[r])) << "rank " << r;
  return ra;
}

std::vector<std::vector<uint8_t>> saveAll(const std::vector<ShardedOneBitAdam>& opts) {
  std::vector<std::vector<uint8_t>> parts;
  for (const auto& o : opts) parts.push_back(o.serialize());
  return parts;
}

std::vector<ShardedOneBitAdam> loadAll(const std::vector<std::vector<uint8_t>>& parts, int world) {
  std::vector<std::pair<const void*, size_t>> views;
  for (const auto& p : parts) views.emplace_back(p.data(), p.size());
  std::vector<ShardedOneBitAdam> out;
  for (int r = 0; r < world; ++r) {
    auto a = ShardedOneBitAdam::deserialize(views, world, r);
    EXPECT_TRUE(a.isOk()) << a.status().toString();
    out.push_back(std::move(a).value());
  }
  return out;
}

// 4 ranks trained `steps` steps from the start and checkpointed: what the checkpoint tests load.
struct Saved {
  std::vector<ShardedOneBitAdam> opts;
  RunResult run;
  std::vector<std::vector<uint8_t>> parts;
};
Saved trainAndSave(size_t n, const ShardedOneBitAdamOptions& o, int steps) {
  Saved saved{makeSharded(4, n, o), {}, {}};
  saved.run = runFromStart(saved.opts, n, steps);
  saved.parts = saveAll(saved.opts);
  return saved;
}

TEST(ShardedOneBitAdam, CheckpointAtTheSameWorldSizeResumesBitIdentically) {
  const size_t n = 9001;
  auto o = baseOptions("onebit", 5);
  auto [opts, first, parts] = trainAndSave(n, o, 12);
  auto resumed = loadAll(parts, 4);
  auto a = expectSameContinuation(opts, resumed, first.params, 10, 13, n);
  EXPECT_GT(maxAbsDiff(a.params[0], first.params[0]), 0.0);
}

TEST(ShardedOneBitAdam, CheckpointAtFourRanksResumesAtTwo) {
  // Saved by 4 ranks after the freeze, loaded at 2. With the lossless codec the 2-rank run must
  // continue as the 4-rank run does when ranks r and r + 2 see the same gradients (the same
  // average): the re-sharded moments and exponents are the same numbers.
  const size_t n = 9001;
  auto o = baseOptions("none", 5);
  auto [opts, first, parts] = trainAndSave(n, o, 12);
  auto at2 = loadAll(parts, 2);
  EXPECT_EQ(at2[0].steps(), 12);
  EXPECT_EQ(at2[1].frozenAt(), 5);
  // The moments were re-partitioned by offset: rank 1 at 2 ranks holds old ranks 2 and 3's.
  Range r2 = chunkRange(n, 4, 2);
  EXPECT_EQ(at2[1].shardOffset(), chunkRange(n, 2, 1).begin);
  EXPECT_EQ(at2[1].momentum()[r2.begin - at2[1].shardOffset()], opts[2].momentum()[0]);
  auto paired = [n](int r, int s, const Vec&) { return noiseGradient(r % 2, s, n); };
  auto ref = runSharded(4, first.params, 10, 13, 1e-3f, opts, paired);
  auto got = runSharded(2, {first.params[0], first.params[1]}, 10, 13, 1e-3f, at2, paired);
  EXPECT_TRUE(bitEqual(got.params[0], got.params[1]));
  EXPECT_LT(maxAbsDiff(got.params[0], ref.params[0]), 1e-6);
  EXPECT_GT(maxAbsDiff(ref.params[0], first.params[0]), 1e-4);
  // With onebit's residuals: re-loading at 2 keeps training and the ranks identical.
  auto o1 = baseOptions("onebit", 5);
  auto [ob, f1, obParts] = trainAndSave(n, o1, 12);
  auto ob2 = loadAll(obParts, 2);
  auto g1 = runSharded(2, {f1.params[0], f1.params[1]}, 10, 13, 1e-3f, ob2, noiseGrads(n));
  EXPECT_TRUE(bitEqual(g1.params[0], g1.params[1]));
}

TEST(ShardedOneBitAdam, BadInputIsAnError) {
  ShardedOneBitAdamOptions o;
  o.warmupSteps = 0;
  EXPECT_FALSE(ShardedOneBitAdam::create(10, 2, 0, o).isOk());
  o.warmupSteps = 5;
  EXPECT_FALSE(ShardedOneBitAdam::create(10, 2, 2, o).isOk());
  o.codec = "nonsense";
  EXPECT_FALSE(ShardedOneBitAdam::create(10, 2, 0, o).isOk());
  // A state made for 4 ranks refuses a 2-rank communicator (on every rank, no hang).
  const size_t n = 100;
  auto opts = makeSharded(4, n, baseOptions("onebit", 2));
  std::vector<Status> st(2);
  onThreadRanks(2, [&](int r, Communicator& c) {
    Vec p = initialParams(n), g = noiseGradient(r, 1, n);
    st[r] = opts[r].step(c, p.data(), g.data(), 1e-3f);
  });
  EXPECT_FALSE(st[0].isOk());
  EXPECT_FALSE(st[1].isOk());
  // Checkpoints: a flipped byte, a missing part, a part given twice.
  auto parts = saveAll(opts);
  std::vector<std::pair<const void*, size_t>> views;
  for (auto& p : parts) views.emplace_back(p.data(), p.size());
  auto missing = views;
  missing.pop_back();
  EXPECT_FALSE(ShardedOneBitAdam::deserialize(missing, 2, 0).isOk());
  auto twice = views;
  twice[1] = twice[0];
  EXPECT_FALSE(ShardedOneBitAdam::deserialize(twice, 2, 0).isOk());
  parts[1][40] ^= 1;
  auto bad = ShardedOneBitAdam::deserialize(views, 2, 0);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_FALSE(ShardedOneBitAdam::deserialize(views, 2, 5).isOk());
}

TEST(ShardedOneBitAdam, CompressedParameterAllGatherKeepsRanksIdenticalAndTrains) {
  // int8 parameter all-gather after the warm-up: every rank's replica is the decoded values
  // (bit-identical), the owners step on exact master shards, fewer bytes move than with the
  // exact all-gather, and the task still trains within 2% of OneBitAdam.
  const Task task(16384, 4);
  ShardedOneBitAdamOptions o;
  o.codec = "onebit";
  o.errorFeedback = true;
  o.paramCodec = "int8";
  o.warmupSteps = kTaskWarmup;
  o.weightDecay = 0.0f;
  auto opts = makeSharded(task.world, task.n, o);
  auto out = runSharded(task.world, std::vector<Vec>(task.world, Vec(task.n, 0.0f)), kTaskSteps, 1,
                        kTaskLr, opts, task.grads());
  auto exact = taskRunSharded(task, "onebit", true);
  const double onebitAdam = taskLossOneBitAdam(task, "onebit", kTaskWarmup);
  const double loss = task.loss(out.params[0]);
  std::printf(
      "int8 parameter all-gather: loss %.6f (%+.2f%% vs OneBitAdam %.6f), bytes %.3fx the "
      "exact all-gather's, state %zu bytes\n",
      loss, 100.0 * (loss / onebitAdam - 1.0), onebitAdam,
      static_cast<double>(out.bytesSent[0]) / static_cast<double>(exact.bytesSent[0]),
      opts[0].stateBytes());
  for (int r = 1; r < task.world; ++r)
    EXPECT_TRUE(bitEqual(out.params[r], out.params[0])) << "rank " << r;
  EXPECT_LT(loss, 1.02 * onebitAdam);
  EXPECT_LT(out.bytesSent[0], exact.bytesSent[0]);
  // The master shard is state: m, v, master (3 x 4 bytes per shard element), exponents, residual.
  const size_t len = opts[0].shardLength();
  EXPECT_EQ(opts[0].stateBytes(), 12 * len + task.n + 4 * task.n);
  // Checkpoint with the master: 4 -> 4 resumes bit-identically.
  auto again = loadAll(saveAll(opts), 4);
  auto a = runSharded(4, out.params, 5, kTaskSteps + 1, kTaskLr, opts, task.grads());
  auto b = runSharded(4, out.params, 5, kTaskSteps + 1, kTaskLr, again, task.grads());
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(bitEqual(a.params[r], b.params[r])) << "rank " << r;
}

TEST(ShardedOneBitAdam, CompressedParameterAllGatherAccumulatesUpdatesBelowItsResolution) {
  // Parameters near 1 and lr 1e-3: a step moves each parameter by ~1e-3, below int8's
  // resolution of ~1/127 of the block's largest value. Stepping on the decoded replica would
  // round every update away; the owner's master shard accumulates them, so the int8 run ends
  // where the exact run does.
  const Task task(8192, 4);
  auto run = [&](const std::string& paramCodec) {
    ShardedOneBitAdamOptions o;
    o.codec = "none";
    o.paramCodec = paramCodec;
    o.warmupSteps = 5;
    o.weightDecay = 0.0f;
    auto opts = makeSharded(task.world, task.n, o);
    auto out = runSharded(task.world, std::vector<Vec>(task.world, Vec(task.n, 1.0f)), 200, 1,
                          1e-3f, opts, task.grads());
    return task.loss(out.params[0]);
  };
  const double start = task.loss(Vec(task.n, 1.0f));
  const double exact = run("none"), int8 = run("int8");
  std::printf("lr 1e-3 from p = 1: loss %.6f -> exact all-gather %.6f, int8 all-gather %.6f\n",
              start, exact, int8);
  EXPECT_LT(exact, start - 0.1 * (start - 1.352473));  // the exact run moved
  EXPECT_LT(std::fabs(int8 - exact), 0.02 * (start - exact));
}

// Runs `steps` steps of two-rank ShardedOneBitAdam with device buffers; returns each rank's
// parameters after every step (params[step - 1][rank]) and sets `st` to the first failure.
std::vector<std::vector<Vec>> runShardedOnDevice(int world, size_t n, int steps,
                                                 std::vector<ShardedOneBitAdam>& opts,
                                                 std::vector<Status>& st) {
  std::vector<std::vector<Vec>> after(steps, std::vector<Vec>(world, Vec(n)));
  st.assign(world, Status::ok());
  onThreadRanks(world, [&](int r, Communicator& c) {
    device::DeviceBuffer dp, dg;
    if (!dp.reserve(4 * n).isOk() || !dg.reserve(4 * n).isOk()) {
      st[r] = errorSystem("device allocation failed");
      return;
    }
    Vec p = initialParams(n);
    (void)device::copyAsync(dp.data(), p.data(), 4 * n, nullptr);
    for (int s = 1; s <= steps && st[r].isOk(); ++s) {
      Vec g = noiseGradient(r, s, n);
      (void)device::copyAsync(dg.data(), g.data(), 4 * n, nullptr);
      (void)device::synchronize(nullptr);
      st[r] = opts[r].step(c, static_cast<float*>(dp.data()), static_cast<const float*>(dg.data()),
                           1e-3f);
      (void)device::copyAsync(after[s - 1][r].data(), dp.data(), 4 * n, nullptr);
      (void)device::synchronize(nullptr);
    }
  });
  return after;
}

// Where two runs first part: "step S rank R element I: A vs B", or "" when bit-identical.
std::string firstDifference(const std::vector<std::vector<Vec>>& a,
                            const std::vector<std::vector<Vec>>& b) {
  for (size_t s = 0; s < a.size(); ++s)
    for (size_t r = 0; r < a[s].size(); ++r)
      for (size_t i = 0; i < a[s][r].size(); ++i)
        if (std::memcmp(&a[s][r][i], &b[s][r][i], 4) != 0) {
          char buf[160];
          std::snprintf(buf, sizeof buf, "step %zu rank %zu element %zu: %.9g vs %.9g", s + 1, r, i,
                        a[s][r][i], b[s][r][i]);
          return buf;
        }
  return "";
}

TEST(ShardedOneBitAdam, DevicePathMatchesHost) {
  if (!device::available()) GTEST_SKIP() << "no CUDA device: the device path is compiled only";
  // Two ranks across the freeze: device buffers must give the host path's bytes (the kernels
  // run adam_math.h's formulas; codec kernels match the CPU's bitwise). Each variant reports
  // the first step and element where the paths part, so one run on a lent GPU says where.
  const size_t n = 9001;
  const int world = 2, steps = 6;
  struct Variant {
    const char* codec;
    bool feedback;
    const char* paramCodec;
    bool localMomentum;
  };
  // The local momentum variants cover its kernel and the freeze's gathered momentum on the
  // device, and the swap that makes the sent values the next step's state.
  for (Variant v : {Variant{"none", false, "none", false}, Variant{"onebit", false, "none", false},
                    Variant{"onebit", true, "none", false}, Variant{"int8", false, "int8", false},
                    Variant{"none", false, "none", true}, Variant{"onebit", true, "none", true}}) {
    SCOPED_TRACE(std::string(v.codec) + (v.feedback ? "+feedback" : "") + " params " +
                 v.paramCodec + (v.localMomentum ? " local momentum" : ""));
    auto o = baseOptions(v.codec, 3);
    o.errorFeedback = v.feedback;
    o.paramCodec = v.paramCodec;
    o.localMomentum = v.localMomentum;
    auto hostOpts = makeSharded(world, n, o);
    std::vector<std::vector<Vec>> host(steps, std::vector<Vec>(world));
    for (int s = 1; s <= steps; ++s) {
      auto out = runSharded(world, s == 1 ? std::vector<Vec>(world, initialParams(n)) : host[s - 2],
                            1, s, 1e-3f, hostOpts, noiseGrads(n));
      host[s - 1] = out.params;
    }
    auto devOpts = makeSharded(world, n, o);
    std::vector<Status> st;
    auto dev = runShardedOnDevice(world, n, steps, devOpts, st);
    for (int r = 0; r < world; ++r) ASSERT_TRUE(st[r].isOk()) << st[r].toString();
    std::string diff = firstDifference(dev, host);
    EXPECT_EQ(diff, "") << "device vs host parameters";
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(bitEqual(devOpts[r].momentum(), hostOpts[r].momentum())) << "rank " << r;
  }
}

ShardedOneBitAdamOptions localMomentumOptions(const std::string& codec, int warmup) {
  auto o = baseOptions(codec, warmup);
  o.localMomentum = true;
  return o;
}

TEST(ShardedOneBitAdam, LocalMomentumWithNoneCodecIsAdamWWithFrozenVariance) {
  // With a lossless codec the ranks' local momenta average to the momentum of the averaged
  // gradient only if the freeze started them from the owners' m (gathered, scaled down by the
  // exponents) and the owner takes the average as m instead of integrating it once more; either
  // mistake moves this run off AdamW with the frozen variance.
  expectAdamWWithVarianceFrozenAtTen(localMomentumOptions("none", 10));
}

TEST(ShardedOneBitAdam, LocalMomentumOnebitTrainsOnTheQuadraticTask) {
  // The quadratic task of OnebitTrainsWithin2PercentOfOneBitAdamAndFailsWithoutFeedback with
  // onebit + error feedback sending the local momenta, and the same task with every rank's
  // targets equal (only the gradient noise differs between ranks).
  //
  // Measured (2026-11-28): with the per-rank targets (non-IID) the local form ends 4.2% above
  // OneBitAdam's loss, the gradient form 0.05%; with shared targets it ends below OneBitAdam's.
  // A rank's local momentum is never re-synchronised, so it converges to that rank's own
  // persistent gradient h (p - c_r) / d, whose average is ~0 near the optimum: onebit then
  // compresses an O(1) vector per rank to deliver a ~0 average, and its error lands in the
  // update every step. OneBitAdam sends b1 m_synced + (1 - b1) g_r, where that persistent part
  // is weighted by 1 - b1 only. So the 2% bound is asserted on the shared-target task, and on the
  // non-IID one the run must train and stay identical and finite (the 4.2% is the report's).
  for (bool nonIid : {true, false}) {
    SCOPED_TRACE(nonIid ? "per-rank targets" : "shared targets");
    Task task(16384, 4);
    if (!nonIid)
      for (int r = 1; r < task.world; ++r) task.c[r] = task.c[0];
    double floor = 0.0;
    {
      Vec best(task.n, 0.0f);
      for (size_t j = 0; j < task.n; ++j) {
        double s = 0.0;
        for (int r = 0; r < task.world; ++r) s += task.c[r][j];
        best[j] = static_cast<float>(s / task.world);
      }
      floor = task.loss(best);
    }
    const double onebitAdam = taskLossOneBitAdam(task, "onebit", kTaskWarmup);
    auto local = taskRunSharded(task, "onebit", true, nullptr, true);
    const double gradientForm = task.loss(taskRunSharded(task, "onebit", true).params[0]);
    const double loss = task.loss(local.params[0]);
    const double start = task.loss(Vec(task.n, 0.0f));
    std::printf(
        "%s: task loss (minimum %.6f, start %.6f): OneBitAdam onebit %.6f, ShardedOneBitAdam "
        "onebit + feedback, local momentum %.6f (%+.2f%%), gradient form %.6f (%+.2f%%)\n",
        nonIid ? "per-rank targets" : "shared targets", floor, start, onebitAdam, loss,
        100.0 * (loss / onebitAdam - 1.0), gradientForm, 100.0 * (gradientForm / onebitAdam - 1.0));
    bool finite = true;
    for (int r = 0; r < task.world; ++r) {
      EXPECT_TRUE(bitEqual(local.params[r], local.params[0])) << "rank " << r;
      for (float x : local.params[r]) finite = finite && std::isfinite(x);
    }
    EXPECT_TRUE(finite);
    // Trained: most of the start's excess over the minimum is gone (measured: 90% non-IID).
    EXPECT_LT(loss - floor, 0.15 * (start - floor));
    if (!nonIid) {
      EXPECT_LT(loss, 1.02 * onebitAdam);
    }
  }
}

// Runs `steps` steps from step 1 on `world` thread-ranks and records every rank's parameters
// after each step (after[s - 1][r]). `split`: reduce(), update() on the rank's shard of its
// replica, then an exact all-gather of the shards (what FSDP2 does) instead of step().
std::vector<std::vector<Vec>> runRecorded(int world, size_t n, int steps, float lr, bool split,
                                          std::vector<ShardedOneBitAdam>& opts,
                                          std::vector<Status>& st) {
  std::vector<std::vector<Vec>> after(steps, std::vector<Vec>(world));
  st.assign(world, Status::ok());
  onThreadRanks(world, [&](int r, Communicator& c) {
    ShardedOneBitAdam& a = opts[r];
    const size_t off = a.shardOffset(), len = a.shardLength();
    Vec p = initialParams(n), reduced(len), shard(len);
    for (int s = 1; s <= steps && st[r].isOk(); ++s) {
      Vec g = noiseGradient(r, s, n);
      if (!split) {
        st[r] = a.step(c, p.data(), g.data(), lr);
      } else {
        st[r] = a.reduce(c, g.data(), reduced.data());
        shard.assign(p.begin() + off, p.begin() + off + len);
        if (st[r].isOk()) st[r] = a.update(c, shard.data(), reduced.data(), lr);
        if (st[r].isOk()) st[r] = c.allgather(shard.data(), p.data(), n, DataType::kFloat32);
      }
      after[s - 1][r] = p;
    }
  });
  return after;
}

TEST(ShardedOneBitAdam, ReduceAndUpdateThenAllGatherIsStepBitForBit) {
  // Warm-up, the freeze (the exponents and the local momentum gathered inside update()) and
  // compressed steps: every step's parameters and, at the end, the whole checkpoint (moments,
  // exponents, local momentum, residual) must be step()'s bytes.
  const size_t n = 5003;
  const int world = 4, steps = 12;
  for (bool local : {false, true}) {
    SCOPED_TRACE(local ? "local momentum" : "gradient form");
    auto o = baseOptions("onebit", 4);
    o.localMomentum = local;
    auto byStep = makeSharded(world, n, o), bySplit = makeSharded(world, n, o);
    std::vector<Status> st1, st2;
    auto want = runRecorded(world, n, steps, 1e-2f, false, byStep, st1);
    auto got = runRecorded(world, n, steps, 1e-2f, true, bySplit, st2);
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(st1[r].isOk()) << st1[r].toString();
      ASSERT_TRUE(st2[r].isOk()) << st2[r].toString();
    }
    EXPECT_EQ(firstDifference(got, want), "");
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(bySplit[r].steps(), steps);
      EXPECT_EQ(bySplit[r].frozenAt(), 4);
      EXPECT_TRUE(bySplit[r].serialize() == byStep[r].serialize()) << "rank " << r;
    }
    // The compressed steps moved the parameters (the comparison covers them).
    EXPECT_GT(maxAbsDiff(want[steps - 1][0], want[4][0]), 1e-3);
  }
}

// Step 1's reduce() on two thread-ranks: each rank's status.
std::vector<Status> firstReduceOnTwoRanks(std::vector<ShardedOneBitAdam>& opts, size_t n) {
  std::vector<Status> st(2);
  onThreadRanks(2, [&](int r, Communicator& c) {
    Vec g = noiseGradient(r, 1, n), red(opts[r].shardLength());
    st[r] = opts[r].reduce(c, g.data(), red.data());
  });
  return st;
}

// Step 1's reduce() on every rank, then rank 1 alone finishes the step with update(): rank 0 is
// left between reduce() and update() for the misuse that follows. Returns rank r's parameters.
Vec reduceThenRankOneUpdates(int r, Communicator& c, ShardedOneBitAdam& opt, size_t n, const Vec& g,
                             Vec& red) {
  Vec p = initialParams(n);
  Vec shard(p.begin() + opt.shardOffset(), p.begin() + opt.shardOffset() + opt.shardLength());
  EXPECT_TRUE(opt.reduce(c, g.data(), red.data()).isOk());
  if (r == 1) {
    EXPECT_TRUE(opt.update(c, shard.data(), red.data(), 1e-3f).isOk());
  }
  return p;
}

TEST(ShardedOneBitAdam, ReduceAndUpdateMisuseIsRefused) {
  const size_t n = 1000;
  // The peers' call must fail because this rank's refusal took its place (the message names the
  // refusing rank), not because they waited for a call that never came (a timeout).
  auto refusedBy = [](const Status& s, int rank) {
    const std::string why = "rank " + std::to_string(rank) + " rejected its arguments";
    return !s.isOk() && s.code() != StatusCode::kTimeout &&
           s.message().find(why) != std::string::npos;
  };
  {
    // Rank 0 reduces twice (a second backward pass); rank 1 goes on to the next step's reduce.
    auto opts = makeSharded(2, n, baseOptions("onebit", 5));
    std::vector<Status> second(2);
    onThreadRanks(2, [&](int r, Communicator& c) {
      Vec g = noiseGradient(r, 1, n), red(opts[r].shardLength());
      reduceThenRankOneUpdates(r, c, opts[r], n, g, red);
      second[r] = opts[r].reduce(c, g.data(), red.data());
    });
    EXPECT_EQ(second[0].code(), StatusCode::kInvalidUsage) << second[0].toString();
    EXPECT_TRUE(refusedBy(second[1], 0)) << second[1].toString();
  }
  {
    // update() without reduce(): refused, and the state does not advance. At the freeze the
    // update talks (the exponents' all-gather), so the peer's collective fails too.
    auto one = createInProcWorld(1, std::chrono::milliseconds(20000));
    ASSERT_TRUE(one.isOk());
    auto opts = makeSharded(1, n, baseOptions("onebit", 5));
    Vec p = initialParams(n), red(n, 0.0f);
    Status s = opts[0].update(*one.value()[0], p.data(), red.data(), 1e-3f);
    EXPECT_EQ(s.code(), StatusCode::kInvalidUsage) << s.toString();
    EXPECT_EQ(opts[0].steps(), 0);
    EXPECT_TRUE(bitEqual(p, initialParams(n)));

    auto atFreeze = makeSharded(2, n, baseOptions("onebit", 1));
    std::vector<Status> st(2);
    onThreadRanks(2, [&](int r, Communicator& c) {
      Vec g = noiseGradient(r, 1, n), q = initialParams(n), red2(atFreeze[r].shardLength());
      if (r == 0)
        st[r] = atFreeze[r].update(c, q.data(), red2.data(), 1e-3f);
      else
        st[r] = atFreeze[r].reduce(c, g.data(), red2.data());
    });
    EXPECT_EQ(st[0].code(), StatusCode::kInvalidUsage) << st[0].toString();
    EXPECT_TRUE(refusedBy(st[1], 0)) << st[1].toString();
  }
  {
    // A lossy parameter codec belongs to step()'s all-gather: reduce() refuses it on every rank.
    auto o = baseOptions("onebit", 5);
    o.paramCodec = "int8";
    auto opts = makeSharded(2, n, o);
    const std::vector<Status> st = firstReduceOnTwoRanks(opts, n);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << st[r].toString();
      EXPECT_EQ(opts[r].steps(), 0);
    }
  }
  {
    // step() between reduce() and update() on rank 0; rank 1 finishes its step and steps again.
    auto opts = makeSharded(2, n, baseOptions("onebit", 5));
    std::vector<Status> st(2);
    onThreadRanks(2, [&](int r, Communicator& c) {
      Vec g = noiseGradient(r, 1, n), red(opts[r].shardLength());
      Vec p = reduceThenRankOneUpdates(r, c, opts[r], n, g, red);
      st[r] = opts[r].step(c, p.data(), g.data(), 1e-3f);
    });
    EXPECT_EQ(st[0].code(), StatusCode::kInvalidUsage) << st[0].toString();
    EXPECT_TRUE(refusedBy(st[1], 0)) << st[1].toString();
    EXPECT_EQ(opts[0].steps(), 0);
  }
}

// Rank 0 refused its bad argument and rank 1 heard so at once (its refusal, not a timeout).
void expectRankZeroRefusedAtOnce(const std::vector<Status>& st) {
  EXPECT_EQ(st[0].code(), StatusCode::kInvalidArgument) << st[0].toString();
  EXPECT_FALSE(st[1].isOk());
  EXPECT_NE(st[1].code(), StatusCode::kTimeout) << st[1].toString();
  EXPECT_NE(st[1].message().find("rank 0 rejected its arguments"), std::string::npos)
      << st[1].toString();
}

TEST(ShardedOneBitAdam, BadLearningRateWithTheBuddyCopyFailsEveryRankAtOnce) {
  // With the buddy copy every update() talks: at the freeze on the main communicator (the
  // exponents), else on the pair (the refresh; at the first one, the split on the main one).
  // Rank 0's refusal must reach the one collective its peer is in: before the fix it went to
  // both, and the wait on the one the peer was not in timed out on every rank.
  const size_t n = 1000;
  const int warmup = 3;
  auto o = baseOptions("onebit", warmup);
  o.buddyCopy = true;
  for (int bad : {1, 2, 3, 4}) {
    for (bool split : {true, false}) {
      SCOPED_TRACE("bad step " + std::to_string(bad) + (split ? ", update()" : ", step()"));
      auto opts = makeSharded(2, n, o);
      auto comms = createInProcWorld(2, std::chrono::milliseconds(5000));
      ASSERT_TRUE(comms.isOk()) << comms.status().toString();
      std::vector<Status> st(2);
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          Communicator& c = *comms.value()[r];
          ShardedOneBitAdam& opt = opts[r];
          Vec p = initialParams(n), red(opt.shardLength());
          for (int s = 1; s <= bad; ++s) {
            const float lr = s == bad && r == 0 ? std::nanf("") : 1e-3f;
            Vec g = noiseGradient(r, s, n);
            Status one;
            if (split) {
              Vec shard(p.begin() + opt.shardOffset(),
                        p.begin() + opt.shardOffset() + opt.shardLength());
              one = opt.reduce(c, g.data(), red.data());
              if (one.isOk()) one = opt.update(c, shard.data(), red.data(), lr);
              if (one.isOk()) std::copy(shard.begin(), shard.end(), p.begin() + opt.shardOffset());
            } else {
              one = opt.step(c, p.data(), g.data(), lr);
            }
            if (!one.isOk()) {
              st[r] = one;
              return;
            }
          }
        });
      for (auto& t : threads) t.join();
      expectRankZeroRefusedAtOnce(st);
      EXPECT_EQ(opts[0].steps(), bad - 1);
      // Where the bad step's collective is the step's own (step(), the freeze) no rank advances;
      // update()'s refresh comes after the partner applied its step (its error says so).
      if (!split || bad == warmup)
        EXPECT_EQ(opts[1].steps(), bad - 1);
      else
        EXPECT_NE(st[1].message().find("the step itself completed"), std::string::npos);
    }
  }
}

// Two cores a rank (two FSDP units) refresh over one pair communicator (Communicator::splitOnce):
// core 0 made it at its first refresh, so core 1 refusing an update() on rank 0, at its own
// first refresh or a later one, must refuse on that pair, where the peer's core 1 is, not on the
// main communicator (a split its peer is no longer in: the wait would time out on both).
TEST(ShardedOneBitAdam, ASecondCoreRefusesOnThePairTheFirstMade) {
  const size_t n = 1000;
  const int warmup = 3;
  auto o = baseOptions("onebit", warmup);
  o.buddyCopy = true;
  for (int bad : {1, 2, 3, 4}) {
    SCOPED_TRACE("core 1's bad step " + std::to_string(bad));
    std::vector<std::vector<ShardedOneBitAdam>> cores;
    for (int k = 0; k < 2; ++k) cores.push_back(makeSharded(2, n, o));
    auto comms = createInProcWorld(2, std::chrono::milliseconds(5000));
    ASSERT_TRUE(comms.isOk()) << comms.status().toString();
    std::vector<Status> st(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        Communicator& c = *comms.value()[r];
        for (int s = 1; s <= bad; ++s)
          for (int k = 0; k < 2; ++k) {
            ShardedOneBitAdam& opt = cores[k][r];
            Vec shard(opt.shardLength(), 0.25f), red(opt.shardLength());
            const float lr = s == bad && k == 1 && r == 0 ? std::nanf("") : 1e-3f;
            Vec g = noiseGradient(r, s + k, n);
            Status one = opt.reduce(c, g.data(), red.data());
            if (one.isOk()) one = opt.update(c, shard.data(), red.data(), lr);
            if (!one.isOk()) {
              st[r] = one;
              return;
            }
          }
      });
    for (auto& t : threads) t.join();
    expectRankZeroRefusedAtOnce(st);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(cores[0][r].steps(), bad) << "rank " << r;
    EXPECT_EQ(cores[1][0].steps(), bad - 1);
  }
}

// Two thread-ranks step with reduce() + update() and the buddy copy; at step `last` rank 0
// passes `lastLr`. Then rank 0 is taken for dead: rank 1 alone (a world of one) takes the parts.
Result<ShardedOneBitAdam::ShrunkParts> survivorOfTwoShrinks(int last, float lastLr) {
  const size_t n = 1000;
  auto o = baseOptions("onebit", 3);
  o.buddyCopy = true;
  auto opts = makeSharded(2, n, o);
  onThreadRanks(2, [&](int r, Communicator& c) {
    Vec shard(opts[r].shardLength(), 0.25f), red(opts[r].shardLength());
    for (int s = 1; s <= last; ++s) {
      Vec g = noiseGradient(r, s, n);
      if (!opts[r].reduce(c, g.data(), red.data()).isOk()) return;
      const float lr = s == last && r == 0 ? lastLr : 1e-3f;
      if (!opts[r].update(c, shard.data(), red.data(), lr).isOk()) return;
    }
  });
  EXPECT_EQ(opts[1].steps(), last);
  auto alone = createInProcWorld(1, std::chrono::milliseconds(20000));
  EXPECT_TRUE(alone.isOk());
  return opts[1].shrinkParts(*alone.value()[0]);
}

TEST(ShardedOneBitAdam, ShrinkGivesADeadRanksParameterShardOnlyFromACopyOfThisStep) {
  // Rank 0's bad learning rate at step 2 leaves rank 1 at step 2 with a copy of step 1 (its
  // refresh failed after its step): the shard of step 1 next to rank 1's of step 2 would be
  // weights of no step. The state part is still given (a copy a step behind, as documented).
  auto behind = survivorOfTwoShrinks(2, std::nanf(""));
  ASSERT_TRUE(behind.isOk()) << behind.status().toString();
  EXPECT_FALSE(behind->parts[0].empty());
  EXPECT_TRUE(behind->params[0].empty());
  auto current = survivorOfTwoShrinks(2, 1e-3f);
  ASSERT_TRUE(current.isOk()) << current.status().toString();
  EXPECT_FALSE(current->params[0].empty());
}

TEST(ShardedOneBitAdam, ShrinkRefusesAPeersRecordLengthThatIsNoLength) {
  // A peer (a raw communicator standing in for old rank 1) sends the shrink's exchanges with a
  // record length that is NaN, huge or fractional: an error, not a cast of it (undefined) or an
  // allocation of petabytes.
  const size_t n = 100;
  auto o = baseOptions("none", 3);
  for (float word : {std::nanf(""), 65535.0f, 1.5f, -1.0f}) {
    SCOPED_TRACE("length word " + std::to_string(word));
    auto opts = makeSharded(2, n, o);
    Status got;
    onThreadRanks(2, [&](int r, Communicator& c) {
      if (r == 0) {
        got = opts[0].shrinkParts(c).status();
        return;
      }
      const float me = 1.0f;
      std::vector<float> ranks(2), offer(3, 0.0f), offers(6);
      ASSERT_TRUE(c.allgather(&me, ranks.data(), ranks.size(), DataType::kFloat32).isOk());
      ASSERT_TRUE(
          c.allgather(offer.data(), offers.data(), offers.size(), DataType::kFloat32).isOk());
      const float length[3] = {word, word == 65535.0f ? word : 0.0f,
                               word == 65535.0f ? word : 0.0f};
      std::vector<float> lengths(6);
      (void)c.allgather(length, lengths.data(), lengths.size(), DataType::kFloat32);
    });
    EXPECT_EQ(got.code(), StatusCode::kInvalidArgument) << got.toString();
    EXPECT_NE(got.message().find("rank(s) 1 sent a record length"), std::string::npos)
        << got.toString();
  }
}

TEST(ShardedOneBitAdam, ANullLostPartIsRefusedOnEveryRank) {
  // The C API passes its NULL arrays on as one NULL part (terse_sharded_onebit_adam_shrink with
  // num_lost > 0): the exchange refuses it on every rank, the peers too, not by a timeout.
  const size_t n = 100;
  auto opts = makeSharded(2, n, baseOptions("none", 3));
  std::vector<Status> st(2);
  onThreadRanks(2, [&](int r, Communicator& c) {
    std::vector<std::pair<const void*, size_t>> lost;
    if (r == 0) lost.emplace_back(nullptr, 0);
    st[r] = opts[r].shrinkParts(c, lost).status();
  });
  EXPECT_EQ(st[0].code(), StatusCode::kInvalidArgument) << st[0].toString();
  EXPECT_NE(st[0].message().find("lost part 0 is NULL"), std::string::npos) << st[0].toString();
  EXPECT_EQ(st[1].code(), StatusCode::kInvalidArgument) << st[1].toString();
  EXPECT_NE(st[1].message().find("old rank(s) 0"), std::string::npos) << st[1].toString();
}

uint32_t checkpointVersion(const std::vector<uint8_t>& part) {
  uint32_t v = 0;
  if (part.size() >= 8) std::memcpy(&v, part.data() + 4, 4);
  return v;
}

TEST(ShardedOneBitAdam, LocalMomentumCheckpointAtTheSameWorldSizeResumesBitIdentically) {
  // onebit + error feedback: each rank's own local momentum must come back (a rank given the
  // average instead sends other bits through the 1-bit codec and the run parts).
  const size_t n = 9001;
  auto o = localMomentumOptions("onebit", 5);
  for (int saveAt : {3, 12}) {  // before the freeze (no local momentum yet) and after it
    SCOPED_TRACE("saved at step " + std::to_string(saveAt));
    auto [opts, first, parts] = trainAndSave(n, o, saveAt);
    for (const auto& p : parts) EXPECT_EQ(checkpointVersion(p), 2u);
    auto resumed = loadAll(parts, 4);
    auto a = expectSameContinuation(opts, resumed, first.params, 10, saveAt + 1, n);
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(resumed[r].serialize() == opts[r].serialize()) << "rank " << r;
    EXPECT_TRUE(opts[0].frozen());
    EXPECT_GT(maxAbsDiff(a.params[0], first.params[0]), 0.0);
  }
}

TEST(ShardedOneBitAdam, LocalMomentumCheckpointAtFourRanksResumesAtTwo) {
  // Lossless codec: only the local momenta's average reaches the update, so the 2-rank run from
  // the old ranks' average continues as the 4-rank run does when ranks r and r + 2 see the same
  // gradients. Any other mix of the old local momenta (say new rank j taking old rank j's)
  // changes that average and the parameters.
  const size_t n = 9001;
  auto [opts, first, parts] = trainAndSave(n, localMomentumOptions("none", 5), 12);
  auto at2 = loadAll(parts, 2);
  EXPECT_EQ(at2[0].steps(), 12);
  EXPECT_TRUE(at2[1].options().localMomentum);
  auto paired = [n](int r, int s, const Vec&) { return noiseGradient(r % 2, s, n); };
  auto ref = runSharded(4, first.params, 10, 13, 1e-3f, opts, paired);
  auto got = runSharded(2, {first.params[0], first.params[1]}, 10, 13, 1e-3f, at2, paired);
  EXPECT_TRUE(bitEqual(got.params[0], got.params[1]));
  const double diff = maxAbsDiff(got.params[0], ref.params[0]);
  EXPECT_LT(diff, 1e-6);
  EXPECT_GT(maxAbsDiff(ref.params[0], first.params[0]), 1e-4);
  // onebit + error feedback re-loaded at 2: training goes on, ranks identical and finite.
  auto [ob, f1, obParts] = trainAndSave(n, localMomentumOptions("onebit", 5), 12);
  auto ob2 = loadAll(obParts, 2);
  auto g1 = runSharded(2, {f1.params[0], f1.params[1]}, 10, 13, 1e-3f, ob2, noiseGrads(n));
  EXPECT_TRUE(bitEqual(g1.params[0], g1.params[1]));
  bool finite = true;
  for (float x : g1.params[0]) finite = finite && std::isfinite(x);
  EXPECT_TRUE(finite);
  EXPECT_GT(maxAbsDiff(g1.params[0], f1.params[0]), 1e-4);
}

TEST(ShardedOneBitAdam, LocalMomentumCheckpointCorruptionAndVersions) {
  const size_t n = 1001;
  auto opts = makeSharded(2, n, localMomentumOptions("none", 2));
  auto plainOpts = makeSharded(2, n, baseOptions("none", 2));
  runFromStart(opts, n, 4);
  runFromStart(plainOpts, n, 4);
  // Without local momentum the format stays version 1 (readers of the first release load it).
  for (const auto& p : saveAll(plainOpts)) EXPECT_EQ(checkpointVersion(p), 1u);
  auto parts = saveAll(opts);
  for (const auto& p : parts) EXPECT_EQ(checkpointVersion(p), 2u);
  auto loadWith = [&](const std::vector<uint8_t>& part0) {
    std::vector<std::pair<const void*, size_t>> views{{part0.data(), part0.size()},
                                                      {parts[1].data(), parts[1].size()}};
    return ShardedOneBitAdam::deserialize(views, 2, 0);
  };
  ASSERT_TRUE(loadWith(parts[0]).isOk());
  // The part ends [local momentum: 4 n bytes][residual size 0: 8][checksum: 8]; a byte in the
  // middle of the local momentum, one in the header, and truncations.
  const size_t inLocal = parts[0].size() - 16 - 2 * n;
  for (size_t at : {inLocal, size_t{20}}) {
    auto flipped = parts[0];
    flipped[at] ^= 1;
    auto bad = loadWith(flipped);
    ASSERT_FALSE(bad.isOk()) << "byte " << at;
    EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt) << bad.status().toString();
  }
  for (size_t keep : {parts[0].size() - 1, inLocal, size_t{6}}) {
    std::vector<uint8_t> cut(parts[0].begin(), parts[0].begin() + keep);
    auto bad = loadWith(cut);
    ASSERT_FALSE(bad.isOk()) << keep << " bytes";
    EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt) << bad.status().toString();
  }
}

TEST(ShardedOneBitAdam, LocalMomentumStateBytesIncludeTheWholeTensor) {
  // After the freeze: m, v for the shard, the exponents, the residual (with feedback) and the
  // local momentum over the whole tensor (4 bytes a parameter).
  const size_t n = 1 << 16;
  auto withEf = makeSharded(4, n, localMomentumOptions("onebit", 1));
  auto noEf = makeSharded(4, n, localMomentumOptions("int8", 1));
  runFromStart(withEf, n, 2);
  runFromStart(noEf, n, 2);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(noEf[r].stateBytes(), 2 * 4 * (n / 4) + n + 4 * n) << "rank " << r;
    EXPECT_EQ(withEf[r].stateBytes(), 2 * 4 * (n / 4) + n + 4 * n + 4 * n) << "rank " << r;
  }
}

// deserializeRemapped: every rank of a `world`-rank run from the saved parts and one element map.
std::vector<ShardedOneBitAdam> remapAll(const std::vector<std::vector<uint8_t>>& parts, int world,
                                        const std::vector<int64_t>& source) {
  std::vector<std::pair<const void*, size_t>> views;
  for (const auto& p : parts) views.emplace_back(p.data(), p.size());
  std::vector<ShardedOneBitAdam> out;
  for (int r = 0; r < world; ++r) {
    auto a = ShardedOneBitAdam::deserializeRemapped(views, world, r, source.size(), source.data());
    EXPECT_TRUE(a.isOk()) << a.status().toString();
    out.push_back(std::move(a).value());
  }
  return out;
}

// The whole tensor of a per-shard quantity (momentum or variance), the shards laid end to end.
Vec wholeTensor(const std::vector<ShardedOneBitAdam>& opts,
                const std::function<const Vec&(const ShardedOneBitAdam&)>& shardOf) {
  Vec whole(opts[0].count());
  for (const auto& o : opts)
    std::copy(shardOf(o).begin(), shardOf(o).end(), whole.begin() + o.shardOffset());
  return whole;
}

// The tail of a part with local momentum and error feedback is [local momentum: 4 n][residual
// size: 8][residual: ErrorFeedback::serialize()][checksum: 8]. The residual's size is that of a
// fresh ErrorFeedback of the codec (the reduce-scatter keeps no server residual), checked against
// the size field, so a layout change fails here instead of comparing the wrong bytes.
struct LocalState {
  Vec localM, residual;
};
LocalState localStateOf(const std::vector<uint8_t>& part, const std::string& codec, size_t n) {
  LocalState out;
  auto fresh = ErrorFeedback::create(codec, n);
  EXPECT_TRUE(fresh.isOk()) << fresh.status().toString();
  const size_t nFb = fresh->serialize().size();
  if (part.size() < 16 + nFb + 4 * n) {
    ADD_FAILURE() << "part too short";
    return out;
  }
  const size_t fbAt = part.size() - 8 - nFb;
  uint64_t sizeField = 0;
  std::memcpy(&sizeField, part.data() + fbAt - 8, 8);
  EXPECT_EQ(sizeField, nFb);
  auto fb = ErrorFeedback::deserialize(part.data() + fbAt, nFb);
  EXPECT_TRUE(fb.isOk()) << fb.status().toString();
  if (!fb.isOk()) return out;
  out.residual.assign(fb->worker(), fb->worker() + n);
  out.localM.resize(n);
  std::memcpy(out.localM.data(), part.data() + fbAt - 8 - 4 * n, 4 * n);
  return out;
}

// The old ranks' element-wise average of one of the vectors above.
Vec averageOf(const std::vector<LocalState>& states, Vec LocalState::*field) {
  Vec avg((states[0].*field).size(), 0.0f);
  for (const auto& s : states)
    for (size_t k = 0; k < avg.size(); ++k) avg[k] += (s.*field)[k];
  for (float& x : avg) x /= static_cast<float>(states.size());
  return avg;
}

// The scale exponents of a part without local momentum or residual (version 1): its tail is
// [exponent count: 8][exponents: 1 byte each][residual size 0: 8][checksum: 8]. With the
// lossless codec they cannot show in the parameters (a power of two scales and unscales
// exactly), so the relayout test reads them here.
std::vector<int8_t> exponentsOf(const std::vector<uint8_t>& part, size_t n) {
  if (part.size() < 24 + n) {
    ADD_FAILURE() << "part too short";
    return {};
  }
  const size_t at = part.size() - 16 - n;
  uint64_t countField = 0, fbField = 1;
  std::memcpy(&countField, part.data() + at - 8, 8);
  std::memcpy(&fbField, part.data() + at + n, 8);
  EXPECT_EQ(countField, n);
  EXPECT_EQ(fbField, 0u);
  return std::vector<int8_t>(part.begin() + at, part.begin() + at + n);
}

bool allFinite(const Vec& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

TEST(ShardedOneBitAdam, RemappedWithTheIdentityMapIsDeserializeBitForBit) {
  // Without local momentum and residuals (the two things the remap averages on purpose) the
  // identity map at the same world size must build exactly deserialize's state: same bytes, and
  // the same 5 steps after it. The lossy parameter all-gather adds the master shard to what has
  // to come back element for element.
  const size_t n = 9001;
  std::vector<int64_t> identity(n);
  for (size_t k = 0; k < n; ++k) identity[k] = static_cast<int64_t>(k);
  for (const char* paramCodec : {"none", "int8"}) {
    SCOPED_TRACE(std::string("param codec ") + paramCodec);
    auto o = baseOptions("none", 5);
    o.paramCodec = paramCodec;
    auto opts = makeSharded(4, n, o);
    auto first = runFromStart(opts, n, 12);
    ASSERT_TRUE(opts[0].frozen());
    auto parts = saveAll(opts);
    auto plain = loadAll(parts, 4);
    auto remapped = remapAll(parts, 4, identity);
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(remapped[r].serialize() == plain[r].serialize()) << "rank " << r;
    auto a = expectSameContinuation(plain, remapped, first.params, 5, 13, n);
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(remapped[r].serialize() == plain[r].serialize()) << "rank " << r;
    EXPECT_GT(maxAbsDiff(a.params[0], first.params[0]), 1e-4);
  }
  // onebit + error feedback + local momentum: every new rank's local momentum and worker
  // residual is the old ranks' average (deserialize would give each rank its own back), so the
  // average the next reduce-scatter injects is kept; training then goes on, ranks identical.
  auto o = localMomentumOptions("onebit", 5);
  auto [opts, first, parts] = trainAndSave(n, o, 12);
  auto remapped = remapAll(parts, 4, identity);
  const std::string codec = opts[0].options().codec;
  std::vector<LocalState> old;
  for (const auto& p : parts) old.push_back(localStateOf(p, codec, n));
  ASSERT_EQ(old.size(), 4u);
  ASSERT_EQ(old[0].localM.size(), n);
  // The old ranks really differ (else "the average" and "its own" could not be told apart).
  EXPECT_GT(maxAbsDiff(old[0].localM, old[1].localM), 1e-3);
  EXPECT_GT(maxAbsDiff(old[0].residual, old[1].residual), 1e-3);
  const Vec wantM = averageOf(old, &LocalState::localM);
  const Vec wantE = averageOf(old, &LocalState::residual);
  for (int r = 0; r < 4; ++r) {
    LocalState got = localStateOf(remapped[r].serialize(), codec, n);
    ASSERT_EQ(got.localM.size(), n);
    EXPECT_LT(maxAbsDiff(got.localM, wantM), 1e-6) << "rank " << r;
    EXPECT_LT(maxAbsDiff(got.residual, wantE), 1e-6) << "rank " << r;
    // The moments still come back untouched.
    EXPECT_TRUE(bitEqual(remapped[r].momentum(), opts[r].momentum())) << "rank " << r;
  }
  auto b = runSharded(4, first.params, 5, 13, 1e-3f, remapped, noiseGrads(n));
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(bitEqual(b.params[r], b.params[0])) << "rank " << r;
  EXPECT_TRUE(allFinite(b.params[0]));
  EXPECT_GT(maxAbsDiff(b.params[0], first.params[0]), 1e-4);
}

// A relayout as FSDP2 makes one: the saved n elements reversed, with 3 elements of new padding
// (-1) at the start, the middle and the end, so that both new shards hold some.
std::vector<int64_t> reversedWithPadding(size_t n) {
  const size_t count = n + 3;
  std::vector<int64_t> source(count);
  int64_t next = static_cast<int64_t>(n) - 1;
  for (size_t k = 0; k < count; ++k)
    source[k] = k == 0 || k == count / 2 || k == count - 1 ? -1 : next--;
  EXPECT_EQ(next, -1);
  return source;
}

TEST(ShardedOneBitAdam, RemappedRelayoutMovesStateWithItsElementsAndPaddingNeverMoves) {
  // Saved by 4 ranks after the freeze over n elements, loaded at 2 ranks over the relayout above.
  // With the lossless codec the 2-rank run must continue the 4-rank run element for element
  // (ranks r and r + 2 see the same gradients there, so the average is the same): that needs the
  // moments and the exponents (and the master shard with a lossy all-gather) taken from the
  // source positions. The padding has v = 0 and the no-gradient exponent, so, given a gradient
  // anyway, it only decays.
  const size_t n = 1001;
  const std::vector<int64_t> source = reversedWithPadding(n);
  const size_t count = source.size();
  const float lr = 1e-3f;
  struct Config {
    std::string codec, paramCodec;
    bool localMomentum;
    double tolerance;  // against the 4-rank run at the source positions; -1: not comparable
  };
  // int8 parameter all-gather: both runs step the same fp32 master, their replicas differ only
  // by the quantization of different blocks (under 1% of the parameters' 0.5 scale); a master
  // taken from the wrong element is off by the parameters' own size.
  const Config configs[] = {
      {"none", "none", false, 1e-6}, {"none", "int8", false, 2e-2}, {"onebit", "none", true, -1.0}};
  for (const Config& c : configs) {
    SCOPED_TRACE("codec " + c.codec + ", param codec " + c.paramCodec +
                 (c.localMomentum ? ", local momentum" : ""));
    auto o = baseOptions(c.codec, 5);
    o.paramCodec = c.paramCodec;
    o.localMomentum = c.localMomentum;
    auto opts = makeSharded(4, n, o);
    auto first =
        runSharded(4, std::vector<Vec>(4, initialParams(n)), 12, 1, lr, opts, noiseGrads(n));
    ASSERT_TRUE(opts[0].frozen());
    const Vec oldM =
        wholeTensor(opts, [](const ShardedOneBitAdam& a) -> const Vec& { return a.momentum(); });
    const Vec oldV =
        wholeTensor(opts, [](const ShardedOneBitAdam& a) -> const Vec& { return a.variance(); });
    const auto parts = saveAll(opts);
    auto at2 = remapAll(parts, 2, source);
    ASSERT_EQ(at2.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(at2[r].count(), count);
      EXPECT_EQ(at2[r].steps(), 12);
      EXPECT_EQ(at2[r].frozenAt(), 5);
      const Range want = chunkRange(count, 2, r);
      ASSERT_EQ(at2[r].shardOffset(), want.begin);
      ASSERT_EQ(at2[r].shardLength(), want.length);
      for (size_t i = 0; i < want.length; ++i) {
        const int64_t from = source[want.begin + i];
        EXPECT_EQ(at2[r].momentum()[i], from < 0 ? 0.0f : oldM[from]) << "element " << i;
        EXPECT_EQ(at2[r].variance()[i], from < 0 ? 0.0f : oldV[from]) << "element " << i;
      }
    }
    const std::string codec = opts[0].options().codec;
    if (!c.localMomentum) {
      // The scales moved with their elements; the padding has the no-gradient sentinel.
      const std::vector<int8_t> oldExps = exponentsOf(parts[0], n);
      ASSERT_EQ(oldExps.size(), n);
      std::vector<int8_t> want(count);
      for (size_t k = 0; k < count; ++k)
        want[k] =
            source[k] < 0 ? static_cast<int8_t>(optim::kAdamNoGradientExp) : oldExps[source[k]];
      for (int r = 0; r < 2; ++r) EXPECT_TRUE(exponentsOf(at2[r].serialize(), count) == want);
    }
    if (c.localMomentum) {
      // Local momenta at load: the old ranks' average at the source positions, 0 on the padding.
      std::vector<LocalState> old;
      for (const auto& p : parts) old.push_back(localStateOf(p, codec, n));
      const Vec avg = averageOf(old, &LocalState::localM);
      ASSERT_EQ(avg.size(), n);
      for (int r = 0; r < 2; ++r) {
        const LocalState now = localStateOf(at2[r].serialize(), codec, count);
        ASSERT_EQ(now.localM.size(), count);
        double worst = 0.0;
        for (size_t k = 0; k < count; ++k) {
          const float want = source[k] < 0 ? 0.0f : avg[source[k]];
          worst = std::max(worst, std::fabs(double(now.localM[k]) - want));
        }
        EXPECT_LT(worst, 1e-6) << "rank " << r;
      }
    }
    // The caller's parameters in the new layout; padding starts at 0 (stays exactly 0) or not.
    Vec start(count);
    for (size_t k = 0; k < count; ++k)
      start[k] = source[k] >= 0 ? first.params[0][source[k]] : (k == 0 ? 0.0f : 0.25f);
    auto paired = [n](int r, int s, const Vec&) { return noiseGradient(r % 2, s, n); };
    auto relaid = [&](int r, int s, const Vec&) {
      const Vec g = noiseGradient(r, s, n);
      Vec out(count, 3.0f);  // a gradient on the padding too: the exponent must still drop it
      for (size_t k = 0; k < count; ++k)
        if (source[k] >= 0) out[k] = g[source[k]];
      return out;
    };
    const int steps = 10;
    auto got = runSharded(2, {start, start}, steps, 13, lr, at2, relaid);
    EXPECT_TRUE(bitEqual(got.params[0], got.params[1]));
    EXPECT_TRUE(allFinite(got.params[0]));
    Vec moved(n), startOld(n);
    for (size_t k = 0; k < count; ++k)
      if (source[k] >= 0) {
        moved[source[k]] = got.params[0][k];
        startOld[source[k]] = start[k];
      }
    EXPECT_GT(maxAbsDiff(moved, startOld), 1e-4);  // the rest trains
    if (c.localMomentum) {
      // After training the padding's local momentum is still 0 on both ranks: its exponent
      // scales its gradient to nothing, so it never sends anything.
      for (int r = 0; r < 2; ++r) {
        const LocalState now = localStateOf(at2[r].serialize(), codec, count);
        ASSERT_EQ(now.localM.size(), count);
        for (size_t k = 0; k < count; ++k) {
          if (source[k] >= 0) continue;
          EXPECT_EQ(now.localM[k], 0.0f) << "rank " << r << ", pad " << k;
        }
      }
    }
    if (c.tolerance > 0) {
      auto ref = runSharded(4, first.params, steps, 13, lr, opts, paired);
      EXPECT_LT(maxAbsDiff(moved, ref.params[0]), c.tolerance);
    }
    if (c.paramCodec != "none") continue;  // the padding's replica is then a decoded value
    const float decay = 1.0f - lr * o.weightDecay;
    for (size_t k = 0; k < count; ++k) {
      if (source[k] >= 0) continue;
      float want = start[k];
      for (int s = 0; s < steps; ++s) want *= decay;
      if (start[k] == 0.0f) {
        EXPECT_EQ(got.params[0][k], 0.0f) << "pad " << k;
      } else {
        EXPECT_FLOAT_EQ(got.params[0][k], want) << "pad " << k;
      }
    }
  }
}

TEST(ShardedOneBitAdam, RemappedBadMapsAreRefused) {
  // Every rank checks the whole map (an entry outside its own shard too), so no rank of the new
  // world builds a state its peers refused.
  const size_t n = 100;
  auto opts = makeSharded(4, n, localMomentumOptions("onebit", 2));
  runFromStart(opts, n, 4);
  auto parts = saveAll(opts);
  std::vector<std::pair<const void*, size_t>> views;
  for (const auto& p : parts) views.emplace_back(p.data(), p.size());
  std::vector<int64_t> good(n + 2, -1);
  for (size_t k = 0; k < n; ++k) good[k] = static_cast<int64_t>(n - 1 - k);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(
        ShardedOneBitAdam::deserializeRemapped(views, 2, r, good.size(), good.data()).isOk());
  for (int64_t bad : {int64_t{-2}, static_cast<int64_t>(n), int64_t{1} << 40}) {
    for (size_t at : {size_t{0}, good.size() - 1}) {  // in rank 0's shard and in rank 1's
      auto map = good;
      map[at] = bad;
      for (int r = 0; r < 2; ++r) {
        auto got = ShardedOneBitAdam::deserializeRemapped(views, 2, r, map.size(), map.data());
        ASSERT_FALSE(got.isOk()) << bad << " at " << at << ", rank " << r;
        EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << got.status().toString();
      }
    }
  }
  auto null = ShardedOneBitAdam::deserializeRemapped(views, 2, 0, 5, nullptr);
  ASSERT_FALSE(null.isOk());
  EXPECT_EQ(null.status().code(), StatusCode::kInvalidArgument);
  // Parts as deserialize wants them: every rank's, each once; a rank the world cannot have.
  auto missing = views;
  missing.pop_back();
  auto lost = ShardedOneBitAdam::deserializeRemapped(missing, 2, 0, good.size(), good.data());
  ASSERT_FALSE(lost.isOk());
  EXPECT_EQ(lost.status().code(), StatusCode::kInvalidArgument);
  auto twice = views;
  twice[1] = twice[0];
  EXPECT_FALSE(
      ShardedOneBitAdam::deserializeRemapped(twice, 2, 0, good.size(), good.data()).isOk());
  EXPECT_FALSE(ShardedOneBitAdam::deserializeRemapped({}, 2, 0, good.size(), good.data()).isOk());
  EXPECT_FALSE(
      ShardedOneBitAdam::deserializeRemapped(views, 2, 2, good.size(), good.data()).isOk());
}

// Issue 44, finding 4: options that decide the sequence of collectives (warm-up length, local
// momentum) or the arithmetic differ between ranks. Before the agreement, a 2-step warm-up on
// one rank of three against 3 on the others paired its exponent all-gather with their parameter
// all-gather at step 2 (same kind and count): two ranks returned OK with another rank's
// exponents as parameters, and the error came a step later. Now the first step refuses it on
// every rank, naming the option and both values, and changes nothing.
struct RankDifference {
  const char* what;
  std::function<void(ShardedOneBitAdamOptions&)> change;  // applied to the last rank's options
  std::string says;                                       // in every rank's error
};

// Runs up to `steps` steps on `world` thread-ranks whose states `opts` hold (one replica each,
// from initialParams) and returns each rank's statuses, stopping at its first failure.
std::vector<std::vector<Status>> stepUntilFailure(int world, int steps,
                                                  std::vector<ShardedOneBitAdam>& opts,
                                                  std::vector<Vec>& params) {
  std::vector<std::vector<Status>> st(world);
  params.clear();
  for (int r = 0; r < world; ++r) params.push_back(initialParams(opts[r].count()));
  auto comms = createInProcWorld(world, std::chrono::milliseconds(20000));
  EXPECT_TRUE(comms.isOk());
  if (!comms.isOk()) return st;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      for (int s = 1; s <= steps; ++s) {
        Vec g = noiseGradient(r, s, opts[r].count());
        st[r].push_back(opts[r].step(*comms.value()[r], params[r].data(), g.data(), 1e-2f));
        if (!st[r].back().isOk()) return;
      }
    });
  for (auto& t : threads) t.join();
  return st;
}

TEST(ShardedOneBitAdam, OptionsThatDifferBetweenRanksAreRefusedAtTheFirstStepOnEveryRank) {
  const size_t n = 301;
  const int world = 3;
  const std::vector<RankDifference> cases = {
      {"warm-up", [](auto& o) { o.warmupSteps = 3; },
       "warmup_steps differs between ranks: rank 0 has 2, rank 2 has 3"},
      {"local momentum", [](auto& o) { o.localMomentum = true; },
       "local_momentum differs between ranks: rank 0 has false, rank 2 has true"},
      {"error feedback", [](auto& o) { o.errorFeedback = true; },
       "error_feedback differs between ranks: rank 0 has false, rank 2 has true"},
      {"codec", [](auto& o) { o.codec = "onebit"; },
       ": codec differs between ranks: rank 0 has 'int8:block=256,round=nearest,seed=0', rank 2 "
       "has 'onebit:block=2048'"},
      {"parameter codec", [](auto& o) { o.paramCodec = "bf16"; },
       "param_codec differs between ranks: rank 0 has 'none', rank 2 has 'bf16'"},
      {"beta1", [](auto& o) { o.beta1 = 0.8f; },
       "beta1 differs between ranks: rank 0 has 0.899999976, rank 2 has 0.800000012"},
      {"beta2", [](auto& o) { o.beta2 = 0.99f; }, "beta2 differs between ranks"},
      {"eps", [](auto& o) { o.eps = 1e-6f; }, "eps differs between ranks"},
      {"weight decay", [](auto& o) { o.weightDecay = 0.0f; },
       "weight_decay differs between ranks: rank 0 has 0.100000001, rank 2 has 0"},
  };
  auto base = baseOptions("int8", 2);
  auto checkRefused = [&](std::vector<ShardedOneBitAdam>& opts, const std::string& says) {
    std::vector<int64_t> stepsBefore;
    for (const auto& a : opts) stepsBefore.push_back(a.steps());
    std::vector<Vec> params;
    auto st = stepUntilFailure(world, 4, opts, params);
    for (int r = 0; r < world; ++r) {
      // What each rank's steps returned, for the failure message (the corruption before the
      // fix: OK, OK with another rank's exponents as parameters, then the error).
      std::string seen;
      for (const Status& s : st[r]) seen += (s.isOk() ? "OK" : s.toString()) + "; ";
      seen += "p[0] = " + std::to_string(params[r].empty() ? 0.0f : params[r][0]);
      EXPECT_EQ(st[r].size(), 1u) << "rank " << r << ": " << seen;
      if (st[r].empty()) continue;
      EXPECT_EQ(st[r][0].code(), StatusCode::kInvalidArgument) << "rank " << r << ": " << seen;
      EXPECT_NE(st[r][0].message().find(says), std::string::npos) << "rank " << r << ": " << seen;
      EXPECT_EQ(opts[r].steps(), stepsBefore[r]) << "rank " << r;
      EXPECT_TRUE(bitEqual(params[r], initialParams(opts[r].count()))) << "rank " << r;
    }
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::vector<ShardedOneBitAdam> opts;
    for (int r = 0; r < world; ++r) {
      auto o = base;
      if (r == world - 1) c.change(o);
      auto made = ShardedOneBitAdam::create(n, world, r, o);
      ASSERT_TRUE(made.isOk()) << made.status().toString();
      opts.push_back(std::move(made).value());
    }
    checkRefused(opts, c.says);
  }
  {
    // The element count is agreed too (the collectives would refuse it as well, without naming
    // it).
    SCOPED_TRACE("count");
    std::vector<ShardedOneBitAdam> opts;
    for (int r = 0; r < world; ++r)
      opts.push_back(ShardedOneBitAdam::create(r == 1 ? n + 1 : n, world, r, base).value());
    checkRefused(opts, "count differs between ranks: rank 0 has 301, rank 1 has 302");
  }
  {
    // One rank resumed a checkpoint of another step (saved by a world of one after 1 step).
    SCOPED_TRACE("step");
    auto solo = makeSharded(1, n, base);
    runSharded(1, {initialParams(n)}, 1, 1, 1e-2f, solo, noiseGrads(n));
    auto part = solo[0].serialize();
    std::vector<ShardedOneBitAdam> opts = makeSharded(world, n, base);
    opts[1] = ShardedOneBitAdam::deserialize({{part.data(), part.size()}}, world, 1).value();
    checkRefused(opts, "steps differs between ranks: rank 0 has 0, rank 1 has 1");
  }
  {
    // The same codec spelled two ways is one codec: no error, and the run trains alike.
    SCOPED_TRACE("codec spelled two ways");
    std::vector<ShardedOneBitAdam> opts;
    for (int r = 0; r < world; ++r) {
      auto o = base;
      o.codec = r == 0 ? "onebit" : "onebit:block=2048";
      opts.push_back(ShardedOneBitAdam::create(n, world, r, o).value());
    }
    std::vector<Vec> params;
    auto st = stepUntilFailure(world, 4, opts, params);
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(st[r].size(), 4u);
      EXPECT_TRUE(st[r][3].isOk()) << st[r][3].toString();
      EXPECT_TRUE(bitEqual(params[r], params[0])) << "rank " << r;
    }
  }
}

TEST(ShardedOneBitAdam, OptionsThatDifferBetweenRanksAreRefusedByReduceOnEveryRank) {
  // The split step (FSDP2's path) agrees in its first reduce(): the warm-up length differs.
  const size_t n = 301;
  std::vector<ShardedOneBitAdam> opts;
  for (int r = 0; r < 2; ++r) {
    auto o = baseOptions("int8", r == 0 ? 1 : 2);
    opts.push_back(ShardedOneBitAdam::create(n, 2, r, o).value());
  }
  const std::vector<Status> st = firstReduceOnTwoRanks(opts, n);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), StatusCode::kInvalidArgument) << st[r].toString();
    EXPECT_NE(
        st[r].message().find("warmup_steps differs between ranks: rank 0 has 1, rank 1 has 2"),
        std::string::npos)
        << st[r].toString();
  }
}

TEST(ShardedOneBitAdam, CheckpointPartsOfTwoRunsAreRefusedNamingWhatDiffers) {
  // Rank 0's part after 2 steps with rank 1's after 3: the reader names the step, with the same
  // table the ranks compare at their first step.
  const size_t n = 101;
  auto a = makeSharded(2, n, baseOptions("int8", 2)), b = makeSharded(2, n, baseOptions("int8", 2));
  runSharded(2, std::vector<Vec>(2, initialParams(n)), 2, 1, 1e-2f, a, noiseGrads(n));
  runSharded(2, std::vector<Vec>(2, initialParams(n)), 3, 1, 1e-2f, b, noiseGrads(n));
  auto pa = a[0].serialize(), pb = b[1].serialize();
  auto mixed =
      ShardedOneBitAdam::deserialize({{pa.data(), pa.size()}, {pb.data(), pb.size()}}, 2, 0);
  ASSERT_FALSE(mixed.isOk());
  EXPECT_EQ(mixed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.status().message().find(
                "the parts disagree (not one run's checkpoint): steps differs between the parts: "
                "rank 0 has 2, rank 1 has 3"),
            std::string::npos)
      << mixed.status().toString();
}

// Issue 44, finding 5: every count the API accepts saves and resumes bit for bit, including
// fewer elements than ranks (ranks with an empty shard) and none at all, in warm-up and after the
// freeze, for both parameter codecs and both codec forms (int8 alone; onebit with error feedback
// and local momentum, which save residuals and local momenta over the whole tensor).
enum class TinyCount { kZero, kOne, kThree, kRanksMinusOne, kRanksPlusOne };
struct TinyCase {
  TinyCount count;
  int world;
  bool frozen;  // saved after the freeze (else in warm-up)
  const char* paramCodec;
  bool onebitLocal;  // onebit + error feedback + local momentum (else int8 alone)
};

size_t tinyCount(TinyCount c, int world) {
  switch (c) {
    case TinyCount::kZero: return 0;
    case TinyCount::kOne: return 1;
    case TinyCount::kThree: return 3;
    case TinyCount::kRanksMinusOne: return static_cast<size_t>(world - 1);
    case TinyCount::kRanksPlusOne: return static_cast<size_t>(world + 1);
  }
  return 0;
}

std::string tinyText(const TinyCase& c);
// For gtest's messages (it would print the struct's bytes, padding included).
void PrintTo(const TinyCase& c, std::ostream* os) { *os << tinyText(c); }

class TinyCheckpoint : public ::testing::TestWithParam<TinyCase> {};

TEST_P(TinyCheckpoint, ResumesBitForBitAgainstTheUninterruptedRun) {
  const TinyCase c = GetParam();
  const int world = c.world, total = 8, warmup = 3;
  const int cut = c.frozen ? 5 : 2;  // after two compressed steps, or one step before the freeze
  const size_t n = tinyCount(c.count, world);
  auto o = c.onebitLocal ? localMomentumOptions("onebit", warmup) : baseOptions("int8", warmup);
  o.paramCodec = c.paramCodec;
  auto start = std::vector<Vec>(world, initialParams(n));

  auto whole = makeSharded(world, n, o);
  auto want = runSharded(world, start, total, 1, 1e-2f, whole, noiseGrads(n));

  auto before = makeSharded(world, n, o);
  auto first = runSharded(world, start, cut, 1, 1e-2f, before, noiseGrads(n));
  ASSERT_EQ(before[0].frozen(), c.frozen);
  auto parts = saveAll(before);
  auto resumed = loadAll(parts, world);
  ASSERT_EQ(resumed.size(), static_cast<size_t>(world));
  auto got = runSharded(world, first.params, total - cut, cut + 1, 1e-2f, resumed, noiseGrads(n));
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(bitEqual(got.params[r], want.params[r])) << "rank " << r;
    EXPECT_TRUE(resumed[r].serialize() == whole[r].serialize()) << "rank " << r;
  }
  // Without local momentum and residuals (which it averages on purpose) the identity map of
  // deserializeRemapped is deserialize.
  if (!c.onebitLocal) {
    std::vector<int64_t> identity(n);
    for (size_t k = 0; k < n; ++k) identity[k] = static_cast<int64_t>(k);
    auto remapped = remapAll(parts, world, identity);
    ASSERT_EQ(remapped.size(), static_cast<size_t>(world));
    auto again =
        runSharded(world, first.params, total - cut, cut + 1, 1e-2f, remapped, noiseGrads(n));
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(bitEqual(again.params[r], want.params[r])) << "rank " << r;
      EXPECT_TRUE(remapped[r].serialize() == whole[r].serialize()) << "rank " << r;
    }
  }
}

std::vector<TinyCase> tinyCases() {
  std::vector<TinyCase> out;
  for (TinyCount count : {TinyCount::kZero, TinyCount::kOne, TinyCount::kThree,
                          TinyCount::kRanksMinusOne, TinyCount::kRanksPlusOne})
    for (int world : {2, 4})
      for (bool frozen : {false, true})
        for (const char* paramCodec : {"none", "int8"})
          for (bool onebitLocal : {false, true})
            out.push_back({count, world, frozen, paramCodec, onebitLocal});
  return out;
}

std::string tinyName(const ::testing::TestParamInfo<TinyCase>& info) {
  return tinyText(info.param);
}

std::string tinyText(const TinyCase& c) {
  static const char* const kCounts[] = {"Zero", "One", "Three", "RanksMinusOne", "RanksPlusOne"};
  return std::string(kCounts[static_cast<int>(c.count)]) + "At" + std::to_string(c.world) +
         (c.frozen ? "Frozen" : "Warmup") + "Param" + (c.paramCodec[0] == 'n' ? "None" : "Int8") +
         (c.onebitLocal ? "OnebitLocal" : "Int8");
}

INSTANTIATE_TEST_SUITE_P(ShardedOneBitAdam, TinyCheckpoint, ::testing::ValuesIn(tinyCases()),
                         tinyName);

// reduce() and update() move the full gradient and the shard: a null buffer is refused only
// where its part has elements (docs/api.md), so ranks with an empty shard pass null for the
// shard's buffers (and every rank null for everything at 0 elements), across the freeze, and
// the split step is step() bit for bit.
TEST(ShardedOneBitAdam, ReduceAndUpdateTakeNullBuffersWhereThereIsNothingToMove) {
  for (size_t n : {size_t{0}, size_t{3}}) {
    SCOPED_TRACE("count " + std::to_string(n));
    const int world = 4, steps = 6;
    auto o = localMomentumOptions("onebit", 3);
    auto byStep = makeSharded(world, n, o), bySplit = makeSharded(world, n, o);
    std::vector<Status> st1;
    auto want = runRecorded(world, n, steps, 1e-2f, false, byStep, st1);
    std::vector<Vec> params(world, initialParams(n));
    std::vector<Status> st(world);
    onThreadRanks(world, [&](int r, Communicator& c) {
      ShardedOneBitAdam& a = bySplit[r];
      const size_t off = a.shardOffset(), len = a.shardLength();
      Vec reduced(len), shard(len);
      float* red = len ? reduced.data() : nullptr;
      float* sh = len ? shard.data() : nullptr;
      for (int s = 1; s <= steps && st[r].isOk(); ++s) {
        Vec g = noiseGradient(r, s, n);
        st[r] = a.reduce(c, n ? g.data() : nullptr, red);
        shard.assign(params[r].begin() + off, params[r].begin() + off + len);
        if (st[r].isOk()) st[r] = a.update(c, sh, red, 1e-2f);
        if (st[r].isOk())
          st[r] = c.allgather(sh, n ? params[r].data() : nullptr, n, DataType::kFloat32);
      }
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(st1[r].isOk()) << st1[r].toString();
      ASSERT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].toString();
      EXPECT_TRUE(bitEqual(params[r], want[steps - 1][r])) << "rank " << r;
      EXPECT_TRUE(bySplit[r].serialize() == byStep[r].serialize()) << "rank " << r;
      EXPECT_EQ(bySplit[r].frozenAt(), 3);
    }
  }
}

TEST(ShardedOneBitAdam, NullBuffersWithElementsToMoveAreRefusedOnEveryRank) {
  // 3 elements at 4 ranks: rank 3's shard is empty, its gradient is not. Rank 3 passes a null
  // gradient to reduce() (3 elements to move): refused there, and the peers' same call fails at
  // once naming it. Then rank 0 passes a null shard to update() at the freeze (1 element).
  const size_t n = 3;
  const int world = 4;
  auto opts = makeSharded(world, n, baseOptions("int8", 1));
  std::vector<Status> nullGrad(world), nullShard(world);
  onThreadRanks(world, [&](int r, Communicator& c) {
    ShardedOneBitAdam& a = opts[r];
    Vec g = noiseGradient(r, 1, n), red(a.shardLength()), shard(a.shardLength(), 0.5f);
    float* redp = a.shardLength() ? red.data() : nullptr;
    nullGrad[r] = a.reduce(c, r == 3 ? nullptr : g.data(), redp);
    if (nullGrad[r].isOk()) return;
    Status s = a.reduce(c, g.data(), redp);
    if (!s.isOk()) {
      nullShard[r] = s;
      return;
    }
    nullShard[r] = a.update(c, r == 0 ? nullptr : (redp ? shard.data() : nullptr), redp, 1e-2f);
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_FALSE(nullGrad[r].isOk()) << "rank " << r;
    if (r == 3) {
      EXPECT_EQ(nullGrad[r].code(), StatusCode::kInvalidArgument) << nullGrad[r].toString();
      EXPECT_NE(nullGrad[r].message().find("grads is null for 3 elements"), std::string::npos)
          << nullGrad[r].toString();
    } else {
      EXPECT_NE(nullGrad[r].message().find("rank 3 rejected its arguments"), std::string::npos)
          << nullGrad[r].toString();
    }
    EXPECT_FALSE(nullShard[r].isOk()) << "rank " << r;
    EXPECT_EQ(opts[r].steps(), 0);
  }
  EXPECT_EQ(nullShard[0].code(), StatusCode::kInvalidArgument) << nullShard[0].toString();
  EXPECT_NE(nullShard[0].message().find("paramShard is null for 1 elements"), std::string::npos)
      << nullShard[0].toString();
  for (int r = 1; r < world; ++r)
    EXPECT_NE(nullShard[r].message().find("rank 0 rejected its arguments"), std::string::npos)
        << nullShard[r].toString();
}

}  // namespace
}  // namespace terse
