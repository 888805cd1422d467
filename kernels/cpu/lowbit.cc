// The low-bit block formats (fp8, mxfp8, mxfp4, int4): loop templates over numeric.h's format
// policies. The portable loops call the formulas element by element; the AVX2 loops (run when
// the CPU has them) compute the same bits lane for lane: nearest rounding and every decoder in
// vectors (decoders by tables filled from the formulas, mx scales eight blocks at a time),
// stochastic rounding through the scalar formulas. Throughput: docs/codecs.md.
#include "cpu_common.h"
#include "simd_avx2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace terse::kernels::cpu {
namespace {

template <typename In>
inline float valueAt(const In* in, const float* residual, size_t i) {
  return residual ? num::feedbackSum(num::load(in, i), residual[i]) : num::load(in, i);
}

// One block: scale from the largest magnitude, then every element's code (and residual).
// codes points at the block's first byte (element 0 of the block is a low nibble).
template <typename P, typename In>
void quantizeBlock(const In* TERSE_RESTRICT in, size_t n, bool stochastic, uint64_t seed,
                   uint64_t offset, float* TERSE_RESTRICT residual,
                   typename P::Scale* TERSE_RESTRICT scaleOut, uint8_t* TERSE_RESTRICT codes) {
  uint32_t maxKey = 0;
  for (size_t i = 0; i < n; ++i)
    maxKey = std::max(maxKey, num::magnitudeKey(valueAt(in, residual, i)));
  typename P::Scale s = P::scaleFromKey(maxKey);
  *scaleOut = s;
  float inv = P::factor(s), sv = P::scaleValue(s);
  bool st = stochastic;
  auto codeAt = [&](size_t i) {
    float v = valueAt(in, residual, i);
    uint32_t c = P::encode(v, inv, st, st ? num::uniform01(seed, offset + i) : 0.0f);
    if (residual) residual[i] = num::residualOf(v, P::decode(c) * sv);
    return c;
  };
  if constexpr (P::kNibbles) {
    size_t pairs = n / 2;
    for (size_t j = 0; j < pairs; ++j) {
      uint32_t lo = codeAt(2 * j), hi = codeAt(2 * j + 1);
      codes[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
    if (n & 1) codes[pairs] = static_cast<uint8_t>(codeAt(n - 1));
  } else {
    for (size_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(codeAt(i));
  }
}

// Decoded values of one block, handed to put(i, value).
template <typename P, typename Put>
void decodeBlock(typename P::Scale s, const uint8_t* TERSE_RESTRICT codes, size_t n, Put&& put) {
  float sv = P::scaleValue(s);
  if constexpr (P::kNibbles) {
    size_t pairs = n / 2;
    for (size_t j = 0; j < pairs; ++j) {
      uint32_t b = codes[j];
      put(2 * j, P::decode(b & 0xfu) * sv);
      put(2 * j + 1, P::decode(b >> 4) * sv);
    }
    if (n & 1) put(n - 1, P::decode(codes[pairs] & 0xfu) * sv);
  } else {
    for (size_t i = 0; i < n; ++i) put(i, P::decode(codes[i]) * sv);
  }
}

// Byte offset of element s's code (s even for nibble formats).
template <typename P>
size_t codeOffset(size_t s) {
  return P::kNibbles ? s / 2 : s;
}

#if TERSE_CPU_HAVE_AVX2_PATH
// The element format behind a policy (void for int4).
template <typename P>
struct ElemOf {
  using type = void;
};
template <typename F>
struct ElemOf<num::FpBlockPolicy<F>> {
  using type = F;
};
template <typename F>
struct ElemOf<num::MxPolicy<F>> {
  using type = F;
};

// num::fpMagnitudeValue for 8 finite magnitude codes.
template <typename F>
TERSE_AVX2_INLINE __m256 magnitudeValue8(__m256i mag) {
  __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(mag, 23 - F::kMant),
                                    _mm256_set1_epi32((127 - F::kBias) << 23));
  __m256 sub =
      _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(num::pow2(F::kEmin - F::kMant)));
  __m256i isSub = _mm256_cmpgt_epi32(_mm256_set1_epi32(1 << F::kMant), mag);
  return _mm256_blendv_ps(avx2::floatOf(normal), sub, avx2::floatOf(isSub));
}

// P::encode(v, inv, nearest) for 8 lanes as 32-bit codes, and P::decode(code) in *dec (before
// the scale). Lane for lane what the scalar formulas compute: the minifloat path follows
// fpEncodeScaled + fpMagnitudeNearest (the scaled value is finite and within +-max, so
// decoding needs no NaN/Inf codes); int4 follows Int4Policy::encode (inv is then the policy's
// factor, the divisor: int4 rounds the quotient v / s, numeric.h says why).
// kDec: also the value (for a residual); without it the decode is skipped. kGuarded false: a
// tame block (simd_avx2.h), where x is never NaN. A template flag, not
// a pointer that may be null: through a pointer GCC kept the value in memory, a store and a
// reload per 8 elements that made the residual path cost twice int8's.
template <typename P, bool kDec, bool kGuarded>
TERSE_AVX2_INLINE __m256i encodeNearest8(__m256 v, __m256 inv, __m256& dec) {
  using F = typename ElemOf<P>::type;
  using namespace avx2;
  if constexpr (std::is_void_v<F>) {
    __m256 x = _mm256_div_ps(v, inv);
    __m256 q = _mm256_round_ps(x, _MM_FROUND_CUR_DIRECTION);  // rintf
    if constexpr (kGuarded) q = _mm256_andnot_ps(_mm256_cmp_ps(q, q, _CMP_UNORD_Q), q);
    q = _mm256_min_ps(q, _mm256_set1_ps(7.0f));
    q = _mm256_max_ps(q, _mm256_set1_ps(-7.0f));
    q = _mm256_add_ps(q, _mm256_setzero_ps());  // -0 -> +0, as the int conversion does
    if constexpr (kDec) dec = q;
    return _mm256_and_si256(_mm256_cvtps_epi32(q), _mm256_set1_epi32(0xf));
  } else {
    __m256 x = _mm256_mul_ps(v, inv);
    // One float addition rounds |x| to the element grid, normal and subnormal alike: adding
    // M = 2^(E + 23 - mant), E = max(exponent of |x|, emin), leaves M's unit in the last place
    // at the grid step 2^(E - mant), so the sum is rounded to nearest even exactly as rintf
    // rounds |x| / step (the scalar formula). Then (sum - M) is the value, exact, and
    // bits(sum) - bits(M) is it in steps, n; the code is n + ((E - emin) << mant), with E read
    // off M's exponent field. A carry into the next binade (n = 2^(mant+1)) and a subnormal
    // rounding up to the smallest normal (n = 2^mant) land on the right codes by the same sum.
    // Eight integer and float operations where rounding the bits and blending a separate
    // subnormal path took thirteen. E2M1 (mxfp4) takes this path too: on Zen 4 it compressed
    // 5% faster with a residual than a binary search over the midpoints (three compares, a
    // blend, two permutes in one dependency chain), and equal without
    // (KernelLowbit.Avx2MatchesThePortablePathOverEveryFloatInRange checks every float32).
    // The addition rounds in the current rounding mode, so this matches the scalar formula
    // (integer rounding, always to nearest even) under the default mode only, which terse
    // never changes; under FE_TOWARDZERO a value just under a grid point would round down.
    constexpr int kShift = 23 - F::kMant;
    const __m256 mx = _mm256_set1_ps(num::fpMax<F>());
    if constexpr (kGuarded) x = _mm256_andnot_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q), x);  // NaN->+0
    __m256i bits = bitsOf(x);
    __m256i sign = _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
    // clamping |x| to max clamps x to +-max (and keeps the sign of a saturated -Inf)
    __m256 a = _mm256_min_ps(floatOf(_mm256_xor_si256(bits, sign)), mx);
    __m256i magic = _mm256_add_epi32(_mm256_and_si256(bitsOf(a), _mm256_set1_epi32(0x7f800000)),
                                     _mm256_set1_epi32(kShift << 23));
    magic = _mm256_max_epi32(magic, _mm256_set1_epi32((127 + F::kEmin + kShift) << 23));
    __m256 sum = _mm256_add_ps(a, floatOf(magic));
    __m256i mag = _mm256_add_epi32(
        _mm256_sub_epi32(bitsOf(sum), magic),
        _mm256_sub_epi32(_mm256_srli_epi32(magic, kShift),
                         _mm256_set1_epi32((127 + F::kEmin + kShift) << F::kMant)));
    constexpr int kSignShift = F::kSign == 0x80u ? 24 : 28;
    if constexpr (kDec) dec = _mm256_or_ps(_mm256_sub_ps(sum, floatOf(magic)), floatOf(sign));
    return _mm256_or_si256(mag, _mm256_srli_epi32(sign, kSignShift));
  }
}

