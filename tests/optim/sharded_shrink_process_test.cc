// ShardedOneBitAdam after a shrink, across real processes (issue #48, item 2): ranks step, save
// their parts (the reference: the state as it was), one or two die by SIGKILL, the survivors shrink
// the communicator and the optimizer and go on. With a buddy copy the state they continue from is
// bit-identical to deserialize() of every old rank's part at the smaller world; from a checkpoint
// the dead shard's moments are the checkpoint's; a pair that died together is an error on every
// survivor, naming both; the split step's copy keeps the parameter shard. OneBitAdam (replicated)
// continues too. The stores are file stores (they outlive any rank).
#include "../transport/process_harness.h"

#include "terse/collectives/partition.h"
#include "terse/common/status.h"
#include "terse/communicator.h"
#include "terse/optim/onebit_adam.h"
#include "terse/optim/sharded_onebit_adam.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

namespace terse::testing {
namespace {

constexpr size_t kCount = 1003;  // shards of different lengths at 3 and 4 ranks
constexpr int kWarmup = 3;
constexpr float kLr = 1e-2f;

EnvMap env(const std::string& store) {
  return {{"UCX_TLS", "tcp,self"},
          {"UCX_NET_DEVICES", "lo"},
          {"TERSE_STORE", store},
          {"TERSE_TIMEOUT_MS", "20000"}};
}

struct Case {
  const char* name;
  int world;
  std::vector<int> victims;
  bool buddy;
  int killAfter;     // steps every rank completes before the victims die
  int checkpointAt;  // > 0: every rank saves its part after this step; the survivors pass the
                     // victims' parts of it to shrink()
  bool richState;    // error feedback, local momentum and an int8 parameter all-gather
  bool expectLost;   // shrink() must fail on every survivor, naming the victims
};

// For gtest's (and so ctest's) test names: the case's name, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<float> gradient(int step, int rank) {
  std::vector<float> g(kCount);
  for (size_t i = 0; i < kCount; ++i)
    g[i] = std::sin(0.31f * static_cast<float>(step) + 0.017f * static_cast<float>(i)) *
               static_cast<float>(rank + 1) +
           0.05f * std::cos(static_cast<float>(i * (rank + 2)));
  return g;
}

void writeFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// In a child: the communicator TERSE_RANK / TERSE_WORLD_SIZE / TERSE_STORE describe, or null
// after reporting why not.
std::unique_ptr<Communicator> connectFromEnv() {
  auto made = Communicator::createFromEnv();
  if (!made.isOk()) {
    reportFromChild("create: " + made.status().toString());
    return nullptr;
  }
  return std::move(made).value();
}

// The options every test here starts from: kWarmup steps, the buddy copy as asked.
ShardedOneBitAdamOptions shardedOptions(bool buddy) {
  ShardedOneBitAdamOptions o;
  o.warmupSteps = kWarmup;
  o.buddyCopy = buddy;
  return o;
}

std::vector<std::pair<const void*, size_t>> views(const std::vector<std::vector<uint8_t>>& parts) {
  std::vector<std::pair<const void*, size_t>> out;
  for (const auto& p : parts) out.emplace_back(p.data(), p.size());
  return out;
}

bool isVictim(const Case& c, int rank) {
  return std::find(c.victims.begin(), c.victims.end(), rank) != c.victims.end();
}

// One rank. Reports "<new world> ranks, weights <hash>" (or the shrink's error when expected) and
// returns 0 when every check held.
int rankBody(const Case& c, int rank, const std::string& dir) {
  std::unique_ptr<Communicator> comm = connectFromEnv();
  if (!comm) return 2;
  ShardedOneBitAdamOptions o = shardedOptions(c.buddy);
  if (c.richState) {
    o.errorFeedback = true;
    o.localMomentum = true;
    o.paramCodec = "int8";
  }
  auto opt = ShardedOneBitAdam::create(kCount, c.world, rank, o);
  if (!opt.isOk()) return 3;
  std::vector<float> params(kCount, 0.5f);
  for (int s = 0; s < c.killAfter; ++s) {
    Status st = opt->step(*comm, params.data(), gradient(s, rank).data(), kLr);
    if (!st.isOk()) {
      reportFromChild("step " + std::to_string(s) + ": " + st.toString());
      return 4;
    }
    if (s + 1 == c.checkpointAt) writeFile(dir + "/ckpt_" + std::to_string(rank), opt->serialize());
  }
  // The reference: every rank's state as it was when the victims died.
  writeFile(dir + "/part_" + std::to_string(rank), opt->serialize());
  Status saved = comm->barrier();  // every part is on disk before anyone dies
  if (!saved.isOk()) return 5;
  if (isVictim(c, rank)) raise(SIGKILL);

  // A survivor: the next step fails (a victim is gone) and leaves the state as it was.
  const int64_t before = opt->steps();
  std::vector<float> kept = params;
  Status failed = opt->step(*comm, params.data(), gradient(c.killAfter, rank).data(), kLr);
  if (failed.isOk() || opt->steps() != before) {
    reportFromChild("the step without the victims: " + failed.toString());
    return 6;
  }
  params = kept;  // a failed parameter all-gather may have written some of it
  std::vector<int> gone;
  auto shrunk = comm->shrink({}, &gone);
  if (!shrunk.isOk()) {
    reportFromChild("shrink: " + shrunk.status().toString());
    return 7;
  }
  comm.reset();
  Communicator& next = **shrunk;
  std::vector<std::vector<uint8_t>> lostParts;
  if (c.checkpointAt > 0)
    for (int v : c.victims) lostParts.push_back(readFile(dir + "/ckpt_" + std::to_string(v)));
  Status s = opt->shrink(next, views(lostParts));
  if (c.expectLost) {
    reportFromChild(s.toString());
    return !s.isOk() && opt->worldSize() == c.world && opt->steps() == before ? 0 : 8;
  }
  if (!s.isOk()) {
    reportFromChild("optimizer shrink: " + s.toString());
    return 9;
  }
  if (opt->worldSize() != next.size() || opt->rank() != next.rank()) return 10;

  // The reference state at the smaller world.
  std::vector<std::vector<uint8_t>> parts;
  for (int r = 0; r < c.world; ++r) parts.push_back(readFile(dir + "/part_" + std::to_string(r)));
  auto ref = ShardedOneBitAdam::deserialize(views(parts), next.size(), next.rank());
  if (!ref.isOk()) {
    reportFromChild("reference: " + ref.status().toString());
    return 11;
  }
  if (c.checkpointAt == 0) {
    // Nothing lost: bit for bit the state a checkpoint of every old rank would load as.
    if (opt->serialize() != ref->serialize()) {
      reportFromChild("the shrunk state differs from the reference");
      return 12;
    }
  } else {
    // The victims' elements: the checkpoint's moments; every other element: the present ones.
    std::vector<std::vector<uint8_t>> ckpt;
    for (int r = 0; r < c.world; ++r) ckpt.push_back(readFile(dir + "/ckpt_" + std::to_string(r)));
    std::vector<std::vector<float>> m(c.world), v(c.world);
    for (int r = 0; r < c.world; ++r) {
      auto old = ShardedOneBitAdam::deserialize(views(isVictim(c, r) ? ckpt : parts), c.world, r);
      if (!old.isOk()) return 13;
      m[r] = old->momentum();
      v[r] = old->variance();
    }
    for (size_t i = 0; i < opt->shardLength(); ++i) {
      const size_t e = opt->shardOffset() + i;
      int owner = 0;
      while (e >= chunkRange(kCount, c.world, owner).end()) ++owner;
      const size_t at = e - chunkRange(kCount, c.world, owner).begin;
      if (opt->momentum()[i] != m[owner][at] || opt->variance()[i] != v[owner][at]) {
        reportFromChild("element " + std::to_string(e) + " of old rank " + std::to_string(owner) +
                        " is not the " + (isVictim(c, owner) ? "checkpoint's" : "present") +
                        " state");
        return 14;
      }
    }
    if (opt->steps() != before) return 15;
  }
  // And it goes on: three more steps, the replicas bit-identical on every survivor (the report).
  for (int k = 1; k <= 3; ++k) {
    Status st = opt->step(next, params.data(), gradient(c.killAfter + k, rank).data(), kLr);
    if (!st.isOk()) {
      reportFromChild("step after the shrink: " + st.toString());
      return 16;
    }
  }
  reportFromChild(std::to_string(next.size()) + " ranks, weights " +
                  std::to_string(weightsHash(params)));
  return 0;
}

class ShardedShrink : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedShrink, SurvivorsGoOn) {
  const Case c = GetParam();
  const std::string dir = makeTempDir();
  std::vector<int> ranks;
  for (int r = 0; r < c.world; ++r) ranks.push_back(r);
  auto outcomes = runProcesses(
      c.world, ranks, [&](int) { return env(dir); },
      [&](int rank) { return rankBody(c, rank, dir); }, std::chrono::seconds(180));
  ASSERT_EQ(static_cast<int>(outcomes.size()), c.world);
  std::string first;
  for (int r = 0; r < c.world; ++r) {
    const RankOutcome& o = outcomes[r];
    if (isVictim(c, r)) {
      EXPECT_EQ(o.signal, SIGKILL) << describe(o);
      continue;
    }
    EXPECT_TRUE(o.exited && o.code == 0) << describe(o) << ": " << o.report;
    std::printf("rank %d: %s\n", r, o.report.c_str());
    if (c.expectLost) {
      std::string names = "old rank(s) ";
      for (size_t i = 0; i < c.victims.size(); ++i)
        names += (i ? ", " : "") + std::to_string(c.victims[i]);
      EXPECT_NE(o.report.find(names + " is lost"), std::string::npos) << o.report;
      EXPECT_NE(o.report.find("is gone too"), std::string::npos) << o.report;
      continue;
    }
    if (first.empty()) first = o.report;
    EXPECT_EQ(o.report, first) << "rank " << r << " ends with other weights";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optim, ShardedShrink,
    ::testing::Values(
        // After the freeze, every section of the state (residual, local momentum, master shard).
        Case{"BuddyPairRichState", 4, {2}, true, 6, 0, true, false},
        // In warm-up, rank 0 (its buddy is rank 1).
        Case{"BuddyInWarmup", 4, {0}, true, 2, 0, false, false},
        // An odd world: the three ranks form a ring, rank 1's copy is on rank 0.
        Case{"BuddyRingOfThree", 3, {1}, true, 5, 0, false, false},
        // No buddy copy: the victim's shard from the checkpoint after step 4.
        Case{"FromCheckpoint", 4, {3}, false, 6, 4, true, false},
        // Both members of a pair: nothing holds their shards.
        Case{"PairDiedTogether", 4, {0, 1}, true, 5, 0, false, true}),
    [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

// The split step (reduce() + update(), FSDPShardedOneBitAdam's): the buddy copy keeps the
// partner's parameter shard too, since nobody else has it. 3 ranks (a ring), rank 2 dies after
// the freeze; shrinkParts gives every survivor every old rank's part as it was saved and rank 2's
// parameter shard as it was.
TEST(ShardedShrinkSplitStep, TheBuddyCopyKeepsTheParameterShard) {
  const std::string dir = makeTempDir();
  constexpr int kWorld = 3, kVictim = 2;
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2}, [&](int) { return env(dir); },
      [&](int rank) -> int {
        std::unique_ptr<Communicator> comm = connectFromEnv();
        if (!comm) return 2;
        const ShardedOneBitAdamOptions o = shardedOptions(true);
        auto opt = ShardedOneBitAdam::create(kCount, kWorld, rank, o);
        if (!opt.isOk()) return 3;
        std::vector<float> shard(opt->shardLength(), 0.25f), reduced(opt->shardLength());
        for (int s = 0; s < 5; ++s) {
          Status st = opt->reduce(*comm, gradient(s, rank).data(), reduced.data());
          if (st.isOk()) st = opt->update(*comm, shard.data(), reduced.data(), kLr);
          if (!st.isOk()) {
            reportFromChild("step: " + st.toString());
            return 4;
          }
        }
        writeFile(dir + "/part_" + std::to_string(rank), opt->serialize());
        std::vector<uint8_t> bytes(4 * shard.size());
        std::memcpy(bytes.data(), shard.data(), bytes.size());
        writeFile(dir + "/shard_" + std::to_string(rank), bytes);
        if (!comm->barrier().isOk()) return 5;
        if (rank == kVictim) raise(SIGKILL);
        if (opt->reduce(*comm, gradient(5, rank).data(), reduced.data()).isOk()) return 6;
        auto shrunk = comm->shrink();
        if (!shrunk.isOk()) return 7;
        comm.reset();
        auto got = opt->shrinkParts(**shrunk);
        if (!got.isOk()) {
          reportFromChild("shrinkParts: " + got.status().toString());
          return 8;
        }
        for (int r = 0; r < kWorld; ++r)
          if (got->parts[r] != readFile(dir + "/part_" + std::to_string(r))) {
            reportFromChild("old rank " + std::to_string(r) + "'s part differs");
            return 9;
          }
        const std::vector<uint8_t> victim = readFile(dir + "/shard_2");
        if (got->params[kVictim].size() * 4 != victim.size() ||
            std::memcmp(got->params[kVictim].data(), victim.data(), victim.size()) != 0 ||
            !got->params[0].empty() || !got->params[1].empty()) {
          reportFromChild("the victim's parameter shard is not what it saved");
          return 10;
        }
        if (opt->worldSize() != kWorld) return 11;  // left as it was
        reportFromChild("ok");
        return 0;
      },
      std::chrono::seconds(180));
  ASSERT_NO_FATAL_FAILURE(expectVictimKilledOthersPassed(outcomes, kWorld, kVictim));
}

// An FSDP model wrapped per layer has an optimizer core per layer, each with its buddy copy: 70
// cores on one world communicator, more than the world's 62 splits. Their refreshes share one
// pair communicator (Communicator::splitOnce); before, each core split its own and the 63rd
// core's first refresh failed (kUnsupported, after its step). 3 processes (a ring) step every
// core past the freeze, rank 2 dies, every survivor's cores shrink from the copies to exactly
// the state the saved parts load as at 2 ranks, and step on over the new world's pair.
TEST(ShardedShrinkManyCores, SeventyCoresShareOnePairCommunicator) {
  const std::string dir = makeTempDir();
  constexpr int kWorld = 3, kVictim = 2, kCores = 70, kSteps = 5;
  constexpr size_t kSmall = 101;  // shards of 34, 34 and 33 elements, then 51 and 50
  auto part = [&](int core, int rank) {
    return dir + "/part_" + std::to_string(core) + "_" + std::to_string(rank);
  };
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2}, [&](int) { return env(dir); },
      [&](int rank) -> int {
        std::unique_ptr<Communicator> comm = connectFromEnv();
        if (!comm) return 2;
        const ShardedOneBitAdamOptions o = shardedOptions(true);
        std::vector<ShardedOneBitAdam> cores;
        std::vector<std::vector<float>> params;
        for (int c = 0; c < kCores; ++c) {
          auto opt = ShardedOneBitAdam::create(kSmall, kWorld, rank, o);
          if (!opt.isOk()) return 3;
          cores.push_back(std::move(opt).value());
          params.emplace_back(kSmall, 0.01f * static_cast<float>(c));
        }
        // Every core steps in turn, as FSDP steps its units: the same order on every rank.
        auto stepAll = [&](Communicator& on, int s) -> Status {
          for (int c = 0; c < kCores; ++c) {
            Status st = cores[c].step(on, params[c].data(), gradient(s + c, rank).data(), kLr);
            if (!st.isOk())
              return st.withContext("core " + std::to_string(c) + ", step " + std::to_string(s));
          }
          return Status::ok();
        };
        for (int s = 0; s < kSteps; ++s) {
          Status st = stepAll(*comm, s);
          if (!st.isOk()) {
            reportFromChild(st.toString());
            return 4;
          }
        }
        for (int c = 0; c < kCores; ++c) writeFile(part(c, rank), cores[c].serialize());
        if (!comm->barrier().isOk()) return 5;
        if (rank == kVictim) raise(SIGKILL);
        if (cores[0].step(*comm, params[0].data(), gradient(kSteps, rank).data(), kLr).isOk())
          return 6;
        auto shrunk = comm->shrink();
        if (!shrunk.isOk()) {
          reportFromChild("shrink: " + shrunk.status().toString());
          return 7;
        }
        comm.reset();
        Communicator& next = **shrunk;
        for (int c = 0; c < kCores; ++c) {
          // The dead rank's shard of every core comes from its copy on rank 1.
          Status st = cores[c].shrink(next);
          if (!st.isOk()) {
            reportFromChild("core " + std::to_string(c) + " shrink: " + st.toString());
            return 8;
          }
          std::vector<std::vector<uint8_t>> parts;
          for (int r = 0; r < kWorld; ++r) parts.push_back(readFile(part(c, r)));
          auto ref = ShardedOneBitAdam::deserialize(views(parts), next.size(), next.rank());
          if (!ref.isOk() || cores[c].serialize() != ref->serialize()) {
            reportFromChild("core " + std::to_string(c) +
                            ": the shrunk state differs from the "
                            "saved parts' at 2 ranks");
            return 9;
          }
        }
        // On over the new world: its own pair, shared again.
        for (int s = kSteps + 1; s <= kSteps + 2; ++s) {
          Status st = stepAll(next, s);
          if (!st.isOk()) {
            reportFromChild("after the shrink: " + st.toString());
            return 10;
          }
        }
        std::vector<float> all;
        for (const auto& p : params) all.insert(all.end(), p.begin(), p.end());
        reportFromChild("weights " + std::to_string(weightsHash(all)));
        return 0;
      },
      std::chrono::seconds(180));
  ASSERT_NO_FATAL_FAILURE(expectVictimKilledOthersPassed(outcomes, kWorld, kVictim));
  EXPECT_EQ(outcomes[0].report, outcomes[1].report) << "the survivors end with other weights";
}

