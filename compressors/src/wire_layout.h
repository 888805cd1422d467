// Where each codec's arrays sit in its payload (docs/wire-format.md, "Payloads"), written once
// for the host path (codecs.cc), the device path (codecs_device.cc) and the size checks.
//
// Every payload is a sequence of sections (scales, codes, indices, ...) placed back to back,
// each padded with zero bytes to a multiple of 4, so every array starts 4-byte aligned. A
// codec's layout is a function of the header fields it depends on (count, and for some the
// source type or param0); CodecBase computes it once per call, zeroes the padding and hands the
// codec a Payload whose sections it fills or reads. TERSE_HD and constexpr: usable in kernels
// and in static_asserts alike.
#pragma once

#include "terse/common/hd.h"
#include "terse/kernels/kernels.h"

#include <cstddef>
#include <cstdint>

namespace terse::wire {

TERSE_HD constexpr size_t pad4(size_t n) { return (n + 3) & ~size_t{3}; }
TERSE_HD constexpr size_t ceilDiv(size_t n, size_t d) { return n / d + (n % d != 0); }

struct Layout {
  static constexpr int kMaxSections = 3;
  size_t offset[kMaxSections] = {};
  size_t bytes[kMaxSections] = {};  // the array's own bytes; padding follows up to pad4
  int sections = 0;
  size_t total = 0;  // payload bytes: every section padded

  // This layout with one more section of `b` bytes after the others.
  TERSE_HD constexpr Layout then(size_t b) const {
    Layout l = *this;
    l.offset[l.sections] = l.total;
    l.bytes[l.sections] = b;
    l.total += pad4(b);
    ++l.sections;
    return l;
  }
  TERSE_HD constexpr size_t end(int i) const { return offset[i] + bytes[i]; }
  TERSE_HD constexpr size_t padding(int i) const { return pad4(bytes[i]) - bytes[i]; }
};

// A payload buffer (host, device or pinned memory) seen through its codec's layout.
template <typename Byte>
struct PayloadOf {
  Byte* base;
  Layout layout;
  template <typename T>
  TERSE_HD T* at(int section) const {
    return reinterpret_cast<T*>(base + layout.offset[section]);
  }
};
using Payload = PayloadOf<unsigned char>;
using ConstPayload = PayloadOf<const unsigned char>;

// ---- the codecs' layouts ---------------------------------------------------------------------
// Section numbers of the blockwise codecs (int8, onebit, the low-bit formats) and of topk.
constexpr int kScales = 0, kCodes = 1;
constexpr int kIndices = 0, kValues = 1;

// none / fp16 / bf16: n elements of the wire type.
TERSE_HD constexpr Layout castLayout(size_t n, size_t elementBytes) {
  return Layout{}.then(n * elementBytes);
}
// int8: float32 scale per block, then an int8 per element.
TERSE_HD constexpr Layout int8Layout(size_t n, size_t block) {
  return Layout{}.then(4 * ceilDiv(n, block)).then(n);
}
// onebit: float32 scale per block, then a bit per element in uint32 words.
TERSE_HD constexpr Layout onebitLayout(size_t n, size_t block) {
  return Layout{}.then(4 * ceilDiv(n, block)).then(4 * ceilDiv(n, 32));
}
// topk: k uint32 indices, then k float32 values.
TERSE_HD constexpr Layout topkLayout(size_t k) { return Layout{}.then(4 * k).then(4 * k); }
// fp8 / mxfp8 / mxfp4 / int4: the format's scale per block, then its codes.
TERSE_HD constexpr Layout lowbitLayout(kernels::LowbitFormat f, size_t n, size_t block) {
  return Layout{}
      .then(ceilDiv(n, block) * kernels::lowbitScaleBytes(f))
      .then(kernels::lowbitCodeBytes(f, n));
}
// nvfp4: the message's float32 scale, an E4M3 scale per 16 elements, then E2M1 nibbles.
constexpr int kTensorScale = 0, kBlockScales = 1, kNibbles = 2;
TERSE_HD constexpr Layout nvfp4Layout(size_t n) {
  return Layout{}.then(4).then(ceilDiv(n, num::kNvfp4Block)).then(ceilDiv(n, 2));
}

// The table of docs/wire-format.md, checked where it is written.
static_assert(castLayout(3, 2).total == 8);
static_assert(int8Layout(300, 256).total == 8 + 300 && int8Layout(301, 256).offset[kCodes] == 8);
static_assert(onebitLayout(33, 32).total == 8 + 8);
static_assert(topkLayout(5).offset[kValues] == 20 && topkLayout(5).total == 40);
static_assert(lowbitLayout(kernels::LowbitFormat::kMxfp4, 33, 32).offset[kCodes] == 4 &&
              lowbitLayout(kernels::LowbitFormat::kMxfp4, 33, 32).total == 4 + 20);
static_assert(nvfp4Layout(33).offset[kBlockScales] == 4 && nvfp4Layout(33).offset[kNibbles] == 8 &&
              nvfp4Layout(33).total == 8 + 20);

}  // namespace terse::wire
