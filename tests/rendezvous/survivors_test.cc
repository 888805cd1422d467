// agreeOnSurvivors (rendezvous/survivors.h) with ranks as threads over a memory store: what the
// survivors decide when a rank never arrives (seen dead, or not), is asked out, or arrives after
// the decision; and the parsers of what other processes wrote into the store.
#include "terse/rendezvous/survivors.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace terse {
namespace {

using rendezvous_detail::encodeCheckIn;
using rendezvous_detail::encodeDecision;
using rendezvous_detail::GoneRank;
using rendezvous_detail::GoneReason;
using rendezvous_detail::parseCheckIn;
using rendezvous_detail::parseDecision;

constexpr auto kLong = std::chrono::seconds(60);

// Runs agreeOnSurvivors on each of `ranks` (threads) of a world of `size`.
std::vector<Result<SurvivorAgreement>> agree(Store& store, int size, const std::vector<int>& ranks,
                                             const std::vector<std::vector<int>>& exclude,
                                             std::function<bool(int)> processGone,
                                             std::chrono::milliseconds timeout) {
  std::vector<Result<SurvivorAgreement>> out(ranks.size(), Result<SurvivorAgreement>(Status()));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i)
    threads.emplace_back([&, i] {
      out[i] = agreeOnSurvivors(store, "s", ranks[i], size, exclude[i], processGone, timeout);
    });
  for (auto& t : threads) t.join();
  return out;
}

TEST(Survivors, ARankSeenDeadIsGoneWithoutWaitingOutTheTimeout) {
  auto store = createMemoryStore();
  // Only rank 0 can see rank 2's process (same host); ranks 1 and 3 learn it from the store.
  std::atomic<int> asked{0};
  auto gone = [&](int r) {
    ++asked;
    return r == 2;
  };
  const auto start = std::chrono::steady_clock::now();
  auto out = agree(*store, 4, {0, 1, 3}, {{}, {}, {}}, gone, kLong);
  EXPECT_LT(std::chrono::steady_clock::now() - start, kLong / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(out[i].isOk()) << out[i].status().toString();
    EXPECT_EQ(out[i]->gone, std::vector<int>{2});
    EXPECT_EQ(out[i]->members, (std::vector<int>{0, 1, 3}));
    EXPECT_EQ(out[i]->newRank, static_cast<int>(i));
    EXPECT_NE(out[i]->describe.find("its process ended"), std::string::npos) << out[i]->describe;
  }
}

TEST(Survivors, ARankNotSeenIsGoneAtTheTimeoutAndRefusedWhenItComes) {
  auto store = createMemoryStore();
  auto out = agree(*store, 3, {0, 1}, {{}, {}}, nullptr, std::chrono::milliseconds(200));
  for (auto& r : out) {
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    EXPECT_EQ(r->gone, std::vector<int>{2});
  }
  // Rank 2 arrives after the decision: it is told, and never joins.
  auto late = agreeOnSurvivors(*store, "s", 2, 3, {}, nullptr, kLong);
  ASSERT_FALSE(late.isOk());
  EXPECT_EQ(late.status().code(), StatusCode::kRemoteError);
  EXPECT_NE(late.status().message().find("left rank 2 out"), std::string::npos)
      << late.status().toString();
  EXPECT_NE(late.status().message().find("timeout"), std::string::npos) << late.status().toString();
}

TEST(Survivors, AsksToLeaveOutAreUnitedAndTheRankAskedOutIsTold) {
  auto store = createMemoryStore();
  // Rank 0 asks rank 3 out, rank 1 asks nothing; rank 3 calls too and learns it is out.
  auto out = agree(*store, 4, {0, 1, 2, 3}, {{3}, {}, {}, {}}, nullptr, kLong);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(out[i].isOk()) << out[i].status().toString();
    EXPECT_EQ(out[i]->gone, std::vector<int>{3});
    EXPECT_EQ(out[i]->newRank, i);
  }
  ASSERT_FALSE(out[3].isOk());
  EXPECT_NE(out[3].status().message().find("asked out by rank 0"), std::string::npos)
      << out[3].status().toString();
}

TEST(Survivors, BadExcludeListsAreRefusedBeforeCheckingIn) {
  auto store = createMemoryStore();
  for (const std::vector<int>& bad :
       {std::vector<int>{4}, std::vector<int>{-1}, std::vector<int>{1}}) {
    auto r = agreeOnSurvivors(*store, "s", 1, 4, bad, nullptr, kLong);
    ASSERT_FALSE(r.isOk());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().toString();
  }
  auto in = store->tryGet("s/in/1");
  ASSERT_TRUE(in.isOk());
  EXPECT_FALSE(in.value().has_value());
}

TEST(Survivors, DecisionsAndCheckInsRoundTripAndMalformedOnesAreRefused) {
  std::vector<GoneRank> gone = {{1, GoneReason::kExcluded, 0},
                                {5, GoneReason::kProcessEnded, 2},
                                {6, GoneReason::kNotSeen, 0}};
  auto parsed = parseDecision(encodeDecision(gone), 7);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[1].rank, 5);
  EXPECT_EQ((*parsed)[1].reason, GoneReason::kProcessEnded);
  EXPECT_EQ((*parsed)[1].by, 2);
  EXPECT_TRUE(parseDecision("", 7).isOk());  // nobody gone
  for (const char* bad : {"1 x 0", "7 x 0\n", "1 q 0\n", "2 x 0\n1 x 0\n", "1 x 0\n1 x 0\n",
                          "01 x 0\n", "1  x 0\n", "-1 x 0\n", "1 x\n", "x\n"})
    EXPECT_EQ(parseDecision(bad, 7).status().code(), StatusCode::kCorrupt) << bad;
  auto in = parseCheckIn(encodeCheckIn({0, 3}), 4, 1);
  ASSERT_TRUE(in.isOk());
  EXPECT_EQ(in.value(), (std::vector<int>{0, 3}));
  EXPECT_TRUE(parseCheckIn("x", 4, 1).isOk());
  for (const char* bad : {"", "y", "x,", "x,4", "x,a", "x3", "x,1,,2"})
    EXPECT_EQ(parseCheckIn(bad, 4, 1).status().code(), StatusCode::kCorrupt) << bad;
}

}  // namespace
}  // namespace terse
