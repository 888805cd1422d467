// The public collective API across real processes over UCX (TCP and shared memory): every codec
// gives bit-identical results on every rank and `none` matches the serial sum; async handles
// complete in order; a rank killed mid-collective makes every survivor fail with an error
// naming it, within the timeout.
#include "../transport/process_harness.h"

#include "terse/common/status.h"
#include "terse/communicator.h"
#include "terse/kernels/numeric.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

namespace terse::testing {
namespace {

float valueAt(int rank, size_t i, int call) {
  uint64_t h = num::mix64((uint64_t(rank) << 40) ^ (i * 0x9e3779b97f4a7c15ull) ^ uint64_t(call));
  return static_cast<float>(h >> 40) / 16777216.0f - 0.5f;
}

EnvMap env(const std::string& tls, int port, int timeoutMs) {
  return {{"UCX_TLS", tls},
          {"UCX_NET_DEVICES", "lo"},
          {"TERSE_STORE", "127.0.0.1:" + std::to_string(port)},
          {"TERSE_TIMEOUT_MS", std::to_string(timeoutMs)}};
}

const std::vector<std::string> kCodecs = {"none", "fp16",   "bf16",
                                          "int8", "onebit", "topk:ratio=0.05"};
constexpr size_t kCount = 100003;

// Each rank allreduces with every codec (two calls in flight at once per codec) and writes its
// results to <dir>/rank<r>.bin for the parent to compare.
int allreduceBody(int rank, const std::string& dir,
                  const std::vector<std::string>& codecs = kCodecs, size_t count = kCount) {
  auto made = Communicator::createFromEnv();
  if (!made.isOk()) {
    reportFromChild(made.status().toString());
    return 2;
  }
  Communicator& comm = **made;
  std::ofstream out(dir + "/rank" + std::to_string(rank) + ".bin", std::ios::binary);
  for (const std::string& codec : codecs) {
    const char* spec = codec.c_str();
    std::vector<float> a(count), b(count), ra(count), rb(count);
    for (size_t i = 0; i < count; ++i) a[i] = valueAt(rank, i, 0), b[i] = valueAt(rank, i, 1);
    auto ef = ErrorFeedback::create(spec, count);
    if (!ef.isOk()) return 3;
    CollectiveOptions withEf{spec, &ef.value()};
    Work first =
        comm.allreduceAsync(a.data(), ra.data(), count, DataType::kFloat32, ReduceOp::kSum, withEf);
    Work second = comm.allreduceAsync(b.data(), rb.data(), count, DataType::kFloat32,
                                      ReduceOp::kAvg, CollectiveOptions{spec, nullptr});
    Status s1 = second.wait(), s0 = first.wait();
    if (!s0.isOk() || !s1.isOk()) {
      reportFromChild(std::string(spec) + ": " + (s0.isOk() ? s1 : s0).toString());
      return 4;
    }
    out.write(reinterpret_cast<const char*>(ra.data()), count * 4);
    out.write(reinterpret_cast<const char*>(rb.data()), count * 4);
  }
  Status b = comm.barrier();
  return b.isOk() ? 0 : 5;
}

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What allreduceBody's ranks wrote: every rank exited cleanly and holds rank 0's bits, and
// `none` (the first block) is the serial sum within float32's bound.
void checkRanksAgreeAndNoneExact(const std::vector<RankOutcome>& outcomes, const std::string& dir,
                                 int n, size_t codecCount, size_t count = kCount) {
  for (const auto& o : outcomes)
    ASSERT_TRUE(o.exited && o.code == 0) << describe(o) << " " << o.report;
  std::string r0 = readAll(dir + "/rank0.bin");
  ASSERT_EQ(r0.size(), codecCount * 2 * count * 4);
  for (int r = 1; r < n; ++r)
    EXPECT_TRUE(readAll(dir + "/rank" + std::to_string(r) + ".bin") == r0)
        << "rank " << r << " holds different bits than rank 0";
  const float* got = reinterpret_cast<const float*>(r0.data());
  for (size_t i = 0; i < count; ++i) {
    double ref = 0, mag = 0;
    for (int r = 0; r < n; ++r) ref += valueAt(r, i, 0), mag += std::fabs(valueAt(r, i, 0));
    ASSERT_NEAR(got[i], ref, n * 0x1p-23 * mag + 1e-7) << "element " << i;
  }
}

class CollectiveProcesses : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(CollectiveProcesses, EveryCodecBitIdenticalAndNoneExact) {
  const auto [tls, n] = GetParam();
  const std::string dir = makeTempDir();
  const int port = freeLoopbackPort();
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  auto outcomes = runProcesses(
      n, ranks, [&](int) { return env(tls, port, 60000); },
      [&](int r) { return allreduceBody(r, dir); }, std::chrono::seconds(240));
  checkRanksAgreeAndNoneExact(outcomes, dir, n, kCodecs.size());
}

INSTANTIATE_TEST_SUITE_P(Ucx, CollectiveProcesses,
                         ::testing::Combine(::testing::Values("tcp,self", "posix,cma,self"),
                                            ::testing::Values(2, 3, 4)),
                         [](const auto& p) {
                           std::string tl = std::get<0>(p.param)[0] == 't' ? "tcp" : "shm";
                           return tl + "_" + std::to_string(std::get<1>(p.param)) + "ranks";
                         });

// Two-level as processes (issue #18): ranks laid out on nodes by TERSE_NODE, no UCX_* transport
// list (same-node peers over shared memory, the others over the network, as users get them),
// every codec: the ranks hold the same bits and `none` is the sum within float32's bound. A
// 2+1 layout cannot run two-level and runs flat; the results must hold all the same.
class TwoLevelProcesses : public ::testing::TestWithParam<std::vector<int>> {};

// Ranks on the nodes `nodeOf` names (TERSE_NODE), each allreducing `count` elements with every
// codec of `codecs` (allreduceBody), `extra` added to their environment; checks what they wrote.
void runOnNodes(const std::vector<int>& nodeOf, const std::vector<std::string>& codecs,
                size_t count, const EnvMap& extra = {}) {
  const int n = static_cast<int>(nodeOf.size());
  const std::string dir = makeTempDir();
  const int port = freeLoopbackPort();
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  auto outcomes = runProcesses(
      n, ranks,
      [&](int r) {
        EnvMap e = {{"UCX_NET_DEVICES", "lo"},
                    {"TERSE_STORE", "127.0.0.1:" + std::to_string(port)},
                    {"TERSE_TIMEOUT_MS", "60000"},
                    {"TERSE_NODE", "node" + std::to_string(nodeOf[r])}};
        for (const auto& kv : extra) e[kv.first] = kv.second;
        return e;
      },
      [&](int r) { return allreduceBody(r, dir, codecs, count); }, std::chrono::seconds(240));
  checkRanksAgreeAndNoneExact(outcomes, dir, n, codecs.size(), count);
}

TEST_P(TwoLevelProcesses, EveryCodecBitIdenticalAndNoneExact) {
  runOnNodes(GetParam(),
             {"none", "fp16", "bf16", "int8", "fp8", "mxfp8", "mxfp4", "int4", "onebit",
              "topk:ratio=0.05"},
             kCount);
}

// The pipelined two-level allreduce as processes: a tensor of three segments and a ragged
// fourth (TERSE_TWOLEVEL_SEGMENT_BYTES of 65536 elements per local rank), each segment's
// cross-node step on the communicator's lane thread while the next segment's node step runs on
// its collective thread, two calls in flight at once, error feedback on one of them.
TEST(TwoLevelProcessesPipelined, SegmentsBitIdenticalAndNoneExact) {
  runOnNodes(
      {0, 0, 1, 1}, {"none", "int8", "onebit"}, 3 * 131072 + 4099,
      {{"TERSE_ALGO", "twolevel"}, {"TERSE_TWOLEVEL_SEGMENT_BYTES", std::to_string(131072 * 4)}});
}

std::string layoutName(const ::testing::TestParamInfo<std::vector<int>>& info) {
  std::map<int, int> perNode;
  for (int node : info.param) perNode[node]++;
  std::string name = std::to_string(perNode.size()) + "nodes";
  for (const auto& kv : perNode) name += "_" + std::to_string(kv.second);
  return name + (info.param.size() == 6 ? "_interleaved" : "");
}

INSTANTIATE_TEST_SUITE_P(Layouts, TwoLevelProcesses,
                         ::testing::Values(std::vector<int>{0, 0, 1, 1},
                                           std::vector<int>{0, 1, 0, 1, 0, 1},
                                           std::vector<int>{0, 0, 1}),
                         layoutName);

// Rank 2 dies (SIGKILL) while the others are inside a large compressed allreduce: each survivor
// must return an error that names rank 2 well before the harness deadline.
TEST(CollectiveProcesses, KilledRankIsNamedBySurvivors) {
  for (const char* tls : {"tcp,self", "posix,cma,self"}) {
    const int n = 3, port = freeLoopbackPort();
    auto outcomes = runProcesses(
        n, {0, 1, 2}, [&](int) { return env(tls, port, 20000); },
        [&](int rank) {
          auto made = Communicator::createFromEnv();
          if (!made.isOk()) return 2;
          Communicator& comm = **made;
          const size_t count = size_t{8} << 20;
          std::vector<float> in(count, 1.0f), out(count);
          if (!comm.allreduce(in.data(), out.data(), 1000, DataType::kFloat32, ReduceOp::kSum)
                   .isOk())
            return 3;
          if (rank == 2) {
            usleep(20000);  // let the others enter the big call
            raise(SIGKILL);
          }
          auto start = std::chrono::steady_clock::now();
          Status s = comm.allreduce(in.data(), out.data(), count, DataType::kFloat32,
                                    ReduceOp::kSum, CollectiveOptions{"int8", nullptr});
          double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          reportFromChild(s.toString() + formatString(" (after %.1f s)", secs));
          if (s.isOk()) return 4;
          if (s.message().find("rank 2") == std::string::npos) return 5;
          return secs < 25.0 ? 0 : 6;
        },
        std::chrono::seconds(90));
    ASSERT_EQ(outcomes.size(), 3u);
    EXPECT_EQ(outcomes[2].signal, SIGKILL) << describe(outcomes[2]);
    for (int r = 0; r < 2; ++r)
      EXPECT_TRUE(outcomes[r].exited && outcomes[r].code == 0)
          << tls << ": " << describe(outcomes[r]) << ": " << outcomes[r].report;
  }
}

// A rank that dies fails the calls of every communicator that contains it (issue #18): 4 ranks
// split into {0, 2} and {1, 3}; rank 2 dies while rank 0 is inside their communicator's large
// allreduce. Rank 0's call fails naming the victim, and then every survivor's call on the
// parent fails too, all well before the timeout. The other split communicator holds no dead
// rank: its call is reported, not judged (its ranks share connections with rank 0, which may
// have given up on them).
TEST(CollectiveProcesses, KilledRankFailsEverySplitCommunicatorHoldingIt) {
  for (const char* tls : {"tcp,self", "posix,cma,self"}) {
    const int n = 4, port = freeLoopbackPort();
    auto outcomes = runProcesses(
        n, {0, 1, 2, 3}, [&](int) { return env(tls, port, 20000); },
        [&](int rank) {
          auto made = Communicator::createFromEnv();
          if (!made.isOk()) return 2;
          Communicator& comm = **made;
          auto split = comm.split(rank % 2, rank);
          if (!split.isOk() || !split.value()) return 3;
          Communicator& half = *split.value();
          const size_t count = size_t{8} << 20;
          std::vector<float> in(count, 1.0f), out(count);
          for (Communicator* c : {&comm, &half})
            if (!c->allreduce(in.data(), out.data(), 1000, DataType::kFloat32, ReduceOp::kSum)
                     .isOk())
              return 3;
          if (rank == 2) {
            usleep(20000);  // let rank 0 enter the big call
            raise(SIGKILL);
          }
          std::string report;
          auto timed = [&](Communicator& c, size_t elems, double* secs) {
            auto start = std::chrono::steady_clock::now();
            Status s = c.allreduce(in.data(), out.data(), elems, DataType::kFloat32, ReduceOp::kSum,
                                   CollectiveOptions{"int8", nullptr});
            *secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            return s;
          };
          double halfSecs = 0, parentSecs = 0;
          Status inHalf = timed(half, count, &halfSecs);
          Status inParent = timed(comm, 4096, &parentSecs);
          report = formatString("split: %s (after %.1f s); parent: %s (after %.1f s)",
                                inHalf.toString().c_str(), halfSecs, inParent.toString().c_str(),
                                parentSecs);
          reportFromChild(report);
          if (rank == 0) {
            if (inHalf.isOk()) return 4;
            if (inHalf.message().find("rank 2") == std::string::npos) return 5;
            if (halfSecs > 25.0) return 6;
          }
          if (inParent.isOk()) return 7;
          return parentSecs < 25.0 ? 0 : 8;
        },
        std::chrono::seconds(120));
    ASSERT_EQ(outcomes.size(), 4u);
    EXPECT_EQ(outcomes[2].signal, SIGKILL) << describe(outcomes[2]);
    for (int r : {0, 1, 3})
      EXPECT_TRUE(outcomes[r].exited && outcomes[r].code == 0)
          << tls << ": rank " << r << ": " << describe(outcomes[r]) << ": " << outcomes[r].report;
  }
}

}  // namespace
}  // namespace terse::testing
