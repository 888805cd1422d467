// The whole chain (engine, SimGrid transport, platform) against what the algorithms must cost:
// the ring's bandwidth bound, and terse-sim's command line.
#include "sim_harness.h"

#include "terse/collectives/auto_select.h"
#include "terse/collectives/engine.h"
#include "terse/transport/group.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace terse::testing {
namespace {

// Uncompressed ring allreduce on 8 ranks, one per node, 10 Gbit/s NICs: every rank sends
// 2 (n-1)/n of the tensor through its NIC, so the time is at least that over 10 Gbit/s, and a
// pipelined ring comes within a few percent of it (latencies, descriptors, pipeline fill).
TEST(SimModel, RingAllreduceMeetsTheBandwidthBound) {
  const std::string out = inChild([] {
    const size_t count = size_t{4} << 20;  // 16 MiB of float32
    auto p = testPlatform(8);
    p.ranksPerNode = 1;
    std::vector<float> in(count), res(count);
    sim::SimTransportOptions opt;
    opt.copyPayload = false;
    std::vector<double> took(8);
    auto codec = makeCodec("none");
    EXPECT_TRUE(codec.isOk());
    auto r = sim::runSimulation(p, opt, [&](Transport& t) {
      CollectiveEngine engine(t, std::chrono::milliseconds(60000));
      engine.setSmallBytes(0);  // ring
      CollectiveOp op;
      op.send = in.data();
      op.recv = res.data();
      op.count = count;
      op.codec = codec->get();
      const double start = sim::simNow();
      EXPECT_TRUE(engine.run(op).isOk());
      took[t.rank()] = sim::simNow() - start;
    });
    EXPECT_TRUE(r.isOk());
    const double bound = 2.0 * 7 / 8 * count * 4 * 8 / (p.nicGbps * 1e9);
    for (double t : took) {
      EXPECT_GE(t, bound);
      EXPECT_LE(t, bound * 1.03);
    }
    return std::string();
  });
}

// The auto codec times its calibration on the engine's clock, which the simulation sets to
// simulated time (as terse-sim does for the algorithm choice): its model of `none` at 2^20
// elements is then what that allreduce takes on the simulated cluster. Before, the codec choice
// always read steady_clock and modelled how long the host took to simulate the call. The NICs
// are slow (0.1 Gbit/s: about half a simulated second per call) so that the two cannot meet.
TEST(SimModel, TheAutoCodecIsCalibratedOnSimulatedTime) {
  inChild([] {
    const int n = 4;
    const size_t big = size_t{1} << 20;
    auto p = testPlatform(n);
    p.nicGbps = 0.1;
    auto none = makeCodec("none");
    EXPECT_TRUE(none.isOk());
    std::vector<double> predicted(n, 0), took(n, 0);
    std::vector<std::string> picks(n);
    auto r = sim::runSimulation(p, sim::SimTransportOptions{}, [&](Transport& t) {
      CollectiveEngine engine(t, std::chrono::hours(24));  // simulated time
      engine.setClock(sim::simNow);
      auto sel = AutoSelector::create("auto");
      EXPECT_TRUE(sel.isOk());
      std::vector<float> in(big, 1.0f), out(big);
      CollectiveOp op;
      op.send = in.data();
      op.recv = out.data();
      op.count = 1000;
      auto codec = (*sel)->choose(engine, op);
      EXPECT_TRUE(codec.isOk()) << codec.status().toString();
      if (!codec.isOk()) return;
      picks[t.rank()] = codec.value()->spec();
      CollectiveOp probe;
      probe.count = big;
      for (const auto& [spec, seconds] : (*sel)->predict(probe, n))
        if (spec == "none") predicted[t.rank()] = seconds;
      // The calibration's own largest collective of `none`, timed here.
      op.count = big;
      op.codec = none->get();
      EXPECT_TRUE(engine.barrier().isOk());
      const double start = sim::simNow();
      EXPECT_TRUE(engine.run(op).isOk());
      took[t.rank()] = sim::simNow() - start;
    });
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    const double slowest = *std::max_element(took.begin(), took.end());
    EXPECT_GT(slowest, 0.3) << "a 4 MiB allreduce over 0.1 Gbit/s NICs";
    for (int rank = 0; rank < n; ++rank) {
      EXPECT_NEAR(predicted[rank], slowest, 0.02 * slowest) << "rank " << rank;
      EXPECT_EQ(picks[rank], picks[0]);
    }
    return std::string();
  });
}

std::string runCli(const std::string& args, int* code) {
  const std::string cmd = std::string(TERSE_SIM_BIN) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = p ? ::pclose(p) : -1;
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(SimCli, RejectsBadArgumentsWithAMessage) {
  int code = 0;
  std::string out = runCli("--world 0", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("world size"), std::string::npos) << out;
  out = runCli("--codec nosuch", &code);
  EXPECT_EQ(code, 2) << out;
  out = runCli("--bytes lots", &code);
  EXPECT_EQ(code, 2) << out;
  out = runCli("--codec int8 --model /nonexistent.json", &code);
  EXPECT_EQ(code, 2) << out;
  out = runCli("--frobnicate", &code);
  EXPECT_EQ(code, 2) << out;
  out = runCli("--world 2 --bytes 4K --simgrid-cfg no/such:1", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("SimGrid rejected"), std::string::npos) << out;
}

// A compressed call writes its row. onebit's wire is ~1/31 of float32, but its scatter-reduce
// sends 6 of every 8 chunks off the node where none's ring sends half its hops there, so the
// busiest NIC carries well over 10x fewer bytes, not 31x.
TEST(SimCli, WritesJsonWithNicBytes) {
  const std::string dir = ::testing::TempDir();
  int code = 0;
  uint64_t nic[2] = {0, 0};
  const char* codecs[2] = {"none", "onebit"};
  for (int i = 0; i < 2; ++i) {
    const std::string json = dir + "/sim-" + codecs[i] + ".json";
    std::string out = runCli(std::string("--world 8 --ranks-per-node 2 --bytes 4M --codec ") +
                                 codecs[i] + " --assume-gbps 100,100 --json " + json,
                             &code);
    ASSERT_EQ(code, 0) << out;
    EXPECT_NE(out.find("busbw"), std::string::npos) << out;
    std::ifstream f(json);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    const size_t at = text.find("\"max_nic_bytes\": ");
    ASSERT_NE(at, std::string::npos) << text;
    nic[i] = std::stoull(text.substr(at + 17));
    EXPECT_NE(text.find("\"time_us\": "), std::string::npos);
  }
  EXPECT_GT(nic[1], 0u);
  EXPECT_LT(nic[1] * 10, nic[0]) << "onebit " << nic[1] << " none " << nic[0];
}

// The engine's two-level allreduce runs in the simulation unchanged: across nodes only each
// node's share of the compressed tensor leaves it, so an int8 call's busiest NIC carries a
// fraction of what the flat scatter-reduce puts through it, and the call is faster.
TEST(SimCli, TwoLevelCutsTheNicBytes) {
  const std::string dir = ::testing::TempDir();
  double nic[2] = {0, 0}, time[2] = {0, 0};
  const char* algos[2] = {"flat", "twolevel"};
  for (int i = 0; i < 2; ++i) {
    const std::string json = dir + "/sim-" + algos[i] + ".json";
    int code = 0;
    std::string out = runCli(std::string("--world 16 --ranks-per-node 8 --bytes 4M --codec int8 "
                                         "--algo ") +
                                 algos[i] + " --json " + json,
                             &code);
    ASSERT_EQ(code, 0) << out;
    std::ifstream f(json);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    const size_t a = text.find("\"max_nic_bytes\": "), b = text.find("\"time_us\": ");
    ASSERT_TRUE(a != std::string::npos && b != std::string::npos) << text;
    nic[i] = std::stod(text.substr(a + 17));
    time[i] = std::stod(text.substr(b + 11));
  }
  EXPECT_GT(nic[1], 0);
  EXPECT_LT(nic[1] * 3, nic[0]) << "two-level " << nic[1] << " flat " << nic[0];
  EXPECT_LT(time[1], time[0]);
}

// Ranks sharing one set of workspaces (terse-sim's default, what lets thousands of ranks fit)
// simulate exactly what ranks with their own workspaces do: same time, same bytes, flat and
// two-level, compressed and not.
TEST(SimCli, SharedWorkspacesChangeNothingButMemory) {
  for (const char* args : {"--codec none --algo ring", "--codec int8 --algo flat",
                           "--codec onebit --algo twolevel", "--codec none --algo twolevel"}) {
    std::string outs[2];
    for (int own = 0; own < 2; ++own) {
      int code = 0;
      outs[own] = runCli(std::string("--world 16 --ranks-per-node 4 --bytes 4M ") + args +
                             (own ? " --own-workspaces" : ""),
                         &code);
      ASSERT_EQ(code, 0) << outs[own];
      // The result row without its last column (this run's wall time).
      const size_t row = outs[own].rfind("\n", outs[own].size() - 2) + 1;
      outs[own] = outs[own].substr(row, outs[own].find_last_of(' ') - row);
    }
    EXPECT_EQ(outs[0], outs[1]) << args;
  }
}

// The engine's own arithmetic is charged (ArithmeticHook): an uncompressed ring allreduce on one
// node of 4 ranks, 4 MiB of float32, at an assumed 1 GB/s for sums and conversions takes longer
// than the compute-free prediction by each rank's passes: the conversion into float32 (the
// whole tensor), the sums of 3 of its 4 chunks and the conversion of its own chunk back, 8 MB
// at 1 GB/s = 8 ms, less what the links overlap. A model without `none`'s row is refused by name.
TEST(SimCli, TheEnginesOwnArithmeticIsCharged) {
  auto timeUs = [](const std::string& extra) {
    const std::string json = ::testing::TempDir() + "/sim-arith.json";
    int code = 0;
    std::string out = runCli(
        "--world 4 --ranks-per-node 4 --bytes 4M --codec none --algo ring "
        "--json " +
            json + " " + extra,
        &code);
    EXPECT_EQ(code, 0) << out;
    std::ifstream f(json);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    const size_t at = text.find("\"time_us\": ");
    EXPECT_NE(at, std::string::npos) << text;
    return at == std::string::npos ? 0.0 : std::stod(text.substr(at + 11));
  };
  const double free = timeUs(""), charged = timeUs("--assume-gbps 1,1");
  const double passes = 4.0 * (1 << 20) * (1.0 + 3.0 / 4 + 1.0 / 4) / 1e9 * 1e6;  // 8 MB, us
  EXPECT_GT(charged - free, 0.9 * passes) << "free " << free << " us, charged " << charged;
  EXPECT_LT(charged - free, 1.05 * passes) << "free " << free << " us, charged " << charged;

  const std::string model = ::testing::TempDir() + "/no-none.json";
  FILE* f = std::fopen(model.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f,
               "{\"benchmark\": \"codecs\", \"results\": [{\"codec\": "
               "\"int8:block=256,round=nearest,seed=0\", \"wire_bytes\": 1, "
               "\"compress_gbps\": 2.5, \"decompress_accumulate_gbps\": 4.0}]}\n");
  std::fclose(f);
  int code = 0;
  std::string out = runCli("--world 4 --bytes 4M --codec int8 --model " + model, &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("none"), std::string::npos) << out;
}

}  // namespace
}  // namespace terse::testing

