// Conformance tests of transport.h's contract, run on every backend and world size with ranks as
// threads. Each message's content is a function of (source, destination, sequence), so a
// misrouted, reordered or truncated delivery shows up as a mismatch.
#include "harness.h"
#include "patterns.h"

#include "terse/transport/give_up.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

namespace terse::testing {
namespace {

struct Param {
  Backend backend;
  int size;
};

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return std::string(backendName(info.param.backend)) + "_" + std::to_string(info.param.size) +
         "ranks";
}

std::vector<Param> allParams() {
  std::vector<Param> out;
  for (Backend b : allBackends())
    for (int n : {1, 2, 3, 4, 8}) out.push_back({b, n});
  return out;
}

class TransportTest : public ::testing::TestWithParam<Param> {};

// Every rank sends to its right neighbour and receives from its left one while also sending left
// and receiving from the right (both directions at once), for sizes from 0 bytes to 64 MiB.
TEST_P(TransportTest, RingBothDirectionsByteExact) {
  const Param p = GetParam();
  const std::vector<size_t> sizes = ringSizes(p.size);
  runThreads(p.backend, p.size, [&](Transport& t) { ringBothDirections(t, sizes); });
}

// Many messages in flight to every peer on a few tags: per (peer, tag) they must arrive in
// posting order, and the receives are posted after the sends for half the tags so both the
// unexpected-message and the posted-receive paths are taken.
TEST_P(TransportTest, ManyInFlightKeepPerTagOrder) {
  const Param p = GetParam();
  const int kPerPair = p.size <= 4 ? 64 : 24;
  const int kTags = 3;
  runThreads(p.backend, p.size, [&](Transport& t) { manyInFlight(t, kPerPair, kTags); });
}

// test() polling (instead of wait) also completes everything, and a receive posted for one tag is
// never satisfied by a message on another.
TEST_P(TransportTest, TagsNeverCrossAndTestPolls) {
  const Param p = GetParam();
  runThreads(p.backend, p.size, [&](Transport& t) {
    const int n = t.size(), me = t.rank();
    const int to = (me + 1) % n, from = (me + n - 1) % n;
    const uint64_t tagA = 7, tagB = kMaxTransportTag;  // the largest legal tag too
    uint64_t a = 0xA000 + me, b = 0xB000 + me, gotA = 0, gotB = 0;
    TransportRequest *ra, *rb, *sa, *sb;
    // Receive B first although A is sent first.
    ASSERT_TRUE(t.irecv(from, tagB, &gotB, sizeof gotB, &rb).isOk());
    ASSERT_TRUE(t.isend(to, tagA, &a, sizeof a, &sa).isOk());
    ASSERT_TRUE(t.isend(to, tagB, &b, sizeof b, &sb).isOk());
    ASSERT_TRUE(t.irecv(from, tagA, &gotA, sizeof gotA, &ra).isOk());
    std::vector<TransportRequest*> pending = {ra, rb, sa, sb};
    auto deadline = std::chrono::steady_clock::now() + kTestTimeout;
    while (!pending.empty() && std::chrono::steady_clock::now() < deadline) {
      t.progress();
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
    ASSERT_TRUE(pending.empty()) << "requests did not complete by polling";
    EXPECT_EQ(gotA, 0xA000u + from);
    EXPECT_EQ(gotB, 0xB000u + from);
  });
}

// A message larger than the receive buffer fails the receive with kInvalidUsage; nothing is
// written past the buffer.
TEST_P(TransportTest, TruncationIsAnErrorNotSilent) {
  const Param p = GetParam();
  runThreads(p.backend, p.size, [&](Transport& t) {
    const int n = t.size(), me = t.rank();
    const int to = (me + 1) % n, from = (me + n - 1) % n;
    std::vector<uint8_t> big(100000, 0x5A), small(1000 + 64, 0xEE);
    TransportRequest *r, *s;
    ASSERT_TRUE(t.irecv(from, 1, small.data(), 1000, &r).isOk());
    ASSERT_TRUE(t.isend(to, 1, big.data(), big.size(), &s).isOk());
    size_t bytes = 0;
    Status rs = t.wait(r, &bytes, kTestTimeout);
    EXPECT_EQ(rs.code(), StatusCode::kInvalidUsage) << rs.toString();
    Status ss = t.wait(s, &bytes, kTestTimeout);
    // The sender may see success (its bytes left) or the receiver's error; it must not hang.
    (void)ss;
    for (size_t i = 1000; i < small.size(); ++i) ASSERT_EQ(small[i], 0xEE) << "overrun at " << i;
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportTest, ::testing::ValuesIn(allParams()), paramName);

// ---- errors that do not depend on the world size ----

class TransportErrorTest : public ::testing::TestWithParam<Backend> {};

TEST_P(TransportErrorTest, BadArgumentsAreRejected) {
  runThreads(GetParam(), 2, [&](Transport& t) {
    char buf[8] = {};
    TransportRequest* r = nullptr;
    EXPECT_EQ(t.isend(2, 0, buf, 8, &r).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.irecv(-1, 0, buf, 8, &r).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.isend(0, kMaxTransportTag + 1, buf, 8, &r).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.irecv(0, 0, nullptr, 8, &r).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(t.isend(0, 0, buf, 8, nullptr).code(), StatusCode::kInvalidArgument);
  });
}

// A receive nobody sends to fails with kTimeout naming the peer; cancel then frees it.
TEST_P(TransportErrorTest, UnmatchedReceiveTimesOutNamingPeer) {
  runThreads(GetParam(), 2, [&](Transport& t) {
    if (t.rank() != 0) return;
    char buf[8];
    TransportRequest* r;
    ASSERT_TRUE(t.irecv(1, 99, buf, sizeof buf, &r).isOk());
    size_t bytes;
    Status s = t.wait(r, &bytes, std::chrono::milliseconds(50));
    EXPECT_EQ(s.code(), StatusCode::kTimeout);
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  });
}

// A rank that aborts makes the others' pending and later operations fail with kRemoteError
// naming it; its own later operations fail with the abort's reason. UCX's shared-memory
// transports cannot report a peer's failure and the aborting rank is a thread of this process
// (no process to watch), so there the pending receive ends in a timeout that names it instead.
TEST_P(TransportErrorTest, AbortedPeerFailsPendingAndLaterOps) {
  const bool detects = GetParam() != Backend::kUcxShm;
  const auto timeout = detects ? kTestTimeout : std::chrono::milliseconds(2000);
  std::atomic<bool> posted{false};
  runThreads(GetParam(), 3, [&](Transport& t) {
    char buf[64] = {};
    if (t.rank() == 2) {
      while (!posted.load()) t.progress();
      t.abort(errorInternal("test abort"));
      TransportRequest* r;
      Status s = t.isend(0, 1, buf, sizeof buf, &r);
      if (s.isOk()) s = t.wait(r, nullptr, kTestTimeout);
      EXPECT_EQ(s.code(), StatusCode::kInternal) << s.toString();
      EXPECT_NE(s.message().find("test abort"), std::string::npos) << s.message();
      return;
    }
    if (t.rank() == 0) {
      TransportRequest* r;
      ASSERT_TRUE(t.irecv(2, 1, buf, sizeof buf, &r).isOk());
      posted = true;
      size_t bytes;
      Status s = t.wait(r, &bytes, timeout);
      EXPECT_EQ(s.code(), detects ? StatusCode::kRemoteError : StatusCode::kTimeout)
          << s.toString();
      EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.message();
      if (!detects) return;
      // Later operations with rank 2 fail too, quickly.
      Status later = t.isend(2, 1, buf, sizeof buf, &r);
      if (later.isOk()) later = t.wait(r, &bytes, kTestTimeout);
      EXPECT_EQ(later.code(), StatusCode::kRemoteError) << later.toString();
      EXPECT_NE(later.message().find("rank 2"), std::string::npos) << later.message();
    }
  });
}

// giveUpOnWorld (give_up.h) in a chain: rank 0 gives up for a reason of its own, rank 1 learns
// from the broken connection to rank 0, rank 2 from the broken connection to rank 1. Each of
// them must still name the root cause, which reached them only as rank 0's failure notice; and
// rank 0, which found no notice, keeps its message as it was. Over shared memory the broken
// connection shows as a timeout (see above), the notices arrive all the same.
TEST_P(TransportErrorTest, GivingUpTellsThePeersWhy) {
  const bool detects = GetParam() != Backend::kUcxShm;
  const auto timeout = detects ? kTestTimeout : std::chrono::milliseconds(2000);
  const std::string cause = "the root cause, a checksum mismatch";
  runThreads(GetParam(), 3, [&](Transport& t) {
    char buf[64] = {};
    if (t.rank() == 0) {
      Status s = giveUpOnWorld(t, errorInternal("%s", cause.c_str()));
      EXPECT_EQ(s.code(), StatusCode::kInternal);
      EXPECT_EQ(s.message(), cause) << "rank 0 found a notice nobody sent";
      return;
    }
    TransportRequest* r;
    Status s = t.irecv(t.rank() - 1, 1, buf, sizeof buf, &r);
    if (s.isOk()) s = t.wait(r, nullptr, timeout);
    ASSERT_FALSE(s.isOk()) << "rank " << t.rank() << " received from a rank that gave up";
    const StatusCode code = s.code();
    s = giveUpOnWorld(t, std::move(s));
    EXPECT_EQ(s.code(), code) << "the notice must not change the error's code";
    EXPECT_NE(s.message().find("rank " + std::to_string(t.rank() - 1)), std::string::npos)
        << s.message();
    // The in-process fabric carries an aborted rank's reason in its errors already; over UCX
    // it takes the notice.
    const std::string expected =
        GetParam() == Backend::kInProc ? cause : "had given up first: " + cause;
    EXPECT_NE(s.message().find(expected), std::string::npos)
        << "rank " << t.rank() << ": " << s.message();
  });
}

// A notice is a peer's bytes, whatever they are: NULs, control bytes and terminal escapes in it
// must reach the error message escaped, not as they came.
TEST_P(TransportErrorTest, APeersNoticeIsEscaped) {
  runThreads(GetParam(), 2, [&](Transport& t) {
    TransportRequest* r = nullptr;
    char go = 'g';
    if (t.rank() == 1) {
      static const char kNotice[] = "bad\0\x1b[2Jend\\";
      ASSERT_TRUE(t.isend(0, kFailureNoticeTag, kNotice, sizeof kNotice - 1, &r).isOk());
      // Then tell rank 0 to give up: the notice travels ahead of this on the same connection.
      // (In-process sends complete when matched, so the notice is waited for last.)
      TransportRequest* signal = nullptr;
      ASSERT_TRUE(t.isend(0, 1, &go, 1, &signal).isOk());
      waitOk(t, signal);
      waitOk(t, r);
      return;
    }
    ASSERT_TRUE(t.irecv(1, 1, &go, 1, &r).isOk());
    waitOk(t, r);
    Status s = giveUpOnWorld(t, errorInternal("mine"));
    EXPECT_EQ(s.message(), "mine; rank 1 had given up first: bad\\x00\\x1b[2Jend\\x5c");
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportErrorTest, ::testing::ValuesIn(allBackends()),
                         [](const auto& pinfo) { return std::string(backendName(pinfo.param)); });

}  // namespace
}  // namespace terse::testing
