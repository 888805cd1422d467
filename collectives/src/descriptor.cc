#include "descriptor.h"

#include "terse/compressors/codec.h"

namespace terse::detail {

std::string describeDescriptor(const CallDescriptor& d) {
  if (d.kind == kRejectedKind) return "a call it rejected as invalid (see that rank's error)";
  // The name functions answer "unknown..." for values outside their enums.
  return formatString(
      "%s(count=%llu, %s, %s, codec %s [spec hash %016llx])",
      collectiveName(static_cast<CollectiveKind>(d.kind)), static_cast<unsigned long long>(d.count),
      dataTypeName(static_cast<DataType>(d.dtype)), reduceOpName(static_cast<ReduceOp>(d.op)),
      codecName(static_cast<CodecId>(d.codec)), static_cast<unsigned long long>(d.specHash));
}

Status checkReceivedDescriptor(CollectiveKind kind, int peer, const CallDescriptor& d, size_t got) {
  if (got != sizeof(CallDescriptor) || d.magic != kDescriptorMagic)
    return errorCorrupt("%s: rank %d sent a malformed call descriptor (%zu bytes)",
                        collectiveName(kind), peer, got);
  return Status::ok();
}

Status checkDescriptorsAgree(const CallDescriptor& mine, const CallDescriptor* theirs, int n,
                             int self, uint32_t seq, bool rejected) {
  for (int i = 0; i < n; ++i) {
    if (i == self) continue;
    const CallDescriptor& d = theirs[i];
    if (d.kind == kRejectedKind && !rejected)
      return errorInvalidUsage(
          "collective call #%u failed: rank %d rejected its arguments (see its error); this rank "
          "called %s",
          seq, i, describeDescriptor(mine).c_str());
    if (d.kind != mine.kind || d.dtype != mine.dtype || d.op != mine.op || d.codec != mine.codec ||
        d.count != mine.count || d.specHash != mine.specHash || d.worldSize != mine.worldSize ||
        d.seq != mine.seq)
      return errorInvalidUsage(
          "ranks disagree on collective call #%u: rank %d called %s but rank %d (this rank) "
          "called %s; every rank must make the same calls in the same order",
          seq, i, describeDescriptor(d).c_str(), self, describeDescriptor(mine).c_str());
  }
  return Status::ok();
}

}  // namespace terse::detail
