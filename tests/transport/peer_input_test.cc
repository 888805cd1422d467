// The transport's parsers of bytes another rank chose (transport/src/peer_input.h): the blob a
// UCX rank publishes at bootstrap and a failure notice's text. fuzz/fuzz_peer.cc fuzzes them.
#include "peer_input.h"

#include <gtest/gtest.h>

#include <string>

namespace terse {
namespace {

Status parse(int rank, const std::string& b, PeerBlob* out) {
  return parsePeerBlob(rank, reinterpret_cast<const uint8_t*>(b.data()), b.size(), out);
}

TEST(PeerBlob, RoundTripsWhatEncodeMakes) {
  const std::string address("\x01\x00\x02\xff", 4);
  for (const PeerBlob& in : {PeerBlob{"node-7.cluster", 4242, address}, PeerBlob{"", 1, "x"},
                             PeerBlob{std::string(kMaxPeerHostBytes, 'h'), 2147483647,
                                      std::string(kMaxPeerWorkerAddressBytes, '\0')}}) {
    const std::string bytes = encodePeerBlob(in);
    PeerBlob out;
    Status st = parse(3, bytes, &out);
    ASSERT_TRUE(st.isOk()) << st.message();
    EXPECT_EQ(out.host, in.host);
    EXPECT_EQ(out.pid, in.pid);
    EXPECT_EQ(out.address, in.address);
    EXPECT_EQ(encodePeerBlob(out), bytes);
  }
}

// Each malformed blob is kCorrupt, names the rank that published it and says what was wrong.
TEST(PeerBlob, RefusesMalformedBlobsNamingTheRank) {
  using namespace std::string_literals;
  const struct {
    std::string bytes;
    const char* says;
  } bad[] = {
      {""s, "malformed"},
      {"host"s, "malformed"},
      {"host\0"s
       "123"s,
       "malformed"},
      {"host\0"s
       "123\0"s,
       "empty UCX worker address"},
      {"host\0"s
       "\0"s
       "addr"s,
       "process id"},
      {"host\0"s
       "0\0"s
       "addr"s,
       "process id"},
      {"host\0"s
       "-5\0"s
       "addr"s,
       "process id"},
      {"host\0"s
       "+5\0"s
       "addr"s,
       "process id"},
      {"host\0"s
       " 5\0"s
       "addr"s,
       "process id"},
      {"host\0"s
       "007\0"s
       "addr"s,
       "process id"},
      {"host\0"s
       "12ab\0"s
       "addr"s,
       "process id"},
      {"host\0"s
       "2147483648\0"s
       "addr"s,
       "process id"},
      {"host\0"s
       "99999999999999999999\0"s
       "addr"s,
       "process id"},
      {std::string(kMaxPeerHostBytes + 1, 'h') + "\0"s
                                                 "5\0"s
                                                 "addr"s,
       "host name of 256 bytes"},
      {"host\0"s
       "5\0"s +
           std::string(kMaxPeerWorkerAddressBytes + 1, 'a'),
       "worker address of 65537 bytes"},
  };
  for (const auto& b : bad) {
    PeerBlob out;
    Status st = parse(5, b.bytes, &out);
    ASSERT_FALSE(st.isOk()) << b.says;
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.message();
    EXPECT_NE(st.message().find("rank 5 "), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(b.says), std::string::npos) << st.message();
  }
}

std::string notice(const std::string& bytes, size_t maxBytes = 512) {
  return formatFailureNotice(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                             maxBytes);
}

TEST(FailureNotice, PrintableTextIsUnchanged) {
  const std::string text = "rank 3: allreduce failed: the connection to rank 2 broke (UCX: x)";
  EXPECT_EQ(notice(text), text);
  EXPECT_EQ(notice(""), "");
}

TEST(FailureNotice, EscapesEveryByteOutsidePrintableAsciiAndTheBackslash) {
  using namespace std::string_literals;
  EXPECT_EQ(notice("a\0b"s), "a\\x00b");
  EXPECT_EQ(notice("\x1b[2J\r\n\x7f\x80\xff"s), "\\x1b[2J\\x0d\\x0a\\x7f\\x80\\xff");
  // Escaped backslashes keep the escaping unambiguous: a peer cannot forge "\x00" as text.
  EXPECT_EQ(notice("\\x00"), "\\x5cx00");
}

TEST(FailureNotice, IsCutAtTheBound) {
  EXPECT_EQ(notice(std::string(600, 'a')), std::string(512, 'a') + "...");
  EXPECT_EQ(notice(std::string(512, 'a')), std::string(512, 'a'));
  EXPECT_EQ(notice("abcdef", 3), "abc...");
  // The bound counts the peer's bytes, so even all-escaped text stays at 4 x the bound.
  EXPECT_EQ(notice(std::string(600, '\0')).size(), 512u * 4 + 3);
}

}  // namespace
}  // namespace terse
