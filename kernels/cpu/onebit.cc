// onebit: sign bits plus the mean magnitude of each block.
#include "cpu_common.h"
#include "simd_avx2.h"

#include <algorithm>

namespace terse::kernels::cpu {
namespace {

// Independent partial sums so the block sum vectorizes; numeric.h fixes their order for
// every path, the GPU's included.
constexpr size_t kLanes = num::kOnebitLanes;

// Sign bits of n elements (starting on a word boundary) with the block's scale, 32 per word.
template <typename In>
void signPass(const In* TERSE_RESTRICT in, size_t n, float scale, float* TERSE_RESTRICT residual,
              uint32_t* TERSE_RESTRICT bits) {
  for (size_t w = 0; w * 32 < n; ++w) {
    size_t base = w * 32;
    size_t m = std::min<size_t>(32, n - base);
    uint32_t word = 0;
    if (residual) {
      for (size_t j = 0; j < m; ++j) {
        float v = num::feedbackSum(num::load(in, base + j), residual[base + j]);
        bool bit = num::onebitBit(v);
        word |= static_cast<uint32_t>(bit) << j;
        residual[base + j] = num::residualOf(v, num::onebitDecode(bit, scale));
      }
    } else {
      for (size_t j = 0; j < m; ++j)
        word |= static_cast<uint32_t>(num::onebitBit(num::load(in, base + j))) << j;
    }
    bits[w] = word;
  }
}

// Adds |v| of elements [from, n) into the lane sums the way the 8-wide loop would (element i
// goes to lane i % 8), so the portable and AVX2 paths give the same bits.
template <typename In>
void magnitudeTail(const In* in, const float* residual, size_t from, size_t n, float* part,
                   uint32_t* maxKey) {
  for (size_t i = from; i < n; ++i) {
    float v = residual ? num::feedbackSum(num::load(in, i), residual[i]) : num::load(in, i);
    part[i % kLanes] += num::bitsFloat(num::magnitudeKey(v));
    *maxKey = std::max(*maxKey, num::magnitudeKey(v));
  }
}

// The scale of a block whose magnitude sum overflowed (num::onebitSumOverflowed): rare, so a
// plain loop in index order, the same on every CPU path.
template <typename In>
float wideScale(const In* in, const float* residual, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    float v = residual ? num::feedbackSum(num::load(in, i), residual[i]) : num::load(in, i);
    sum += num::bitsFloat(num::magnitudeKey(v)) * num::kOnebitWideSumScale;
  }
  return num::onebitScaleFromScaledSum(sum, static_cast<uint32_t>(n));
}

inline float laneSum(const float* part) { return num::onebitLaneSum(part); }

template <typename In>
void compressBlock(const In* TERSE_RESTRICT in, size_t n, float* TERSE_RESTRICT residual,
                   float* TERSE_RESTRICT scaleOut, uint32_t* TERSE_RESTRICT bits) {
  // Sum of magnitudes in kLanes partial sums (a fixed order, so results are reproducible).
  float part[kLanes] = {};
  uint32_t maxKey = 0;
  size_t full = n / kLanes * kLanes;
  for (size_t i = 0; i < full; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      float v =
          residual ? num::feedbackSum(num::load(in, i + l), residual[i + l]) : num::load(in, i + l);
      part[l] += num::bitsFloat(num::magnitudeKey(v));
      maxKey = std::max(maxKey, num::magnitudeKey(v));
    }
  }
  magnitudeTail(in, residual, full, n, part, &maxKey);
  float scale = num::onebitScale(laneSum(part), static_cast<uint32_t>(n), maxKey < 0x7f800000u);
  if (num::onebitSumOverflowed(scale, maxKey < 0x7f800000u)) scale = wideScale(in, residual, n);
  *scaleOut = scale;
  signPass(in, n, scale, residual, bits);
}

#if TERSE_CPU_HAVE_AVX2_PATH
template <typename In>
TERSE_AVX2 void compressBlockAvx2(const In* TERSE_RESTRICT in, size_t n,
                                  float* TERSE_RESTRICT residual, float* TERSE_RESTRICT scaleOut,
                                  uint32_t* TERSE_RESTRICT bits) {
  using namespace avx2;
  __m256 sum = _mm256_setzero_ps();
  __m256i maxKeys = _mm256_setzero_si256();
  size_t full = n / 8 * 8;
  for (size_t i = 0; i < full; i += 8) {
    __m256 v = load8(in + i);
    if (residual) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + i));
    __m256i key = avx2::magnitudeKey(v);
    sum = _mm256_add_ps(sum, floatOf(key));
    maxKeys = _mm256_max_epu32(maxKeys, key);
  }
  alignas(32) float part[8];
  alignas(32) uint32_t keys[8];
  _mm256_store_ps(part, sum);
  _mm256_store_si256(reinterpret_cast<__m256i*>(keys), maxKeys);
  uint32_t maxKey = 0;
  for (uint32_t k : keys) maxKey = std::max(maxKey, k);
  magnitudeTail(in, residual, full, n, part, &maxKey);
  // A non-finite block with a residual: input plus residual may have overflowed (the vector
  // sums above do not saturate), so the portable loop, which does, compresses it (rare).
  if (residual && maxKey >= 0x7f800000u) return compressBlock(in, n, residual, scaleOut, bits);
  float scale = num::onebitScale(laneSum(part), static_cast<uint32_t>(n), maxKey < 0x7f800000u);
  if (num::onebitSumOverflowed(scale, maxKey < 0x7f800000u)) scale = wideScale(in, residual, n);
  *scaleOut = scale;

  const __m256 pos = _mm256_set1_ps(num::onebitDecode(true, scale));
  const __m256 neg = _mm256_set1_ps(num::onebitDecode(false, scale));
  const __m256 zero = _mm256_setzero_ps();
  size_t words = n / 32;
  for (size_t w = 0; w < words; ++w) {
    uint32_t word = 0;
    for (size_t g = 0; g < 4; ++g) {
      size_t i = w * 32 + g * 8;
      __m256 v = load8(in + i);
      if (residual) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + i));
      __m256 bit = _mm256_cmp_ps(v, zero, _CMP_NLT_UQ);  // num::onebitBit: !(v < 0)
      word |= static_cast<uint32_t>(_mm256_movemask_ps(bit)) << (8 * g);
      if (residual)
        _mm256_storeu_ps(residual + i, avx2::residualOf(v, _mm256_blendv_ps(neg, pos, bit)));
    }
    bits[w] = word;
  }
  size_t done = words * 32;
  signPass(in + done, n - done, scale, residual ? residual + done : nullptr, bits + words);
}
#endif

