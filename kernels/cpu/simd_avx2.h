// AVX2 + F16C building blocks for the CPU kernels (private to kernels/cpu).
//
// Binaries must run on any x86-64, so nothing here is compiled for the whole file: every
// function carries a target attribute and is only reached after detail::useAvx2() said the CPU
// has the instructions. Each helper computes exactly what the numeric.h formula computes for
// every input (the kernel tests run both paths over the same bit patterns and compare).
#pragma once

#include "cpu_common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TERSE_CPU_HAVE_AVX2_PATH 1
#include <immintrin.h>

#define TERSE_AVX2 __attribute__((target("avx2,f16c")))
#define TERSE_AVX2_INLINE static inline __attribute__((target("avx2,f16c"), always_inline))

namespace terse::kernels::cpu::avx2 {

TERSE_AVX2_INLINE __m256i bitsOf(__m256 v) { return _mm256_castps_si256(v); }
TERSE_AVX2_INLINE __m256 floatOf(__m256i v) { return _mm256_castsi256_ps(v); }

// Lanes whose float is Inf or NaN (all ones) - the negation of num::isFinite.
TERSE_AVX2_INLINE __m256i nonFiniteMask(__m256 v) {
  const __m256i expMask = _mm256_set1_epi32(0x7f800000);
  return _mm256_cmpeq_epi32(_mm256_and_si256(bitsOf(v), expMask), expMask);
}

// num::residualOf: v - d, or 0 where that is not finite. e - e is +0 for a finite e and NaN
// otherwise, so the test needs no constant: in the low-bit encoders every constant competes for
// AVX2's 16 registers, and one more spilled them.
TERSE_AVX2_INLINE __m256 residualOf(__m256 v, __m256 d) {
  __m256 e = _mm256_sub_ps(v, d);
  __m256 z = _mm256_sub_ps(e, e);
  return _mm256_and_ps(e, _mm256_cmp_ps(z, z, _CMP_ORD_Q));
}

// num::feedbackSum for 8 lanes: x + r, or +-FLT_MAX where x and r are finite and the sum is
// not. The block codecs do not call it per element: a sum that overflowed makes their block's
// largest key non-finite, and such a block with a residual is encoded by the portable loop
// (which calls num::feedbackSum), so the vector bodies keep a plain addition.
TERSE_AVX2_INLINE __m256 feedbackSum8(__m256 x, __m256 r) {
  __m256 v = _mm256_add_ps(x, r);
  __m256i over =
      _mm256_andnot_si256(_mm256_or_si256(nonFiniteMask(x), nonFiniteMask(r)), nonFiniteMask(v));
  __m256 sat = _mm256_or_ps(_mm256_set1_ps(3.40282347e38f),
                            _mm256_and_ps(v, floatOf(_mm256_set1_epi32(int(0x80000000u)))));
  return _mm256_blendv_ps(v, sat, floatOf(over));
}

// A block of the block codecs (int8, fp8, mx, int4) is tame when its largest |v| (magnitude
// key) is below 2^121 and either at least 2^-64 or zero. Then the block's inverse scale is
// finite (smaller maxima have one too since numeric.h's blockScale floors scales at 2^-126;
// the bound keeps its margin) or 0 for an all-zero block (int4's divisor is then 1), so every
// scaled value is finite and its NaN mapping can be skipped; and no residual can be non-finite:
// each decoded value is at most twice the block's largest magnitude (a scale of absmax / max
// times a code of at most max, or mx's power of two times at most 448), so |v - d| < 2^123 and
// residualOf's test can be skipped too. Same bits; in the low-bit encoders with a residual
// those steps were a fifth of the operations. Encoders instantiate a guarded body (kGuarded)
// for the other blocks.
constexpr uint32_t kTameBlockMinKey = 0x1f800000u, kTameBlockMaxKey = 0x7c000000u;
inline bool tameBlock(uint32_t maxKey) {
  return maxKey < kTameBlockMaxKey && (maxKey >= kTameBlockMinKey || maxKey == 0);
}
// Whether all eight blocks whose maximum keys these are are tame.
TERSE_AVX2_INLINE bool tameBlocks8(__m256i keys) {
  __m256i large = _mm256_cmpgt_epi32(keys, _mm256_set1_epi32(kTameBlockMaxKey - 1));
  __m256i small =
      _mm256_andnot_si256(_mm256_cmpeq_epi32(keys, _mm256_setzero_si256()),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32(kTameBlockMinKey), keys));
  return _mm256_testz_si256(_mm256_or_si256(large, small), _mm256_set1_epi32(-1)) != 0;
}

