// Settings that every rank must share, across real processes over UCX (issue 44, finding 6):
// one rank setting one of them alone fails communicator creation on every rank, with the
// setting's name, rank 0's value and the differing rank's (before, creation succeeded and
// the first call that depended on it failed as corrupt data, or worse). The same values set
// everywhere work, and a setting each rank may hold alone (TERSE_PIPELINE_DEPTH) does not stop
// them. TERSE_TIMEOUT_MS is small so that a hang shows as a failure, not a 5-minute wait.
#include "../transport/process_harness.h"

#include "terse/common/status.h"
#include "terse/communicator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace terse::testing {
namespace {

EnvMap baseEnv(int port) {
  return {{"UCX_TLS", "tcp,self"},
          {"UCX_NET_DEVICES", "lo"},
          {"TERSE_STORE", "127.0.0.1:" + std::to_string(port)},
          {"TERSE_TIMEOUT_MS", "8000"}};
}

std::vector<int> allRanks(int n) {
  std::vector<int> ranks(n);
  for (int r = 0; r < n; ++r) ranks[r] = r;
  return ranks;
}

// An allreduce of `count` elements with `codec` whose every element must be 1 + 2 + ... + n
// (small integers: exact through int8 and the flat and two-level paths alike). 0 when it is.
int allreduceIsExact(Communicator& comm, size_t count, const char* codec) {
  const int n = comm.size();
  std::vector<float> in(count, static_cast<float>(comm.rank() + 1)), out(count);
  CollectiveOptions options;
  options.codec = codec;
  Status s =
      comm.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, options);
  if (!s.isOk()) {
    reportFromChild(std::string(codec) + ": " + s.toString());
    return 4;
  }
  const float want = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < count; ++i)
    if (out[i] != want) {
      reportFromChild(std::string(codec) + ": element " + std::to_string(i) + " is " +
                      std::to_string(out[i]));
      return 5;
    }
  return 0;
}

struct Differing {
  const char* name;
  const char* value;   // what the odd rank sets
  const char* others;  // what every other rank has, as the message shows it
  int ranks, odd;      // the world's size and the rank that sets `value` alone
  bool twoNodes;       // 2 emulated nodes, so that two-level runs
};

// Every marked setting (TheSettingsEveryRankMustShareAreMarked), one rank of 2 or 3 setting it
// alone: the TERSE_TWOLEVEL_SEGMENT_BYTES on rank 1 of 4 ranks on 2 nodes, each other
// setting on another rank, rank 0 included (then rank 1 is named, with the default). Every
// rank's creation fails with kInvalidArgument naming both values.
TEST(SettingsProcesses, ASettingOneRankSetsAloneFailsCreationOnEveryRank) {
  const std::vector<Differing> cases = {
      {"TERSE_TWOLEVEL_SEGMENT_BYTES", "262144", "16777216 (default)", 4, 1, true},
      {"TERSE_SEGMENT_BYTES", "262144", "1048576 (default)", 3, 2, false},
      {"TERSE_SMALL_BYTES", "0", "65536 (default)", 3, 0, false},
      {"TERSE_AGREEMENT_DIRECT_RANKS", "1", "32 (default)", 3, 1, false},
      {"TERSE_ALGO", "flat", "auto (default)", 2, 1, false},
  };
  for (const Differing& c : cases) {
    const int port = freeLoopbackPort();
    // The message names rank 0 and the first rank whose value is not rank 0's.
    const std::string want =
        c.odd == 0 ? std::string(c.name) + " differs between ranks: rank 0 has " + c.value +
                         ", rank 1 has " + c.others
                   : std::string(c.name) + " differs between ranks: rank 0 has " + c.others +
                         ", rank " + std::to_string(c.odd) + " has " + c.value;
    auto outcomes = runProcesses(
        c.ranks, allRanks(c.ranks),
        [&](int rank) {
          EnvMap e = baseEnv(port);
          if (c.twoNodes) {
            e["TERSE_NODE"] = rank < c.ranks / 2 ? "left" : "right";
            e["TERSE_LOCAL_RANK"] = std::to_string(rank % (c.ranks / 2));
          }
          if (rank == c.odd) e[c.name] = c.value;
          return e;
        },
        [&](int) {
          auto made = Communicator::createFromEnv();
          if (made.isOk()) {
            // What the old code did: say how the first call went.
            const int first = allreduceIsExact(**made, size_t{1} << 20, "none");
            reportFromChild("created; first allreduce " + std::to_string(first));
            return 2;
          }
          reportFromChild(made.status().toString());
          return made.status().code() == StatusCode::kInvalidArgument &&
                         made.status().message().find(want) != std::string::npos
                     ? 0
                     : 3;
        },
        std::chrono::seconds(60));
    ASSERT_EQ(static_cast<int>(outcomes.size()), c.ranks);
    for (const RankOutcome& o : outcomes)
      EXPECT_TRUE(o.exited && o.code == 0)
          << c.name << "=" << c.value << " on rank " << c.odd << " of " << c.ranks << ": "
          << describe(o) << ": " << o.report << "\n  expected: " << want;
  }
}

