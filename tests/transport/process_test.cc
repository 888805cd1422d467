// Ranks as forked processes over UCX, bootstrapped the way a real job is: Communicator::
// createFromEnv reading TERSE_RANK / TERSE_WORLD_SIZE / TERSE_STORE. Failure cases need real
// processes: a rank killed with SIGKILL mid-transfer, a rank that never starts, ranks that
// disagree on the world size.
#include "harness.h"
#include "patterns.h"
#include "process_harness.h"
#include "terse/api/internal.h"
#include "terse/communicator.h"
#include "terse/transport/transport.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <thread>

extern char** environ;

namespace terse::testing {
namespace {

EnvMap ucxEnv(const std::string& tls, const std::string& store, int timeoutMs) {
  return {{"UCX_TLS", tls},
          {"UCX_NET_DEVICES", "lo"},
          {"TERSE_STORE", store},
          {"TERSE_TIMEOUT_MS", std::to_string(timeoutMs)}};
}

// In a child: removes every UCX_* variable, as for a user who set none (the default transport
// choice of issue #18). ucxEnv("") below sets none either.
void clearUcxVariables() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "UCX_", 4) == 0)
      if (const char* eq = std::strchr(*e, '=')) names.emplace_back(*e, eq - *e);
  for (const auto& n : names) unsetenv(n.c_str());
}

// UCX variables only when a TLS list is given.
EnvMap envFor(const std::string& tls, const std::string& store, int timeoutMs) {
  if (!tls.empty()) return ucxEnv(tls, store, timeoutMs);
  return {{"TERSE_STORE", store}, {"TERSE_TIMEOUT_MS", std::to_string(timeoutMs)}};
}

std::string tcpStore() { return "127.0.0.1:" + std::to_string(freeLoopbackPort()); }

std::vector<int> allRanks(int n) {
  std::vector<int> r(n);
  for (int i = 0; i < n; ++i) r[i] = i;
  return r;
}

void expectAllExitedZero(const std::vector<RankOutcome>& outcomes) {
  for (const auto& o : outcomes) EXPECT_TRUE(o.exited && o.code == 0) << describe(o);
}

// Child body: communicator from the environment, then the traffic patterns and a barrier.
int trafficBody(int rank) {
  auto comm = Communicator::createFromEnv();
  if (!comm.isOk()) {
    reportFromChild(comm.status().toString());
    return 2;
  }
  Communicator& c = **comm;
  if (c.rank() != rank) return 3;
  ringBothDirections(transportOf(c), ringSizes(c.size()));
  manyInFlight(transportOf(c), c.size() <= 4 ? 32 : 12, 2);
  Status b = c.barrier();
  if (!b.isOk()) {
    reportFromChild(b.toString());
    return 4;
  }
  return 0;
}

struct Param {
  const char* tls;
  int size;
};

class ProcessTrafficTest : public ::testing::TestWithParam<Param> {};

TEST_P(ProcessTrafficTest, RingManyInFlightAndBarrier) {
  const Param p = GetParam();
  const std::string store = tcpStore();
  auto outcomes = runProcesses(
      p.size, allRanks(p.size), [&](int) { return ucxEnv(p.tls, store, 120000); }, trafficBody,
      std::chrono::seconds(240));
  expectAllExitedZero(outcomes);
}

std::vector<Param> trafficParams() {
  std::vector<Param> out;
  for (const char* tls : {"tcp", "shm"})
    for (int n : {1, 2, 3, 4, 8}) out.push_back({tls, n});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Ucx, ProcessTrafficTest, ::testing::ValuesIn(trafficParams()),
                         [](const auto& pinfo) {
                           return std::string(pinfo.param.tls) + "_" +
                                  std::to_string(pinfo.param.size) + "ranks";
                         });

