// TERSE_FAULT: the rule parser, that the backends stay unwrapped when no rule applies, and what
// drop and delay do to ranks as threads (in-process and UCX over TCP). kill needs processes:
// tests/api/fault_process_test.cc.
#include "harness.h"

#include "terse/transport/fault.h"
#include "terse/transport/inproc.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace terse::testing {
namespace {

using std::chrono::milliseconds;

// TERSE_FAULT's rules as a communicator hands them to the factories (which never read the
// environment themselves).
TransportSettings faults(const char* rules) {
  TransportSettings settings;
  auto parsed = parseFaultRules(rules);
  EXPECT_TRUE(parsed.isOk()) << parsed.status().toString();
  if (parsed.isOk()) settings.faults = std::move(parsed).value();
  return settings;
}

TEST(FaultRules, ParseEveryField) {
  auto rules = parseFaultRules(
      "kill:rank=2:after_sends=17;drop:rank=1:peer=0:phase=gather:after_recvs=4;;"
      "delay:ms=50:count=0:tag=0x40/0xff;");
  ASSERT_TRUE(rules.isOk()) << rules.status().toString();
  ASSERT_EQ(rules->size(), 3u);
  const FaultRule& kill = (*rules)[0];
  EXPECT_EQ(kill.action, FaultAction::kKill);
  EXPECT_EQ(kill.rank, 2);
  EXPECT_EQ(kill.peer, -1);
  EXPECT_FALSE(kill.onRecv);
  EXPECT_EQ(kill.after, 17u);
  EXPECT_EQ(kill.tagMask, 0u);
  EXPECT_EQ(kill.text, "kill:rank=2:after_sends=17");
  const FaultRule& drop = (*rules)[1];
  EXPECT_EQ(drop.action, FaultAction::kDrop);
  EXPECT_EQ(drop.peer, 0);
  EXPECT_TRUE(drop.onRecv);
  EXPECT_EQ(drop.after, 4u);
  EXPECT_EQ(drop.tagMask, uint64_t{3} << 18);
  EXPECT_EQ(drop.tagValue, uint64_t{1} << 18);
  const FaultRule& delay = (*rules)[2];
  EXPECT_EQ(delay.action, FaultAction::kDelay);
  EXPECT_EQ(delay.rank, -1);
  EXPECT_EQ(delay.delayMs, 50);
  EXPECT_EQ(delay.count, 0u);
  EXPECT_EQ(delay.after, 0u);
  EXPECT_EQ(delay.tagValue, 0x40u);
  EXPECT_EQ(delay.tagMask, 0xffu);
  auto none = parseFaultRules("");
  ASSERT_TRUE(none.isOk());
  EXPECT_TRUE(none->empty());
}

TEST(FaultRules, MalformedRulesAreErrorsNamingThem) {
  for (const char* bad :
       {"explode", "kill:rank", "kill:rank=-1", "kill:rank=x", "kill:rank=1:rank=2",
        "kill:after_sends=1:after_recvs=2", "kill:phase=scatter", "kill:phase=reduce:tag=1/1",
        "kill:tag=5", "kill:tag=2/1", "kill:ms=5", "drop:count=2", "delay:rank=1",
        "delay:ms=99999999", "kill:color=red", "kill:after_sends=1e3", "kill:peer=16777216",
        ":rank=1",
        // Numbers are decimal or 0x hex only: no white space (strtoull would skip it), no octal.
        "kill:rank=\t1", "kill:rank=\n1", "kill:after_sends=010", "kill:tag=0x/0x1",
        "kill:after_sends=18446744073709551616"}) {
    auto r = parseFaultRules(std::string("delay:ms=1;") + bad);
    ASSERT_FALSE(r.isOk()) << bad << " was accepted";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

// No rule for a rank: the factory hands out the backend itself, so fault injection costs the
// other ranks nothing.
TEST(FaultRules, OnlyNamedRanksAreWrapped) {
  const TransportSettings settings = faults("delay:rank=1:ms=1");
  auto fabric = makeInProcFabric(2).value();
  auto t0 = createInProcTransport(fabric, 0, settings);
  auto t1 = createInProcTransport(fabric, 1, settings);
  ASSERT_TRUE(t0.isOk() && t1.isOk());
  EXPECT_EQ((*t0)->describe(), "inproc");
  EXPECT_EQ((*t1)->describe(), "inproc+faults");
}

// The factories take the rules they are given and read no environment: TERSE_FAULT set here
// (as a communicator would read it, tests/transport/communicator_test.cc) changes nothing.
TEST(FaultRules, FactoriesIgnoreTheEnvironment) {
  setenv("TERSE_FAULT", "delay:ms=1", 1);
  auto fabric = makeInProcFabric(1).value();
  auto t = createInProcTransport(fabric, 0);
  unsetenv("TERSE_FAULT");
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_EQ((*t)->describe(), "inproc");
}

class FaultThreads : public ::testing::TestWithParam<Backend> {};

// Rank 0 drops its connection to rank 1 at its 4th send to rank 1: the first three arrive, the
// 4th send fails naming the rule, rank 1's next receive from rank 0 fails (in-process: the link
// broke; UCX: its timeout), and traffic between the other pairs is untouched.
TEST_P(FaultThreads, DropClosesOneConnectionAtTheCountedSend) {
  const TransportSettings settings = faults("drop:rank=0:peer=1:after_sends=3");
  runThreads(
      GetParam(), 3,
      [&](Transport& t) {
        const int me = t.rank();
        uint32_t value = 0;
        if (me == 0) {
          for (uint32_t i = 0; i < 3; ++i) {
            TransportRequest* r = nullptr;
            ASSERT_TRUE(t.isend(1, 5, &i, sizeof i, &r).isOk());
            waitOk(t, r);
            // A message to rank 2 in between must not count against the peer=1 rule.
            ASSERT_TRUE(t.isend(2, 5, &i, sizeof i, &r).isOk());
            waitOk(t, r);
          }
          TransportRequest* r = nullptr;
          Status s = t.isend(1, 5, &value, sizeof value, &r);
          if (s.isOk()) s = t.wait(r, nullptr, milliseconds(5000));
          EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.toString();
          EXPECT_NE(s.message().find("TERSE_FAULT 'drop:rank=0:peer=1:after_sends=3'"),
                    std::string::npos)
              << s.message();
          // Rank 2 is still reachable.
          ASSERT_TRUE(t.isend(2, 6, &value, sizeof value, &r).isOk());
          waitOk(t, r);
        } else {
          for (uint32_t i = 0; i < 3; ++i) {
            TransportRequest* r = nullptr;
            ASSERT_TRUE(t.irecv(0, 5, &value, sizeof value, &r).isOk());
            waitOk(t, r);
            EXPECT_EQ(value, i);
          }
          TransportRequest* r = nullptr;
          if (me == 1) {
            // Over UCX nobody tells rank 1 (a silently failed link): its timeout ends the wait.
            Status s = t.irecv(0, 5, &value, sizeof value, &r);
            if (s.isOk()) s = t.wait(r, nullptr, milliseconds(1500));
            EXPECT_FALSE(s.isOk()) << "rank 1 received after rank 0 dropped it";
            EXPECT_TRUE(s.code() == StatusCode::kRemoteError || s.code() == StatusCode::kTimeout)
                << s.toString();
            EXPECT_NE(s.message().find("rank 0"), std::string::npos) << s.message();
          } else {
            ASSERT_TRUE(t.irecv(0, 6, &value, sizeof value, &r).isOk());
            waitOk(t, r);
          }
        }
      },
      settings);
}

// Rank 1 drops everything when its third receive completes: that receive reports the drop, and
// rank 0, which goes on sending to it, fails as well.
TEST_P(FaultThreads, DropAllOnAReceiveFailsBothSides) {
  const TransportSettings settings = faults("drop:rank=1:after_recvs=2");
  runThreads(
      GetParam(), 2,
      [&](Transport& t) {
        uint32_t value = 7;
        if (t.rank() == 1) {
          for (int i = 0; i < 3; ++i) {
            TransportRequest* r = nullptr;
            ASSERT_TRUE(t.irecv(0, 1, &value, sizeof value, &r).isOk());
            Status s = t.wait(r, nullptr, milliseconds(5000));
            if (i < 2) {
              EXPECT_TRUE(s.isOk()) << s.toString();
            } else {
              EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.toString();
              EXPECT_NE(s.message().find("dropped all its connections"), std::string::npos)
                  << s.message();
            }
          }
          TransportRequest* r = nullptr;
          Status later = t.isend(0, 2, &value, sizeof value, &r);
          if (later.isOk()) later = t.wait(r, nullptr, milliseconds(5000));
          EXPECT_FALSE(later.isOk()) << "a dropped rank could still send";
          return;
        }
        for (int i = 0; i < 3; ++i) {
          TransportRequest* r = nullptr;
          ASSERT_TRUE(t.isend(1, 1, &value, sizeof value, &r).isOk());
          waitOk(t, r);
        }
        TransportRequest* r = nullptr;
        Status s = t.irecv(1, 3, &value, sizeof value, &r);
        if (s.isOk()) s = t.wait(r, nullptr, milliseconds(5000));
        EXPECT_FALSE(s.isOk());
        EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
      },
      settings);
}

// The tag of failure notices lies in the barrier phase's range, but rules neither count nor hit
// notices: rank 0's notice to rank 1 arrives, and the rule fires at its first real barrier send.
TEST_P(FaultThreads, FailureNoticesAreNeitherCountedNorHit) {
  const TransportSettings settings = faults("drop:rank=0:peer=1:phase=barrier:after_sends=0");
  const uint64_t barrierTag = kFaultPhases[3].value;
  ASSERT_STREQ(kFaultPhases[3].name, "barrier");
  ASSERT_EQ(kFailureNoticeTag & kFaultPhases[3].mask, barrierTag) << "test premise";
  runThreads(
      GetParam(), 2,
      [&](Transport& t) {
        uint32_t value = 9;
        TransportRequest* r = nullptr;
        if (t.rank() == 0) {
          ASSERT_TRUE(t.isend(1, kFailureNoticeTag, &value, sizeof value, &r).isOk());
          waitOk(t, r);
          Status s = t.isend(1, barrierTag, &value, sizeof value, &r);
          if (s.isOk()) s = t.wait(r, nullptr, milliseconds(5000));
          EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.toString();
          EXPECT_NE(s.message().find("TERSE_FAULT"), std::string::npos) << s.message();
        } else {
          value = 0;
          ASSERT_TRUE(t.irecv(0, kFailureNoticeTag, &value, sizeof value, &r).isOk());
          waitOk(t, r);
          EXPECT_EQ(value, 9u);
        }
      },
      settings);
}

// A delayed send still arrives intact; only the matching tags are delayed, `count` times.
TEST_P(FaultThreads, DelayedSendsStillArrive) {
  const TransportSettings settings = faults("delay:rank=0:ms=40:count=2:tag=0x10/0xf0");
  runThreads(
      GetParam(), 2,
      [&](Transport& t) {
        const int kMessages = 6;
        std::vector<uint8_t> buf(1000);
        for (int i = 0; i < kMessages; ++i) {
          const uint64_t tag = i % 2 ? 0x10 : 0x20;  // odd messages match the rule
          TransportRequest* r = nullptr;
          if (t.rank() == 0) {
            fillPattern(buf, 0, 1, i);
            auto start = std::chrono::steady_clock::now();
            ASSERT_TRUE(t.isend(1, tag, buf.data(), buf.size(), &r).isOk());
            auto posting = std::chrono::steady_clock::now() - start;
            waitOk(t, r);
            // sleep_for never returns early, so the hit sends took at least the delay to post.
            if (i == 1 || i == 3) {
              EXPECT_GE(posting, milliseconds(40)) << "message " << i;
            }
          } else {
            ASSERT_TRUE(t.irecv(0, tag, buf.data(), buf.size(), &r).isOk());
            EXPECT_EQ(waitOk(t, r), buf.size());
            EXPECT_EQ(firstMismatch(buf, buf.size(), 0, 1, i), -1) << "message " << i;
          }
        }
      },
      settings);
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultThreads,
                         ::testing::Values(Backend::kInProc, Backend::kUcxTcp),
                         [](const auto& p) { return std::string(backendName(p.param)); });

}  // namespace
}  // namespace terse::testing