// The same values of every marked setting on every rank: creation succeeds and the calls they
// govern run (a two-level allreduce in 65536-element segments per local rank, the ring in
// 65536-element segments, the agreement by dissemination, int8 across nodes).
TEST(SettingsProcesses, EqualValuesOnEveryRankWork) {
  const int n = 4, port = freeLoopbackPort();
  auto outcomes = runProcesses(
      n, allRanks(n),
      [&](int rank) {
        EnvMap e = baseEnv(port);
        e["TERSE_NODE"] = rank < 2 ? "left" : "right";
        e["TERSE_LOCAL_RANK"] = std::to_string(rank % 2);
        e["TERSE_TWOLEVEL_SEGMENT_BYTES"] = "524288";
        e["TERSE_SEGMENT_BYTES"] = "262144";
        e["TERSE_SMALL_BYTES"] = "0";
        e["TERSE_AGREEMENT_DIRECT_RANKS"] = "1";
        e["TERSE_ALGO"] = "twolevel";
        return e;
      },
      [&](int) {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) {
          reportFromChild(made.status().toString());
          return 2;
        }
        const size_t count = size_t{1} << 20;
        if (int bad = allreduceIsExact(**made, count, "none")) return bad;
        if (int bad = allreduceIsExact(**made, count, "int8")) return bad;
        auto child = (*made)->split(0, (*made)->rank());
        if (!child.isOk()) {
          reportFromChild("split: " + child.status().toString());
          return 6;
        }
        return allreduceIsExact(**child, count, "int8");
      },
      std::chrono::seconds(90));
  ASSERT_EQ(static_cast<int>(outcomes.size()), n);
  for (const RankOutcome& o : outcomes)
    EXPECT_TRUE(o.exited && o.code == 0) << describe(o) << ": " << o.report;
}

// TERSE_PIPELINE_DEPTH is each rank's own (docs/env.md): a rank that compresses 8 segment rounds
// ahead sends the same messages as its peers at depth 1, in another order, and every compressed
// allreduce (16 segments per rank's chunk) comes out exact on every rank.
TEST(SettingsProcesses, PipelineDepthMayDiffer) {
  const int n = 3, port = freeLoopbackPort();
  auto outcomes = runProcesses(
      n, allRanks(n),
      [&](int rank) {
        EnvMap e = baseEnv(port);
        e["TERSE_SEGMENT_BYTES"] = "262144";
        if (rank == 1) e["TERSE_PIPELINE_DEPTH"] = "8";
        return e;
      },
      [&](int) {
        auto made = Communicator::createFromEnv();
        if (!made.isOk()) {
          reportFromChild(made.status().toString());
          return 2;
        }
        for (const char* codec : {"int8", "bf16", "int8"})
          if (int bad = allreduceIsExact(**made, size_t{3} << 20, codec)) return bad;
        return 0;
      },
      std::chrono::seconds(90));
  ASSERT_EQ(static_cast<int>(outcomes.size()), n);
  for (const RankOutcome& o : outcomes)
    EXPECT_TRUE(o.exited && o.code == 0) << describe(o) << ": " << o.report;
}

}  // namespace
}  // namespace terse::testing
