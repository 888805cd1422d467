// The parsers of values other ranks publish in the rendezvous store (rendezvous/src/
// published.h), without a store. storeAllGather's end-to-end cases are in rendezvous_test.cc.
#include "published.h"

#include <gtest/gtest.h>

#include <string>

namespace terse::rendezvous_detail {
namespace {

using namespace std::string_literals;

TEST(PublishedFailure, RoundTripsEveryErrorCode) {
  for (int c = static_cast<int>(StatusCode::kInvalidArgument);
       c <= static_cast<int>(StatusCode::kInternal); ++c) {
    Status why(static_cast<StatusCode>(c), "the cause");
    Status got = parsePublishedFailure(encodePublishedFailure(3, why));
    EXPECT_EQ(got.code(), why.code());
    EXPECT_EQ(got.message(), "rank 3: the cause");
  }
}

// A code that is not an error (kOk would read as success, kInProgress as "call again"), not a
// number, or out of the enum: a remote error quoting the whole value.
TEST(PublishedFailure, AnythingElseIsARemoteErrorQuotingIt) {
  for (const std::string& v :
       {"0\nrank 1: x"s, "9\nrank 1: x"s, "10\nrank 1: x"s, "-3\nrank 1: x"s, "03\nrank 1: x"s,
        "3 \nrank 1: x"s, "99999999999\nrank 1: x"s, "\nrank 1: x"s, "3"s, ""s}) {
    Status got = parsePublishedFailure(v);
    EXPECT_EQ(got.code(), StatusCode::kRemoteError) << v;
    EXPECT_EQ(got.message(), printableBytes(v.data(), v.size(), kMaxQuotedBytes)) << v;
  }
}

TEST(PublishedFailure, TheTextIsQuotedEscapedAndBounded) {
  Status got = parsePublishedFailure("3\nrank 1: a\0b\x1b"s);
  EXPECT_EQ(got.code(), StatusCode::kCorrupt);
  EXPECT_EQ(got.message(), "rank 1: a\\x00b\\x1b");
  got = parsePublishedFailure("3\n" + std::string(10000, 'z'));
  EXPECT_EQ(got.message(), std::string(kMaxQuotedBytes, 'z') + "...");
}

TEST(PublishedValue, SplitsAtTheHeader) {
  const std::string header = "terse 1.2.3 size 4\n";
  std::string payload;
  ASSERT_TRUE(splitPublishedValue(2, 0, header + "addr\nwith\0bytes"s, header, &payload).isOk());
  EXPECT_EQ(payload, "addr\nwith\0bytes"s);
  ASSERT_TRUE(splitPublishedValue(2, 0, header, header, &payload).isOk());
  EXPECT_EQ(payload, "");
}

TEST(PublishedValue, AnotherHeaderNamesBothRanksAndQuotesItsFirstLine) {
  const std::string header = "terse 1.2.3 size 4\n";
  std::string payload;
  Status st = splitPublishedValue(2, 0, "terse 9.9.9 size 4\naddr", header, &payload);
  EXPECT_EQ(st.code(), StatusCode::kInvalidUsage);
  EXPECT_EQ(st.message(),
            "rank 2 announced 'terse 9.9.9 size 4' but rank 0 runs 'terse 1.2.3 size 4': all "
            "ranks must run the same terse version with the same world size (check "
            "TERSE_WORLD_SIZE and the launcher's -n)");
  // Without a newline, or only a prefix of the header: still refused.
  EXPECT_FALSE(splitPublishedValue(2, 0, "terse 1.2.3 size 4", header, &payload).isOk());
  EXPECT_FALSE(splitPublishedValue(2, 0, "", header, &payload).isOk());
  // A huge or binary first line is quoted bounded and escaped.
  st = splitPublishedValue(1, 0, std::string(100000, '\x01'), header, &payload);
  EXPECT_NE(st.message().find("'\\x01\\x01"), std::string::npos);
  EXPECT_LT(st.message().size(), 4 * kMaxQuotedBytes + 400);
}

}  // namespace
}  // namespace terse::rendezvous_detail