// The file store bootstraps the same way as the TCP one.
TEST(ProcessBootstrap, FileStore) {
  const std::string dir = makeTempDir();
  ASSERT_FALSE(dir.empty());
  auto outcomes = runProcesses(
      3, allRanks(3), [&](int) { return ucxEnv("tcp", dir + "/store", 60000); },
      [](int) {
        auto comm = Communicator::createFromEnv();
        if (!comm.isOk()) {
          reportFromChild(comm.status().toString());
          return 2;
        }
        Status b = (*comm)->barrier();
        reportFromChild(b.toString());
        return b.isOk() ? 0 : 4;
      },
      std::chrono::seconds(120));
  expectAllExitedZero(outcomes);
  (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

// Rank 3 starts 64 MiB transfers with everyone and SIGKILLs itself while they are in flight.
// Every other rank must fail (not hang) with an error that names rank 3.
class KillTest : public ::testing::TestWithParam<const char*> {};

TEST_P(KillTest, SigkilledRankIsNamedByEveryOther) {
  const int kWorld = 4, kVictim = 3;
  const size_t kBytes = size_t{64} << 20;
  const std::string store = tcpStore();
  const char* tls = GetParam();
  auto outcomes = runProcesses(
      kWorld, allRanks(kWorld), [&](int) { return envFor(tls, store, 30000); },
      [&](int rank) {
        if (*tls == '\0') clearUcxVariables();
        auto comm = Communicator::createFromEnv();
        if (!comm.isOk()) {
          reportFromChild("setup: " + comm.status().toString());
          return 2;
        }
        Communicator& c = **comm;
        Transport& t = transportOf(c);
        if (!c.barrier().isOk()) return 5;  // everyone is connected before the kill
        std::vector<uint8_t> out(kBytes, 0x11), in(kBytes);
        if (rank == kVictim) {
          std::vector<TransportRequest*> reqs(kWorld - 1);
          std::vector<std::vector<uint8_t>> ins(kWorld - 1, std::vector<uint8_t>(kBytes));
          for (int p = 0; p < kWorld - 1; ++p) {
            (void)t.isend(p, 9, out.data(), kBytes, &reqs[p]);
            (void)t.irecv(p, 9, ins[p].data(), kBytes, &reqs[p]);
          }
          for (int i = 0; i < 2000; ++i) t.progress();  // mid-transfer
          ::kill(::getpid(), SIGKILL);
        }
        TransportRequest *r = nullptr, *s = nullptr;
        Status rs = t.irecv(kVictim, 9, in.data(), kBytes, &r);
        Status ss = t.isend(kVictim, 9, out.data(), kBytes, &s);
        // One of the two may complete (the victim may have received or sent before dying);
        // the other must fail naming it. Then a later operation with it must fail too.
        if (rs.isOk()) rs = t.wait(r, nullptr, c.timeout());
        if (ss.isOk()) ss = t.wait(s, nullptr, c.timeout());
        Status failed = !rs.isOk() ? rs : ss;
        if (failed.isOk()) {
          TransportRequest* again = nullptr;
          uint8_t byte;
          failed = t.irecv(kVictim, 10, &byte, 1, &again);
          if (failed.isOk()) failed = t.wait(again, nullptr, c.timeout());
        }
        reportFromChild(failed.toString());
        return 0;
      },
      std::chrono::seconds(120));
  for (const auto& o : outcomes) {
    if (o.rank == kVictim) {
      EXPECT_EQ(o.signal, SIGKILL) << describe(o);
      continue;
    }
    EXPECT_TRUE(o.exited && o.code == 0) << describe(o);
    EXPECT_NE(o.report.find("rank 3"), std::string::npos) << describe(o);
    EXPECT_TRUE(o.report.rfind("remote error:", 0) == 0 || o.report.rfind("timeout:", 0) == 0)
        << describe(o);
  }
}

// "": no UCX_* variables, so same-node ranks use shared memory without UCX's failure reporting
// and terse watches them itself.
INSTANTIATE_TEST_SUITE_P(Ucx, KillTest, ::testing::Values("tcp", "shm", ""),
                         [](const auto& p) { return *p.param ? p.param : "default"; });

// Regression (found by the fault matrix, tests/api/fault_process_test.cc): over shared memory a
// send to a rank that has died failed with kSystemError ("Shared memory error") instead of the
// kRemoteError naming the dead rank that transport.h promises. Rank 1 dies right after the
// barrier; rank 0's eager sends to it, posted without progressing in between so the process
// watch cannot have noticed first, must fail as remote errors naming rank 1. They are 4 KiB:
// larger than a shared-memory FIFO element, so UCX has to attach the dead rank's segment (the
// barrier's 1-byte messages never did), which is what fails.
TEST(ProcessKill, SendToDeadPeerOverSharedMemoryIsARemoteError) {
  const std::string store = tcpStore();
  auto outcomes = runProcesses(
      2, allRanks(2), [&](int) { return ucxEnv("posix,cma,self", store, 20000); },
      [&](int rank) {
        auto comm = Communicator::createFromEnv();
        if (!comm.isOk()) {
          reportFromChild("setup: " + comm.status().toString());
          return 2;
        }
        Communicator& c = **comm;
        if (!c.barrier().isOk()) return 3;
        if (rank == 1) ::kill(::getpid(), SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        std::vector<uint8_t> message(4096, 42);
        Status s;
        for (int i = 0; i < 64 && s.isOk(); ++i) {
          TransportRequest* r = nullptr;
          s = transportOf(c).isend(1, 77, message.data(), message.size(), &r);
          if (s.isOk()) s = transportOf(c).wait(r, nullptr, c.timeout());
        }
        reportFromChild(s.toString());
        return 0;
      },
      std::chrono::seconds(60));
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[1].signal, SIGKILL) << describe(outcomes[1]);
  EXPECT_TRUE(outcomes[0].exited && outcomes[0].code == 0) << describe(outcomes[0]);
  EXPECT_EQ(outcomes[0].report.rfind("remote error:", 0), 0u) << describe(outcomes[0]);
  EXPECT_NE(outcomes[0].report.find("rank 1"), std::string::npos) << describe(outcomes[0]);
}

// Regression (found by the fault matrix's delay cases): rank 1 sends its last messages, sees
// its sends complete and exits, as the fastest rank does at the end of every job. Rank 0 was
// busy meanwhile; what rank 1 sent is already on rank 0's side (its shared-memory FIFO, its
// socket), so every receive of it must still succeed: those posted before rank 1 left, and
// those posted after rank 0's transport has noticed that rank 1 is gone. Over shared memory the
// process watch used to fail the peer before the FIFO was read, and a receive posted after that
// was refused although its message was waiting in UCX's unexpected queue.
class ExitedPeerTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ExitedPeerTest, MessagesOfAPeerThatExitedAreStillDelivered) {
  const int kEarly = 8, kLate = 8;
  const size_t kBytes = 1024;
  const std::string store = tcpStore();
  auto outcomes = runProcesses(
      2, allRanks(2), [&](int) { return ucxEnv(GetParam(), store, 20000); },
      [&](int rank) {
        auto comm = Communicator::createFromEnv();
        if (!comm.isOk()) {
          reportFromChild("setup: " + comm.status().toString());
          return 2;
        }
        Transport& t = transportOf(**comm);
        if (!(*comm)->barrier().isOk()) return 3;
        std::vector<std::vector<uint8_t>> bufs(kEarly + kLate, std::vector<uint8_t>(kBytes));
        if (rank == 1) {
          for (int i = 0; i < kEarly + kLate; ++i) {
            fillPattern(bufs[i], 1, 0, i);
            TransportRequest* r = nullptr;
            Status s = t.isend(0, 40 + i, bufs[i].data(), kBytes, &r);
            if (s.isOk()) s = t.wait(r, nullptr, (*comm)->timeout());
            if (!s.isOk()) {
              reportFromChild(s.toString());
              return 4;
            }
          }
          return 0;  // the communicator closes, the process exits
        }
        std::vector<TransportRequest*> reqs(kEarly + kLate);
        for (int i = 0; i < kEarly; ++i)
          if (!t.irecv(1, 40 + i, bufs[i].data(), kBytes, &reqs[i]).isOk()) return 5;
        // Busy elsewhere while rank 1 sends and exits, then progress long enough for the
        // transport to notice that rank 1 is gone (the process watch polls every 100 ms).
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        while (std::chrono::steady_clock::now() < until) t.progress();
        for (int i = kEarly; i < kEarly + kLate; ++i) {
          Status s = t.irecv(1, 40 + i, bufs[i].data(), kBytes, &reqs[i]);
          if (!s.isOk()) {
            reportFromChild("late receive " + std::to_string(i) + ": " + s.toString());
            return 6;
          }
        }
        for (int i = 0; i < kEarly + kLate; ++i) {
          size_t got = 0;
          Status s = t.wait(reqs[i], &got, (*comm)->timeout());
          if (!s.isOk()) {
            reportFromChild("message " + std::to_string(i) + ": " + s.toString());
            return 7;
          }
          if (got != kBytes || firstMismatch(bufs[i], kBytes, 1, 0, i) != -1) return 8;
        }
        return 0;
      },
      std::chrono::seconds(60));
  expectAllExitedZero(outcomes);
}

INSTANTIATE_TEST_SUITE_P(Ucx, ExitedPeerTest, ::testing::Values("tcp,self", "posix,cma,self"),
                         [](const auto& p) { return p.param[0] == 't' ? "tcp" : "shm"; });

// A world of three where rank 2 never starts: the others fail at rendezvous with a timeout that
// names rank 2.
TEST(ProcessBootstrap, MissingRankIsATimeoutNamingIt) {
  const std::string store = tcpStore();
  auto outcomes = runProcesses(
      3, {0, 1}, [&](int) { return ucxEnv("tcp", store, 1500); },
      [](int) {
        auto comm = Communicator::createFromEnv();
        reportFromChild(comm.status().toString());
        return comm.isOk() ? 1 : 0;
      },
      std::chrono::seconds(60));
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.exited && o.code == 0) << describe(o);
    // Rank 0 times out; rank 1 either times out too or, if rank 0 gave up a moment earlier and
    // took its store along, reports the lost store. Either way it names the missing rank.
    if (o.rank == 0)
      EXPECT_EQ(o.report.rfind("timeout:", 0), 0u) << describe(o);
    else
      EXPECT_TRUE(o.report.rfind("timeout:", 0) == 0 || o.report.rfind("remote error:", 0) == 0)
          << describe(o);
    // The store's server (rank 0) always names the missing rank; rank 1 does when it timed out
    // itself (under heavy load it can instead lose the store first, which it then reports).
    if (o.rank == 0 || o.report.rfind("timeout:", 0) == 0) {
      EXPECT_NE(o.report.find("rank 2 (1 missing) never arrived"), std::string::npos)
          << describe(o);
    }
  }
}

