// The wire header of docs/wire-format.md (private to compressors). Little-endian, 40 bytes,
// 8-byte aligned size so the payload arrays that follow stay aligned.
#pragma once

#include "terse/compressors/codec.h"

#include <cstddef>
#include <cstdint>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "terse's wire format is little-endian and this build only supports little-endian hosts"
#endif

namespace terse::wire {

constexpr uint32_t kMagic = 0x45535254u;  // bytes "TRSE"
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 40;
constexpr uint8_t kFlagStochastic = 1u << 0;  // int8/fp8/mx/int4 rounding (decoders check it)
constexpr uint8_t kKnownFlags = kFlagStochastic;

struct Header {
  uint8_t codec = 0;
  uint8_t dtype = 0;
  uint8_t flags = 0;
  uint64_t count = 0;
  uint64_t payloadBytes = 0;
  uint32_t param0 = 0;  // int8/onebit/fp8/mx/int4: block size; topk: k sent
  uint32_t param1 = 0;  // topk: ratio as float32 bits; fp8: 0 E4M3, 1 E5M2; others 0
};

// Writes the 40 header bytes (wire must hold them).
void writeHeader(void* wire, const Header& h);
// Parses and validates magic, version, checksum, codec, dtype, flags and that header + payload
// fit in `bytes`. Does not check codec parameters (the codec does).
Result<Header> readHeader(const void* wire, size_t bytes);

}  // namespace terse::wire
