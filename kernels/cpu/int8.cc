// int8 blockwise absmax quantization.
#include "cpu_common.h"
#include "simd_avx2.h"

#include <algorithm>
#include <type_traits>

namespace terse::kernels::cpu {
namespace {

// Value the codec compresses: input plus residual, in float32.
template <typename In>
inline float valueAt(const In* in, const float* residual, size_t i) {
  return residual ? num::feedbackSum(num::load(in, i), residual[i]) : num::load(in, i);
}

// Largest magnitude of a block as the integer key (order-preserving for finite values);
// >= 0x7f800000 means the block holds Inf or NaN. Integer max vectorizes without fast-math.
template <typename In>
uint32_t blockMaxKey(const In* TERSE_RESTRICT in, const float* TERSE_RESTRICT residual, size_t n) {
  uint32_t m = 0;
  if (residual) {
    for (size_t i = 0; i < n; ++i)
      m = std::max(m, num::magnitudeKey(num::feedbackSum(num::load(in, i), residual[i])));
  } else {
    for (size_t i = 0; i < n; ++i) m = std::max(m, num::magnitudeKey(num::load(in, i)));
  }
  return m;
}

template <typename In>
void quantizeBlock(const In* TERSE_RESTRICT in, size_t n, Rounding rounding, uint64_t seed,
                   uint64_t offset, float* TERSE_RESTRICT residual, float* TERSE_RESTRICT scaleOut,
                   int8_t* TERSE_RESTRICT q) {
  uint32_t maxKey = blockMaxKey(in, residual, n);
  bool finite = maxKey < 0x7f800000u;
  float scale = num::int8Scale(num::bitsFloat(maxKey), finite);
  float inv = num::int8InvScale(scale);
  *scaleOut = scale;
  if (rounding == Rounding::kNearest) {
    if (residual) {
      for (size_t i = 0; i < n; ++i) {
        float v = num::feedbackSum(num::load(in, i), residual[i]);
        int8_t c = num::int8QuantizeNearest(v, inv);
        q[i] = c;
        residual[i] = num::residualOf(v, num::int8Dequantize(c, scale));
      }
    } else {
      for (size_t i = 0; i < n; ++i) q[i] = num::int8QuantizeNearest(num::load(in, i), inv);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      float v = valueAt(in, residual, i);
      int8_t c = num::int8QuantizeStochastic(v, inv, num::uniform01(seed, offset + i));
      q[i] = c;
      if (residual) residual[i] = num::residualOf(v, num::int8Dequantize(c, scale));
    }
  }
}

template <typename Out>
void dequantizeBlock(float scale, const int8_t* TERSE_RESTRICT q, size_t n,
                     Out* TERSE_RESTRICT out) {
  for (size_t i = 0; i < n; ++i) num::store(out, i, num::int8Dequantize(q[i], scale));
}

void dequantizeAccBlock(float scale, const int8_t* TERSE_RESTRICT q, size_t n,
                        float* TERSE_RESTRICT acc) {
  for (size_t i = 0; i < n; ++i) acc[i] += num::int8Dequantize(q[i], scale);
}

#if TERSE_CPU_HAVE_AVX2_PATH
// num::int8QuantizeNearest for 8 lanes, as float (an integer in [-127, 127]).
template <bool kGuarded = true>
TERSE_AVX2_INLINE __m256 clampQ8(__m256 q);
template <bool kGuarded>
TERSE_AVX2_INLINE __m256 quantizeNearest8(__m256 v, __m256 inv) {
  return clampQ8<kGuarded>(
      _mm256_round_ps(_mm256_mul_ps(v, inv), _MM_FROUND_CUR_DIRECTION));  // rintf
}
// num::int8QuantizeStochastic: floorf(v * inv + u).
TERSE_AVX2_INLINE __m256 quantizeStochastic8(__m256 v, __m256 inv, __m256 u) {
  return clampQ8(_mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(v, inv), u)));
}
// 64-bit lane-wise a * b (low 64 bits) from 32-bit multiplies: AVX2 has no vpmullq.
TERSE_AVX2_INLINE __m256i mullo64(__m256i a, __m256i b) {
  __m256i lo = _mm256_mul_epu32(a, b);
  __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                   _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

// num::mix64 on four lanes.
TERSE_AVX2_INLINE __m256i mix64x4(__m256i z) {
  z = mullo64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)),
              _mm256_set1_epi64x(static_cast<long long>(0xbf58476d1ce4e5b9ull)));
  z = mullo64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)),
              _mm256_set1_epi64x(static_cast<long long>(0x94d049bb133111ebull)));
  return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

