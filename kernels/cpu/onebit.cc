// onebit: sign bits plus the mean magnitude of each block.
#include "cpu_common.h"

#include <algorithm>

namespace terse::kernels::cpu {
namespace {

constexpr size_t kLanes = 8;  // independent partial sums so the block sum vectorizes

template <typename In>
void compressBlock(const In* TERSE_RESTRICT in, size_t n, float* TERSE_RESTRICT residual,
                   float* TERSE_RESTRICT scaleOut, uint32_t* TERSE_RESTRICT bits) {
  // Sum of magnitudes in kLanes partial sums (a fixed order, so results are reproducible).
  float part[kLanes] = {};
  uint32_t maxKey = 0;
  size_t full = n / kLanes * kLanes;
  for (size_t i = 0; i < full; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      float v = residual ? num::load(in, i + l) + residual[i + l] : num::load(in, i + l);
      part[l] += num::bitsFloat(num::magnitudeKey(v));
      maxKey = std::max(maxKey, num::magnitudeKey(v));
    }
  }
  for (size_t i = full; i < n; ++i) {
    float v = residual ? num::load(in, i) + residual[i] : num::load(in, i);
    part[i - full] += num::bitsFloat(num::magnitudeKey(v));
    maxKey = std::max(maxKey, num::magnitudeKey(v));
  }
  float sum =
      ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  float scale = num::onebitScale(sum, static_cast<uint32_t>(n), maxKey < 0x7f800000u);
  *scaleOut = scale;
  // Sign bits, 32 elements per word; blocks are multiples of 32 except the message's last.
  for (size_t w = 0; w * 32 < n; ++w) {
    size_t base = w * 32;
    size_t m = std::min<size_t>(32, n - base);
    uint32_t word = 0;
    if (residual) {
      for (size_t j = 0; j < m; ++j) {
        float v = num::load(in, base + j) + residual[base + j];
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

template <typename Body>
void forBlocks(size_t n, size_t block, Body&& body) {
  detail::forRange(n, block, [&](size_t b, size_t e) {
    for (size_t s = b; s < e; s += block) body(s / block, s, std::min(block, e - s));
  });
}

}  // namespace

template <typename In>
void onebitCompress(const In* in, size_t n, size_t block, float* residual, float* scales,
                    uint32_t* bits) {
  // Blocks are powers of two >= 32, so every block starts on a word boundary.
  forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
    compressBlock(in + s, len, residual ? residual + s : nullptr, scales + bi, bits + s / 32);
  });
}

template <typename Out>
void onebitDecompress(const float* scales, const uint32_t* bits, size_t n, size_t block, Out* out) {
  forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
    decompressBlock(scales[bi], bits + s / 32, len, out + s);
  });
}

void onebitDecompressAccumulate(const float* scales, const uint32_t* bits, size_t n, size_t block,
                                float* acc) {
  forBlocks(n, block, [&](size_t bi, size_t s, size_t len) {
    decompressAccBlock(scales[bi], bits + s / 32, len, acc + s);
  });
}

#define TERSE_ONEBIT(T)                                                                 \
  template void onebitCompress<T>(const T*, size_t, size_t, float*, float*, uint32_t*); \
  template void onebitDecompress<T>(const float*, const uint32_t*, size_t, size_t, T*);
TERSE_ONEBIT(float)
TERSE_ONEBIT(Half)
TERSE_ONEBIT(BFloat16)

}  // namespace terse::kernels::cpu