// Two vectors of codes (< 256) packed pairwise to 16 bits (_mm256_packs_epi32 of four vectors
// of 32-bit codes, two by two) -> 32 bytes in order.
TERSE_AVX2_INLINE __m256i packBytes(__m256i ab, __m256i cd) {
  __m256i abcd = _mm256_packus_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Nearest rounding of 32 elements in vectors: codes (and, with kResidual, the residual) from
// one block's inverse and scale. kGuarded false: a tame block (simd_avx2.h).
template <typename P, bool kResidual, bool kGuarded, typename In>
TERSE_AVX2_INLINE void encode32(const In* in, float* residual, __m256 inv, __m256 sc,
                                uint8_t* codes) {
  auto code8 = [&](int j) __attribute__((always_inline, target("avx2,f16c"))) {
    __m256 v = avx2::load8(in + 8 * j);
    if constexpr (kResidual) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + 8 * j));
    __m256 dec;
    __m256i c = encodeNearest8<P, kResidual, kGuarded>(v, inv, dec);
    if constexpr (kResidual)
      _mm256_storeu_ps(residual + 8 * j, avx2::blockResidual<kGuarded>(v, _mm256_mul_ps(dec, sc)));
    return c;
  };
  // Packed pair by pair as they come, so two vectors of codes are live rather than four.
  __m256i c01 = _mm256_packs_epi32(code8(0), code8(1));
  __m256i c23 = _mm256_packs_epi32(code8(2), code8(3));
  __m256i bytes = packBytes(c01, c23);
  if constexpr (P::kNibbles) {
    // byte pairs (even, odd) -> even | odd << 4, then 16-bit lanes -> bytes
    __m256i lo = _mm256_and_si256(bytes, _mm256_set1_epi16(0x000f));
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi16(0x00f0));
    __m256i w = _mm256_or_si256(lo, hi);
    __m256i p = _mm256_packus_epi16(w, w);
    p = _mm256_permute4x64_epi64(p, 0xd8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm256_castsi256_si128(p));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), bytes);
  }
}

