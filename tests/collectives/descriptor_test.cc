// The checks of the call descriptors peers send at the start of every collective
// (collectives/src/descriptor.h), without a transport. The same checks end to end, with ranks
// that disagree or reject their arguments, are in collectives_test.cc.
#include "descriptor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace terse::detail {
namespace {

CallDescriptor call(uint32_t seq = 7) {
  CallDescriptor d{};
  d.magic = kDescriptorMagic;
  d.kind = static_cast<uint8_t>(CollectiveKind::kAllReduce);
  d.dtype = static_cast<uint8_t>(DataType::kFloat16);
  d.op = static_cast<uint8_t>(ReduceOp::kSum);
  d.codec = static_cast<uint8_t>(CodecId::kInt8);
  d.count = 1000;
  d.specHash = 0x1234;
  d.seq = seq;
  d.worldSize = 4;
  return d;
}

TEST(CallDescriptor, ReceivedMustBeWholeWithTheMagic) {
  CallDescriptor d = call();
  EXPECT_TRUE(checkReceivedDescriptor(CollectiveKind::kAllGather, 2, d, sizeof d).isOk());
  for (size_t got : {size_t{0}, sizeof d - 1}) {
    Status st = checkReceivedDescriptor(CollectiveKind::kAllGather, 2, d, got);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_EQ(st.message(), "allgather: rank 2 sent a malformed call descriptor (" +
                                std::to_string(got) + " bytes)");
  }
  d.magic ^= 1;
  EXPECT_EQ(checkReceivedDescriptor(CollectiveKind::kAllReduce, 3, d, sizeof d).code(),
            StatusCode::kCorrupt);
}

TEST(CallDescriptor, AgreementNamesTheFirstRankThatDiffers) {
  const CallDescriptor mine = call();
  std::vector<CallDescriptor> theirs(4, mine);
  EXPECT_TRUE(checkDescriptorsAgree(mine, theirs.data(), 4, 1, 7, false).isOk());
  theirs[1].count = 0;  // this rank's own slot is never read
  EXPECT_TRUE(checkDescriptorsAgree(mine, theirs.data(), 4, 1, 7, false).isOk());
  theirs[3].count = 999;
  theirs[2].codec = 200;  // no such codec: described, not trusted
  Status st = checkDescriptorsAgree(mine, theirs.data(), 4, 1, 7, false);
  EXPECT_EQ(st.code(), StatusCode::kInvalidUsage);
  EXPECT_EQ(st.message(),
            "ranks disagree on collective call #7: rank 2 called allreduce(count=1000, float16, "
            "sum, codec unknown) but rank 1 (this rank) called allreduce(count=1000, float16, "
            "sum, codec int8); every rank must make the same calls in the same order");
  // Every field counts, the sequence number and world size included.
  for (int field = 0; field < 9; ++field) {
    std::vector<CallDescriptor> t(2, mine);
    CallDescriptor& d = t[1];
    switch (field) {
      case 0: d.kind = 3; break;
      case 1: d.dtype = 0; break;
      case 2: d.op = 1; break;
      case 3: d.codec = 0; break;
      case 4: d.count = 1; break;
      case 5: d.specHash = 1; break;
      case 6: d.seq = 8; break;
      case 7: d.worldSize = 3; break;
      case 8: d.requestedHash = 1; break;
    }
    EXPECT_EQ(checkDescriptorsAgree(mine, t.data(), 2, 0, 7, false).code(),
              StatusCode::kInvalidUsage)
        << "field " << field;
  }
}

TEST(CallDescriptor, APeerThatRejectedItsArgumentsFailsTheCall) {
  const CallDescriptor mine = call();
  std::vector<CallDescriptor> theirs(3, mine);
  theirs[2].kind = kRejectedKind;
  Status st = checkDescriptorsAgree(mine, theirs.data(), 3, 0, 7, false);
  EXPECT_EQ(st.code(), StatusCode::kInvalidUsage);
  EXPECT_EQ(st.message(),
            "collective call #7 failed: rank 2 rejected its arguments (see its error); this rank "
            "called allreduce(count=1000, float16, sum, codec int8)");
  // A rank that rejected its own call too compares the rest as usual.
  CallDescriptor rejected = mine;
  rejected.kind = kRejectedKind;
  std::vector<CallDescriptor> all(3, rejected);
  EXPECT_TRUE(checkDescriptorsAgree(rejected, all.data(), 3, 0, 7, true).isOk());
}

// Issue #22 (15): a codec disagreement names both specs in words, and auto's pick says which
// spec the caller asked for.
TEST(CallDescriptor, DisagreementNamesBothSpecs) {
  auto int8 = makeCodec("int8:block=512");
  auto fp16 = makeCodec("fp16");
  ASSERT_TRUE(int8.isOk() && fp16.isOk());
  CollectiveOp op;
  op.count = 10;
  op.codec = int8->get();
  const CallDescriptor mine = makeDescriptor(op, 3, 2);
  op.codec = fp16->get();
  std::vector<CallDescriptor> theirs(2, makeDescriptor(op, 3, 2));
  Status st = checkDescriptorsAgree(mine, theirs.data(), 2, 0, 3, false);
  EXPECT_EQ(
      st.message(),
      "ranks disagree on collective call #3: rank 1 called allreduce(count=10, float32, "
      "sum, codec fp16) but rank 0 (this rank) called allreduce(count=10, float32, sum, "
      "codec int8:block=512,round=nearest,seed=0); every rank must make the same calls in the "
      "same order");
  // auto that picked int8 against a plain int8: the codec is the same, the calls are not.
  op.codec = int8->get();
  const std::string autoSpec = "auto:max=int8";
  op.requested = autoSpec;
  theirs[1] = makeDescriptor(op, 3, 2);
  op.requested = {};
  st = checkDescriptorsAgree(makeDescriptor(op, 3, 2), theirs.data(), 2, 0, 3, false);
  EXPECT_NE(st.message().find("rank 1 called allreduce(count=10, float32, sum, codec "
                              "auto:max=int8, which picked int8)"),
            std::string::npos)
      << st.message();
  // Before its pick (CollectiveEngine::agree) auto's descriptor names only the auto spec.
  op.codec = nullptr;
  op.requested = autoSpec;
  EXPECT_EQ(describeDescriptor(makeDescriptor(op, 3, 2)),
            "allreduce(count=10, float32, sum, codec auto:max=int8)");
  op.kind = CollectiveKind::kBarrier;
  EXPECT_EQ(describeDescriptor(makeDescriptor(op, 3, 2)), "barrier()");
}

// A peer's requested text is its bytes: unterminated or with control bytes, it is escaped and
// bounded by the field.
TEST(CallDescriptor, APeersSpecTextIsEscapedAndBounded) {
  CallDescriptor d = call();
  std::memset(d.requested, '\x1b', sizeof d.requested);  // no terminator at all
  const std::string text = describeDescriptor(d);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_NE(text.find("\\x1b"), std::string::npos) << text;
  EXPECT_LT(text.size(), 4 * sizeof d.requested + 100);
}

}  // namespace
}  // namespace terse::detail