namespace terse::testing {
namespace {

// The two-level algorithms will run the engine over group transports (transport/group.h) of
// the world's transport; here two groups of the simulated world ({0,2} and {1,3}) each run a
// real allreduce at once, and each gets its own group's sum.
TEST(SimModel, GroupTransportsRunTheEngine) {
  inChild([] {
    const size_t count = 100000;
    auto codec = makeCodec("none");
    EXPECT_TRUE(codec.isOk());
    auto r = sim::runSimulation(testPlatform(4), sim::SimTransportOptions{}, [&](Transport& t) {
      const int me = t.rank();
      std::vector<int> members = {me % 2, me % 2 + 2};
      auto group = createGroupTransport(t, members, 1 + me % 2);
      ASSERT_TRUE(group.isOk()) << group.status().toString();
      std::vector<float> in(count, float(me + 1)), out(count, 0.0f);
      CollectiveEngine engine(**group, std::chrono::milliseconds(60000));
      CollectiveOp op;
      op.send = in.data();
      op.recv = out.data();
      op.count = count;
      op.codec = codec->get();
      Status s = engine.run(op);
      ASSERT_TRUE(s.isOk()) << s.toString();
      const float want = float(members[0] + 1 + members[1] + 1);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], want) << "rank " << me << " at " << i;
    });
    EXPECT_TRUE(r.isOk());
    return std::string();
  });
}

}  // namespace
}  // namespace terse::testing
