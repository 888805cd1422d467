// auto's measurement routine (terse/collectives/measure.h), which both of auto's choices use:
// its size classes and slowest-rank rule on their own, then ranks over the in-process transport
// with a clock of the test's own, so that every figure is known in advance and nothing depends
// on this machine's speed.
#include "world.h"

#include "terse/collectives/auto_select.h"
#include "terse/collectives/measure.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace terse {
namespace {

TEST(Measure, SizeClassesArePowersOfTwo) {
  EXPECT_EQ(sizeClassOfBytes(0), 0u);
  EXPECT_EQ(sizeClassOfBytes(1), 0u);
  EXPECT_EQ(sizeClassOfBytes(2), 1u);
  EXPECT_EQ(sizeClassOfBytes(3), 2u);
  EXPECT_EQ(sizeClassOfBytes(4), 2u);
  EXPECT_EQ(sizeClassOfBytes(size_t{1} << 26), 26u);
  EXPECT_EQ(sizeClassOfBytes((size_t{1} << 26) + 1), 27u);
  EXPECT_EQ(sizeClassOfBytes(~size_t{0}), 63u);
}

TEST(Measure, SlowestRankOfEachCandidate) {
  // Three ranks, two candidates each.
  std::vector<float> all = {1.0f, 5.0f, 3.0f, 2.0f, 2.0f, 4.0f};
  auto worst = slowestOfRanks(all, 2);
  ASSERT_EQ(worst.size(), 2u);
  EXPECT_EQ(worst[0], 3.0);
  EXPECT_EQ(worst[1], 5.0);
  all[3] = std::nanf("");
  worst = slowestOfRanks(all, 2);
  EXPECT_EQ(worst[0], 3.0);
  EXPECT_TRUE(std::isnan(worst[1]));
  EXPECT_TRUE(slowestOfRanks(all, 0).empty());
}

// A clock under which, on rank r, candidate c's trial takes (c + 1) * (r + 1) seconds in the
// last timed round and 10 s more in the others: the routine reads it before and after each
// timed trial, never in the warm-up round. One sequence per rank (each rank is a thread).
std::function<double()> rankClock(int r, size_t candidates, int rounds) {
  return [=] {
    thread_local int reads = 0;
    thread_local double now = 0;
    const int i = reads++;
    if (i % 2 == 1) {
      const int trial = i / 2;
      const size_t c = static_cast<size_t>(trial) % candidates;
      const int round = trial / static_cast<int>(candidates) + 1;
      now += static_cast<double>((c + 1) * (r + 1)) + (round < rounds ? 10.0 : 0.0);
    }
    return now;
  };
}

Measurement threeCodecs(const std::vector<std::shared_ptr<const Codec>>& codecs, void* callers) {
  Measurement m;
  m.what = "test measurement";
  for (const auto& codec : codecs) {
    CollectiveOp op;
    op.kind = CollectiveKind::kAllReduce;
    op.count = 5000;
    op.codec = codec.get();
    // The caller's buffers are not the trials': the routine must not touch them.
    op.send = callers;
    op.recv = callers;
    m.candidates.push_back(op);
    m.names.push_back(codec->spec());
  }
  return m;
}

TEST(Measure, BestRoundOfTheSlowestRankOnTheEnginesClockAlikeOnEveryRank) {
  const int n = 3, rounds = 3;
  std::vector<std::shared_ptr<const Codec>> codecs = {
      makeCodec("none").value(), makeCodec("fp16").value(), makeCodec("int8").value()};
  std::vector<std::vector<double>> got(n);
  std::vector<CollectiveStats> stats(n);
  std::vector<int> agreements(n, 0);
  std::vector<std::vector<float>> callers(n, std::vector<float>(5000, 7.0f));
  auto st = testing::runWorld(n, [&](int r, CollectiveEngine& e) -> Status {
    e.setClock(rankClock(r, codecs.size(), rounds));
    TERSE_RETURN_IF_ERROR(e.barrier());  // the caller's own barrier, which stays counted
    Measurement m = threeCodecs(codecs, callers[r].data());
    m.rounds = rounds;
    m.agree = [&] {
      ++agreements[r];
      return Status::ok();
    };
    TERSE_ASSIGN_OR_RETURN(got[r], measureCandidates(e, m));
    stats[r] = e.stats();
    return Status::ok();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].toString();
    // Best round (the last), slowest rank (rank 2): (c + 1) * 3.
    EXPECT_EQ(got[r], (std::vector<double>{3.0, 6.0, 9.0})) << "rank " << r;
    EXPECT_EQ(agreements[r], 1);
    // (1 warm-up + 3 timed rounds) x 3 candidates + 1 gather of the times, all auto's own.
    EXPECT_EQ(stats[r].autoPolicy.calls, 13u) << "rank " << r;
    EXPECT_EQ(stats[r].allreduce.calls, 0u);
    EXPECT_EQ(stats[r].barriers, 1u) << "the trials' barriers are not the caller's";
    for (float v : callers[r]) ASSERT_EQ(v, 7.0f) << "rank " << r << ": trials ran on scratch";
  }
}

TEST(Measure, AFailedAgreementRunsNoTrialAndMismatchedCandidatesAreRefused) {
  const int n = 2;
  std::vector<std::shared_ptr<const Codec>> codecs = {makeCodec("none").value(),
                                                      makeCodec("fp16").value()};
  std::vector<Status> failed(n), mixed(n);
  std::vector<CollectiveStats> stats(n);
  auto st = testing::runWorld(n, [&](int r, CollectiveEngine& e) -> Status {
    Measurement m = threeCodecs(codecs, nullptr);
    m.agree = [] { return errorInvalidUsage("the ranks disagree"); };
    failed[r] = measureCandidates(e, m).status();
    m.agree = nullptr;
    m.candidates[1].kind = CollectiveKind::kReduceScatter;
    mixed[r] = measureCandidates(e, m).status();
    Measurement none;
    auto empty = measureCandidates(e, none);
    EXPECT_TRUE(empty.isOk() && empty.value().empty());
    stats[r] = e.stats();
    return Status::ok();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[r].isOk()) << st[r].toString();
    EXPECT_EQ(failed[r].code(), StatusCode::kInvalidUsage);
    EXPECT_NE(failed[r].message().find("the ranks disagree"), std::string::npos);
    EXPECT_EQ(mixed[r].code(), StatusCode::kInvalidUsage);
    EXPECT_NE(mixed[r].message().find("test measurement"), std::string::npos) << mixed[r].message();
    EXPECT_EQ(stats[r].autoPolicy.calls + stats[r].autoPolicy.failures, 0u) << "no trial ran";
  }
}

TEST(Measure, EachTrialHasItsOwnErrorFeedbackWhenAsked) {
  const int n = 2;
  std::vector<std::shared_ptr<const Codec>> codecs = {makeCodec("int8").value(),
                                                      makeCodec("onebit").value()};
  auto st = testing::runWorld(n, [&](int, CollectiveEngine& e) -> Status {
    Measurement m = threeCodecs(codecs, nullptr);
    m.feedback = true;
    m.candidates[0].kind = m.candidates[1].kind = CollectiveKind::kAllGather;
    TERSE_ASSIGN_OR_RETURN(std::vector<double> t, measureCandidates(e, m));
    EXPECT_EQ(t.size(), 2u);
    return Status::ok();
  });
  for (const Status& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
}

// The codec choice reads the same clock as the algorithm choice: the engine's. Under a clock in
// which every candidate's calibration collective takes 1 ms at 2^16 elements and 3 ms at 2^20,
// auto's model is exactly that line for every candidate, whatever this machine's speed (before,
// codec choice always read steady_clock, so the simulator's clock could not reach it).
TEST(Measure, TheCodecChoiceIsTimedWithTheEnginesClock) {
  const int n = 2;
  std::vector<std::vector<std::pair<std::string, double>>> predicted(n);
  auto st = testing::runWorld(n, [&](int, CollectiveEngine& e) -> Status {
    e.setClock([] {
      thread_local int reads = 0;
      thread_local double now = 0;
      const int i = reads++;
      // Candidates alternate 2^16 and 2^20 elements (codec by codec); two reads per trial.
      if (i % 2 == 1) now += (i / 2) % 2 == 0 ? 1e-3 : 3e-3;
      return now;
    });
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<AutoSelector> sel, AutoSelector::create("auto"));
    std::vector<float> in(1000, 1.0f), out(1000);
    CollectiveOp op;
    op.send = in.data();
    op.recv = out.data();
    op.count = in.size();
    TERSE_ASSIGN_OR_RETURN(op.codec, sel->choose(e, op));
    CollectiveOp probe;
    probe.count = size_t{1} << 18;
    predicted[e.transport().rank()] = sel->predict(probe, n);
    return Status::ok();
  });
  for (const Status& s : st) ASSERT_TRUE(s.isOk()) << s.toString();
  // The line through (2^16, 1 ms) and (2^20, 3 ms), at 2^18.
  const double slope = 2e-3 / ((1 << 20) - (1 << 16));
  const double want = 1e-3 + slope * ((1 << 18) - (1 << 16));
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(predicted[r].size(), 4u);
    for (const auto& [codec, seconds] : predicted[r])
      EXPECT_NEAR(seconds, want, 1e-6) << "rank " << r << " " << codec;
  }
}

}  // namespace
}  // namespace terse
