// Communicator::shrink across real processes over UCX (issue #48, items 1 and 3): 4 ranks
// allreduce in a loop; one is SIGKILLed (between calls, or inside a call through TERSE_FAULT);
// the 3 survivors shrink, check their dense ranks in world order, and go on allreducing with
// exact sums; a live rank left out on request learns so and never joins; a slow rank that checks
// in after the others decided is refused; a split of a shrunk communicator works; a link that
// stays broken makes every rank's shrink fail rather than go on. TERSE_TIMEOUT_MS is small so a
// hang shows as a failure; the stores are file stores (they outlive any rank) unless a case says.
#include "../transport/process_harness.h"

#include "terse/common/status.h"
#include "terse/communicator.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace terse::testing {
namespace {

constexpr int kWorld = 4;
constexpr int kTimeoutMs = 20000;
constexpr size_t kCount = 100000;

EnvMap env(const std::string& store, int timeoutMs = kTimeoutMs) {
  return {{"UCX_TLS", "tcp,self"},
          {"UCX_NET_DEVICES", "lo"},
          {"TERSE_STORE", store},
          {"TERSE_TIMEOUT_MS", std::to_string(timeoutMs)}};
}

// Allreduce of (world rank + 1) everywhere; the sum every member must get.
Status step(Communicator& comm, int worldRank, float want, std::string* wrong) {
  std::vector<float> in(kCount, static_cast<float>(worldRank + 1)), out(kCount, -1.0f);
  Status s = comm.allreduce(in.data(), out.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
  if (s.isOk())
    for (float v : out)
      if (v != want) {
        *wrong = "sum " + std::to_string(v) + ", want " + std::to_string(want);
        break;
      }
  return s;
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Where the victim of a kill between calls writes when it died (steady_clock is CLOCK_MONOTONIC,
// one clock for every process of the host), for the survivors' "kill to next step" figure.
std::string gKillMark;

void markKill() {
  std::FILE* f = std::fopen(gKillMark.c_str(), "w");
  if (f == nullptr) return;
  std::fprintf(f, "%lld\n",
               static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count()));
  std::fclose(f);
}

// Seconds from the kill to now, or -1 when the victim left no mark (killed by TERSE_FAULT).
double secondsSinceKill() {
  std::FILE* f = gKillMark.empty() ? nullptr : std::fopen(gKillMark.c_str(), "r");
  if (f == nullptr) return -1;
  long long ns = 0;
  const bool read = std::fscanf(f, "%lld", &ns) == 1;
  std::fclose(f);
  if (!read) return -1;
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch());
  return static_cast<double>(now.count() - ns) / 1e9;
}

// The body of every survivor: calls until one fails (the victim's death), then a shrink, then
// calls on the new world. Reports "shrunk <new rank> <new size> gone <ranks> in <s> s, next
// step after <s> s" and returns 0 when every check held.
int surviveAndGoOn(int rank, int victim, int killAfter) {
  auto made = Communicator::createFromEnv();
  if (!made.isOk()) {
    reportFromChild(made.status().toString());
    return 2;
  }
  std::unique_ptr<Communicator> comm = std::move(made).value();
  const float all = kWorld * (kWorld + 1) / 2.0f;
  std::string wrong;
  int calls = 0;
  Status failed;
  for (; calls < 50; ++calls) {
    if (rank == victim && killAfter >= 0 && calls == killAfter) {  // between calls
      markKill();
      raise(SIGKILL);
    }
    failed = step(*comm, rank, all, &wrong);
    if (!wrong.empty()) {
      reportFromChild("before the failure: " + wrong);
      return 3;
    }
    if (!failed.isOk()) break;
  }
  if (failed.isOk()) {
    reportFromChild("no call failed in 50 calls");
    return 4;
  }
  const auto failedAt = std::chrono::steady_clock::now();
  std::vector<int> gone;
  auto shrunk = comm->shrink({}, &gone);
  const double shrinkSeconds = secondsSince(failedAt);
  if (!shrunk.isOk()) {
    reportFromChild("shrink: " + shrunk.status().toString() + "\nafter: " + failed.toString());
    return 5;
  }
  comm.reset();  // the old world is done with
  Communicator& next = **shrunk;
  // Dense ranks in world order: the survivors below the victim keep theirs, those above move down.
  const int want = rank < victim ? rank : rank - 1;
  if (next.size() != kWorld - 1 || next.rank() != want || gone != std::vector<int>{victim}) {
    reportFromChild("shrunk to rank " + std::to_string(next.rank()) + " of " +
                    std::to_string(next.size()) + ", gone " + std::to_string(gone.size()));
    return 6;
  }
  const float survivors = all - static_cast<float>(victim + 1);
  double firstStep = 0, fromKill = -1;
  for (int i = 0; i < 5; ++i) {
    Status s = step(next, rank, survivors, &wrong);
    if (!s.isOk() || !wrong.empty()) {
      reportFromChild("after the shrink: " + s.toString() + " " + wrong);
      return 7;
    }
    if (i == 0) {
      firstStep = secondsSince(failedAt);
      fromKill = secondsSinceKill();
    }
  }
  char text[240];
  std::snprintf(text, sizeof text,
                "rank %d of %d after the shrink: shrink %.3f s, failure to next step %.3f s, kill "
                "to next step %.3f s",
                next.rank(), next.size(), shrinkSeconds, firstStep, fromKill);
  reportFromChild(text);
  // Within the timeout: the victim's process was seen to end on this host, so nobody waited it
  // out (the timeout is 20 s, the agreement takes milliseconds).
  return shrinkSeconds < kTimeoutMs / 1000.0 ? 0 : 8;
}

// Rank 0 dies between calls: the file store outlives it, and old rank 1 becomes rank 0.
TEST(ShrinkProcesses, RankZeroKilledBetweenCalls) {
  const std::string dir = makeTempDir();
  gKillMark = makeTempDir() + "/killed_at";
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2, 3}, [&](int) { return env(dir); },
      [&](int rank) { return surviveAndGoOn(rank, 0, 3); }, std::chrono::seconds(120));
  gKillMark.clear();
  ASSERT_NO_FATAL_FAILURE(expectVictimKilledOthersPassed(outcomes, kWorld, 0));
}