// num::uniform01(seed, index + j) for j = 0..7, bit for bit.
TERSE_AVX2_INLINE __m256 uniform8(uint64_t seed, uint64_t index) {
  const uint64_t g = 0x9e3779b97f4a7c15ull;
  uint64_t z0 = seed + (index + 1) * g;
  // Even elements in one vector, odd in the other, so the 32-bit results interleave in order.
  __m256i even =
      _mm256_setr_epi64x(static_cast<long long>(z0), static_cast<long long>(z0 + 2 * g),
                         static_cast<long long>(z0 + 4 * g), static_cast<long long>(z0 + 6 * g));
  __m256i odd = _mm256_add_epi64(even, _mm256_set1_epi64x(static_cast<long long>(g)));
  __m256i re = _mm256_srli_epi64(mix64x4(even), 40);
  __m256i ro = _mm256_srli_epi64(mix64x4(odd), 40);
  __m256i r = _mm256_blend_epi32(re, _mm256_slli_epi64(ro, 32), 0xaa);
  return _mm256_mul_ps(_mm256_cvtepi32_ps(r), _mm256_set1_ps(1.0f / 16777216.0f));
}

// num::clampInt8 after the NaN check, kept in float.
// kGuarded false: a tame block (simd_avx2.h), where q is never NaN.
template <bool kGuarded>
TERSE_AVX2_INLINE __m256 clampQ8(__m256 q) {
  if constexpr (kGuarded) q = _mm256_andnot_ps(_mm256_cmp_ps(q, q, _CMP_UNORD_Q), q);  // NaN -> 0
  q = _mm256_min_ps(q, _mm256_set1_ps(127.0f));
  q = _mm256_max_ps(q, _mm256_set1_ps(-127.0f));
  // -0 + 0 = +0: the scalar path goes through int8_t, which has no negative zero.
  return _mm256_add_ps(q, _mm256_setzero_ps());
}

// Four vectors of small integers (as float) -> 32 int8 in order.
TERSE_AVX2_INLINE __m256i packInt8(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256i ab = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b));
  __m256i cd = _mm256_packs_epi32(_mm256_cvtps_epi32(c), _mm256_cvtps_epi32(d));
  __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <typename In>
