#include "wire.h"

#include "registry.h"

#include <cstring>

namespace terse::wire {
namespace {

// Header layout (offsets in bytes); see docs/wire-format.md.
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffCodec = 5, kOffDtype = 6, kOffFlags = 7,
                 kOffCount = 8, kOffPayload = 16, kOffParam0 = 24, kOffParam1 = 28, kOffCheck = 32,
                 kOffReserved = 36;

template <typename T>
void put(uint8_t* p, size_t off, T v) {
  std::memcpy(p + off, &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

// FNV-1a over the first 32 header bytes: any flipped header bit is caught before a length or
// parameter from it is trusted.
uint32_t headerCheck(const uint8_t* p) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < kOffCheck; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

}  // namespace

void writeHeader(void* wire, const Header& h) {
  auto* p = static_cast<uint8_t*>(wire);
  put<uint32_t>(p, kOffMagic, kMagic);
  put<uint8_t>(p, kOffVersion, kVersion);
  put<uint8_t>(p, kOffCodec, h.codec);
  put<uint8_t>(p, kOffDtype, h.dtype);
  put<uint8_t>(p, kOffFlags, h.flags);
  put<uint64_t>(p, kOffCount, h.count);
  put<uint64_t>(p, kOffPayload, h.payloadBytes);
  put<uint32_t>(p, kOffParam0, h.param0);
  put<uint32_t>(p, kOffParam1, h.param1);
  put<uint32_t>(p, kOffCheck, headerCheck(p));
  put<uint32_t>(p, kOffReserved, 0);
}

Result<Header> readHeader(const void* wire, size_t bytes) {
  if (!wire) return errorInvalidArgument("wire message pointer is null");
  if (bytes < kHeaderBytes)
    return errorCorrupt("wire message of %zu bytes is shorter than the %zu-byte header", bytes,
                        kHeaderBytes);
  const auto* p = static_cast<const uint8_t*>(wire);
  uint32_t magic = get<uint32_t>(p, kOffMagic);
  if (magic != kMagic)
    return errorCorrupt(
        "wire message has magic 0x%08x, expected 0x%08x (\"TRSE\"): not a terse "
        "codec message",
        magic, kMagic);
  uint8_t version = get<uint8_t>(p, kOffVersion);
  if (version != kVersion)
    return errorCorrupt(
        "wire message has format version %u; this build reads version %u only: "
        "use the same terse release on every rank",
        version, kVersion);
  if (get<uint32_t>(p, kOffCheck) != headerCheck(p))
    return errorCorrupt("wire header checksum mismatch: the message header is corrupt");
  if (get<uint32_t>(p, kOffReserved) != 0)
    return errorCorrupt("wire header reserved field is not zero");
  Header h;
  h.codec = get<uint8_t>(p, kOffCodec);
  h.dtype = get<uint8_t>(p, kOffDtype);
  h.flags = get<uint8_t>(p, kOffFlags);
  h.count = get<uint64_t>(p, kOffCount);
  h.payloadBytes = get<uint64_t>(p, kOffPayload);
  h.param0 = get<uint32_t>(p, kOffParam0);
  h.param1 = get<uint32_t>(p, kOffParam1);
  if (!isRegisteredCodec(h.codec))
    return errorCorrupt("wire header names unknown codec id %u", h.codec);
  if (h.dtype > static_cast<uint8_t>(DataType::kBFloat16))
    return errorCorrupt("wire header names unknown source data type %u", h.dtype);
  if (h.flags & ~kKnownFlags) return errorCorrupt("wire header has unknown flags 0x%02x", h.flags);
  if (h.payloadBytes > bytes - kHeaderBytes)
    return errorCorrupt(
        "wire message is truncated: header announces %llu payload bytes but only "
        "%zu follow it",
        static_cast<unsigned long long>(h.payloadBytes), bytes - kHeaderBytes);
  return h;
}

}  // namespace terse::wire

namespace terse {

Result<WireInfo> parseWireHeader(const void* wire, size_t bytes) {
  TERSE_ASSIGN_OR_RETURN(wire::Header h, wire::readHeader(wire, bytes));
  WireInfo info;
  info.codec = static_cast<CodecId>(h.codec);
  info.sourceType = static_cast<DataType>(h.dtype);
  info.count = h.count;
  info.totalBytes = wire::kHeaderBytes + h.payloadBytes;
  return info;
}

}  // namespace terse