// residualOf, or v - d in a tame block (kGuarded false).
template <bool kGuarded>
TERSE_AVX2_INLINE __m256 blockResidual(__m256 v, __m256 d) {
  if constexpr (kGuarded)
    return residualOf(v, d);
  else
    return _mm256_sub_ps(v, d);
}

// num::magnitudeKey for 8 lanes.
TERSE_AVX2_INLINE __m256i magnitudeKey(__m256 v) {
  return _mm256_and_si256(bitsOf(v), _mm256_set1_epi32(0x7fffffff));
}

// num::floatToHalfBits: F16C rounds to nearest even like the formula; finite values that would
// round past 65504 are replaced by +-65504 first (F16C would make them Inf).
TERSE_AVX2_INLINE __m128i floatToHalf8(__m256 v) {
  __m256i absBits = magnitudeKey(v);
  __m256i overflow = _mm256_andnot_si256(
      _mm256_cmpgt_epi32(absBits, _mm256_set1_epi32(0x7f7fffff)),   // not Inf/NaN
      _mm256_cmpgt_epi32(absBits, _mm256_set1_epi32(0x477fefff)));  // >= 65520 - ulp/2
  __m256 sat = _mm256_or_ps(_mm256_set1_ps(65504.0f),
                            _mm256_and_ps(v, floatOf(_mm256_set1_epi32(int(0x80000000u)))));
  v = _mm256_blendv_ps(v, sat, floatOf(overflow));
  return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// num::halfBitsToFloat: F16C is exact for numbers; NaN lanes are rebuilt the formula's way
// (F16C would also set the quiet bit of a signalling NaN).
TERSE_AVX2_INLINE __m256 halfToFloat8(__m128i h) {
  __m256 f = _mm256_cvtph_ps(h);
  __m256i wide = _mm256_cvtepu16_epi32(h);
  __m256i absH = _mm256_and_si256(wide, _mm256_set1_epi32(0x7fff));
  __m256i isNaN = _mm256_cmpgt_epi32(absH, _mm256_set1_epi32(0x7c00));
  __m256i nanBits = _mm256_or_si256(
      _mm256_slli_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x8000)), 16),
      _mm256_or_si256(_mm256_set1_epi32(0x7f800000),
                      _mm256_slli_epi32(_mm256_and_si256(wide, _mm256_set1_epi32(0x3ff)), 13)));
  return _mm256_blendv_ps(f, floatOf(nanBits), floatOf(isNaN));
}

// num::floatToBf16Bits, 8 lanes, in the low 16 bits of each 32-bit lane.
TERSE_AVX2_INLINE __m256i floatToBf16Wide(__m256 v) {
  __m256i x = bitsOf(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  __m256i nan = _mm256_cmpgt_epi32(magnitudeKey(v), _mm256_set1_epi32(0x7f800000));
  __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

// Packs the low 16 bits of 8 lanes (values < 65536) in order.
TERSE_AVX2_INLINE __m128i pack16(__m256i w) {
  __m256i p = _mm256_packus_epi32(w, w);  // per 128-bit lane: [a0..3 a0..3 | b0..3 b0..3]
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0xd8));
}

TERSE_AVX2_INLINE __m256 bf16ToFloat8(__m128i b) {
  return floatOf(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}

// Typed 8-lane loads and stores in float32 (num::load / num::store).
TERSE_AVX2_INLINE __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
TERSE_AVX2_INLINE __m256 load8(const Half* p) {
  return halfToFloat8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
TERSE_AVX2_INLINE __m256 load8(const BFloat16* p) {
  return bf16ToFloat8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// Stores 8 values and returns what a load of them gives back (for residuals).
TERSE_AVX2_INLINE __m256 store8(float* p, __m256 v) {
  _mm256_storeu_ps(p, v);
  return v;
}
TERSE_AVX2_INLINE __m256 store8(Half* p, __m256 v) {
  __m128i h = floatToHalf8(v);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  return halfToFloat8(h);
}
TERSE_AVX2_INLINE __m256 store8(BFloat16* p, __m256 v) {
  __m128i b = pack16(floatToBf16Wide(v));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), b);
  return bf16ToFloat8(b);
}

}  // namespace terse::kernels::cpu::avx2
#endif
