// The per-element and per-block arithmetic of every codec, shared verbatim by the CPU kernels
// and the CUDA kernels (TERSE_HD). Changing a formula here changes both paths, and the CPU tests
// that check it.
//
// Conventions (documented in docs/wire-format.md and tested):
//  - float16: IEEE binary16, round to nearest even. Finite values beyond +-65504 saturate to
//    +-65504 instead of becoming infinite; +-Inf stays +-Inf; NaN stays NaN (quiet).
//  - bfloat16: the top 16 bits of binary32, round to nearest even; NaN stays NaN (quiet),
//    Inf stays Inf, overflow on rounding becomes Inf as in every bfloat16 implementation.
//  - int8: scale = absmax / 127 per block; q = round(v / scale) in [-127, 127].
//  - onebit: scale = mean(|v|) per block; bit 1 means v >= 0 (zero maps to +scale).
#pragma once

#include "terse/common/hd.h"

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include <cmath>
#endif

namespace terse {

// 16-bit storage types. Layout-compatible with __half / __nv_bfloat16 / torch's Half/BFloat16.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit storage types");

namespace num {

TERSE_HD uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

TERSE_HD float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

TERSE_HD bool isFinite(float f) { return (floatBits(f) & 0x7f800000u) != 0x7f800000u; }

// float32 -> binary16 bits, round to nearest even, saturating finite overflow to +-65504.
TERSE_HD uint16_t floatToHalfBits(float f) {
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // Inf or NaN
    if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7bffu);  // rounds past 65504
  if (absx < 0x38800000u) {  // result is subnormal or zero
    if (absx < 0x33000000u)
      return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    uint32_t exp = absx >> 23;
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;  // 14..24: aligns to 2^-24 units
    uint32_t value = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (value & 1u))) ++value;
    return static_cast<uint16_t>(sign | value);
  }
  uint32_t rounded = absx + 0xfffu + ((absx >> 13) & 1u);  // round to nearest even at bit 13
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

TERSE_HD float halfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bitsFloat(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp == 0) {
    if (mant == 0) return bitsFloat(sign);
    // subnormal: value = mant * 2^-24, exact in float32
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

// float32 -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN.
TERSE_HD uint16_t floatToBf16Bits(float f) {
  uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

TERSE_HD float bf16BitsToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

// Error-feedback residual after `decoded` was sent for the value v: v - decoded, except that a
// non-finite difference (v or decoded Inf/NaN) leaves 0, so one overflowing step (which a loss
// scaler skips) does not poison every later step of the tensor with NaN.
TERSE_HD float residualOf(float v, float decoded) {
  float e = v - decoded;
  return isFinite(e) ? e : 0.0f;
}

// Loads and stores of the three element types, in float32.
TERSE_HD float load(const float* p, size_t i) { return p[i]; }
TERSE_HD float load(const Half* p, size_t i) { return halfBitsToFloat(p[i].bits); }
TERSE_HD float load(const BFloat16* p, size_t i) { return bf16BitsToFloat(p[i].bits); }
TERSE_HD void store(float* p, size_t i, float v) { p[i] = v; }
TERSE_HD void store(Half* p, size_t i, float v) { p[i].bits = floatToHalfBits(v); }
TERSE_HD void store(BFloat16* p, size_t i, float v) { p[i].bits = floatToBf16Bits(v); }

// ---- int8 -----------------------------------------------------------------------------------
// Scale of a block from its largest magnitude. A block with a non-finite value gets a NaN
// scale so every element of it decodes to NaN: overflow checks downstream still fire.
TERSE_HD float int8Scale(float absmax, bool allFinite) {
  return allFinite ? absmax / 127.0f : bitsFloat(0x7fc00000u);
}
// Multiplier applied before rounding; zero for an all-zero (or NaN-scaled) block.
TERSE_HD float int8InvScale(float scale) { return scale > 0.0f ? 1.0f / scale : 0.0f; }

TERSE_HD int8_t clampInt8(float q) {
  q = q > 127.0f ? 127.0f : q;
  q = q < -127.0f ? -127.0f : q;
  return static_cast<int8_t>(q);
}

TERSE_HD int8_t int8QuantizeNearest(float v, float invScale) {
  float q = rintf(v * invScale);  // ties to even under the default rounding mode
  return clampInt8(q != q ? 0.0f : q);
}

// Stochastic rounding: floor(v/scale + u) with u uniform in [0, 1), so E[q * scale] = v.
TERSE_HD int8_t int8QuantizeStochastic(float v, float invScale, float u) {
  float q = floorf(v * invScale + u);
  return clampInt8(q != q ? 0.0f : q);
}

TERSE_HD float int8Dequantize(int8_t q, float scale) { return static_cast<float>(q) * scale; }

// ---- counter-based random numbers (stochastic rounding) --------------------------------------
// splitmix64 of (seed, index): stateless, so element i gets the same draw on CPU and GPU and
// runs replay exactly for the same seed.
TERSE_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) with 24 random bits.
TERSE_HD float uniform01(uint64_t seed, uint64_t index) {
  uint64_t r = mix64(seed + (index + 1) * 0x9e3779b97f4a7c15ull);
  return static_cast<float>(static_cast<uint32_t>(r >> 40)) * (1.0f / 16777216.0f);
}

// ---- onebit ---------------------------------------------------------------------------------
// Scale of a block: mean magnitude keeps the block's L1 mass. Non-finite input -> NaN scale.
TERSE_HD float onebitScale(float absSum, uint32_t count, bool allFinite) {
  if (!allFinite) return bitsFloat(0x7fc00000u);
  return count ? absSum / static_cast<float>(count) : 0.0f;
}
// A block of finite values whose magnitudes add up past float32's range (values near 3e38) has
// a finite mean all the same: its sum overflowed, not its scale. The kernels then add the
// magnitudes again scaled by 2^-32 (exact for every normal float) and scale the mean back.
constexpr float kOnebitWideSumScale = 1.0f / 4294967296.0f;
TERSE_HD bool onebitSumOverflowed(float scale, bool allFinite) {
  return allFinite && !(scale <= 3.40282347e38f);
}
TERSE_HD float onebitScaleFromScaledSum(float scaledSum, uint32_t count) {
  float mean = count ? scaledSum / static_cast<float>(count) * 4294967296.0f : 0.0f;
  return mean <= 3.40282347e38f ? mean : 3.40282347e38f;  // rounding must not tip it to Inf
}
TERSE_HD bool onebitBit(float v) { return !(v < 0.0f); }  // zero and -0 map to +scale
TERSE_HD float onebitDecode(bool bit, float scale) { return bit ? scale : -scale; }

// ---- topk -----------------------------------------------------------------------------------
// Order key of |v| as an unsigned integer: larger magnitude -> larger key; NaN sorts above
// every number so a NaN is always selected (and propagates).
TERSE_HD uint32_t magnitudeKey(float v) { return floatBits(v) & 0x7fffffffu; }

}  // namespace num
}  // namespace terse
