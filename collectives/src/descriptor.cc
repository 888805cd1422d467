#include "descriptor.h"

#include "terse/compressors/codec.h"

#include <algorithm>
#include <cstring>

namespace terse::detail {

namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

CallDescriptor makeDescriptor(const CollectiveOp& op, uint32_t seq, uint32_t worldSize) {
  CallDescriptor d{};
  d.magic = kDescriptorMagic;
  d.kind = static_cast<uint8_t>(op.kind);
  d.dtype = static_cast<uint8_t>(op.dtype);
  const bool reduces =
      op.kind == CollectiveKind::kAllReduce || op.kind == CollectiveKind::kReduceScatter;
  d.op = static_cast<uint8_t>(reduces ? op.op : ReduceOp::kSum);
  d.codec = op.codec ? static_cast<uint8_t>(op.codec->id()) : kCodecNotChosen;
  d.count = op.count;
  const std::string spec = op.codec ? op.codec->spec() : std::string();
  d.specHash = fnv1a(spec);
  const std::string_view requested = op.requested.empty() ? spec : op.requested;
  d.requestedHash = fnv1a(requested);
  std::memcpy(d.requested, requested.data(), std::min(requested.size(), sizeof d.requested - 1));
  d.algorithm = static_cast<uint8_t>(op.algorithm);
  d.seq = seq;
  d.worldSize = worldSize;
  return d;
}

std::string describeDescriptor(const CallDescriptor& d) {
  if (d.kind == kRejectedKind) return "a call it rejected as invalid (see that rank's error)";
  if (d.kind == static_cast<uint8_t>(CollectiveKind::kBarrier)) return "barrier()";
  // A peer's text: bounded by the field, bytes outside printable ASCII escaped.
  const std::string requested =
      printableBytes(d.requested, strnlen(d.requested, sizeof d.requested), sizeof d.requested);
  std::string codec;
  if (d.codec == kCodecNotChosen)
    codec = requested;  // auto before its pick
  else if (requested.empty() || requested.rfind(codecName(static_cast<CodecId>(d.codec)), 0) == 0)
    codec = requested.empty() ? codecName(static_cast<CodecId>(d.codec)) : requested;
  else
    codec = requested + ", which picked " + codecName(static_cast<CodecId>(d.codec));
  // The name functions answer "unknown..." for values outside their enums. Flat, the one
  // algorithm of every world without a node layout, goes unsaid.
  const auto algorithm = static_cast<Algorithm>(d.algorithm);
  const std::string how = algorithm == Algorithm::kFlat || algorithm == Algorithm::kAuto
                              ? std::string()
                              : std::string(", ") + algorithmName(algorithm);
  return formatString(
      "%s(count=%llu, %s, %s, codec %s%s)", collectiveName(static_cast<CollectiveKind>(d.kind)),
      static_cast<unsigned long long>(d.count), dataTypeName(static_cast<DataType>(d.dtype)),
      reduceOpName(static_cast<ReduceOp>(d.op)), codec.c_str(), how.c_str());
}

Status checkReceivedDescriptor(CollectiveKind kind, int peer, const CallDescriptor& d, size_t got) {
  if (got != sizeof(CallDescriptor) || d.magic != kDescriptorMagic)
    return errorCorrupt("%s: rank %d sent a malformed call descriptor (%zu bytes)",
                        collectiveName(kind), peer, got);
  return Status::ok();
}

bool sameCall(const CallDescriptor& a, const CallDescriptor& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.op == b.op && a.codec == b.codec &&
         a.count == b.count && a.specHash == b.specHash && a.requestedHash == b.requestedHash &&
         a.algorithm == b.algorithm && a.worldSize == b.worldSize && a.seq == b.seq;
}

CallSummary summarizeCall(int rank, const CallDescriptor& call) {
  CallSummary s{};
  s.magic = kSummaryMagic;
  s.lowest = rank;
  s.firstOther = -1;
  s.lowestCall = call;
  return s;
}

void mergeSummaries(CallSummary* into, const CallSummary& from) {
  const bool fromIsLower = from.lowest < into->lowest;
  const CallSummary& lo = fromIsLower ? from : *into;
  const CallSummary& hi = fromIsLower ? *into : from;
  // hi's first rank whose call differs from lo's lowest call: hi's lowest rank if its call
  // differs, else hi's own first other (which differs from a call equal to lo's).
  int candidate = hi.firstOther;
  const CallDescriptor* candidateCall = &hi.otherCall;
  if (!sameCall(hi.lowestCall, lo.lowestCall)) {
    candidate = hi.lowest;
    candidateCall = &hi.lowestCall;
  }
  CallSummary merged = lo;
  if (candidate >= 0 && (merged.firstOther < 0 || candidate < merged.firstOther)) {
    merged.firstOther = candidate;
    merged.otherCall = *candidateCall;
  }
  *into = merged;
}

Status checkReceivedSummary(CollectiveKind kind, int peer, int n, const CallSummary& s,
                            size_t got) {
  const bool whole = got == sizeof(CallSummary) && s.magic == kSummaryMagic && s.reserved == 0 &&
                     s.lowestCall.magic == kDescriptorMagic && s.lowest >= 0 && s.lowest < n;
  const bool other = s.firstOther == -1 || (s.firstOther > s.lowest && s.firstOther < n &&
                                            s.otherCall.magic == kDescriptorMagic);
  // A descriptor's size: that peer agrees by the all-to-all of smaller worlds.
  const char* hint = got == sizeof(CallDescriptor)
                         ? ", the size of a call descriptor: do all ranks set the same "
                           "TERSE_AGREEMENT_DIRECT_RANKS?"
                         : "";
  if (!whole || !other)
    return errorCorrupt("%s: rank %d sent a malformed summary of call descriptors (%zu bytes%s)",
                        collectiveName(kind), peer, got, hint);
  return Status::ok();
}

Status checkAgreement(const CallDescriptor& mine, int self, const CallSummary& world, uint32_t seq,
                      bool rejected) {
  // The first rank in rank order whose call differs from this rank's: the lowest rank if its
  // call does, else the first that differs from the lowest's (and so from this rank's).
  int named = -1;
  const CallDescriptor* theirs = nullptr;
  if (world.lowest != self && !sameCall(world.lowestCall, mine)) {
    named = world.lowest;
    theirs = &world.lowestCall;
  } else if (world.firstOther >= 0 && world.firstOther != self) {
    named = world.firstOther;
    theirs = &world.otherCall;
  }
  if (named < 0) return Status::ok();
  if (theirs->kind == kRejectedKind && !rejected)
    return errorInvalidUsage(
        "collective call #%u failed: rank %d rejected its arguments (see its error); this rank "
        "called %s",
        seq, named, describeDescriptor(mine).c_str());
  return errorInvalidUsage(
      "ranks disagree on collective call #%u: rank %d called %s but rank %d (this rank) "
      "called %s; every rank must make the same calls in the same order",
      seq, named, describeDescriptor(*theirs).c_str(), self, describeDescriptor(mine).c_str());
}

Status checkDescriptorsAgree(const CallDescriptor& mine, const CallDescriptor* theirs, int n,
                             int self, uint32_t seq, bool rejected) {
  CallSummary world = summarizeCall(self, mine);
  for (int i = 0; i < n; ++i)
    if (i != self) mergeSummaries(&world, summarizeCall(i, theirs[i]));
  return checkAgreement(mine, self, world, seq, rejected);
}

}  // namespace terse::detail
