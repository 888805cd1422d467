// The transport's parsers of bytes another rank chose (transport/src/peer_input.h): the blob a
// UCX rank publishes at bootstrap.
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

}  // namespace
}  // namespace terse
