// NVFP4 on the CPU: numeric.h's nvfp4 formulas, block by block. Two passes: the message's
// largest finite magnitude (for its float32 scale), then each block's scale and codes.
#include "cpu_common.h"

#include <algorithm>
#include <atomic>

namespace terse::kernels::cpu {
namespace {

constexpr size_t kBlock = num::kNvfp4Block;

template <typename In>
inline float valueAt(const In* in, const float* residual, size_t i) {
  return residual ? num::feedbackSum(num::load(in, i), residual[i]) : num::load(in, i);
}

// Decoded values handed to put(i, value); pieces start on whole blocks (and so whole bytes).
template <typename Put>
void decode(const float* tensorScale, const uint8_t* scales, const uint8_t* codes, size_t n,
            Put&& put) {
  float t = *tensorScale;
  detail::forRange(n, kBlock, [&](size_t b, size_t e) {
    for (size_t s = b; s < e; s += kBlock) {
      float sv = num::nvfp4ScaleValue(scales[s / kBlock], t);
      size_t end = std::min(s + kBlock, e);
      for (size_t i = s; i < end; ++i) {
        uint32_t nibble = (codes[i / 2] >> (4 * (i & 1))) & 0xfu;
        put(i, num::fpDecode<num::E2M1>(nibble) * sv);
      }
    }
  });
}

}  // namespace

template <typename In>
void nvfp4Quantize(const In* in, size_t n, Rounding rounding, uint64_t seed, float* residual,
                   float* tensorScale, uint8_t* scales, uint8_t* codes) {
  // The largest finite magnitude: a max of integer keys, the same whatever the pieces.
  std::atomic<uint32_t> keyMax{0};
  detail::forRange(n, kBlock, [&](size_t b, size_t e) {
    uint32_t m = 0;
    for (size_t i = b; i < e; ++i) {
      uint32_t key = num::magnitudeKey(valueAt(in, residual, i));
      if (key < 0x7f800000u) m = std::max(m, key);
    }
    uint32_t seen = keyMax.load();
    while (m > seen && !keyMax.compare_exchange_weak(seen, m)) {
    }
  });
  float t = num::nvfp4TensorScale(keyMax.load());
  *tensorScale = t;
  bool st = rounding == Rounding::kStochastic;
  detail::forRange(n, kBlock, [&](size_t b, size_t e) {
    for (size_t s = b; s < e; s += kBlock) {
      size_t end = std::min(s + kBlock, e);
      uint32_t blockKey = 0;
      for (size_t i = s; i < end; ++i)
        blockKey = std::max(blockKey, num::magnitudeKey(valueAt(in, residual, i)));
      uint32_t code = num::nvfp4ScaleCode(blockKey, t);
      scales[s / kBlock] = static_cast<uint8_t>(code);
      float sv = num::nvfp4ScaleValue(code, t);
      float inv = num::int8InvScale(sv);
      for (size_t i = s; i < end; ++i) {
        float v = valueAt(in, residual, i);
        uint32_t c =
            num::fpEncodeScaled<num::E2M1>(v, inv, st, st ? num::uniform01(seed, i) : 0.0f);
        if (residual) residual[i] = num::residualOf(v, num::fpDecode<num::E2M1>(c) * sv);
        if (i & 1)
          codes[i / 2] = static_cast<uint8_t>(codes[i / 2] | (c << 4));
        else
          codes[i / 2] = static_cast<uint8_t>(c);  // an odd n leaves the last high nibble 0
      }
    }
  });
}

template <typename Out>
void nvfp4Dequantize(const float* tensorScale, const uint8_t* scales, const uint8_t* codes,
                     size_t n, Out* out) {
  decode(tensorScale, scales, codes, n, [out](size_t i, float v) { num::store(out, i, v); });
}

void nvfp4DequantizeAccumulate(const float* tensorScale, const uint8_t* scales,
                               const uint8_t* codes, size_t n, float* acc) {
  decode(tensorScale, scales, codes, n, [acc](size_t i, float v) { acc[i] += v; });
}

#define TERSE_NVFP4(T)                                                                           \
  template void nvfp4Quantize<T>(const T*, size_t, Rounding, uint64_t, float*, float*, uint8_t*, \
                                 uint8_t*);                                                      \
  template void nvfp4Dequantize<T>(const float*, const uint8_t*, const uint8_t*, size_t, T*);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_NVFP4)
#undef TERSE_NVFP4

}  // namespace terse::kernels::cpu
