// The call descriptor each rank makes at the start of a collective, the summary of several that
// large worlds disseminate instead of sending every descriptor to every rank
// (CollectiveEngine::exchangeDescriptors, disseminateDescriptor), and the checks of what the
// peers sent.
//
// The checks are pure functions of the descriptors and received sizes, without a transport, so
// that fuzz/fuzz_peer.cc and the unit tests drive exactly what the engine runs.
#pragma once

#include "terse/collectives/collective_op.h"
#include "terse/common/status.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace terse::detail {

// What every rank must agree on before data moves. Fixed layout, sent as raw bytes between
// processes of the same build (a version mismatch between builds is caught at bootstrap).
struct CallDescriptor {
  uint32_t magic;
  uint8_t kind, dtype, op, codec;
  uint64_t count;
  uint64_t specHash;  // of the codec that runs the call
  uint32_t seq;
  uint32_t worldSize;
  // The spec the caller asked for: "auto:max=int8" when auto picked int8, else the codec's
  // own. Its hash is compared; its text (cut to fit, NUL-padded) only makes the message of a
  // disagreement name both calls' codecs in words.
  uint64_t requestedHash;
  uint8_t algorithm;  // the Algorithm the call resolved to (flat or two-level)
  char requested[55];
};
static_assert(sizeof(CallDescriptor) == 96, "sent as raw bytes: no padding");
constexpr uint32_t kDescriptorMagic = 0x44435355;  // "UCST": the 96-byte layout

// A descriptor's codec byte when the call has not picked its codec yet: auto's agreement on
// the caller's call before it calibrates or measures (CollectiveEngine::agree).
constexpr uint8_t kCodecNotChosen = 0xfe;

// Fills a descriptor for `op` (kind, count, type, op, codec, requested spec) at `seq`.
CallDescriptor makeDescriptor(const CollectiveOp& op, uint32_t seq, uint32_t worldSize);

// A descriptor's kind when the sending rank rejected its own arguments: its peers then fail
// at once instead of waiting for transfers that will never come.
constexpr uint8_t kRejectedKind = 0;

// "allreduce(count=..., float32, sum, codec int8 [spec hash ...])", or what a rejected call says.
// Any field values are safe (a peer's descriptor may hold anything).
std::string describeDescriptor(const CallDescriptor& d);

// Whether two descriptors are the same call: every field but the magic and the requested
// spec's text (its hash is compared).
bool sameCall(const CallDescriptor& a, const CallDescriptor& b);

// What a rank knows of the calls of a set of ranks: the call of the lowest rank in the set and
// the lowest rank whose call differs from it. That is enough to name, for any rank of the set,
// the first rank in rank order whose call differs from its own (the lowest rank, unless its call
// is the same; then the first that differs from it), and it stays 208 bytes whatever the set.
// Merging is a minimum, so merging overlapping sets, or one set twice, is harmless: worlds too
// large for an all-to-all of descriptors agree by a dissemination of these summaries
// (CollectiveEngine::disseminateDescriptor), which covers every rank in ceil(log2 n) rounds.
struct CallSummary {
  uint32_t magic;      // kSummaryMagic
  int32_t lowest;      // the lowest rank of the set
  int32_t firstOther;  // the lowest rank of the set whose call is not lowestCall; -1: none
  uint32_t reserved;   // zero
  CallDescriptor lowestCall;
  CallDescriptor otherCall;  // firstOther's call (zero when there is none)
};
static_assert(sizeof(CallSummary) == 208, "sent as raw bytes: no padding");
constexpr uint32_t kSummaryMagic = 0x53435355;  // "UCSS"

// The summary of one rank's call.
CallSummary summarizeCall(int rank, const CallDescriptor& call);
// `into` becomes the summary of its set and `from`'s together. For equal lowest ranks `into`'s
// copy of that call is kept (a rank's own call over a relayed one).
void mergeSummaries(CallSummary* into, const CallSummary& from);
// `got` bytes from rank `peer` during the agreement of a call of `kind` in a world of n ranks.
// kCorrupt unless it is a whole summary with the magics, ranks in [0, n), firstOther above
// lowest and a zero `reserved`.
Status checkReceivedSummary(CollectiveKind kind, int peer, int n, const CallSummary& s, size_t got);
// Step 2 from a summary of the whole world (world.lowest is rank 0): as checkDescriptorsAgree.
Status checkAgreement(const CallDescriptor& mine, int self, const CallSummary& world, uint32_t seq,
                      bool rejected);

// Step 1, as each peer's descriptor arrives: `got` bytes from rank `peer` for a call of `kind`
// (this rank's). kCorrupt unless it is a whole descriptor with the magic.
Status checkReceivedDescriptor(CollectiveKind kind, int peer, const CallDescriptor& d, size_t got);

// Step 2, once every descriptor has arrived and passed step 1: theirs[i] for every rank i of
// the world of n but `self` (theirs[self] is not read). kInvalidUsage, naming the first rank in
// rank order that differs from `mine`, when a peer rejected its arguments (unless this rank did
// too) or made another call.
Status checkDescriptorsAgree(const CallDescriptor& mine, const CallDescriptor* theirs, int n,
                             int self, uint32_t seq, bool rejected);

}  // namespace terse::detail