// num::mxScaleCode for 8 block maxima at once: floor(log2) from the exponent field, or for a
// float32-subnormal maximum from the exponent of its exact int -> float conversion (2^hi has
// field hi + 127, and lg = hi - 149); zero falls out as the smallest code, Inf/NaN is 0xFF.
// (For E4M3 and E2M1 a subnormal maximum always clamps to code 0 and code 254 cannot occur;
// both are kept so this is the formula for any element format.)
template <typename F>
TERSE_AVX2_INLINE __m256i mxScaleCode8(__m256i key) {
  __m256i lgNormal = _mm256_sub_epi32(_mm256_srli_epi32(key, 23), _mm256_set1_epi32(127));
  __m256i lgSub = _mm256_sub_epi32(_mm256_srli_epi32(avx2::bitsOf(_mm256_cvtepi32_ps(key)), 23),
                                   _mm256_set1_epi32(127 + 149));
  __m256i normal = _mm256_cmpgt_epi32(key, _mm256_set1_epi32(0x007fffff));
  __m256i lg = _mm256_blendv_epi8(lgSub, lgNormal, normal);
  __m256i code = _mm256_add_epi32(lg, _mm256_set1_epi32(127 - F::kEmax));
  code = _mm256_max_epi32(_mm256_min_epi32(code, _mm256_set1_epi32(254)), _mm256_setzero_si256());
  __m256i nonFinite = _mm256_cmpgt_epi32(key, _mm256_set1_epi32(0x7f7fffff));
  return _mm256_blendv_epi8(code, _mm256_set1_epi32(static_cast<int>(num::kE8M0Nan)), nonFinite);
}

// num::e8m0Decode for 8 codes (one per 32-bit lane): code << 23, 2^-127 for code 0, NaN for 0xFF.
TERSE_AVX2_INLINE __m256 e8m0Value8(__m256i code) {
  __m256i sv = _mm256_blendv_epi8(_mm256_slli_epi32(code, 23), _mm256_set1_epi32(0x00400000),
                                  _mm256_cmpeq_epi32(code, _mm256_setzero_si256()));
  __m256i isNan = _mm256_cmpeq_epi32(code, _mm256_set1_epi32(static_cast<int>(num::kE8M0Nan)));
  return avx2::floatOf(_mm256_blendv_epi8(sv, _mm256_set1_epi32(0x7fc00000), isNan));
}

// Lane j = the largest of m[j]'s 8 lanes (unsigned), for 8 vectors: three rounds of
// interleave-and-max instead of eight separate horizontal reductions.
TERSE_AVX2_INLINE __m256i hmax8x8(const __m256i* m) {
  __m256i s[4], q[2];
  for (int k = 0; k < 4; ++k)
    s[k] = _mm256_max_epu32(_mm256_unpacklo_epi32(m[2 * k], m[2 * k + 1]),
                            _mm256_unpackhi_epi32(m[2 * k], m[2 * k + 1]));
  for (int k = 0; k < 2; ++k)
    q[k] = _mm256_max_epu32(_mm256_unpacklo_epi64(s[2 * k], s[2 * k + 1]),
                            _mm256_unpackhi_epi64(s[2 * k], s[2 * k + 1]));
  return _mm256_max_epu32(_mm256_permute2x128_si256(q[0], q[1], 0x20),
                          _mm256_permute2x128_si256(q[0], q[1], 0x31));
}

// The scales of eight blocks from their largest magnitude keys, in vectors: the Scale values
// stored to scales[0..7], and each scale's value and encoding factor (lane j: block j). The mx
// rule (num::mxScaleCode, e8m0Decode, e8m0Inverse) for E8M0 scales; num::blockScale for the
// others (absmax / levels, at least 2^-126, one ulp down where levels times it would be Inf,
// NaN for a non-finite block, 0 for a zero one), whose vector divisions round as the scalar
// ones do, and their factor (fp8: int8InvScale; int4: int4Divisor).
template <typename P>
TERSE_AVX2_INLINE void scales8(__m256i keys, typename P::Scale* scales, __m256* value,
                               __m256* inverse) {
  using F = typename ElemOf<P>::type;
  if constexpr (std::is_same_v<typename P::Scale, uint8_t>) {
    __m256i code = mxScaleCode8<F>(keys);
    // e8m0Inverse: (254 - code) << 23, 2^-127 for code 254, 0 for 0xFF.
    __m256i isNan = _mm256_cmpeq_epi32(code, _mm256_set1_epi32(static_cast<int>(num::kE8M0Nan)));
    __m256i inv = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), code), 23);
    inv = _mm256_blendv_epi8(inv, _mm256_set1_epi32(0x00400000),
                             _mm256_cmpeq_epi32(code, _mm256_set1_epi32(254)));
    *inverse = avx2::floatOf(_mm256_andnot_si256(isNan, inv));
    *value = e8m0Value8(code);
    __m128i bytes = _mm_packus_epi16(
        _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1)),
        _mm_setzero_si128());
    _mm_storel_epi64(reinterpret_cast<__m128i*>(scales), bytes);
  } else {
    float levels;
    if constexpr (std::is_void_v<F>)
      levels = 7.0f;  // int4Scale
    else
      levels = num::fpMax<F>();  // fpBlockScale
    const __m256 lv = _mm256_set1_ps(levels);
    __m256 s = _mm256_div_ps(avx2::floatOf(keys), lv);
    __m256i zero = _mm256_cmpeq_epi32(keys, _mm256_setzero_si256());
    // the floor, for nonzero blocks (a zero block's lane stays 0; keys are finite or NaN-bound)
    s = _mm256_max_ps(s,
                      _mm256_andnot_ps(avx2::floatOf(zero), _mm256_set1_ps(num::kMinBlockScale)));
    // one ulp down where levels * s rounds to Inf (an integer decrement of the bits)
    __m256i over = avx2::nonFiniteMask(_mm256_mul_ps(s, lv));
    s = avx2::floatOf(_mm256_add_epi32(avx2::bitsOf(s), over));
    __m256i nonFinite = _mm256_cmpgt_epi32(keys, _mm256_set1_epi32(0x7f7fffff));
    s = _mm256_blendv_ps(s, avx2::floatOf(_mm256_set1_epi32(0x7fc00000)), avx2::floatOf(nonFinite));
    if constexpr (std::is_void_v<F>) {
      // int4Divisor: 1 for a zero block, the scale otherwise (NaN included)
      *inverse = _mm256_blendv_ps(s, _mm256_set1_ps(1.0f), avx2::floatOf(zero));
    } else {
      __m256 positive = _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_GT_OQ);
      *inverse = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), s), positive);
    }
    *value = s;
    _mm256_storeu_ps(scales, s);
  }
}

