// The low-bit block formats (fp8, mxfp8, mxfp4, int4): one loop template over numeric.h's
// format policies. The loops are written so the compiler vectorizes them (integer max for the
// scale, selects instead of branches); the AVX2 build of the same template runs when the CPU
// has it, and computes the same bits (IEEE operations only, no contraction).
#include "cpu_common.h"
#include "simd_avx2.h"

#include <algorithm>

namespace terse::kernels::cpu {
namespace {

template <typename In>
inline float valueAt(const In* in, const float* residual, size_t i) {
  return residual ? num::load(in, i) + residual[i] : num::load(in, i);
}

// One block: scale from the largest magnitude, then every element's code (and residual).
// codes points at the block's first byte (element 0 of the block is a low nibble).
#define TERSE_LOWBIT_QUANTIZE_BODY                                                    \
  uint32_t maxKey = 0;                                                                \
  for (size_t i = 0; i < n; ++i)                                                      \
    maxKey = std::max(maxKey, num::magnitudeKey(valueAt(in, residual, i)));           \
  typename P::Scale s = P::scaleFromKey(maxKey);                                      \
  *scaleOut = s;                                                                      \
  float inv = P::inverse(s), sv = P::scaleValue(s);                                   \
  bool st = stochastic;                                                               \
  auto codeAt = [&](size_t i) {                                                       \
    float v = valueAt(in, residual, i);                                               \
    uint32_t c = P::encode(v, inv, st, st ? num::uniform01(seed, offset + i) : 0.0f); \
    if (residual) residual[i] = num::residualOf(v, P::decode(c) * sv);                \
    return c;                                                                         \
  };                                                                                  \
  if constexpr (P::kNibbles) {                                                        \
    size_t pairs = n / 2;                                                             \
    for (size_t j = 0; j < pairs; ++j) {                                              \
      uint32_t lo = codeAt(2 * j), hi = codeAt(2 * j + 1);                            \
      codes[j] = static_cast<uint8_t>(lo | (hi << 4));                                \
    }                                                                                 \
    if (n & 1) codes[pairs] = static_cast<uint8_t>(codeAt(n - 1));                    \
  } else {                                                                            \
    for (size_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(codeAt(i));        \
  }

template <typename P, typename In>
void quantizeBlock(const In* TERSE_RESTRICT in, size_t n, bool stochastic, uint64_t seed,
                   uint64_t offset, float* TERSE_RESTRICT residual,
                   typename P::Scale* TERSE_RESTRICT scaleOut, uint8_t* TERSE_RESTRICT codes) {
  TERSE_LOWBIT_QUANTIZE_BODY
}

// Decoded values of one block, handed to put(i, value).
#define TERSE_LOWBIT_DECODE_BODY                                     \
  float sv = P::scaleValue(s);                                       \
  if constexpr (P::kNibbles) {                                       \
    size_t pairs = n / 2;                                            \
    for (size_t j = 0; j < pairs; ++j) {                             \
      uint32_t b = codes[j];                                         \
      put(2 * j, P::decode(b & 0xfu) * sv);                          \
      put(2 * j + 1, P::decode(b >> 4) * sv);                        \
    }                                                                \
    if (n & 1) put(n - 1, P::decode(codes[pairs] & 0xfu) * sv);      \
  } else {                                                           \
    for (size_t i = 0; i < n; ++i) put(i, P::decode(codes[i]) * sv); \
  }

template <typename P, typename Put>
void decodeBlock(typename P::Scale s, const uint8_t* TERSE_RESTRICT codes, size_t n, Put&& put) {
  TERSE_LOWBIT_DECODE_BODY
}

#if TERSE_CPU_HAVE_AVX2_PATH
template <typename P, typename In>
TERSE_AVX2 void quantizeBlockAvx2(const In* TERSE_RESTRICT in, size_t n, bool stochastic,
                                  uint64_t seed, uint64_t offset, float* TERSE_RESTRICT residual,
                                  typename P::Scale* TERSE_RESTRICT scaleOut,
                                  uint8_t* TERSE_RESTRICT codes) {
  TERSE_LOWBIT_QUANTIZE_BODY
}
template <typename P, typename Put>
TERSE_AVX2 void decodeBlockAvx2(typename P::Scale s, const uint8_t* TERSE_RESTRICT codes, size_t n,
                                Put&& put) {
  TERSE_LOWBIT_DECODE_BODY
}
#endif

// Byte offset of element s's code (s even for nibble formats).
template <typename P>
size_t codeOffset(size_t s) {
  return P::kNibbles ? s / 2 : s;
}

template <typename P, typename In>
void quantize(const In* in, size_t n, size_t block, Rounding rounding, uint64_t seed,
              uint64_t offset, float* residual, void* scalesV, uint8_t* codes) {
  auto* scales = static_cast<typename P::Scale*>(scalesV);
  bool st = rounding == Rounding::kStochastic;
  bool avx = detail::useAvx2();
  detail::forRange(n, block, [&](size_t b, size_t e) {
    for (size_t s = b; s < e; s += block) {
      size_t len = std::min(block, e - s);
      float* r = residual ? residual + s : nullptr;
#if TERSE_CPU_HAVE_AVX2_PATH
      if (avx) {
        quantizeBlockAvx2<P>(in + s, len, st, seed, offset + s, r, scales + s / block,
                             codes + codeOffset<P>(s));
        continue;
      }
#endif
      quantizeBlock<P>(in + s, len, st, seed, offset + s, r, scales + s / block,
                       codes + codeOffset<P>(s));
    }
  });
}

template <typename P, typename Put>
void decode(const void* scalesV, const uint8_t* codes, size_t n, size_t block, Put&& put) {
  auto* scales = static_cast<const typename P::Scale*>(scalesV);
  bool avx = detail::useAvx2();
  detail::forRange(n, block, [&](size_t b, size_t e) {
    for (size_t s = b; s < e; s += block) {
      size_t len = std::min(block, e - s);
      auto at = [&](size_t i, float v) { put(s + i, v); };
#if TERSE_CPU_HAVE_AVX2_PATH
      if (avx) {
        decodeBlockAvx2<P>(scales[s / block], codes + codeOffset<P>(s), len, at);
        continue;
      }
#endif
      decodeBlock<P>(scales[s / block], codes + codeOffset<P>(s), len, at);
    }
  });
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
  withPolicy(f, [&](auto p) {
    decode<decltype(p)>(scales, codes, n, block,
                        [out](size_t i, float v) { num::store(out, i, v); });
  });
}

void lowbitDequantizeAccumulate(LowbitFormat f, const void* scales, const uint8_t* codes, size_t n,
                                size_t block, float* acc) {
  withPolicy(f, [&](auto p) {
    decode<decltype(p)>(scales, codes, n, block, [acc](size_t i, float v) { acc[i] += v; });
  });
}

#define TERSE_LOWBIT(T)                                                                       \
  template void lowbitQuantize<T>(LowbitFormat, const T*, size_t, size_t, Rounding, uint64_t, \
                                  uint64_t, float*, void*, uint8_t*);                         \
  template void lowbitDequantize<T>(LowbitFormat, const void*, const uint8_t*, size_t, size_t, T*);
TERSE_LOWBIT(float)
TERSE_LOWBIT(Half)
TERSE_LOWBIT(BFloat16)

}  // namespace terse::kernels::cpu
