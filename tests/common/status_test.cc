#include "terse/common/status.h"

#include <gtest/gtest.h>

namespace terse {
namespace {

Result<int> half(int x) {
  if (x % 2) return errorInvalidArgument("%d is odd", x);
  return x / 2;
}

Status chain(int x, int* out) {
  TERSE_ASSIGN_OR_RETURN(int h, half(x));
  TERSE_ASSIGN_OR_RETURN(int q, half(h));
  *out = q;
  return Status::ok();
}

TEST(Status, CarriesCodeAndFormattedMessage) {
  Status s = errorCorrupt("payload of %zu bytes, expected %d", size_t{3}, 8);
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.message(), "payload of 3 bytes, expected 8");
  EXPECT_EQ(s.toString(), "corrupt data: payload of 3 bytes, expected 8");
  EXPECT_EQ(s.withContext("rank 2").message(), "rank 2: payload of 3 bytes, expected 8");
  EXPECT_TRUE(Status::ok().withContext("ignored").isOk());
}

TEST(Status, ResultPropagatesFirstError) {
  int out = -1;
  EXPECT_TRUE(chain(12, &out).isOk());
  EXPECT_EQ(out, 3);
  Status s = chain(6, &out);  // 6 -> 3 -> odd
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "3 is odd");
  EXPECT_EQ(out, 3) << "outputs are set only on success";
}

TEST(Status, CodesMatchCApi) {
  EXPECT_EQ(static_cast<int>(StatusCode::kRemoteError), TERSE_REMOTE_ERROR);
  EXPECT_STREQ(dataTypeName(DataType::kBFloat16), "bfloat16");
  EXPECT_STREQ(reduceOpName(ReduceOp::kAvg), "avg");
  EXPECT_EQ(dataTypeSize(DataType::kFloat16), 2u);
}

}  // namespace
}  // namespace terse