// Eight whole blocks of kLen elements with nearest rounding: their scales computed together in
// vectors (a block's scalar scale rule, horizontal maximum and divisions cost as much as the
// encoding of a 32- or 64-element block), then each block encoded 32 elements at a time as
// quantizeBlockAvx2 does. Bit for bit the per-block path.
template <typename P, size_t kLen, bool kResidual, typename In>
TERSE_AVX2_INLINE void quantize8Blocks(const In* in, float* residual, typename P::Scale* scales,
                                       uint8_t* codes) {
  static_assert(kLen % 32 == 0, "blocks are encoded 32 elements at a time");
  __m256i m[8];
  for (size_t j = 0; j < 8; ++j) {
    __m256i k = _mm256_setzero_si256();
    for (size_t t = 0; t < kLen; t += 8) {
      __m256 v = avx2::load8(in + kLen * j + t);
      if constexpr (kResidual) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + kLen * j + t));
      k = _mm256_max_epu32(k, avx2::magnitudeKey(v));
    }
    m[j] = k;
  }
  __m256i keys = hmax8x8(m);
  if constexpr (kResidual) {
    // As in quantizeBlockAvx2: a non-finite block may hold a sum that overflowed; the portable
    // loop encodes such a batch block by block (nearest rounding: no seed is drawn).
    if (!_mm256_testz_si256(_mm256_cmpgt_epi32(keys, _mm256_set1_epi32(0x7f7fffff)),
                            _mm256_set1_epi32(-1))) {
      for (size_t j = 0; j < 8; ++j)
        quantizeBlock<P>(in + kLen * j, kLen, false, 0, 0, residual + kLen * j, scales + j,
                         codes + (P::kNibbles ? kLen * j / 2 : kLen * j));
      return;
    }
  }
  __m256 sv, inv;
  scales8<P>(keys, scales, &sv, &inv);
  alignas(32) float svs[8], invs[8];
  _mm256_store_ps(svs, sv);
  _mm256_store_ps(invs, inv);
  auto encodeAll = [&](auto guarded) __attribute__((always_inline, target("avx2,f16c"))) {
    for (size_t j = 0; j < 8; ++j) {
      __m256 bi = _mm256_broadcast_ss(invs + j), bs = _mm256_broadcast_ss(svs + j);
      for (size_t t = 0; t < kLen; t += 32) {
        size_t at = kLen * j + t;
        encode32<P, kResidual, decltype(guarded)::value>(in + at,
                                                         kResidual ? residual + at : nullptr, bi,
                                                         bs, codes + (P::kNibbles ? at / 2 : at));
      }
    }
  };
  if (avx2::tameBlocks8(keys))
    encodeAll(std::false_type{});
  else
    encodeAll(std::true_type{});
}