// Rank 0 dies while it serves the TCP store: the survivors' shrink cannot meet, and each says
// why (the store ended with rank 0) and what to use instead, within its timeout.
TEST(ShrinkProcesses, RankZerosTcpStoreEndsWithItAndTheShrinkSaysSo) {
  const int port = freeLoopbackPort();
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2, 3}, [&](int) { return env("127.0.0.1:" + std::to_string(port), 3000); },
      [&](int rank) -> int {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) return 2;
        std::string wrong;
        if (!step(**made, rank, 10.0f, &wrong).isOk()) return 3;
        if (rank == 0) raise(SIGKILL);
        if (step(**made, rank, 10.0f, &wrong).isOk()) return 4;
        auto shrunk = (*made)->shrink();
        reportFromChild(shrunk.status().toString());
        return !shrunk.isOk() &&
                       shrunk.status().message().find("ends with rank 0") != std::string::npos
                   ? 0
                   : 5;
      },
      std::chrono::seconds(120));
  ASSERT_NO_FATAL_FAILURE(expectVictimKilledOthersPassed(outcomes, kWorld, 0));
}

// Rank 3 dies at its 10th reduce-phase send: inside a call, with the others waiting on it. The
// TCP store served by rank 0 does here, since rank 0 lives.
TEST(ShrinkProcesses, LastRankKilledInsideACall) {
  const int port = freeLoopbackPort();
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2, 3},
      [&](int) {
        EnvMap e = env("127.0.0.1:" + std::to_string(port));
        e["TERSE_FAULT"] = "kill:rank=3:phase=reduce:after_sends=10";
        return e;
      },
      [&](int rank) { return surviveAndGoOn(rank, 3, -1); }, std::chrono::seconds(120));
  ASSERT_NO_FATAL_FAILURE(expectVictimKilledOthersPassed(outcomes, kWorld, 3));
}

// Rank 1 dies inside a call of a split child (children by parity); the survivors shrink the
// world.
TEST(ShrinkProcesses, KilledInsideASplitChildThenShrinkTheWorld) {
  const std::string dir = makeTempDir();
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2, 3}, [&](int) { return env(dir); },
      [&](int rank) -> int {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) return 2;
        auto half = (*made)->split(rank % 2, rank);
        if (!half.isOk() || !half.value()) return 3;
        std::string wrong;
        if (rank == 1) {
          // Inside: the child's peer (rank 3) waits for this rank's data when it dies.
          std::thread([] {
            usleep(20000);
            raise(SIGKILL);
          }).detach();
          std::vector<float> big(size_t{8} << 20, 1.0f);
          (void)half.value()->allreduce(big.data(), big.data(), big.size(), DataType::kFloat32,
                                        ReduceOp::kSum);
          pause();
        }
        // The other child's call may succeed; the world's next call cannot.
        (void)step(*half.value(), rank, rank % 2 ? 6.0f : 4.0f, &wrong);
        Status s = step(**made, rank, 10.0f, &wrong);
        if (s.isOk()) return 4;
        half.value().reset();
        std::vector<int> gone;
        auto shrunk = (*made)->shrink({}, &gone);
        if (!shrunk.isOk()) {
          reportFromChild(shrunk.status().toString());
          return 5;
        }
        wrong.clear();
        Status after = step(**shrunk, rank, 10.0f - 2.0f, &wrong);
        reportFromChild(after.toString() + " " + wrong);
        return after.isOk() && wrong.empty() && gone == std::vector<int>{1} ? 0 : 6;
      },
      std::chrono::seconds(120));
  ASSERT_NO_FATAL_FAILURE(expectVictimKilledOthersPassed(outcomes, kWorld, 1));
}

