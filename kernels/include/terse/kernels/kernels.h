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
#pragma once

#include "terse/kernels/numeric.h"

#include <cstddef>
#include <cstdint>

namespace terse::kernels {

enum class Rounding : uint8_t { kNearest = 0, kStochastic = 1 };

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