template <typename P, typename In>
TERSE_AVX2 inline __attribute__((always_inline)) void quantizeBlockAvx2(
    const In* TERSE_RESTRICT in, size_t n, bool stochastic, uint64_t seed, uint64_t offset,
    float* TERSE_RESTRICT residual, typename P::Scale* TERSE_RESTRICT scaleOut,
    uint8_t* TERSE_RESTRICT codes) {
  // The largest magnitude key, 8 lanes at a time (an integer max: exact, order independent).
  __m256i keys = _mm256_setzero_si256();
  size_t full8 = n / 8 * 8;
  for (size_t i = 0; i < full8; i += 8) {
    __m256 v = avx2::load8(in + i);
    if (residual) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + i));
    keys = _mm256_max_epu32(keys, avx2::magnitudeKey(v));
  }
  __m128i k4 = _mm_max_epu32(_mm256_castsi256_si128(keys), _mm256_extracti128_si256(keys, 1));
  k4 = _mm_max_epu32(k4, _mm_shuffle_epi32(k4, 0x4e));
  k4 = _mm_max_epu32(k4, _mm_shuffle_epi32(k4, 0xb1));
  uint32_t maxKey = static_cast<uint32_t>(_mm_cvtsi128_si32(k4));
  for (size_t i = full8; i < n; ++i)
    maxKey = std::max(maxKey, num::magnitudeKey(valueAt(in, residual, i)));
  // A non-finite block with a residual: input plus residual may have overflowed (the vector
  // sums above do not saturate), so the portable loop, which does, encodes it (rare).
  if (residual && maxKey >= 0x7f800000u)
    return quantizeBlock<P>(in, n, stochastic, seed, offset, residual, scaleOut, codes);
  typename P::Scale s = P::scaleFromKey(maxKey);
  *scaleOut = s;
  float invScale = P::factor(s), sv = P::scaleValue(s);
  auto codeAt = [&](size_t i) {
    float v = valueAt(in, residual, i);
    uint32_t c =
        P::encode(v, invScale, stochastic, stochastic ? num::uniform01(seed, offset + i) : 0.0f);
    if (residual) residual[i] = num::residualOf(v, P::decode(c) * sv);
    return c;
  };
  // Nearest rounding runs 32 elements at a time in vectors (stochastic rounding's 64-bit hash
  // stays scalar); the tail and stochastic blocks take the scalar formulas.
  size_t done = 0;
  if (!stochastic) {
    const __m256 inv = _mm256_set1_ps(invScale), sc = _mm256_set1_ps(sv);
    // one loop per case (with or without a residual, tame or guarded: simd_avx2.h)
    auto loop = [&](auto withResidual, auto guarded)
        __attribute__((always_inline, target("avx2,f16c"))) {
      constexpr bool kResidual = decltype(withResidual)::value;
      for (; done + 32 <= n; done += 32)
        encode32<P, kResidual, decltype(guarded)::value>(
            in + done, kResidual ? residual + done : nullptr, inv, sc,
            codes + (P::kNibbles ? done / 2 : done));
    };
    bool tame = avx2::tameBlock(maxKey);
    if (residual && tame)
      loop(std::true_type{}, std::false_type{});
    else if (residual)
      loop(std::true_type{}, std::true_type{});
    else if (tame)
      loop(std::false_type{}, std::false_type{});
    else
      loop(std::false_type{}, std::true_type{});
  }
  if constexpr (P::kNibbles) {
    size_t pairs = n / 2;
    for (size_t j = done / 2; j < pairs; ++j) {
      uint32_t lo = codeAt(2 * j), hi = codeAt(2 * j + 1);
      codes[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
    if (n & 1) codes[pairs] = static_cast<uint8_t>(codeAt(n - 1));
  } else {
    for (size_t i = done; i < n; ++i) codes[i] = static_cast<uint8_t>(codeAt(i));
  }
}

// Every block of [b, e) in one call: with 32-element mx blocks a call per block cost as much as
// the block's work. The block body is inlined with and without a residual and with the length
// a constant (below) or not, so the small blocks' loops unroll and no residual test is left in
// them (the per-block bookkeeping was a third of mxfp8's instructions).
template <typename P, typename In>
TERSE_AVX2 void quantizeRangeAvx2(const In* in, size_t b, size_t e, size_t block, bool stochastic,
                                  uint64_t seed, uint64_t offset, float* residual,
                                  typename P::Scale* scales, uint8_t* codes) {
  auto one = [&](size_t s, size_t len, float* r)
      __attribute__((always_inline, target("avx2,f16c"))) {
    // Small blocks walk the input (and residual) in short bursts the hardware prefetcher
    // follows poorly: ask for the lines 4 KiB ahead (a no-op hint past the end of an array).
    for (size_t k = 0; k < len; k += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(in + s + 1024 + k), _MM_HINT_T0);
      if (r) _mm_prefetch(reinterpret_cast<const char*>(r + 1024 + k), _MM_HINT_T0);
    }
    quantizeBlockAvx2<P>(in + s, len, stochastic, seed, offset + s, r, scales + s / block,
                         codes + (P::kNibbles ? s / 2 : s));
  };
  size_t s = b;
  // Nearest rounding in short blocks (32: mx's; 64: int4's default) runs eight blocks at a
  // time, inlined with and without a residual so neither copy tests for it.
  auto batches = [&](auto len) __attribute__((always_inline, target("avx2,f16c"))) {
    constexpr size_t kLen = decltype(len)::value, kBatch = 8 * kLen;
    constexpr size_t kAhead = 1024;  // 4 KiB ahead, as above (a batch is at most 2 KiB)
    for (; s + kBatch <= e; s += kBatch) {
      for (size_t k = 0; k < kBatch; k += 16) {
        _mm_prefetch(reinterpret_cast<const char*>(in + s + kAhead + k), _MM_HINT_T0);
        if (residual)
          _mm_prefetch(reinterpret_cast<const char*>(residual + s + kAhead + k), _MM_HINT_T0);
      }
      uint8_t* c = codes + (P::kNibbles ? s / 2 : s);
      if (residual)
        quantize8Blocks<P, kLen, true>(in + s, residual + s, scales + s / kLen, c);
      else
        quantize8Blocks<P, kLen, false>(in + s, nullptr, scales + s / kLen, c);
    }
  };
  if (!stochastic) {
    if (block == 32)
      batches(std::integral_constant<size_t, 32>{});
    else if (block == 64)
      batches(std::integral_constant<size_t, 64>{});
    // Not 256 (fp8's default): the per-block body's scalar scale is little per 256 elements, and
    // eight such blocks (8 KiB of input, as much of residual) read twice streamed worse from
    // memory: fp8 compressed 64 MiB at 0.55-0.68x int8 batched against 0.87x per block.
  }
  // The formats' default lengths (32: mx; 64: int4; 256: fp8), each with and without a
  // residual, since every codec is usable both ways (fp8 with a residual took 6.5
  // instructions per element on the generic body against 5.9 for int8).
  auto body = [&](size_t at, size_t len, float* r)
      __attribute__((always_inline, target("avx2,f16c"))) {
    if (len == 32)
      one(at, 32, r);
    else if (len == 64)
      one(at, 64, r);
    else if (len == 256)
      one(at, 256, r);
    else
      one(at, len, r);
  };
  for (; s < e; s += block) {
    size_t len = std::min(block, e - s);
    if (residual)
      body(s, len, residual + s);
    else
      body(s, len, nullptr);
  }
}

// P::decode for 8 byte codes of an 8-bit minifloat (NaN and Inf codes included).
template <typename F>
TERSE_AVX2_INLINE __m256 decodeFp8x8(const uint8_t* codes) {
  using namespace avx2;
  __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(static_cast<int>(F::kSign - 1u)));
  __m256 v = magnitudeValue8<F>(mag);
  __m256i special = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(static_cast<int>(F::kMaxCode)));
  __m256i nonFinite = _mm256_set1_epi32(0x7fc00000);
  if constexpr (F::kInfCode != F::kNanCode) {
    __m256i isInf = _mm256_cmpeq_epi32(mag, _mm256_set1_epi32(static_cast<int>(F::kInfCode)));
    nonFinite = _mm256_blendv_epi8(nonFinite, _mm256_set1_epi32(0x7f800000), isInf);
  }
  v = _mm256_blendv_ps(v, floatOf(nonFinite), floatOf(special));
  __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  return _mm256_or_ps(v, floatOf(sign));
}