// On request: ranks 0, 1 and 3 leave rank 2 out while it lives. Rank 2 calls shrink too and is
// told it was left out; the new world of 3 allreduces, and a split of it works.
TEST(ShrinkProcesses, OnRequestALiveRankIsLeftOutAndASplitOfTheNewWorldWorks) {
  const std::string dir = makeTempDir();
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2, 3}, [&](int) { return env(dir); },
      [&](int rank) -> int {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) return 2;
        std::string wrong;
        if (!step(**made, rank, 10.0f, &wrong).isOk() || !wrong.empty()) return 3;
        if (rank == 2) {
          auto refused = (*made)->shrink();
          reportFromChild(refused.status().toString());
          return !refused.isOk() && refused.status().code() == StatusCode::kRemoteError &&
                         refused.status().message().find("left rank 2 out") != std::string::npos
                     ? 0
                     : 4;
        }
        std::vector<int> gone;
        auto shrunk = (*made)->shrink({2}, &gone);
        if (!shrunk.isOk()) {
          reportFromChild(shrunk.status().toString());
          return 5;
        }
        Communicator& next = **shrunk;
        const int want = rank < 2 ? rank : rank - 1;
        if (next.rank() != want || next.size() != 3 || gone != std::vector<int>{2}) return 6;
        if (!step(next, rank, 10.0f - 3.0f, &wrong).isOk() || !wrong.empty()) return 7;
        // Split the new world: {new 0, new 2} = old {0, 3} and {new 1} = old {1}.
        auto child = next.split(next.rank() % 2, next.rank());
        if (!child.isOk() || !child.value()) return 8;
        const float childSum = rank == 1 ? 2.0f : 1.0f + 4.0f;
        if (!step(*child.value(), rank, childSum, &wrong).isOk() || !wrong.empty()) {
          reportFromChild("split: " + wrong);
          return 9;
        }
        reportFromChild("ok");
        return 0;
      },
      std::chrono::seconds(120));
  expectEveryRankPassed(outcomes, kWorld);
}

// Slow past the timeout: rank 3 (alive) calls shrink only after the others have finished theirs
// (ordered by a marker file, not by time); they left it out when their 3 s ran out, and it is
// refused rather than let in.
TEST(ShrinkProcesses, ARankSlowPastTheTimeoutIsLeftOutByAllAndRefused) {
  const std::string dir = makeTempDir();
  const std::string markers = makeTempDir();
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2, 3}, [&](int) { return env(dir, 3000); },
      [&](int rank) -> int {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) return 2;
        std::string wrong;
        if (!step(**made, rank, 10.0f, &wrong).isOk()) return 3;
        if (rank == 3) {
          for (int r = 0; r < 3; ++r) {
            const std::string marker = markers + "/" + std::to_string(r);
            struct stat st;
            while (::stat(marker.c_str(), &st) != 0) usleep(10000);
          }
          auto refused = (*made)->shrink();
          reportFromChild(refused.status().toString());
          return !refused.isOk() &&
                         refused.status().message().find("left rank 3 out") != std::string::npos
                     ? 0
                     : 4;
        }
        std::vector<int> gone;
        auto shrunk = (*made)->shrink({}, &gone);
        std::FILE* f = std::fopen((markers + "/" + std::to_string(rank)).c_str(), "w");
        if (f) std::fclose(f);
        if (!shrunk.isOk()) {
          reportFromChild(shrunk.status().toString());
          return 5;
        }
        if (gone != std::vector<int>{3} || (*shrunk)->size() != 3) return 6;
        if (!step(**shrunk, rank, 6.0f, &wrong).isOk() || !wrong.empty()) return 7;
        return 0;
      },
      std::chrono::seconds(120));
  expectEveryRankPassed(outcomes, kWorld);
}