template <typename Out>
void decompressBlock(float scale, const uint32_t* TERSE_RESTRICT bits, size_t n,
                     Out* TERSE_RESTRICT out) {
  for (size_t i = 0; i < n; ++i)
    num::store(out, i, num::onebitDecode((bits[i >> 5] >> (i & 31)) & 1u, scale));
}

void decompressAccBlock(float scale, const uint32_t* TERSE_RESTRICT bits, size_t n,
                        float* TERSE_RESTRICT acc) {
  for (size_t i = 0; i < n; ++i)
    acc[i] += num::onebitDecode((bits[i >> 5] >> (i & 31)) & 1u, scale);
}

#if TERSE_CPU_HAVE_AVX2_PATH
// Lane j of the result is all ones when bit j of `byte` is set.
TERSE_AVX2_INLINE __m256 bitMask8(uint32_t byte) {
  const __m256i lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  __m256i b = _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(byte)), lanes);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, lanes));
}

template <typename Out>
TERSE_AVX2 void decompressBlockAvx2(float scale, const uint32_t* TERSE_RESTRICT bits, size_t n,
                                    Out* TERSE_RESTRICT out) {
  const __m256 pos = _mm256_set1_ps(num::onebitDecode(true, scale));
  const __m256 neg = _mm256_set1_ps(num::onebitDecode(false, scale));
  size_t words = n / 32;
  for (size_t w = 0; w < words; ++w)
    for (size_t g = 0; g < 4; ++g)
      avx2::store8(out + w * 32 + g * 8, _mm256_blendv_ps(neg, pos, bitMask8(bits[w] >> (8 * g))));
  decompressBlock(scale, bits + words, n - words * 32, out + words * 32);
}

TERSE_AVX2 void decompressAccBlockAvx2(float scale, const uint32_t* TERSE_RESTRICT bits, size_t n,
                                       float* TERSE_RESTRICT acc) {
  const __m256 pos = _mm256_set1_ps(num::onebitDecode(true, scale));
  const __m256 neg = _mm256_set1_ps(num::onebitDecode(false, scale));
  size_t words = n / 32;
  for (size_t w = 0; w < words; ++w)
    for (size_t g = 0; g < 4; ++g) {
      float* p = acc + w * 32 + g * 8;
      __m256 d = _mm256_blendv_ps(neg, pos, bitMask8(bits[w] >> (8 * g)));
      _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), d));
    }
  decompressAccBlock(scale, bits + words, n - words * 32, acc + words * 32);
}
#endif

}  // namespace

template <typename In>
void onebitCompress(const In* in, size_t n, size_t block, float* residual, float* scales,
                    uint32_t* bits) {
  // Blocks are powers of two >= 32, so every block starts on a word boundary.
  bool avx = detail::useAvx2();
  detail::forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx)
      return compressBlockAvx2(in + s, len, residual ? residual + s : nullptr, scales + bi,
                               bits + s / 32);
#endif
    compressBlock(in + s, len, residual ? residual + s : nullptr, scales + bi, bits + s / 32);
  });
}

template <typename Out>
void onebitDecompress(const float* scales, const uint32_t* bits, size_t n, size_t block, Out* out) {
  bool avx = detail::useAvx2();
  detail::forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx) return decompressBlockAvx2(scales[bi], bits + s / 32, len, out + s);
#endif
    decompressBlock(scales[bi], bits + s / 32, len, out + s);
  });
}

void onebitDecompressAccumulate(const float* scales, const uint32_t* bits, size_t n, size_t block,
                                float* acc) {
  bool avx = detail::useAvx2();
  detail::forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx) return decompressAccBlockAvx2(scales[bi], bits + s / 32, len, acc + s);
#endif
    decompressAccBlock(scales[bi], bits + s / 32, len, acc + s);
  });
}

#define TERSE_ONEBIT(T)                                                                 \
  template void onebitCompress<T>(const T*, size_t, size_t, float*, float*, uint32_t*); \
  template void onebitDecompress<T>(const float*, const uint32_t*, size_t, size_t, T*);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_ONEBIT)

}  // namespace terse::kernels::cpu
