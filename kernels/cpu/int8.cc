// int8 blockwise absmax quantization.
#include "cpu_common.h"

#include <algorithm>

namespace terse::kernels::cpu {
namespace {

// Value the codec compresses: input plus residual, in float32.
template <typename In>
inline float valueAt(const In* in, const float* residual, size_t i) {
  return residual ? num::load(in, i) + residual[i] : num::load(in, i);
}

// Largest magnitude of a block as the integer key (order-preserving for finite values);
// >= 0x7f800000 means the block holds Inf or NaN. Integer max vectorizes without fast-math.
template <typename In>
uint32_t blockMaxKey(const In* TERSE_RESTRICT in, const float* TERSE_RESTRICT residual, size_t n) {
  uint32_t m = 0;
  if (residual) {
    for (size_t i = 0; i < n; ++i)
      m = std::max(m, num::magnitudeKey(num::load(in, i) + residual[i]));
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
        float v = num::load(in, i) + residual[i];
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

// Runs body(blockIndex, begin, length) for every block, blocks spread over threads.
template <typename Body>
void forBlocks(size_t n, size_t block, Body&& body) {
  detail::forRange(n, block, [&](size_t b, size_t e) {
    for (size_t s = b; s < e; s += block) body(s / block, s, std::min(block, e - s));
  });
}

}  // namespace

template <typename In>
void int8Quantize(const In* in, size_t n, size_t block, Rounding rounding, uint64_t seed,
                  uint64_t offset, float* residual, float* scales, int8_t* q) {
  forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
    quantizeBlock(in + s, len, rounding, seed, offset + s, residual ? residual + s : nullptr,
                  scales + bi, q + s);
  });
}

template <typename Out>
void int8Dequantize(const float* scales, const int8_t* q, size_t n, size_t block, Out* out) {
  forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
    dequantizeBlock(scales[bi], q + s, len, out + s);
  });
}

void int8DequantizeAccumulate(const float* scales, const int8_t* q, size_t n, size_t block,
                              float* acc) {
  forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
    dequantizeAccBlock(scales[bi], q + s, len, acc + s);
  });
}

#define TERSE_INT8(T)                                                                           \
  template void int8Quantize<T>(const T*, size_t, size_t, Rounding, uint64_t, uint64_t, float*, \
                                float*, int8_t*);                                               \
  template void int8Dequantize<T>(const float*, const int8_t*, size_t, size_t, T*);
TERSE_INT8(float)
TERSE_INT8(Half)
TERSE_INT8(BFloat16)

}  // namespace terse::kernels::cpu