// A link that stays broken (rank 1 drops its connection to rank 0 at its first send to it, in
// every world this process makes): nobody died, so normally every rank is a member of the new
// world, whose members then cannot all reach each other: every rank's shrink fails. Should a rank
// be slow past the timeout on the loaded machine (it learned of the old world's failure late),
// the others leave it out and, if that cut the broken link, go on without it. Either way there
// is never more than one world: the ranks that go on report the same gone set, it holds 0 or 1,
// every rank outside it goes on, and their new world works.
TEST(ShrinkProcesses, MembersThatCannotReachEachOtherNeverMakeTwoWorlds) {
  const std::string dir = makeTempDir();
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2, 3},
      [&](int) {
        EnvMap e = env(dir, 3000);
        e["TERSE_FAULT"] = "drop:rank=1:peer=0";
        return e;
      },
      [&](int rank) -> int {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) {
          reportFromChild(made.status().toString());
          return 2;
        }
        std::string wrong;
        Status s = step(**made, rank, 10.0f, &wrong);
        if (s.isOk()) return 3;
        std::vector<int> gone;
        auto shrunk = (*made)->shrink({}, &gone);
        if (!shrunk.isOk()) {
          reportFromChild("refused: " + shrunk.status().toString());
          return 0;
        }
        std::string text = "went on; gone";
        float sum = 10.0f;
        for (int g : gone) {
          text += " " + std::to_string(g);
          sum -= static_cast<float>(g + 1);
        }
        Status after = step(**shrunk, rank, sum, &wrong);
        reportFromChild(text);
        return after.isOk() && wrong.empty() ? 0 : 4;
      },
      std::chrono::seconds(120));
  ASSERT_EQ(static_cast<int>(outcomes.size()), kWorld);
  std::string wentOn;  // the one report every rank that went on must share
  std::vector<bool> goneRank(kWorld, false);
  for (const RankOutcome& o : outcomes) {
    EXPECT_TRUE(o.exited && o.code == 0) << describe(o) << ": " << o.report;
    std::printf("rank %d: %s\n", o.rank, o.report.c_str());
    if (o.report.rfind("went on", 0) != 0) continue;
    if (wentOn.empty()) wentOn = o.report;
    EXPECT_EQ(o.report, wentOn) << "two worlds";
    for (size_t at = o.report.find("gone") + 4; at < o.report.size(); at += 2)
      goneRank[o.report[at + 1] - '0'] = true;
  }
  if (!wentOn.empty()) {
    EXPECT_TRUE(goneRank[0] || goneRank[1]) << wentOn;
    for (const RankOutcome& o : outcomes)
      if (!goneRank[o.rank]) {
        EXPECT_EQ(o.report, wentOn) << "rank " << o.rank;
      }
  }
}

// ---- Error-feedback residuals follow the survivors (relayoutFeedback) -------------------------
//
// Each rank of 4 fills its states' residuals with values that say whose they are (worker: the
// rank and element; server: the old owner and element over the chunk it owns), rank 2 is left
// out on request, and the 3 survivors re-lay out: worker residuals unchanged, each survivor's
// server residual is its new allreduce chunk, holding the old owners' values there and zero
// where rank 2's chunk was.

// The tensors: two chunks of 2048 per old rank and a short one in which old rank 3 owns nothing.
struct FeedbackCase {
  const char* codec;
  size_t count;
};
constexpr FeedbackCase kFeedbackCases[] = {{"onebit", 20000}, {"topk:ratio=0.01", 5000}};

float workerValue(int worldRank, size_t i) {
  return static_cast<float>(worldRank + 1) + static_cast<float>(i) * 1e-3f;
}
float serverValue(int oldOwner, size_t i) {
  return -static_cast<float>(1000 * (oldOwner + 1)) - static_cast<float>(i);
}

// The states of one rank of `world`, filled as above.
Result<std::vector<ErrorFeedback>> filledStates(int rank, int world) {
  std::vector<ErrorFeedback> states;
  for (const FeedbackCase& c : kFeedbackCases) {
    TERSE_ASSIGN_OR_RETURN(ErrorFeedback ef, ErrorFeedback::create(c.codec, c.count));
    for (size_t i = 0; i < c.count; ++i) ef.worker()[i] = workerValue(rank, i);
    const auto chunk = Communicator::allreduceChunk(c.count, world, rank);
    TERSE_ASSIGN_OR_RETURN(float* s, ef.serverChecked(world, chunk.first, chunk.second));
    for (size_t k = 0; k < chunk.second; ++k) s[k] = serverValue(rank, chunk.first + k);
    states.push_back(std::move(ef));
  }
  return states;
}

// The rank of a world of `world` whose allreduce chunk of `count` elements holds element i (the
// last rank for an i past the end).
int chunkOwner(size_t count, int world, size_t i) {
  int owner = 0;
  while (owner + 1 < world) {
    const auto chunk = Communicator::allreduceChunk(count, world, owner);
    if (i < chunk.first + chunk.second) break;
    ++owner;
  }
  return owner;
}