// P::decode for the 8 nibble codes of 4 bytes (element 2k in the low nibble of byte k).
template <typename P>
TERSE_AVX2_INLINE __m256 decodeNibbles8(const uint8_t* codes) {
  using F = typename ElemOf<P>::type;
  uint32_t word;
  std::memcpy(&word, codes, 4);
  __m128i b = _mm_cvtsi32_si128(static_cast<int>(word));
  __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0f));
  __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
  __m256i c = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
  if constexpr (std::is_void_v<F>) {  // int4: sign-extend the nibble
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(c, 28), 28));
  } else {  // E2M1: no NaN or Inf codes
    __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(7));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(8)), 28);
    return _mm256_or_ps(magnitudeValue8<F>(mag), avx2::floatOf(sign));
  }
}

// Table-driven decoding, 16 or 32 codes per step (the 8-lane decoders above take what is left
// of a block). Both tables are filled from the formulas (P::decode), so the bits are theirs:
//  - 8-bit minifloats: an E4M3 or E5M2 code moved into binary16's bit positions is a binary16
//    number, exactly, equal to the code's value times 2^(kBias - 15) (E5M2 is binary16's top
//    byte; E4M3's subnormals land on binary16 subnormals, which F16C converts exactly and
//    without a microcode assist). Only the NaN codes are rewritten (to binary16's quiet NaN, so
//    the float32 is the formula's 0x7fc00000 with the code's sign); the 2^(15 - kBias) goes
//    into the block scale.
//  - nibbles: every E2M1 and int4 value is a bfloat16 number, so two 16-entry byte tables
//    (high and low byte of the bfloat16) looked up with vpshufb give the float32's top half.
template <typename F>
struct HalfOfFp8 {
  static constexpr int kShift = 10 - F::kMant;  // code magnitude -> binary16 position
  // Magnitudes above this are NaN codes (E5M2's Inf code converts as it is).
  static constexpr uint32_t kLastNumber = F::kInfCode != F::kNanCode ? F::kInfCode : F::kMaxCode;
  static float factor() { return num::pow2(15 - F::kBias); }
};

// 16 byte codes -> 16 binary16 values (see above), in order.
template <typename F>
TERSE_AVX2_INLINE __m256i fp8ToHalf16(const uint8_t* codes) {
  using H = HalfOfFp8<F>;
  __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  __m256i sign = _mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x80)), 8);
  __m256i mag = _mm256_slli_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x7f)), H::kShift);
  __m256i nan = _mm256_cmpgt_epi16(mag, _mm256_set1_epi16(H::kLastNumber << H::kShift));
  mag = _mm256_blendv_epi8(mag, _mm256_set1_epi16(0x7e00), nan);
  return _mm256_or_si256(mag, sign);
}

// out[0..8) = d (or out += d), as decodeRangeAvx2's 8-lane loop does.
template <typename Out>
TERSE_AVX2_INLINE void put8(Out* out, __m256 d, bool accumulate) {
  if constexpr (std::is_same_v<Out, float>) {
    if (accumulate) d = _mm256_add_ps(_mm256_loadu_ps(out), d);
  }
  avx2::store8(out, d);
}

struct NibbleTables {
  __m256i hi, lo;  // bfloat16 bytes of P::decode(nibble), in both 128-bit lanes
};
template <typename P>
TERSE_AVX2_INLINE NibbleTables nibbleTables() {
  alignas(16) uint8_t hi[16], lo[16];
  for (uint32_t c = 0; c < 16; ++c) {
    uint32_t bits = num::floatBits(P::decode(c));  // low 16 bits are zero (see above)
    hi[c] = static_cast<uint8_t>(bits >> 24);
    lo[c] = static_cast<uint8_t>(bits >> 16);
  }
  return {_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(hi))),
          _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(lo)))};
}

// 8 bfloat16 -> float32.
TERSE_AVX2_INLINE __m256 expand(__m128i w) {
  return avx2::floatOf(_mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16));
}

// 32 nibble codes (16 bytes) -> 32 floats * sc, put in order.
template <typename Out>
TERSE_AVX2_INLINE void decodeNibbles32(const NibbleTables& t, const uint8_t* codes, __m256 sc,
                                       Out* out, bool accumulate) {
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0f));
  __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
  // lane 0: elements 0..15, lane 1: 16..31
  __m256i nib = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi8(lo, hi)),
                                        _mm_unpackhi_epi8(lo, hi), 1);
  __m256i th = _mm256_shuffle_epi8(t.hi, nib), tl = _mm256_shuffle_epi8(t.lo, nib);
  __m256i w0 = _mm256_unpacklo_epi8(tl, th);  // elements 0..7 | 16..23 as bfloat16
  __m256i w1 = _mm256_unpackhi_epi8(tl, th);  // elements 8..15 | 24..31
  put8(out, _mm256_mul_ps(expand(_mm256_castsi256_si128(w0)), sc), accumulate);
  put8(out + 8, _mm256_mul_ps(expand(_mm256_castsi256_si128(w1)), sc), accumulate);
  put8(out + 16, _mm256_mul_ps(expand(_mm256_extracti128_si256(w0, 1)), sc), accumulate);
  put8(out + 24, _mm256_mul_ps(expand(_mm256_extracti128_si256(w1, 1)), sc), accumulate);
}

// 32 fp8 codes none of which is a NaN code, times the folded scale (decodeRangeAvx2): a code
// in the high byte of a 16-bit lane is already binary16 for E5M2; for E4M3 an arithmetic shift
// moves the magnitude down one bit and the mask clears the sign's copy.
template <typename F, typename Out>
TERSE_AVX2_INLINE void fp8Numbers32(__m256i c, __m256 fsc, Out* out, bool accumulate) {
  constexpr int kDown = 8 - HalfOfFp8<F>::kShift;
  __m256i u0 = _mm256_unpacklo_epi8(_mm256_setzero_si256(), c);  // 0..7 | 16..23
  __m256i u1 = _mm256_unpackhi_epi8(_mm256_setzero_si256(), c);  // 8..15 | 24..31
  if constexpr (kDown > 0) {
    const __m256i keep = _mm256_set1_epi16(static_cast<int16_t>(0x8000u | (0x7fffu >> kDown)));
    u0 = _mm256_and_si256(_mm256_srai_epi16(u0, kDown), keep);
    u1 = _mm256_and_si256(_mm256_srai_epi16(u1, kDown), keep);
  }
  put8(out, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(u0)), fsc), accumulate);
  put8(out + 8, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(u1)), fsc), accumulate);
  put8(out + 16, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(u0, 1)), fsc), accumulate);
  put8(out + 24, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(u1, 1)), fsc), accumulate);
}

