// auto's choice between flat and two-level (collectives/src/algorithm_choice.*, and
// CollectiveEngine::chooseAlgorithm): the pure parts on their own, then ranks over the
// in-process transport that must all adopt one choice, report it with its reason, keep it for
// the size class, and return identical results. No assertion depends on which is faster.
#include "algorithm_choice.h"
#include "world.h"

#include "terse/compressors/codec.h"

#include <gtest/gtest.h>

#include <array>

#include <cmath>
#include <cstring>
#include <map>

namespace terse {
namespace {

using detail::AlgorithmChoice;
using detail::chooseByTime;

TEST(AlgorithmChoice, KeyNamesCollectiveCodecTypeAndClass) {
  EXPECT_EQ(detail::algorithmChoiceKey(CollectiveKind::kAllReduce, "int8", DataType::kFloat32, 26),
            "allreduce int8 float32 2^26 B");
  EXPECT_NE(
      detail::algorithmChoiceKey(CollectiveKind::kReduceScatter, "int8", DataType::kFloat32, 26),
      detail::algorithmChoiceKey(CollectiveKind::kAllReduce, "int8", DataType::kFloat32, 26));
}

TEST(AlgorithmChoice, FasterWinsTiesGoFlatUnusableFiguresLose) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(chooseByTime(2e-3, 1e-3, 100).algorithm, Algorithm::kTwoLevel);
  EXPECT_EQ(chooseByTime(1e-3, 2e-3, 100).algorithm, Algorithm::kFlat);
  EXPECT_EQ(chooseByTime(1e-3, 1e-3, 100).algorithm, Algorithm::kFlat);
  EXPECT_EQ(chooseByTime(std::nan(""), 1e-3, 100).algorithm, Algorithm::kTwoLevel);
  EXPECT_EQ(chooseByTime(inf, 1e-3, 100).algorithm, Algorithm::kTwoLevel);
  EXPECT_EQ(chooseByTime(1e-3, std::nan(""), 100).algorithm, Algorithm::kFlat);
  EXPECT_EQ(chooseByTime(1e-3, 0.0, 100).algorithm, Algorithm::kFlat);
  AlgorithmChoice none = chooseByTime(0.0, 0.0, 100);
  EXPECT_EQ(none.algorithm, Algorithm::kFlat);
  EXPECT_NE(none.reason.find("neither"), std::string::npos) << none.reason;
  // Two-level in one segment, where the call pipelines: it stands for two-level when faster.
  AlgorithmChoice w = chooseByTime(3e-3, 2e-3, 100, 1e-3);
  EXPECT_EQ(w.algorithm, Algorithm::kTwoLevel);
  EXPECT_TRUE(w.twoLevelWhole);
  EXPECT_NE(w.reason.find("1.000 ms in one segment"), std::string::npos) << w.reason;
  EXPECT_FALSE(chooseByTime(3e-3, 1e-3, 100, 2e-3).twoLevelWhole);
  EXPECT_FALSE(chooseByTime(3e-3, 1e-3, 100, 1e-3).twoLevelWhole);  // a tie keeps the pipeline
  EXPECT_FALSE(chooseByTime(3e-3, 1e-3, 100, std::nan("")).twoLevelWhole);
  EXPECT_FALSE(chooseByTime(3e-3, 1e-3, 100).twoLevelWhole);  // not tried
  AlgorithmChoice onlyWhole = chooseByTime(3e-3, std::nan(""), 100, 1e-3);
  EXPECT_EQ(onlyWhole.algorithm, Algorithm::kTwoLevel);
  EXPECT_TRUE(onlyWhole.twoLevelWhole);
  AlgorithmChoice flatWins = chooseByTime(0.5e-3, 2e-3, 100, 1e-3);
  EXPECT_EQ(flatWins.algorithm, Algorithm::kFlat);
  EXPECT_FALSE(flatWins.twoLevelWhole);
  AlgorithmChoice c = chooseByTime(12.5e-3, 8.25e-3, 4096);
  EXPECT_NE(c.reason.find("4096 elements"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("flat 12.500 ms"), std::string::npos) << c.reason;
  EXPECT_NE(c.reason.find("twolevel 8.250 ms"), std::string::npos) << c.reason;
}

struct RankOutcome {
  CollectiveStats stats;
  std::vector<std::vector<float>> outputs;  // one per call
};

// 2 nodes x 2 ranks; each rank runs `calls` (codec, kind, count, algorithm) in order with auto
// unless told, `clock` (if set) timing auto's trials.
struct Call {
  std::string codec;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  size_t count = 0;
  Algorithm algorithm = Algorithm::kAuto;
};
std::vector<RankOutcome> runCalls(const std::vector<Call>& calls,
                                  std::function<double()> clock = nullptr,
                                  size_t twoLevelSegmentBytes = 0) {
  const int n = 4;
  const std::vector<int> nodeOfRank = {0, 0, 1, 1};
  std::vector<RankOutcome> outcome(n);
  auto st = testing::runWorld(
      n,
      [&](int r, CollectiveEngine& e) -> Status {
        if (clock) e.setClock(clock);
        if (twoLevelSegmentBytes) e.setTwoLevelSegmentBytes(twoLevelSegmentBytes);
        for (const Call& c : calls) {
          auto codec = makeCodec(c.codec);
          TERSE_RETURN_IF_ERROR(codec.status());
          const Range mine = chunkRange(c.count, n, r);
          const size_t sendCount = c.kind == CollectiveKind::kAllGather ? mine.length : c.count;
          const size_t recvCount = c.kind == CollectiveKind::kReduceScatter ? mine.length : c.count;
          std::vector<float> in(std::max<size_t>(1, sendCount)),
              out(std::max<size_t>(1, recvCount));
          for (size_t i = 0; i < sendCount; ++i)
            in[i] = std::cos(0.01f * static_cast<float>(i) + static_cast<float>(r));
          CollectiveOp op;
          op.kind = c.kind;
          op.send = in.data();
          op.recv = out.data();
          op.count = c.count;
          op.codec = codec.value().get();
          op.algorithm = c.algorithm;
          TERSE_RETURN_IF_ERROR(e.run(op));
          out.resize(recvCount);
          outcome[r].outputs.push_back(out);
        }
        outcome[r].stats = e.stats();
        return Status::ok();
      },
      0, &nodeOfRank);
  for (auto& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
  return outcome;
}

TEST(AlgorithmChoice, EveryRankAdoptsAndReportsTheSameChoiceAndKeepsIt) {
  const size_t count = 70000;
  auto outcome = runCalls({{"int8", CollectiveKind::kAllReduce, count},
                           {"int8", CollectiveKind::kAllReduce, count},
                           {"none", CollectiveKind::kAllReduce, count},
                           {"int8", CollectiveKind::kReduceScatter, count},
                           {"int8", CollectiveKind::kAllReduce, count, Algorithm::kFlat}});
  ASSERT_EQ(outcome.size(), 4u);
  const auto& choices = outcome[0].stats.algorithmChoices;
  // One choice per (kind, codec, type, size class) met with auto; the forced call adds none.
  ASSERT_EQ(choices.size(), 3u);
  // Keys carry the codec's canonical spec.
  const std::string key = "allreduce " + makeCodec("int8").value()->spec() + " float32 2^19 B";
  ASSERT_TRUE(choices.count(key)) << choices.begin()->first;
  for (const auto& [k, v] : choices) {
    EXPECT_TRUE(v.rfind("flat: measured", 0) == 0 || v.rfind("twolevel: measured", 0) == 0)
        << k << ": " << v;
  }
  uint64_t trialCalls = outcome[0].stats.autoPolicy.calls;
  EXPECT_GT(trialCalls, 0u);
  for (int r = 0; r < 4; ++r) {
    const CollectiveStats& s = outcome[r].stats;
    // The same choice (and, from the shared figures, the same reason) on every rank.
    EXPECT_EQ(s.algorithmChoices, choices) << "rank " << r;
    // Trials ran for three keys only: the second int8 allreduce reused the first's choice.
    EXPECT_EQ(s.autoPolicy.calls, trialCalls) << "rank " << r;
    uint64_t calls = 0;
    for (const auto& [algo, k] : s.algorithmCalls) calls += k;
    EXPECT_EQ(calls, 5u) << "rank " << r;
    EXPECT_EQ(s.allreduce.calls, 4u) << "rank " << r;
    // The trials' barriers are auto's: the caller made none.
    EXPECT_EQ(s.barriers, 0u) << "rank " << r;
    // Every rank holds bit-identical results, whichever algorithm ran.
    for (size_t c : {0u, 1u, 2u, 4u})
      EXPECT_EQ(std::memcmp(outcome[r].outputs[c].data(), outcome[0].outputs[c].data(),
                            count * sizeof(float)),
                0)
          << "rank " << r << " call " << c;
  }
  // 3 keys x (3 rounds x 2 candidates + 1 gather of the times).
  EXPECT_EQ(trialCalls, 3u * 7u);
}

TEST(AlgorithmChoice, TrialsAreTimedWithTheEnginesClock) {
  // A clock that never moves gives no usable figure: flat, and the reason says so, on every
  // rank. (The simulation hands its simulated clock through the same hook.)
  auto outcome = runCalls({{"fp16", CollectiveKind::kAllReduce, 5000}}, [] { return 42.0; });
  for (const RankOutcome& o : outcome) {
    ASSERT_EQ(o.stats.algorithmChoices.size(), 1u);
    const std::string& v = o.stats.algorithmChoices.begin()->second;
    EXPECT_EQ(v.rfind("flat: ", 0), 0u) << v;
    EXPECT_NE(v.find("neither"), std::string::npos) << v;
    EXPECT_EQ(o.stats.algorithmCalls.at("flat"), 1u);
  }
}

// A clock for auto's trials in which flat, two-level pipelined and two-level in one segment take
// the given times, in the order chooseAlgorithm has them run: the warm-up round reads no clock,
// the timed rounds read it before and after each trial (measureCandidates). One sequence per
// rank (each rank is a thread).
std::function<double()> trialClock(std::array<double, 3> seconds) {
  return [seconds] {
    thread_local int reads = 0;
    thread_local double now = 0;
    const int i = reads++;
    if (i % 2 == 1) now += seconds[(i / 2) % 3];
    return now;
  };
}

TEST(AlgorithmChoice, APipelinedAllreduceIsAlsoTimedInOneSegment) {
  // 3 segments of 65536 elements per local rank and a ragged fourth: the call pipelines, so
  // auto times three candidates. int8's blocks follow the slices, which start on other elements
  // in one segment (the second local rank's at 197108, not a block boundary), so the results
  // tell which ran: the forced two-level call pipelines (the setting), the auto call runs what
  // auto chose.
  const size_t segmentBytes = 131072 * 4, count = 3 * 131072 + 1000;
  for (bool wholeFaster : {true, false}) {
    SCOPED_TRACE(wholeFaster ? "one segment faster" : "pipeline faster");
    const std::array<double, 3> times =
        wholeFaster ? std::array<double, 3>{3, 2, 1} : std::array<double, 3>{3, 1, 2};
    auto outcome = runCalls({{"int8", CollectiveKind::kAllReduce, count},
                             {"int8", CollectiveKind::kAllReduce, count, Algorithm::kTwoLevel}},
                            trialClock(times), segmentBytes);
    for (int r = 0; r < 4; ++r) {
      const CollectiveStats& s = outcome[r].stats;
      ASSERT_EQ(s.algorithmChoices.size(), 1u);
      const std::string& v = s.algorithmChoices.begin()->second;
      EXPECT_EQ(
          v.rfind(wholeFaster ? "twolevel in one segment: measured" : "twolevel: measured", 0), 0u)
          << v;
      EXPECT_NE(v.find("pipelined and"), std::string::npos) << v;
      // 3 rounds x 3 candidates + 1 gather of the times.
      EXPECT_EQ(s.autoPolicy.calls, 10u) << "rank " << r;
      const bool same = outcome[r].outputs[0] == outcome[r].outputs[1];
      EXPECT_EQ(same, !wholeFaster) << "rank " << r;
      EXPECT_EQ(outcome[r].outputs[0], outcome[0].outputs[0]) << "rank " << r;
    }
  }
  // A call that does not pipeline (one segment) times two candidates, as before.
  auto small = runCalls({{"int8", CollectiveKind::kAllReduce, 100000}}, nullptr, segmentBytes);
  EXPECT_EQ(small[0].stats.autoPolicy.calls, 7u);
}

}  // namespace
}  // namespace terse