// "" when rank `worldRank`'s states hold what the relayout from `world` to the survivors of
// `gone` must leave, else what differs.
std::string checkRelaid(std::vector<ErrorFeedback>& states, int worldRank, int world, int gone,
                        Communicator& next) {
  for (size_t t = 0; t < states.size(); ++t) {
    ErrorFeedback& ef = states[t];
    const size_t count = kFeedbackCases[t].count;
    for (size_t i = 0; i < count; ++i)
      if (ef.worker()[i] != workerValue(worldRank, i))
        return "state " + std::to_string(t) + ": worker residual changed at " + std::to_string(i);
    const auto chunk = Communicator::allreduceChunk(count, next.size(), next.rank());
    if (ef.serverWorldSize() != next.size() || ef.serverRegions() != 1 ||
        ef.serverOffset() != chunk.first || ef.serverLength() != chunk.second)
      return "state " + std::to_string(t) + ": server chunk [" + std::to_string(ef.serverOffset()) +
             ", +" + std::to_string(ef.serverLength()) + ") of world " +
             std::to_string(ef.serverWorldSize()) + ", want [" + std::to_string(chunk.first) +
             ", +" + std::to_string(chunk.second) + ")";
    std::vector<float> view(count, 0.0f);
    ef.copyServerTo(view.data());
    for (size_t i = chunk.first; i < chunk.first + chunk.second; ++i) {
      const int owner = chunkOwner(count, world, i);
      const float want = owner == gone ? 0.0f : serverValue(owner, i);
      if (view[i] != want)
        return "state " + std::to_string(t) + " element " + std::to_string(i) + ": " +
               std::to_string(view[i]) + ", want " + std::to_string(want) + " (old owner " +
               std::to_string(owner) + ")";
    }
  }
  return "";
}

TEST(ShrinkProcesses, FeedbackResidualsFollowTheSurvivors) {
  const std::string dir = makeTempDir();
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2, 3}, [&](int) { return env(dir); },
      [&](int rank) -> int {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) return 2;
        auto states = filledStates(rank, kWorld);
        if (!states.isOk()) {
          reportFromChild(states.status().toString());
          return 3;
        }
        if (rank == 2) return (*made)->shrink().isOk() ? 4 : 0;  // left out
        auto shrunk = (*made)->shrink({2});
        if (!shrunk.isOk()) return 5;
        Communicator& next = **shrunk;
        std::vector<ErrorFeedback*> batch;
        for (ErrorFeedback& ef : *states) batch.push_back(&ef);
        Status s = relayoutFeedback(next, rank, kWorld, batch);
        if (!s.isOk()) {
          reportFromChild("relayout: " + s.toString());
          return 6;
        }
        std::string wrong = checkRelaid(*states, rank, kWorld, 2, next);
        if (!wrong.empty()) {
          reportFromChild(wrong);
          return 7;
        }
        // The states serve the new world's allreduce as they are: no reset, no error.
        std::vector<float> g(kFeedbackCases[0].count, 1.0f), out(g.size());
        CollectiveOptions o;
        o.codec = kFeedbackCases[0].codec;
        o.feedback = &(*states)[0];
        s = next.allreduce(g.data(), out.data(), g.size(), DataType::kFloat32, ReduceOp::kAvg, o);
        if (!s.isOk() || (*states)[0].serverWorldSize() != 3) {
          reportFromChild("allreduce after: " + s.toString());
          return 8;
        }
        reportFromChild("ok");
        return 0;
      },
      std::chrono::seconds(120));
  expectEveryRankPassed(outcomes, kWorld);
}

// What relayoutFeedback refuses, on every survivor alike (a rank alone refusing would leave the
// others waiting, so a hang shows as the timeout's failure): states that differ between ranks,
// a state an allgather used, an old rank out of range, a null state. No state changes.
TEST(ShrinkProcesses, FeedbackRelayoutRefusalsFailOnEverySurvivor) {
  const std::string dir = makeTempDir();
  auto outcomes = runProcesses(
      3, {0, 1, 2}, [&](int) { return env(dir); },
      [&](int rank) -> int {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) return 2;
        auto shrunk = (*made)->shrink();  // nobody gone: the relayout's checks still hold
        if (!shrunk.isOk()) return 3;
        Communicator& next = **shrunk;
        auto a = ErrorFeedback::create("onebit", 4096);
        auto b = ErrorFeedback::create(rank == 1 ? "topk" : "onebit", 4096);
        auto c = ErrorFeedback::create("onebit", rank == 2 ? 4097 : 4096);
        if (!a.isOk() || !b.isOk() || !c.isOk()) return 4;
        a->worker()[7] = 1.5f;
        const ErrorFeedback before = *a;
        std::string report;
        int failures = 0;
        auto expectRefused = [&](const Status& s, const char* says) {
          report += s.toString() + "\n";
          if (s.code() == StatusCode::kInvalidArgument &&
              s.message().find(says) != std::string::npos)
            ++failures;
        };
        expectRefused(relayoutFeedback(next, rank, 3, {&*a, &*b}), "codec 'topk:ratio=0.01'");
        expectRefused(relayoutFeedback(next, rank, 3, {&*c}), "4097 elements");
        expectRefused(relayoutFeedback(next, rank == 0 ? 5 : rank, 3, {&*a}), "out of range");
        expectRefused(relayoutFeedback(next, rank, 3, {rank == 2 ? nullptr : &*a}), "null");
        expectRefused(relayoutFeedback(next, rank == 1 ? 0 : rank, 3, {&*a}),
                      "old ranks must rise");
        std::vector<ErrorFeedback*> two{&*a};
        if (rank == 0) two.push_back(&*c);
        expectRefused(relayoutFeedback(next, rank, 3, two), "rank 0 passes 2");
        // An allgather's state holds this rank's part.
        const auto part = next.partOf(3 * 2048);
        auto g = ErrorFeedback::create("onebit", part.second);
        if (!g.isOk()) return 5;
        std::vector<float> mine(part.second, 1.0f), all(3 * 2048);
        CollectiveOptions o;
        o.codec = "onebit";
        o.feedback = &*g;
        if (!next.allgather(mine.data(), all.data(), all.size(), DataType::kFloat32, o).isOk())
          return 6;
        expectRefused(relayoutFeedback(next, rank, 3, {&*a, &*g}), "used by an allgather");
        reportFromChild(report);
        if (failures != 7) return 7;
        // Unchanged by the refusals: same bytes as before.
        if (a->serialize() != before.serialize()) return 8;
        // And the same call without the faults goes through.
        return relayoutFeedback(next, rank, 3, {&*a}).isOk() && a->worker()[7] == 1.5f ? 0 : 9;
      },
      std::chrono::seconds(120));
  expectEveryRankPassed(outcomes, 3);
}