// Rank 1 believes the world has three ranks, rank 0 two: both fail fast with kInvalidUsage.
TEST(ProcessBootstrap, WorldSizeMismatchIsDetected) {
  const std::string store = tcpStore();
  auto outcomes = runProcesses(
      2, {0, 1},
      [&](int rank) {
        EnvMap env = ucxEnv("tcp", store, 20000);
        if (rank == 1) env["TERSE_WORLD_SIZE"] = "3";
        return env;
      },
      [](int) {
        auto comm = Communicator::createFromEnv();
        reportFromChild(comm.status().toString());
        return comm.isOk() ? 1 : 0;
      },
      std::chrono::seconds(60));
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.exited && o.code == 0) << describe(o);
    EXPECT_EQ(o.report.rfind("invalid usage:", 0), 0u) << describe(o);
    EXPECT_NE(o.report.find("size"), std::string::npos) << describe(o);
  }
}

// Issue #18: with no UCX_* variables, ranks on one node talk over shared memory, and ranks on
// different nodes of the topology (hosts emulated with TERSE_NODE) do not: they keep UCX's
// failure-reporting endpoints, which leave shared memory out. Asserted from the transport's own
// report (describe(): what UCX chose for the endpoints to this rank's node). Ranks 0 and 1 share
// node "a", rank 2 is alone on node "b"; traffic crosses both kinds of pairs.
TEST(SameNode, SharedMemoryWithoutUcxVariablesOnlyInsideANode) {
  const std::string store = tcpStore();
  auto outcomes = runProcesses(
      3, allRanks(3),
      [&](int rank) {
        EnvMap env = envFor("", store, 60000);
        env["TERSE_NODE"] = rank < 2 ? "a" : "b";
        return env;
      },
      [](int rank) {
        clearUcxVariables();
        auto comm = Communicator::createFromEnv();
        if (!comm.isOk()) {
          reportFromChild("setup: " + comm.status().toString());
          return 2;
        }
        Communicator& c = **comm;
        ringBothDirections(transportOf(c), ringSizes(c.size()));
        Status b = c.barrier();
        reportFromChild(transportOf(c).describe() + (b.isOk() ? "" : " barrier: " + b.toString()));
        return b.isOk() ? 0 : 4;
      },
      std::chrono::seconds(120));
  ASSERT_EQ(outcomes.size(), 3u);
  expectAllExitedZero(outcomes);
  for (int r : {0, 1}) {
    // "ucx(all; node: sysv,cma shared memory)": which transports depends on the machine.
    EXPECT_EQ(outcomes[r].report.rfind("ucx(all; node: ", 0), 0u) << describe(outcomes[r]);
    EXPECT_NE(outcomes[r].report.find(" shared memory)"), std::string::npos)
        << describe(outcomes[r]);
  }
  EXPECT_EQ(outcomes[2].report, "ucx(all)") << describe(outcomes[2]);
}