// OneBitAdam (replicated state): 4 ranks past the freeze with onebit, rank 2 SIGKILLed; the
// survivors' failed step leaves the state as it was, the shrink keeps the moments and re-lays out
// the residuals for 3 ranks, and 3 more steps leave the survivors bit-identical.
// reload: the survivors go back to the state they saved before the failed step through
// serialize()/deserialize(), as a training loop that rolls back does (terse-train), so the
// optimizer has not stepped on any communicator since it was made.
void oneBitAdamSurvivorsGoOn(bool reload) {
  const std::string dir = makeTempDir();
  constexpr int kWorld = 4, kVictim = 2;
  auto outcomes = runProcesses(
      kWorld, {0, 1, 2, 3}, [&](int) { return env(dir); },
      [&](int rank) -> int {
        std::unique_ptr<Communicator> comm = connectFromEnv();
        if (!comm) return 2;
        OneBitAdamOptions o;
        o.warmupSteps = kWarmup;
        auto opt = OneBitAdam::create(kCount, o);
        if (!opt.isOk()) return 3;
        std::vector<float> params(kCount, 0.5f);
        for (int s = 0; s < 6; ++s) {
          std::vector<float> g = gradient(s, rank);
          if (!opt->step(*comm, params.data(), g.data(), kLr).isOk()) return 4;
        }
        if (!comm->barrier().isOk()) return 5;
        if (rank == kVictim) raise(SIGKILL);
        const std::vector<float> m = opt->momentum(), v = opt->variance(), kept = params;
        const std::vector<uint8_t> saved = opt->serialize();
        std::vector<float> g = gradient(6, rank);
        if (opt->step(*comm, params.data(), g.data(), kLr).isOk() || opt->steps() != 6) return 6;
        params = kept;
        if (reload) {
          auto back = OneBitAdam::deserialize(saved.data(), saved.size());
          if (!back.isOk()) return 11;
          opt = std::move(back);
        }
        auto shrunk = comm->shrink();
        if (!shrunk.isOk()) return 7;
        comm.reset();
        Status s = opt->shrink(**shrunk);
        if (!s.isOk()) {
          reportFromChild("shrink: " + s.toString());
          return 8;
        }
        if (opt->momentum() != m || opt->variance() != v || opt->steps() != 6) return 9;
        // The server residual now lies on this rank's chunk of the new world's allreduce.
        const auto chunk = Communicator::allreduceChunk(kCount, 3, (*shrunk)->rank());
        if (opt->feedback().serverWorldSize() != 3 ||
            opt->feedback().serverOffset() != chunk.first ||
            opt->feedback().serverLength() != chunk.second) {
          reportFromChild("the server residual is not laid out for 3 ranks");
          return 12;
        }
        for (int k = 6; k < 9; ++k) {
          g = gradient(k, rank);
          Status st = opt->step(**shrunk, params.data(), g.data(), kLr);
          if (!st.isOk()) {
            reportFromChild("step after the shrink: " + st.toString());
            return 10;
          }
        }
        reportFromChild(std::to_string((*shrunk)->size()) + " ranks, weights " +
                        std::to_string(weightsHash(params)));
        return 0;
      },
      std::chrono::seconds(180));
  ASSERT_NO_FATAL_FAILURE(expectVictimKilledOthersPassed(outcomes, kWorld, kVictim));
  std::string first;
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    if (first.empty()) first = outcomes[r].report;
    EXPECT_EQ(outcomes[r].report, first) << "rank " << r << " ends with other weights";
  }
  EXPECT_EQ(first.rfind("3 ranks, weights ", 0), 0u) << first;
}

TEST(OneBitAdamShrink, SurvivorsGoOnBitIdentical) { oneBitAdamSurvivorsGoOn(false); }

TEST(OneBitAdamShrink, SurvivorsGoOnAfterReloadingTheirState) { oneBitAdamSurvivorsGoOn(true); }

}  // namespace
}  // namespace terse::testing