// Server residuals of another partition than the old world's flat allreduce (the two-level
// allreduce keeps them per cross-node lane: a world of as many ranks as nodes; or a state an
// earlier, half-failed relayout already reached) restart from zero instead of failing every
// survivor, and the states beside them still move.
TEST(ShrinkProcesses, FeedbackOfAnotherPartitionRestartsFromZero) {
  const std::string dir = makeTempDir();
  constexpr size_t kElements = 3 * 2048 + 100;
  auto outcomes = runProcesses(
      3, {0, 1, 2}, [&](int) { return env(dir); },
      [&](int rank) -> int {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) return 2;
        auto shrunk = (*made)->shrink({2});  // rank 2 asked out: it does not call shrink
        if (rank == 2) return 0;
        if (!shrunk.isOk()) return 3;
        Communicator& next = **shrunk;
        auto lane = ErrorFeedback::create("onebit", kElements);  // residuals of a 2-rank lane
        auto flat = ErrorFeedback::create("onebit", kElements);  // of the old world's allreduce
        if (!lane.isOk() || !flat.isOk()) return 4;
        const auto laneChunk = Communicator::allreduceChunk(kElements, 2, rank);
        float* l = lane->server(2, laneChunk.first, laneChunk.second);
        const auto flatChunk = Communicator::allreduceChunk(kElements, 3, rank);
        float* f = flat->server(3, flatChunk.first, flatChunk.second);
        if (!l || !f) return 5;
        std::fill(l, l + laneChunk.second, 9.0f);
        std::fill(f, f + flatChunk.second, static_cast<float>(rank + 1));
        Status s = relayoutFeedback(next, rank, 3, {&*lane, &*flat});
        if (!s.isOk()) {
          reportFromChild("relayout: " + s.toString());
          return 6;
        }
        const auto chunk = Communicator::allreduceChunk(kElements, 2, next.rank());
        std::vector<float> view(kElements, -1.0f);
        lane->copyServerTo(view.data());
        for (size_t i = chunk.first; i < chunk.first + chunk.second; ++i)
          if (view[i] != 0.0f) {
            reportFromChild("the lane's residual was moved, element " + std::to_string(i));
            return 7;
          }
        flat->copyServerTo(view.data());
        for (size_t i = chunk.first; i < chunk.first + chunk.second; ++i) {
          // Old owner of element i: its value was owner + 1; rank 2's chunk is lost.
          const int owner = chunkOwner(kElements, 3, i);
          const float want = owner == 2 ? 0.0f : static_cast<float>(owner + 1);
          if (view[i] != want) {
            reportFromChild("flat element " + std::to_string(i) + " is " + std::to_string(view[i]) +
                            ", want " + std::to_string(want));
            return 8;
          }
        }
        return 0;
      },
      std::chrono::seconds(120));
  expectEveryRankPassed(outcomes, 3);
}

// ---- The kill matrix's shrink cases: a training loop that survives a kill ----------------------
//
// Each rank keeps weights w and runs steps: a gradient from (step, world rank), averaged over
// the world, then w -= 0.1 * that; in the split cases each step also averages the gradient over
// the rank's parity child (a call the victim may die in; its result differs between the children
// and stays out of w). One victim, drawn with its world size (3-5 ranks), dies by SIGKILL at a
// random point: at a send or receive of a random tag phase after a random count (TERSE_FAULT, set
// for the victim alone: inside the warm-up's first calls, a step's call, a split child's call or
// the split itself), or between steps; a victim still alive after the last step dies before the
// check step, so every case shrinks. The survivors shrink on the failure, agree on the last step
// they all completed (a victim killed at a receive may have let some of them finish a call that
// others failed: those roll back one step), split again, go on, and must end with bit-identical
// weights, each within the timeout. In the error-feedback cases (onebit, topk, int8 with a
// state) the survivors also take back the residuals of the step they resume and re-lay them out
// for the new world (relayoutFeedback), which must give each its new allreduce chunk. Every
// draw comes from one seed, printed (TERSE_TEST_SEED replays it).

