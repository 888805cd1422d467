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
        d.count != mine.count || d.specHash != mine.specHash ||
        d.requestedHash != mine.requestedHash || d.algorithm != mine.algorithm ||
        d.worldSize != mine.worldSize || d.seq != mine.seq)
      return errorInvalidUsage(
          "ranks disagree on collective call #%u: rank %d called %s but rank %d (this rank) "
          "called %s; every rank must make the same calls in the same order",
          seq, i, describeDescriptor(d).c_str(), self, describeDescriptor(mine).c_str());
  }
  return Status::ok();
}

}  // namespace terse::detail