// A same-node peer over shared memory (no UCX_* variables) fails, and the survivor, waiting to
// receive from it, learns it from the transport: a remote error naming the peer, not the
// 60-second timeout. UCX reports nothing on these endpoints, so each way of failing has its own
// path in the transport:
//  - kill: SIGKILL in the middle of a 64 MiB send (the process watch; UCX's shared-memory
//    errors of the dead peer's segment);
//  - abort: the peer aborts its communicator and stays alive (its leaving notice);
//  - close: the peer destroys its communicator and stays alive (its leaving notice).
class SameNodeFailureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SameNodeFailureTest, SurvivorGetsARemoteErrorNamingThePeer) {
  const std::string how = GetParam();
  const size_t kBytes = size_t{64} << 20;
  const std::string store = tcpStore();
  auto outcomes = runProcesses(
      2, allRanks(2), [&](int) { return envFor("", store, 60000); },
      [&](int rank) {
        clearUcxVariables();
        auto comm = Communicator::createFromEnv();
        if (!comm.isOk()) {
          reportFromChild("setup: " + comm.status().toString());
          return 2;
        }
        Communicator& c = **comm;
        if (transportOf(c).describe().find("shared memory") == std::string::npos) {
          reportFromChild("not over shared memory: " + transportOf(c).describe());
          return 3;
        }
        if (!c.barrier().isOk()) return 4;
        std::vector<uint8_t> buf(kBytes, 0x5a);
        if (rank == 1) {
          if (how == "kill") {
            TransportRequest* r = nullptr;
            (void)transportOf(c).isend(0, 9, buf.data(), kBytes, &r);
            for (int i = 0; i < 2000; ++i) transportOf(c).progress();
            ::kill(::getpid(), SIGKILL);
          } else if (how == "abort") {
            c.abort(errorInternal("rank 1 stops on purpose"));
          } else {
            comm->reset();
          }
          // Alive well past the survivor's report, so that its process watch cannot be what
          // told it.
          std::this_thread::sleep_for(std::chrono::seconds(2));
          return 0;
        }
        const auto start = std::chrono::steady_clock::now();
        TransportRequest* r = nullptr;
        // A tag rank 1 never sends (the killed rank's 64 MiB went to tag 9): only the failure can
        // end this receive.
        Status s = transportOf(c).irecv(1, 10, buf.data(), kBytes, &r);
        if (s.isOk()) s = transportOf(c).wait(r, nullptr, c.timeout());
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
        reportFromChild(s.toString() + " [after " + std::to_string(ms) + " ms]");
        return 0;
      },
      std::chrono::seconds(120));
  ASSERT_EQ(outcomes.size(), 2u);
  const RankOutcome& survivor = outcomes[0];
  EXPECT_TRUE(survivor.exited && survivor.code == 0) << describe(survivor);
  EXPECT_EQ(survivor.report.rfind("remote error:", 0), 0u) << describe(survivor);
  EXPECT_NE(survivor.report.find("rank 1"), std::string::npos) << describe(survivor);
  if (how == "kill") {
    EXPECT_EQ(outcomes[1].signal, SIGKILL) << describe(outcomes[1]);
  } else {
    EXPECT_TRUE(outcomes[1].exited && outcomes[1].code == 0) << describe(outcomes[1]);
    // Told by the peer, not by its exit (2 s later) nor the timeout.
    EXPECT_NE(survivor.report.find("aborted or closed its transport"), std::string::npos)
        << describe(survivor);
  }
}

INSTANTIATE_TEST_SUITE_P(Default, SameNodeFailureTest, ::testing::Values("kill", "abort", "close"),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace terse::testing
