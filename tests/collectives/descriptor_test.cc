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

// Large worlds agree by a dissemination of summaries (CollectiveEngine::disseminateDescriptor):
// in round k rank r merges what rank r - 2^k knew. Played here without a transport, over worlds
// of every size up to 40 and calls that differ in count (or were rejected) on a few ranks, each
// rank's verdict must be the message that names the first rank in rank order whose call
// differs from its own, worked out here by a plain loop, as the all-to-all's check said it.
TEST(CallSummary, DisseminationNamesTheFirstRankThatDiffers) {
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (int n = 2; n <= 40; ++n) {
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<CallDescriptor> calls(n, call());
      const int odd = trial == 0 ? 0 : static_cast<int>(next() % 4);  // ranks with other calls
      for (int k = 0; k < odd; ++k) calls[next() % n].count = 1000 + 1 + next() % 2;
      if (trial % 3 == 2) calls[next() % n].kind = kRejectedKind;
      std::vector<CallSummary> known(n);
      for (int r = 0; r < n; ++r) known[r] = summarizeCall(r, calls[r]);
      for (int d = 1; d < n; d *= 2) {
        std::vector<CallSummary> sent = known;
        for (int r = 0; r < n; ++r) {
          const int from = (r - d % n + n) % n;
          ASSERT_TRUE(checkReceivedSummary(CollectiveKind::kAllReduce, from, n, sent[from],
                                           sizeof(CallSummary))
                          .isOk());
          mergeSummaries(&known[r], sent[from]);
        }
      }
      for (int r = 0; r < n; ++r) {
        SCOPED_TRACE("n=" + std::to_string(n) + " trial " + std::to_string(trial) + " rank " +
                     std::to_string(r));
        EXPECT_EQ(known[r].lowest, 0);
        int first = -1;
        for (int i = 0; i < n && first < 0; ++i)
          if (i != r && (calls[i].count != calls[r].count || calls[i].kind != calls[r].kind))
            first = i;
        const bool rejected = calls[r].kind == kRejectedKind;
        Status viaSummary = checkAgreement(calls[r], r, known[r], 7, rejected);
        if (first < 0) {
          EXPECT_TRUE(viaSummary.isOk()) << viaSummary.toString();
          continue;
        }
        ASSERT_EQ(viaSummary.code(), StatusCode::kInvalidUsage);
        const std::string mine = describeDescriptor(calls[r]);
        const std::string expected =
            calls[first].kind == kRejectedKind && !rejected
                ? "collective call #7 failed: rank " + std::to_string(first) +
                      " rejected its arguments (see its error); this rank called " + mine
                : "ranks disagree on collective call #7: rank " + std::to_string(first) +
                      " called " + describeDescriptor(calls[first]) + " but rank " +
                      std::to_string(r) + " (this rank) called " + mine +
                      "; every rank must make the same calls in the same order";
        EXPECT_EQ(viaSummary.message(), expected);
      }
    }
  }
}

// Merging is a minimum: any order, any overlap, gives the same summary.
TEST(CallSummary, MergeIsOrderFreeAndIdempotent) {
  std::vector<CallDescriptor> calls(6, call());
  calls[2].count = 5;
  calls[4].dtype = 0;
  auto fold = [&](const std::vector<int>& order) {
    CallSummary s = summarizeCall(order[0], calls[order[0]]);
    for (size_t i = 1; i < order.size(); ++i)
      mergeSummaries(&s, summarizeCall(order[i], calls[order[i]]));
    return s;
  };
  const CallSummary a = fold({0, 1, 2, 3, 4, 5});
  EXPECT_EQ(a.lowest, 0);
  EXPECT_EQ(a.firstOther, 2);
  EXPECT_EQ(a.otherCall.count, 5u);
  for (const auto& order : std::vector<std::vector<int>>{
           {5, 4, 3, 2, 1, 0}, {3, 5, 0, 4, 2, 1, 3, 0}, {4, 4, 2, 5, 1, 0, 2}}) {
    const CallSummary b = fold(order);
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
  }
  // Two summaries of overlapping sets: {3,4,5} has rank 4 other than rank 3's call; with
  // {0,1,2,3} rank 2 comes first.
  CallSummary high = fold({3, 4, 5}), low = fold({0, 1, 2, 3});
  EXPECT_EQ(high.firstOther, 4);
  mergeSummaries(&high, low);
  EXPECT_EQ(std::memcmp(&high, &a, sizeof a), 0);
  // Only rank 4 differs once rank 2 agrees.
  calls[2].count = 1000;
  EXPECT_EQ(fold({5, 0, 4, 1}).firstOther, 4);
  EXPECT_EQ(fold({5, 0, 1, 2, 3}).firstOther, -1);
}

TEST(CallSummary, ReceivedMustBeWholeWithRanksOfTheWorld) {
  std::vector<CallDescriptor> calls(4, call());
  calls[3].count = 1;
  CallSummary s = summarizeCall(1, calls[1]);
  mergeSummaries(&s, summarizeCall(3, calls[3]));
  ASSERT_EQ(s.firstOther, 3);
  EXPECT_TRUE(checkReceivedSummary(CollectiveKind::kAllReduce, 2, 4, s, sizeof s).isOk());
  auto refused = [&](CallSummary bad, size_t got, int n = 4) {
    Status st = checkReceivedSummary(CollectiveKind::kReduceScatter, 2, n, bad, got);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_EQ(st.message(), "reducescatter: rank 2 sent a malformed summary of call descriptors (" +
                                std::to_string(got) + " bytes)");
  };
  refused(s, sizeof s - 1);
  refused(s, 0);
  // A descriptor's size is named as such (a peer that agrees by the all-to-all).
  Status descriptorSized =
      checkReceivedSummary(CollectiveKind::kAllReduce, 1, 4, s, sizeof(CallDescriptor));
  EXPECT_EQ(descriptorSized.message(),
            "allreduce: rank 1 sent a malformed summary of call descriptors (96 bytes, the size "
            "of a call descriptor: do all ranks set the same TERSE_AGREEMENT_DIRECT_RANKS?)");
  refused(s, sizeof s, /*n=*/3);  // firstOther 3 is outside a world of 3
  CallSummary bad = s;
  bad.magic ^= 1;
  refused(bad, sizeof bad);
  bad = s;
  bad.lowestCall.magic ^= 1;
  refused(bad, sizeof bad);
  bad = s;
  bad.otherCall.magic ^= 1;
  refused(bad, sizeof bad);
  bad = s;
  bad.lowest = -1;
  refused(bad, sizeof bad);
  bad = s;
  bad.firstOther = 1;  // not above lowest
  refused(bad, sizeof bad);
  bad = s;
  bad.firstOther = -2;
  refused(bad, sizeof bad);
  bad = s;
  bad.reserved = 1;
  refused(bad, sizeof bad);
}

}  // namespace
}  // namespace terse::detail