uint64_t baseSeed() {
  static const uint64_t seed = [] {
    const char* fixed = std::getenv("TERSE_TEST_SEED");
    if (fixed && *fixed) return static_cast<uint64_t>(std::strtoll(fixed, nullptr, 10));
    return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  return seed;
}

struct TrainCase {
  const char* codec;
  bool split;
  // Error feedback on the world's allreduce (not with split: a child's state would need a
  // relayout over the child's old members, which the survivors' new split does not keep).
  bool feedback = false;
};

class ShrinkKill : public ::testing::TestWithParam<TrainCase> {};

constexpr int kSteps = 8;
constexpr size_t kWeights = 3000;

// The training loop of one rank; reports "<steps> <hash of w>" and returns 0 when it finished.
int train(int worldRank, const TrainCase& c, int victim, int selfKillAt) {
  auto made = Communicator::createFromEnv();
  if (!made.isOk()) {
    reportFromChild("create: " + made.status().toString());
    return 2;
  }
  std::unique_ptr<Communicator> comm = std::move(made).value(), child;
  auto splitNow = [&]() -> Status {
    if (!c.split) return Status::ok();
    auto half = comm->split(comm->rank() % 2, comm->rank());
    if (!half.isOk()) return half.status();
    child = std::move(half).value();
    return Status::ok();
  };
  std::vector<float> w(kWeights, 0.0f), before = w, grad(kWeights), avg(kWeights), half(kWeights);
  // The residuals, and their copies from the start of this step and of the one before: a rank
  // that rolls back a step rolls its residuals back with its weights, and one whose call failed
  // half-way drops what that call left, so every survivor relays out the residuals of one step.
  ErrorFeedback fb, fbAtStep, fbAtLastStep;
  if (c.feedback) {
    auto state = ErrorFeedback::create(c.codec, kWeights);
    if (!state.isOk()) return 2;
    fb = std::move(state).value();
    fbAtStep = fbAtLastStep = fb;
  }
  const CollectiveOptions options{c.codec, c.feedback ? &fb : nullptr};
  const CollectiveOptions childOptions{c.codec, nullptr};
  int step = 0, shrinks = 0;
  Status failed = splitNow();
  // The step after kSteps is the check step: the victim never gets past it alive.
  while (step <= kSteps) {
    if (failed.isOk()) {
      if (worldRank == victim && step == selfKillAt) raise(SIGKILL);
      if (c.feedback) {
        fbAtLastStep = std::move(fbAtStep);
        fbAtStep = fb;
      }
      for (size_t i = 0; i < kWeights; ++i)
        grad[i] = std::sin(0.37f * static_cast<float>(step) + 0.01f * static_cast<float>(i)) *
                  static_cast<float>(worldRank + 1);
      failed = comm->allreduce(grad.data(), avg.data(), kWeights, DataType::kFloat32,
                               ReduceOp::kAvg, options);
      if (failed.isOk() && child)
        failed = child->allreduce(grad.data(), half.data(), kWeights, DataType::kFloat32,
                                  ReduceOp::kAvg, childOptions);
      if (failed.isOk()) {
        if (step < kSteps) {
          before = w;
          for (size_t i = 0; i < kWeights; ++i) w[i] -= 0.1f * avg[i];
        }
        ++step;
        continue;
      }
    }
    // A failure: the old world (and its child) is done with.
    if (++shrinks > 1) {
      reportFromChild("a second failure: " + failed.toString());
      return 3;
    }
    child.reset();
    const int oldRank = comm->rank(), oldWorld = comm->size();
    auto shrunk = comm->shrink();
    if (!shrunk.isOk()) {
      reportFromChild("shrink: " + shrunk.status().toString() + "\nafter " + failed.toString());
      return 4;
    }
    comm = std::move(shrunk).value();
    // The last step every survivor completed: one allgather of the step counts.
    std::vector<float> mine(1, static_cast<float>(step)), all(comm->size());
    const auto part = comm->partOf(all.size());
    Status agreed =
        comm->allgather(mine.data(), all.data(), all.size(), DataType::kFloat32, {"none"});
    if (!agreed.isOk() || part.second != 1) {
      reportFromChild("agreeing on the step: " + agreed.toString());
      return 5;
    }
    const int resume = static_cast<int>(*std::min_element(all.begin(), all.end()));
    if (step - resume > 1 || step < resume) return 6;
    if (step > resume && resume < kSteps) {  // this rank finished a step others failed
      w = before;
      std::fprintf(stderr, "[ rollback ] rank %d: step %d back to %d\n", worldRank, step, resume);
    }
    if (c.feedback) {
      // The residuals at the start of step `resume`, then laid out for the new world.
      fb = step > resume ? fbAtLastStep : fbAtStep;
      Status relaid = relayoutFeedback(*comm, oldRank, oldWorld, {&fb});
      const auto chunk = Communicator::allreduceChunk(kWeights, comm->size(), comm->rank());
      if (!relaid.isOk() || fb.serverWorldSize() != comm->size() ||
          fb.serverOffset() != chunk.first || fb.serverLength() != chunk.second) {
        reportFromChild("relayout: " + relaid.toString());
        return 7;
      }
    }
    step = resume;
    failed = splitNow();
  }
  reportFromChild(std::to_string(comm->size()) + " ranks, weights " +
                  std::to_string(weightsHash(w)));
  return 0;
}

TEST_P(ShrinkKill, SurvivorsShrinkAndFinishWithIdenticalWeights) {
  const TrainCase c = GetParam();
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  uint64_t h = baseSeed();
  for (unsigned char ch : std::string(info->name())) h = (h ^ ch) * 1099511628211ull;
  std::mt19937_64 rng(h);
  std::printf("[ seed     ] TERSE_TEST_SEED=%lld replays %s\n", static_cast<long long>(baseSeed()),
              info->name());
  const int n = 3 + static_cast<int>(rng() % 3);
  const int victim = static_cast<int>(rng() % n);
  static const char* kPhases[] = {"", ":phase=descriptor", ":phase=reduce", ":phase=gather"};
  std::string fault;
  int selfKillAt = kSteps;  // the check step, unless drawn
  if (rng() % 4 == 0) {
    selfKillAt = static_cast<int>(rng() % kSteps);  // between steps
  } else {
    fault = "kill:rank=" + std::to_string(victim) + kPhases[rng() % 4] +
            (rng() % 2 ? ":after_sends=" : ":after_recvs=") + std::to_string(rng() % 40);
  }
  std::printf(
      "[ draw     ] %d ranks, victim %d, %s\n", n, victim,
      fault.empty() ? ("killed before step " + std::to_string(selfKillAt)).c_str() : fault.c_str());
  const std::string dir = makeTempDir();
  std::vector<int> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r] = r;
  auto outcomes = runProcesses(
      n, ranks,
      [&](int rank) {
        EnvMap e = env(dir);
        if (rank == victim && !fault.empty()) e["TERSE_FAULT"] = fault;
        return e;
      },
      [&](int rank) { return train(rank, c, victim, selfKillAt); }, std::chrono::seconds(180));
  ASSERT_NO_FATAL_FAILURE(expectVictimKilledOthersPassed(outcomes, n, victim));
  std::string weights;
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    const RankOutcome& o = outcomes[r];
    if (weights.empty()) weights = o.report;
    EXPECT_EQ(o.report, weights) << "rank " << r << " ends with other weights";
    EXPECT_EQ(o.report.rfind(std::to_string(n - 1) + " ranks, weights ", 0), 0u) << o.report;
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, ShrinkKill,
                         ::testing::Values(TrainCase{"none", false}, TrainCase{"int8", false},
                                           TrainCase{"fp16", false}, TrainCase{"bf16", false},
                                           TrainCase{"none", true}, TrainCase{"int8", true},
                                           TrainCase{"onebit", false, true},
                                           TrainCase{"topk:ratio=0.01", false, true},
                                           TrainCase{"int8", false, true}),
                         [](const ::testing::TestParamInfo<TrainCase>& p) {
                           std::string name = p.param.codec;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           if (p.param.feedback && name.rfind("int8", 0) == 0) name += "_feedback";
                           return name + (p.param.split ? "_split" : "");
                         });

// What a shrink refuses at once, on one rank: a split communicator, a bad exclude list.
TEST(ShrinkProcesses, MisuseIsAnErrorAtOnce) {
  const std::string dir = makeTempDir();
  auto outcomes = runProcesses(
      1, {0}, [&](int) { return env(dir); },
      [&](int) -> int {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) return 2;
        auto half = (*made)->split(0, 0);
        if (!half.isOk()) return 3;
        auto a = half.value()->shrink();
        auto b = (*made)->shrink({5});
        auto c = (*made)->shrink({0});
        reportFromChild(a.status().toString() + "\n" + b.status().toString() + "\n" +
                        c.status().toString());
        if (a.status().code() != StatusCode::kUnsupported) return 4;
        if (b.status().code() != StatusCode::kInvalidArgument) return 5;
        if (c.status().code() != StatusCode::kInvalidArgument) return 6;
        // A world of one shrinks to itself.
        auto d = (*made)->shrink();
        return d.isOk() && (*d)->size() == 1 ? 0 : 7;
      },
      std::chrono::seconds(60));
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_TRUE(outcomes[0].exited && outcomes[0].code == 0)
      << describe(outcomes[0]) << ": " << outcomes[0].report;
}

}  // namespace
}  // namespace terse::testing
