// transport.h's contract on the SimGrid transport (the parts that apply to a simulation: order,
// sizes, tags, truncation, argument checks, timeouts, a rank giving up), using the traffic
// patterns of tests/transport, plus the time the platform gives simple transfers.
#include "harness.h"
#include "patterns.h"
#include "sim_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace terse::testing {
namespace {

using sim::runSimulation;
using sim::SimTransportOptions;

void simulate(int n, const std::function<void(Transport&)>& fn) {
  inChild([&] {
    auto r = runSimulation(testPlatform(n), SimTransportOptions{}, fn);
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    return std::string();
  });
}

class SimTransportTest : public ::testing::TestWithParam<int> {};

TEST_P(SimTransportTest, RingBothDirectionsByteExact) {
  const int n = GetParam();
  simulate(n, [&](Transport& t) { ringBothDirections(t, ringSizes(n)); });
}

TEST_P(SimTransportTest, ManyInFlightKeepPerTagOrder) {
  const int n = GetParam();
  simulate(n, [&](Transport& t) { manyInFlight(t, n <= 4 ? 64 : 24, 3); });
}

// test() polling also completes everything (simulated time passes while it polls), and a receive
// posted for one tag is never satisfied by a message on another.
TEST_P(SimTransportTest, TagsNeverCrossAndTestPolls) {
  simulate(GetParam(), [&](Transport& t) {
    const int n = t.size(), me = t.rank();
    const int to = (me + 1) % n, from = (me + n - 1) % n;
    uint64_t a = 0xA000 + me, b = 0xB000 + me, gotA = 0, gotB = 0;
    TransportRequest *ra, *rb, *sa, *sb;
    ASSERT_TRUE(t.irecv(from, kMaxTransportTag, &gotB, sizeof gotB, &rb).isOk());
    ASSERT_TRUE(t.isend(to, 7, &a, sizeof a, &sa).isOk());
    ASSERT_TRUE(t.isend(to, kMaxTransportTag, &b, sizeof b, &sb).isOk());
    ASSERT_TRUE(t.irecv(from, 7, &gotA, sizeof gotA, &ra).isOk());
    std::vector<TransportRequest*> pending = {ra, rb, sa, sb};
    for (int polls = 0; !pending.empty() && polls < 1000000; ++polls) {
      for (size_t i = 0; i < pending.size();) {
        bool done = false;
        size_t bytes = 0;
        Status s = t.test(pending[i], &done, &bytes);
        ASSERT_TRUE(s.isOk()) << s.toString();
        if (done) {
          EXPECT_EQ(bytes, sizeof(uint64_t));
          pending.erase(pending.begin() + i);
        } else {
          ++i;
        }
      }
    }
    EXPECT_TRUE(pending.empty());
    EXPECT_EQ(gotA, 0xA000u + from);
    EXPECT_EQ(gotB, 0xB000u + from);
  });
}

TEST_P(SimTransportTest, TruncationIsAnErrorNotSilent) {
  simulate(GetParam(), [&](Transport& t) {
    const int n = t.size(), me = t.rank();
    const int to = (me + 1) % n, from = (me + n - 1) % n;
    std::vector<uint8_t> big(100000, 0x5A), small(1000 + 64, 0xEE);
    TransportRequest *r, *s;
    ASSERT_TRUE(t.irecv(from, 1, small.data(), 1000, &r).isOk());
    ASSERT_TRUE(t.isend(to, 1, big.data(), big.size(), &s).isOk());
    size_t bytes = 0;
    Status rs = t.wait(r, &bytes, kTestTimeout);
    EXPECT_EQ(rs.code(), StatusCode::kInvalidUsage) << rs.toString();
    (void)t.wait(s, &bytes, kTestTimeout);
    for (size_t i = 0; i < small.size(); ++i) ASSERT_EQ(small[i], 0xEE) << "written at " << i;
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, SimTransportTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "ranks";
                         });

TEST(SimTransportErrors, BadArgumentsAreRejected) {
  simulate(2, [](Transport& t) {
    TransportRequest* r = nullptr;
    uint8_t b = 0;
    EXPECT_EQ(t.isend(2, 0, &b, 1, &r).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.irecv(-1, 0, &b, 1, &r).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.isend(0, kMaxTransportTag + 1, &b, 1, &r).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.irecv(0, 0, nullptr, 1, &r).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.isend(0, 0, &b, 1, nullptr).code(), StatusCode::kInvalidArgument);
  });
}

// The timeout is simulated time, and the error names the peer.
TEST(SimTransportErrors, UnmatchedReceiveTimesOutNamingPeer) {
  simulate(2, [](Transport& t) {
    if (t.rank() != 0) return;
    uint64_t v = 0;
    TransportRequest* r;
    ASSERT_TRUE(t.irecv(1, 3, &v, sizeof v, &r).isOk());
    const double before = sim::simNow();
    Status s = t.wait(r, nullptr, std::chrono::milliseconds(250));
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.toString();
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.toString();
    EXPECT_NEAR(sim::simNow() - before, 0.25, 1e-6);
  });
}

// A rank that aborts fails the operations its peers are waiting on with kRemoteError naming it,
// and its own later operations with its reason.
TEST(SimTransportErrors, AbortedPeerFailsPendingAndLaterOps) {
  simulate(2, [](Transport& t) {
    uint64_t v = 0;
    TransportRequest* r;
    if (t.rank() == 1) {
      sim::chargeCompute(0.001);  // rank 0 is waiting by now
      t.abort(errorInternal("rank 1 gives up"));
      Status s = t.isend(0, 3, &v, sizeof v, &r);
      if (s.isOk()) s = t.wait(r, nullptr, kTestTimeout);
      EXPECT_NE(s.message().find("gives up"), std::string::npos) << s.toString();
      return;
    }
    ASSERT_TRUE(t.irecv(1, 3, &v, sizeof v, &r).isOk());
    Status s = t.wait(r, nullptr, kTestTimeout);
    EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.toString();
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.toString();
    EXPECT_LT(sim::simNow(), 0.01) << "the waiter must learn at once, not at its timeout";
  });
}

// disconnect() fails both sides' operations with the peer at once, each naming why, and leaves
// the other peers alone.
TEST(SimTransportErrors, DisconnectFailsBothSidesOnly) {
  simulate(3, [](Transport& t) {
    uint64_t v = 7, got = 0;
    TransportRequest *r, *s;
    if (t.rank() == 0) {
      sim::chargeCompute(0.001);  // rank 1 is waiting by now
      t.disconnect(1, errorInternal("test cuts rank 1"));
      Status later = t.isend(1, 3, &v, sizeof v, &s);
      if (later.isOk()) later = t.wait(s, nullptr, kTestTimeout);
      EXPECT_EQ(later.code(), StatusCode::kRemoteError) << later.toString();
      EXPECT_NE(later.message().find("test cuts rank 1"), std::string::npos) << later.toString();
      ASSERT_TRUE(t.isend(2, 3, &v, sizeof v, &s).isOk());
      EXPECT_EQ(waitOk(t, s), sizeof v);
    } else if (t.rank() == 1) {
      ASSERT_TRUE(t.irecv(0, 3, &got, sizeof got, &r).isOk());
      Status w = t.wait(r, nullptr, kTestTimeout);
      EXPECT_EQ(w.code(), StatusCode::kRemoteError) << w.toString();
      EXPECT_NE(w.message().find("rank 0 closed its connection"), std::string::npos)
          << w.toString();
      EXPECT_LT(sim::simNow(), 0.01);
    } else {
      ASSERT_TRUE(t.irecv(0, 3, &got, sizeof got, &r).isOk());
      EXPECT_EQ(waitOk(t, r), sizeof got);
      EXPECT_EQ(got, 7u);
    }
  });
}

// Rank 0 sends buf to rank 2 (tag 1) and both wait for it; the other ranks do nothing.
void sendZeroToTwo(Transport& t, std::vector<uint8_t>& buf) {
  TransportRequest* q;
  if (t.rank() == 0) {
    ASSERT_TRUE(t.isend(2, 1, buf.data(), buf.size(), &q).isOk());
    EXPECT_EQ(waitOk(t, q), buf.size());
  } else if (t.rank() == 2) {
    ASSERT_TRUE(t.irecv(0, 1, buf.data(), buf.size(), &q).isOk());
    EXPECT_EQ(waitOk(t, q), buf.size());
  }
}

// One message between nodes takes its size over the NIC plus the route's latencies (two NICs
// and the switch): the platform's figures, exactly.
TEST(SimPlatform, OneTransferTakesBandwidthAndLatency) {
  const std::string out = inChild([] {
    const size_t bytes = 1 << 20;
    auto p = testPlatform(4);
    double took = 0;
    auto r = runSimulation(p, SimTransportOptions{}, [&](Transport& t) {
      std::vector<uint8_t> buf(bytes);
      sendZeroToTwo(t, buf);
      if (t.rank() == 2) took = sim::simNow();
    });
    EXPECT_TRUE(r.isOk());
    const double expect =
        bytes * 8 / (p.nicGbps * 1e9) + (2 * p.nicLatencyUs + p.switchLatencyUs) * 1e-6;
    EXPECT_NEAR(took, expect, expect * 1e-6);
    return std::string();
  });
}

// Many ranks, many messages: two rounds of an all-to-all (as the engine's descriptor exchange
// does at every call) among 256 ranks complete byte-exact, and the traffic counters add up.
// Each host's put issuer hands over to a successor every 512 puts or drains (sim_transport.cc),
// which the second round crosses.
TEST(SimTransportScale, AllToAllOf256RanksCompletes) {
  inChild([]() -> std::string {
    const int n = 256;
    auto r = runSimulation(testPlatform(n), SimTransportOptions{}, [&](Transport& t) {
      const int me = t.rank();
      for (uint64_t round = 0; round < 2; ++round) {
        std::vector<uint64_t> got(n, 0), mine(n);
        std::vector<TransportRequest*> reqs;
        for (int p = 0; p < n; ++p) {
          if (p == me) continue;
          TransportRequest* q;
          ASSERT_TRUE(t.irecv(p, round, &got[p], sizeof(uint64_t), &q).isOk());
          reqs.push_back(q);
        }
        for (int k = 1; k < n; ++k) {
          const int p = (me + k) % n;
          mine[p] = (round << 40) | (static_cast<uint64_t>(me) << 20) | p;
          TransportRequest* q;
          ASSERT_TRUE(t.isend(p, round, &mine[p], sizeof(uint64_t), &q).isOk());
          reqs.push_back(q);
        }
        for (TransportRequest* q : reqs) EXPECT_EQ(waitOk(t, q), sizeof(uint64_t));
        for (int p = 0; p < n; ++p) {
          const uint64_t want = (round << 40) | (static_cast<uint64_t>(p) << 20) | me;
          ASSERT_EQ(got[p], p == me ? 0 : want) << p;
        }
      }
    });
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    if (!r.isOk()) return std::string();
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(r->traffic[i].messagesSent, 2u * (n - 1));
      EXPECT_EQ(r->traffic[i].messagesReceived, 2u * (n - 1));
      EXPECT_EQ(r->traffic[i].bytesSent, 2u * (n - 1) * sizeof(uint64_t));
    }
    return std::string();
  });
}

// Senders whose first messages to one receiver are matched at the same simulated time: their
// hosts' put issuers all add a mailbox to the receiver's pool at once, and each transfer must
// get a mailbox of its own. Two issuers once took the same one (SimWorld::takeSlot reserved the
// new slot after a simcall): the receiver's host then took the other, still running, put out
// of it, let go of that get later, and the running put wrote into the freed get when it ended
// (heap corruption; terse-sim crashed on two-level and auto calls from 16 to 64 ranks). The
// messages differ in size, so they end in another order than they were put; the small
// messages after them make the world let go of the first ended transfers (every 256 kept)
// while the longest still runs; every byte must arrive.
TEST(SimTransportScale, SendersGrowingOneReceiversMailboxPoolAtOnceEachGetTheirOwn) {
  const int n = 8;
  simulate(n, [&](Transport& t) {
    const int me = t.rank();
    // Sender p's first message: the odd ranks' long (different nodes, 10 Gbit/s: milliseconds),
    // the even ranks' short.
    auto firstBytes = [](int p) -> size_t { return p % 2 ? (size_t{1} << 20) * p : 64 * p; };
    constexpr int kSmall = 100;  // per sender, one at a time: 700 transfers in all
    if (me == 0) {
      std::vector<std::vector<uint8_t>> first(n);
      std::vector<TransportRequest*> reqs;
      for (int p = 1; p < n; ++p) {
        first[p].assign(firstBytes(p), 0);
        TransportRequest* q;
        ASSERT_TRUE(t.irecv(p, 1, first[p].data(), first[p].size(), &q).isOk());
        reqs.push_back(q);
      }
      for (int i = 0; i < kSmall; ++i)
        for (int p = 1; p < n; ++p) {
          uint64_t got = 0;
          TransportRequest* q;
          ASSERT_TRUE(t.irecv(p, 2, &got, sizeof got, &q).isOk());
          ASSERT_EQ(waitOk(t, q), sizeof got);
          ASSERT_EQ(got, static_cast<uint64_t>(p) << 32 | i);
        }
      for (int i = 0; i < n - 1; ++i) EXPECT_EQ(waitOk(t, reqs[i]), firstBytes(i + 1));
      for (int p = 1; p < n; ++p)
        ASSERT_EQ(std::count(first[p].begin(), first[p].end(), uint8_t(p)),
                  static_cast<ptrdiff_t>(first[p].size()))
            << "from rank " << p;
    } else {
      std::vector<uint8_t> mine(firstBytes(me), uint8_t(me));
      TransportRequest* big;
      ASSERT_TRUE(t.isend(0, 1, mine.data(), mine.size(), &big).isOk());
      for (int i = 0; i < kSmall; ++i) {
        const uint64_t v = static_cast<uint64_t>(me) << 32 | i;
        TransportRequest* q;
        ASSERT_TRUE(t.isend(0, 2, &v, sizeof v, &q).isOk());
        ASSERT_EQ(waitOk(t, q), sizeof v);
      }
      EXPECT_EQ(waitOk(t, big), mine.size());
    }
  });
}

// A long series of transfers keeps the platform's exact time for each, across the hand-overs
// from one put issuer to the next.
TEST(SimTransportScale, EveryTransferOfALongSeriesTakesItsTime) {
  inChild([]() -> std::string {
    const size_t bytes = 4096;
    const int count = 1500;
    auto p = testPlatform(4);
    auto r = runSimulation(p, SimTransportOptions{}, [&](Transport& t) {
      std::vector<uint8_t> buf(bytes);
      for (int i = 0; i < count; ++i) sendZeroToTwo(t, buf);
    });
    EXPECT_TRUE(r.isOk());
    if (!r.isOk()) return std::string();
    const double one =
        bytes * 8 / (p.nicGbps * 1e9) + (2 * p.nicLatencyUs + p.switchLatencyUs) * 1e-6;
    EXPECT_NEAR(r->seconds, count * one, count * one * 1e-6);
    return std::string();
  });
}

// A per-message host cost (SimTransportOptions::postSeconds) delays each message by the posts
// made before it on both ends: of 20 eight-byte messages from rank 0 to rank 2, all posted
// before any is waited on, the last leaves after the sender's 20th post and is matched after
// the receiver's 20th, so the series ends 20 posts after the start plus one message's time.
// Without the cost the series takes longer than one message (they queue on the link).
TEST(SimTransportScale, EachPostCostsItsRankTheHostTime) {
  // One simulation per child (one SimGrid engine per process): its time comes back as text.
  auto run = [&](double postSeconds, int count) {
    const std::string seconds = inChild([&]() -> std::string {
      SimTransportOptions options;
      options.postSeconds = postSeconds;
      auto r = runSimulation(testPlatform(4), options, [&](Transport& t) {
        std::vector<uint64_t> words(count, 7);
        std::vector<TransportRequest*> q(count, nullptr);
        if (t.rank() != 0 && t.rank() != 2) return;
        for (int i = 0; i < count; ++i) {
          Status s = t.rank() == 0 ? t.isend(2, 5, &words[i], sizeof(uint64_t), &q[i])
                                   : t.irecv(0, 5, &words[i], sizeof(uint64_t), &q[i]);
          ASSERT_TRUE(s.isOk()) << s.toString();
        }
        for (TransportRequest* one : q) waitOk(t, one);
      });
      EXPECT_TRUE(r.isOk()) << r.status().toString();
      return r.isOk() ? formatString("%.17g", r->seconds) : std::string("0");
    });
    return std::strtod(seconds.c_str(), nullptr);
  };
  const double one = run(0, 1), series = run(0, 20), costed = run(3e-6, 20);
  EXPECT_GT(one, 0);
  EXPECT_GT(series, one);
  EXPECT_NEAR(costed, 20 * 3e-6 + one, 1e-9) << one << " s for one message";
}

// Two ranks of one node sending off the node at once share the node's NIC (twice the time of
// one), but not per-rank NICs.
TEST(SimPlatform, NodeNicIsSharedRankNicsAreNot) {
  for (bool perRank : {false, true}) {
    inChild([&] {
      const size_t bytes = 8 << 20;
      auto p = testPlatform(4);
      p.nicPerRank = perRank;
      p.nicLatencyUs = p.switchLatencyUs = 0;
      auto r = runSimulation(p, SimTransportOptions{}, [&](Transport& t) {
        std::vector<uint8_t> buf(bytes);
        TransportRequest* q;
        const int me = t.rank();
        if (me < 2)
          ASSERT_TRUE(t.isend(me + 2, 1, buf.data(), bytes, &q).isOk());
        else
          ASSERT_TRUE(t.irecv(me - 2, 1, buf.data(), bytes, &q).isOk());
        waitOk(t, q);
      });
      EXPECT_TRUE(r.isOk());
      const double one = bytes * 8 / (p.nicGbps * 1e9);
      EXPECT_NEAR(r->seconds, perRank ? one : 2 * one, one * 1e-3) << "per rank " << perRank;
      return std::string();
    });
  }
}

}  // namespace
}  // namespace terse::testing
