// The codec kernels: pure math over arrays, no allocation, no policy, no wire headers.
// Every function exists twice with the same name and arguments:
//   terse::kernels::cpu::f(args...)                  -- CPU (multi-threaded on large n); the
//                                                       no-GPU path and the test oracle
//   terse::kernels::cuda::f(args..., cudaStream_t)   -- CUDA, asynchronous on the stream,
//                                                       declared in cuda.h (TERSE_HAVE_CUDA)
// Both use the formulas of numeric.h. Pointers of the CUDA versions are device pointers.
//
// Element types: T is one of float, Half, BFloat16 (explicitly instantiated).
// Residuals (error feedback) are float32 arrays of n elements; nullptr means "no residual".
// With a residual, the kernel compresses v = x + e and writes e = v - decode(encode(v)).
//
// Layouts (the compressors layer places these arrays inside a wire message):
//   int8:   scales[ceil(n/block)] float32, q[n] int8
//   onebit: scales[ceil(n/block)] float32, bits[ceil(n/32)] uint32 (bit j of word w is element
//           32w+j; 1 means >= 0; unused high bits of the last word are 0)
//   topk:   indices[k] uint32 ascending, values[k] float32
//   lowbit: scales[ceil(n/block)] (float32, or one E8M0 byte for mx formats), codes: n bytes
//           (fp8, mxfp8) or ceil(n/2) bytes of nibbles, element 2i in the low nibble (mxfp4,
//           int4; an odd n leaves the last high nibble 0)
#pragma once

#include "terse/kernels/numeric.h"

#include <cstddef>
#include <cstdint>

namespace terse::kernels {

enum class Rounding : uint8_t { kNearest = 0, kStochastic = 1 };

// The low-bit block formats (numeric.h has their formulas). mx formats use block 32 always.
enum class LowbitFormat : uint8_t {
  kFp8E4M3 = 0,  // E4M3 elements, float32 scale per block
  kFp8E5M2 = 1,  // E5M2 elements, float32 scale per block
  kMxfp8 = 2,    // OCP MXFP8 (E4M3), E8M0 scale per 32
  kMxfp4 = 3,    // OCP MXFP4 (E2M1), E8M0 scale per 32
  kInt4 = 4,     // 4-bit signed integers, float32 scale per block
};
constexpr size_t kMxBlock = 32;
constexpr bool lowbitIsMx(LowbitFormat f) {
  return f == LowbitFormat::kMxfp8 || f == LowbitFormat::kMxfp4;
}
constexpr bool lowbitIsNibbles(LowbitFormat f) {
  return f == LowbitFormat::kMxfp4 || f == LowbitFormat::kInt4;
}
// Bytes of one block scale, and of the codes of n elements.
constexpr size_t lowbitScaleBytes(LowbitFormat f) { return lowbitIsMx(f) ? 1 : 4; }
constexpr size_t lowbitCodeBytes(LowbitFormat f, size_t n) {
  return lowbitIsNibbles(f) ? (n + 1) / 2 : n;
}

namespace cpu {

// ---- element casts (codecs none/fp16/bf16) --------------------------------------------------
// out[i] = convert(in[i] * scale); scale multiplies in float32 before narrowing (avg before
// casting avoids fp16 overflow). With a residual, in[i]*scale + e[i] is converted and the
// rounding error kept in e.
template <typename In, typename Out>
void convert(const In* in, Out* out, size_t n, float scale, float* residual);
// acc[i] += load(in[i])
template <typename In>
void accumulate(const In* in, float* acc, size_t n);

// ---- int8 blockwise absmax ------------------------------------------------------------------
// seed/offset: stochastic rounding draws uniform01(seed, offset + i) for element i.
template <typename In>
void int8Quantize(const In* in, size_t n, size_t block, Rounding rounding, uint64_t seed,
                  uint64_t offset, float* residual, float* scales, int8_t* q);
template <typename Out>
void int8Dequantize(const float* scales, const int8_t* q, size_t n, size_t block, Out* out);
void int8DequantizeAccumulate(const float* scales, const int8_t* q, size_t n, size_t block,
                              float* acc);

// ---- onebit: sign + per-block mean magnitude --------------------------------------------------
template <typename In>
void onebitCompress(const In* in, size_t n, size_t block, float* residual, float* scales,
                    uint32_t* bits);
template <typename Out>
void onebitDecompress(const float* scales, const uint32_t* bits, size_t n, size_t block, Out* out);
void onebitDecompressAccumulate(const float* scales, const uint32_t* bits, size_t n, size_t block,
                                float* acc);

// ---- low-bit block formats: fp8, mxfp8, mxfp4, int4 ------------------------------------------
// block: elements per scale (even; kMxBlock for the mx formats). seed/offset as int8's; offset
// must be even for the nibble formats (a chunk starts on a whole byte).
template <typename In>
void lowbitQuantize(LowbitFormat f, const In* in, size_t n, size_t block, Rounding rounding,
                    uint64_t seed, uint64_t offset, float* residual, void* scales, uint8_t* codes);
template <typename Out>
void lowbitDequantize(LowbitFormat f, const void* scales, const uint8_t* codes, size_t n,
                      size_t block, Out* out);
void lowbitDequantizeAccumulate(LowbitFormat f, const void* scales, const uint8_t* codes, size_t n,
                                size_t block, float* acc);

// ---- nvfp4: E2M1 nibbles, an E4M3 scale per 16 elements, a float32 scale per call -----------
// Layout (wire_layout.h's nvfp4Layout): tensorScale[1] float32, scales[ceil(n/16)] E4M3 bytes,
// codes[ceil(n/2)] nibbles as lowbit's. The tensor scale spans the whole call, so a call is the
// unit (no offset chunking); seed as int8's, element i drawing uniform01(seed, i).
template <typename In>
void nvfp4Quantize(const In* in, size_t n, Rounding rounding, uint64_t seed, float* residual,
                   float* tensorScale, uint8_t* scales, uint8_t* codes);
template <typename Out>
void nvfp4Dequantize(const float* tensorScale, const uint8_t* scales, const uint8_t* codes,
                     size_t n, Out* out);
void nvfp4DequantizeAccumulate(const float* tensorScale, const uint8_t* scales,
                               const uint8_t* codes, size_t n, float* acc);

// ---- topk: k largest magnitudes (exact on CPU) ----------------------------------------------
// Scratch for topkCompress, in bytes (two-phase query like CUB's temp storage).
size_t topkScratchBytes(size_t n);
// Selects exactly k = min(k, n) elements of v = in (+ residual) with the largest |v| (ties broken
// by lower index; NaN counts as largest), writes them in ascending index order, and (with a
// residual) sets e = v for unselected elements and e = 0 for selected ones. Returns k written.
template <typename In>
size_t topkCompress(const In* in, size_t n, size_t k, float* residual, void* scratch,
                    uint32_t* indices, float* values);
// The decoders trust nothing: they return false, touching nothing, if an index is >= n or the
// indices are not strictly ascending.
template <typename Out>
bool topkDecompress(const uint32_t* indices, const float* values, size_t k, size_t n, Out* out);
bool topkDecompressAccumulate(const uint32_t* indices, const float* values, size_t k, size_t n,
                              float* acc);

// ---- reductions used by collectives ---------------------------------------------------------
// acc[i] *= scale (turns a sum into an average in float32)
void scaleInPlace(float* acc, size_t n, float scale);

}  // namespace cpu
}  // namespace terse::kernels