TERSE_AVX2 void quantizeBlockAvx2(const In* TERSE_RESTRICT in, size_t n, Rounding rounding,
                                  uint64_t seed, uint64_t offset, float* TERSE_RESTRICT residual,
                                  float* TERSE_RESTRICT scaleOut, int8_t* TERSE_RESTRICT q) {
  using namespace avx2;
  __m256i maxKeys = _mm256_setzero_si256();
  size_t full8 = n / 8 * 8;
  for (size_t i = 0; i < full8; i += 8) {
    __m256 v = load8(in + i);
    if (residual) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + i));
    maxKeys = _mm256_max_epu32(maxKeys, avx2::magnitudeKey(v));
  }
  alignas(32) uint32_t keys[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(keys), maxKeys);
  uint32_t maxKey = 0;
  for (uint32_t k : keys) maxKey = std::max(maxKey, k);
  for (size_t i = full8; i < n; ++i)
    maxKey = std::max(maxKey, num::magnitudeKey(valueAt(in, residual, i)));
  // A non-finite block with a residual: input plus residual may have overflowed (the vector
  // sums above do not saturate), so the portable loop, which does, encodes it (rare).
  if (residual && maxKey >= 0x7f800000u)
    return quantizeBlock(in, n, rounding, seed, offset, residual, scaleOut, q);
  bool finite = maxKey < 0x7f800000u;
  float scale = num::int8Scale(num::bitsFloat(maxKey), finite);
  float invScale = num::int8InvScale(scale);
  *scaleOut = scale;

  const __m256 inv = _mm256_set1_ps(invScale), sc = _mm256_set1_ps(scale);
  size_t full32 = n / 32 * 32;
  bool stochastic = rounding == Rounding::kStochastic;
  // Inlined once per case, so no copy tests for a residual per element; a tame block
  // (simd_avx2.h) needs no NaN mapping and no finiteness test on its residual.
  auto encode = [&](auto withResidual, auto guarded)
      __attribute__((always_inline, target("avx2,f16c"))) {
    constexpr bool kResidual = decltype(withResidual)::value;
    constexpr bool kGuarded = decltype(guarded)::value;
    for (size_t i = 0; i < full32; i += 32) {
      __m256 v[4], qf[4];
      for (int j = 0; j < 4; ++j) {
        v[j] = load8(in + i + 8 * j);
        if constexpr (kResidual) v[j] = _mm256_add_ps(v[j], _mm256_loadu_ps(residual + i + 8 * j));
        qf[j] = stochastic ? quantizeStochastic8(v[j], inv, uniform8(seed, offset + i + 8 * j))
                           : quantizeNearest8<kGuarded>(v[j], inv);
        if constexpr (kResidual)
          _mm256_storeu_ps(residual + i + 8 * j,
                           avx2::blockResidual<kGuarded>(v[j], _mm256_mul_ps(qf[j], sc)));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), packInt8(qf[0], qf[1], qf[2], qf[3]));
    }
  };
  bool tame = avx2::tameBlock(maxKey);
  if (!residual && tame)
    encode(std::false_type{}, std::false_type{});
  else if (!residual)
    encode(std::false_type{}, std::true_type{});
  else if (tame)
    encode(std::true_type{}, std::false_type{});
  else
    encode(std::true_type{}, std::true_type{});
  for (size_t i = full32; i < n; ++i) {
    float v = valueAt(in, residual, i);
    int8_t c = stochastic
                   ? num::int8QuantizeStochastic(v, invScale, num::uniform01(seed, offset + i))
                   : num::int8QuantizeNearest(v, invScale);
    q[i] = c;
    if (residual) residual[i] = num::residualOf(v, num::int8Dequantize(c, scale));
  }
}

template <typename Out>
TERSE_AVX2 void dequantizeBlockAvx2(float scale, const int8_t* TERSE_RESTRICT q, size_t n,
                                    Out* TERSE_RESTRICT out) {
  const __m256 sc = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    avx2::store8(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), sc));
  }
  dequantizeBlock(scale, q + i, n - i, out + i);
}

TERSE_AVX2 void dequantizeAccBlockAvx2(float scale, const int8_t* TERSE_RESTRICT q, size_t n,
                                       float* TERSE_RESTRICT acc) {
  const __m256 sc = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), sc);
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), d));
  }
  dequantizeAccBlock(scale, q + i, n - i, acc + i);
}
#endif

}  // namespace

template <typename In>
void int8Quantize(const In* in, size_t n, size_t block, Rounding rounding, uint64_t seed,
                  uint64_t offset, float* residual, float* scales, int8_t* q) {
  bool avx = detail::useAvx2();
  detail::forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx)
      return quantizeBlockAvx2(in + s, len, rounding, seed, offset + s,
                               residual ? residual + s : nullptr, scales + bi, q + s);
#endif
    quantizeBlock(in + s, len, rounding, seed, offset + s, residual ? residual + s : nullptr,
                  scales + bi, q + s);
  });
}

template <typename Out>
void int8Dequantize(const float* scales, const int8_t* q, size_t n, size_t block, Out* out) {
  bool avx = detail::useAvx2();
  detail::forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx) return dequantizeBlockAvx2(scales[bi], q + s, len, out + s);
#endif
    dequantizeBlock(scales[bi], q + s, len, out + s);
  });
}

void int8DequantizeAccumulate(const float* scales, const int8_t* q, size_t n, size_t block,
                              float* acc) {
  bool avx = detail::useAvx2();
  detail::forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx) return dequantizeAccBlockAvx2(scales[bi], q + s, len, acc + s);
#endif
    dequantizeAccBlock(scales[bi], q + s, len, acc + s);
  });
}

#define TERSE_INT8(T)                                                                           \
  template void int8Quantize<T>(const T*, size_t, size_t, Rounding, uint64_t, uint64_t, float*, \
                                float*, int8_t*);                                               \
  template void int8Dequantize<T>(const float*, const int8_t*, size_t, size_t, T*);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_INT8)

}  // namespace terse::kernels::cpu