// Lanes (bytes) of 32 fp8 codes that are NaN codes.
template <typename F>
TERSE_AVX2_INLINE __m256i fp8NanCodes(__m256i c) {
  return _mm256_cmpgt_epi8(_mm256_and_si256(c, _mm256_set1_epi8(0x7f)),
                           _mm256_set1_epi8(static_cast<char>(HalfOfFp8<F>::kLastNumber)));
}

// Eight 32-element mx blocks decoded in one step, their E8M0 values (and for E4M3 the folded
// 2^8) computed together: false, with nothing written, when the step does not apply (a scale
// whose folded value overflows, or a NaN code), and the per-block loop takes the blocks.
template <typename P, typename Out>
TERSE_AVX2_INLINE bool decodeMx8Blocks(const NibbleTables& t, const uint8_t* scales,
                                       const uint8_t* codes, Out* out, bool accumulate) {
  using F = typename ElemOf<P>::type;
  __m256 sv =
      e8m0Value8(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales))));
  alignas(32) float sc[8];
  if constexpr (P::kNibbles) {
    _mm256_store_ps(sc, sv);
    for (int j = 0; j < 8; ++j)
      decodeNibbles32(t, codes + 16 * j, _mm256_broadcast_ss(sc + j), out + 32 * j, accumulate);
  } else {
    __m256 folded = _mm256_mul_ps(sv, _mm256_set1_ps(HalfOfFp8<F>::factor()));
    __m256 mag = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), folded);
    if (_mm256_movemask_ps(_mm256_cmp_ps(mag, _mm256_set1_ps(3.40282347e38f), _CMP_GT_OQ)))
      return false;
    __m256i c[8], nan = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      c[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * j));
      nan = _mm256_or_si256(nan, fp8NanCodes<F>(c[j]));
    }
    if (_mm256_movemask_epi8(nan)) return false;
    _mm256_store_ps(sc, folded);
    for (int j = 0; j < 8; ++j)
      fp8Numbers32<F>(c[j], _mm256_broadcast_ss(sc + j), out + 32 * j, accumulate);
  }
  return true;
}

// Elements [b, e) (b block-aligned): out = decode(code) * scale, stored or accumulated.
template <typename P, typename Out>
TERSE_AVX2 void decodeRangeAvx2(const typename P::Scale* TERSE_RESTRICT scales,
                                const uint8_t* TERSE_RESTRICT codes, size_t block, size_t b,
                                size_t e, Out* TERSE_RESTRICT out, bool accumulate) {
  using F = typename ElemOf<P>::type;
  NibbleTables tables{};
  if constexpr (P::kNibbles) tables = nibbleTables<P>();
  // Block by block: one scale (and no division) per block; mx blocks eight at a time first.
  auto blocks = [&](size_t from, size_t to) __attribute__((target("avx2,f16c"))) {
    for (size_t s = from; s < to; s += block) {
      size_t end = std::min(s + block, to);
      // int4's 64-element blocks: as the encoder does, the lines 4 KiB ahead of the output and
      // of the codes. Measured on Zen 4 (2026-11-27, docs/codecs.md), these hints lift int4
      // from memory (1.08-1.11x int8 against 0.93-1.07x at 64 MiB) and cost the byte formats:
      // fp8 in cache 0.85x against 0.99-1.05x, mxfp8's batches 0.77-0.87x against 0.93-1.06x
      // from memory, so those go without.
      if constexpr (P::kNibbles) {
        for (size_t k = s; k < end; k += 16)
          _mm_prefetch(reinterpret_cast<const char*>(out + k + 1024), _MM_HINT_T0);
        for (size_t k = s; k < end; k += 128)
          _mm_prefetch(reinterpret_cast<const char*>(codes + codeOffset<P>(k) + 4096), _MM_HINT_T0);
      }
      float sv = P::scaleValue(scales[s / block]);
      __m256 sc = _mm256_set1_ps(sv);
      size_t i = s;
      if constexpr (P::kNibbles) {
        for (; i + 32 <= end; i += 32)
          decodeNibbles32(tables, codes + i / 2, sc, out + i, accumulate);
      } else {
        // decode(c) * sv = half(c) * (2^(15 - bias) * sv): the first product is exact, so one
        // rounding either way, unless 2^(15 - bias) * sv overflows (mx scales near 2^127): then
        // the two multiplications are done apart.
        float factor = HalfOfFp8<F>::factor();
        float folded = sv * factor;
        bool fold = !(std::fabs(folded) > 3.40282347e38f);  // NaN scales fold too
        __m256 fsc = _mm256_set1_ps(folded), fac = _mm256_set1_ps(factor);
        auto scaled = [&](__m128i h) __attribute__((always_inline, target("avx2,f16c"))) {
          __m256 d = _mm256_cvtph_ps(h);
          return fold ? _mm256_mul_ps(d, fsc) : _mm256_mul_ps(_mm256_mul_ps(d, fac), sc);
        };
        // 32 codes at a time when none is a NaN code (the common case, one test per step)
        if (fold) {
          for (; i + 32 <= end; i += 32) {
            __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i));
            if (_mm256_movemask_epi8(fp8NanCodes<F>(c))) break;  // the 16-code steps rewrite them
            fp8Numbers32<F>(c, fsc, out + i, accumulate);
          }
        }
        for (; i + 16 <= end; i += 16) {
          __m256i h = fp8ToHalf16<F>(codes + i);
          put8(out + i, scaled(_mm256_castsi256_si128(h)), accumulate);
          put8(out + i + 8, scaled(_mm256_extracti128_si256(h, 1)), accumulate);
        }
      }
      for (; i + 8 <= end; i += 8) {
        __m256 d;
        if constexpr (P::kNibbles)
          d = _mm256_mul_ps(decodeNibbles8<P>(codes + i / 2), sc);
        else
          d = _mm256_mul_ps(decodeFp8x8<F>(codes + i), sc);
        put8(out + i, d, accumulate);
      }
      for (; i < end; ++i) {
        uint32_t c = P::kNibbles ? (codes[i / 2] >> (4 * (i & 1))) & 0xfu : codes[i];
        float d = P::decode(c) * sv;
        if constexpr (std::is_same_v<Out, float>) {
          if (accumulate) d = out[i] + d;
        }
        num::store(out, i, d);
      }
    }
  };
  size_t s = b;
  if constexpr (std::is_same_v<typename P::Scale, uint8_t>) {
    if (block == kMxBlock) {
      for (; s + 8 * kMxBlock <= e; s += 8 * kMxBlock) {
        if (!decodeMx8Blocks<P>(tables, scales + s / kMxBlock, codes + codeOffset<P>(s), out + s,
                                accumulate))
          blocks(s, s + 8 * kMxBlock);
      }
    }
  }
  blocks(s, e);
}
#endif

template <typename P, typename In>
void quantize(const In* in, size_t n, size_t block, Rounding rounding, uint64_t seed,
              uint64_t offset, float* residual, void* scalesV, uint8_t* codes) {
  auto* scales = static_cast<typename P::Scale*>(scalesV);
  bool st = rounding == Rounding::kStochastic;
  bool avx = detail::useAvx2();
  detail::forRange(n, block, [&](size_t b, size_t e) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx)
      return quantizeRangeAvx2<P>(in, b, e, block, st, seed, offset, residual, scales, codes);
#endif
    for (size_t s = b; s < e; s += block) {
      size_t len = std::min(block, e - s);
      float* r = residual ? residual + s : nullptr;
      quantizeBlock<P>(in + s, len, st, seed, offset + s, r, scales + s / block,
                       codes + codeOffset<P>(s));
    }
  });
}

template <typename P, typename Put>
void decode(const void* scalesV, const uint8_t* codes, size_t n, size_t block, Put&& put) {
  auto* scales = static_cast<const typename P::Scale*>(scalesV);
  detail::forRange(n, block, [&](size_t b, size_t e) {
    for (size_t s = b; s < e; s += block) {
      size_t len = std::min(block, e - s);
      auto at = [&](size_t i, float v) { put(s + i, v); };
      decodeBlock<P>(scales[s / block], codes + codeOffset<P>(s), len, at);
    }
  });
}

// Decode into out (accumulate: out is float32 and gets += ), with the explicit AVX2 loops when
// the CPU has them (the compiler leaves the formulas' selects scalar).
template <typename P, typename Out>
void decodeTo(const void* scalesV, const uint8_t* codes, size_t n, size_t block, Out* out,
              bool accumulate) {
#if TERSE_CPU_HAVE_AVX2_PATH
  {
    if (detail::useAvx2()) {
      auto* scales = static_cast<const typename P::Scale*>(scalesV);
      detail::forRange(n, block, [&](size_t b, size_t e) {
        decodeRangeAvx2<P>(scales, codes, block, b, e, out, accumulate);
      });
      return;
    }
  }
#endif
  if (accumulate) {
    if constexpr (std::is_same_v<Out, float>)
      decode<P>(scalesV, codes, n, block, [out](size_t i, float v) { out[i] += v; });
  } else {
    decode<P>(scalesV, codes, n, block, [out](size_t i, float v) { num::store(out, i, v); });
  }
}

// Calls fn(Policy{}) for the format.
template <typename Fn>
void withPolicy(LowbitFormat f, Fn&& fn) {
  switch (f) {
    case LowbitFormat::kFp8E4M3: return fn(num::FpBlockPolicy<num::E4M3>{});
    case LowbitFormat::kFp8E5M2: return fn(num::FpBlockPolicy<num::E5M2>{});
    case LowbitFormat::kMxfp8: return fn(num::MxPolicy<num::E4M3>{});
    case LowbitFormat::kMxfp4: return fn(num::MxPolicy<num::E2M1>{});
    case LowbitFormat::kInt4: return fn(num::Int4Policy{});
  }
}

}  // namespace

template <typename In>
void lowbitQuantize(LowbitFormat f, const In* in, size_t n, size_t block, Rounding rounding,
                    uint64_t seed, uint64_t offset, float* residual, void* scales, uint8_t* codes) {
  withPolicy(f, [&](auto p) {
    quantize<decltype(p)>(in, n, block, rounding, seed, offset, residual, scales, codes);
  });
}

template <typename Out>
void lowbitDequantize(LowbitFormat f, const void* scales, const uint8_t* codes, size_t n,
                      size_t block, Out* out) {
  withPolicy(f, [&](auto p) { decodeTo<decltype(p)>(scales, codes, n, block, out, false); });
}

void lowbitDequantizeAccumulate(LowbitFormat f, const void* scales, const uint8_t* codes, size_t n,
                                size_t block, float* acc) {
  withPolicy(f, [&](auto p) { decodeTo<decltype(p)>(scales, codes, n, block, acc, true); });
}

#define TERSE_LOWBIT(T)                                                                       \
  template void lowbitQuantize<T>(LowbitFormat, const T*, size_t, size_t, Rounding, uint64_t, \
                                  uint64_t, float*, void*, uint8_t*);                         \
  template void lowbitDequantize<T>(LowbitFormat, const void*, const uint8_t*, size_t, size_t, T*);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_LOWBIT)

}  // namespace terse::kernels::cpu
