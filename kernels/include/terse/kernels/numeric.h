// The per-element and per-block arithmetic of every codec, shared verbatim by the CPU kernels
// and the CUDA kernels (TERSE_HD). Changing a formula here changes both paths, and the CPU tests
// that check it.
//
// Conventions (documented in docs/wire-format.md and tested):
//  - float16: IEEE binary16, round to nearest even. Finite values beyond +-65504 saturate to
//    +-65504 instead of becoming infinite; +-Inf stays +-Inf; NaN stays NaN (quiet).
//  - bfloat16: the top 16 bits of binary32, round to nearest even; NaN stays NaN (quiet),
//    Inf stays Inf, overflow on rounding becomes Inf as in every bfloat16 implementation.
//  - int8: scale = absmax / 127 per block (at least 2^-126, blockScale); q = rint(v * (1/scale))
//    in [-127, 127].
//  - onebit: scale = mean(|v|) per block; bit 1 means v >= 0 (zero maps to +scale).
//  - fp8 (E4M3/E5M2), E2M1 elements: round to nearest even, finite overflow saturates to the
//    largest finite value; NaN stays NaN (E4M3: S.1111.111, E5M2: S.11111.10), Inf becomes NaN
//    in E4M3 (no Inf code) and stays Inf in E5M2; E2M1 has neither (Inf saturates, NaN -> 0).
//    Bit-exact against ml_dtypes' float8_e4m3fn / float8_e5m2 / float4_e2m1fn on every finite
//    input after clamping to +-max (tests/compressors/golden/gen_lowbit.py).
//  - fp8 block scale: absmax / max_finite (float32, at least 2^-126); mx scale: E8M0
//    2^(floor(log2 absmax) - emax_elem), the OCP MX v1.0 rule, clamped to [2^-127, 2^127]
//    (E8M0's floor enters docs/codecs.md's bounds); a block holding Inf/NaN gets
//    a NaN scale (fp8: float NaN, mx: 0xFF) so all of it decodes to NaN.
//  - int4: scale = absmax / 7 per block (at least 2^-126); q = rint(v / scale) in [-7, 7], the
//    float32 quotient rounded to nearest even.
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

// The value error feedback compresses: input (times the call's scale) plus residual. Both are
// finite, yet their sum can pass FLT_MAX (2e38 fed twice through onebit, FLT_MAX through mxfp4):
// it then saturates to +-FLT_MAX, so finite input stays finite through every codec, and what
// could not be sent stays in the next residual (v - decoded, finite). Non-finite input is left
// to propagate; a sum that is finite is returned as it is, bit for bit.
TERSE_HD float feedbackSum(float x, float r) {
  float v = x + r;
  if (isFinite(v) || !isFinite(x) || !isFinite(r)) return v;
  return v > 0.0f ? 3.40282347e38f : -3.40282347e38f;
}

// Loads and stores of the three element types, in float32.
TERSE_HD float load(const float* p, size_t i) { return p[i]; }
TERSE_HD float load(const Half* p, size_t i) { return halfBitsToFloat(p[i].bits); }
TERSE_HD float load(const BFloat16* p, size_t i) { return bf16BitsToFloat(p[i].bits); }
TERSE_HD void store(float* p, size_t i, float v) { p[i] = v; }
TERSE_HD void store(Half* p, size_t i, float v) { p[i].bits = floatToHalfBits(v); }
TERSE_HD void store(BFloat16* p, size_t i, float v) { p[i].bits = floatToBf16Bits(v); }

// ---- float32 block scales (int8, fp8, int4) ---------------------------------------------------
// scale = absmax / levels, where levels is the largest code's value (127, 7, the format's max),
// so the block's largest element lands on the largest code. Two edges (issue #35):
//  - a scale below float32's smallest normal 2^-126 is raised to it. A subnormal scale has
//    few significant bits, and its inverse passes FLT_MAX below 2^-128: every nonzero element
//    of the block then encoded as the largest code (decoding to about +-absmax). With the
//    floor the inverse is at most 2^126 and the block's elements sit on a grid of steps of
//    2^-126 (times the format's own step), which docs/codecs.md's bounds state;
//  - levels * scale must not round past FLT_MAX, or the largest code decodes to Inf (absmax =
//    FLT_MAX over 127 rounds up, and 127 times it is Inf): the scale then steps down one ulp.
// A block with a non-finite value gets a NaN scale so every element of it decodes to NaN:
// overflow checks downstream still fire. An all-zero block keeps the scale 0.
constexpr float kMinBlockScale = 1.17549435e-38f;  // 2^-126
TERSE_HD float blockScale(float absmax, float levels, bool allFinite) {
  if (!allFinite) return bitsFloat(0x7fc00000u);
  if (absmax == 0.0f) return 0.0f;
  float s = absmax / levels;
  s = s < kMinBlockScale ? kMinBlockScale : s;
  if (!isFinite(s * levels)) s = bitsFloat(floatBits(s) - 1u);
  return s;
}

// ---- int8 -----------------------------------------------------------------------------------
TERSE_HD float int8Scale(float absmax, bool allFinite) {
  return blockScale(absmax, 127.0f, allFinite);
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

// ---- minifloat elements: FP8 E4M3 / E5M2 and FP4 E2M1 ------------------------------------------
// A format is a traits struct; every function below is a template over it so the compiler folds
// the constants. kMant: mantissa bits; kBias: exponent bias; kEmin: exponent of the smallest
// normal; kMaxBits: float32 bits of the largest finite value; kSign: the sign bit of a code.
struct E4M3 {
  static constexpr int kMant = 3, kBias = 7, kEmin = -6, kEmax = 8;
  static constexpr uint32_t kSign = 0x80u, kMaxCode = 0x7eu, kNanCode = 0x7fu;
  static constexpr uint32_t kInfCode = 0x7fu;        // no Inf: Inf encodes as NaN (as ml_dtypes)
  static constexpr uint32_t kMaxBits = 0x43e00000u;  // 448
};
struct E5M2 {
  static constexpr int kMant = 2, kBias = 15, kEmin = -14, kEmax = 15;
  static constexpr uint32_t kSign = 0x80u, kMaxCode = 0x7bu, kNanCode = 0x7eu;
  static constexpr uint32_t kInfCode = 0x7cu;
  static constexpr uint32_t kMaxBits = 0x47600000u;  // 57344
};
struct E2M1 {
  static constexpr int kMant = 1, kBias = 1, kEmin = 0, kEmax = 2;
  static constexpr uint32_t kSign = 0x8u, kMaxCode = 0x7u, kNanCode = 0x0u;  // no NaN code
  static constexpr uint32_t kInfCode = 0x7u;         // no Inf: saturates (as ml_dtypes)
  static constexpr uint32_t kMaxBits = 0x40c00000u;  // 6
};

// 2^k as a float for -126 <= k <= 127 (exact).
TERSE_HD float pow2(int k) { return bitsFloat(static_cast<uint32_t>(k + 127) << 23); }

template <typename F>
TERSE_HD float fpMax() {
  return bitsFloat(F::kMaxBits);
}

// Code of a magnitude 0 <= a <= max, round to nearest even (sign not included).
template <typename F>
TERSE_HD uint32_t fpMagnitudeNearest(float a) {
  if (a < pow2(F::kEmin)) {
    // Subnormal range: a multiple of 2^(emin - mant); the count is the code (a count of
    // 2^mant is the smallest normal's code, so rounding up across the boundary is free).
    return static_cast<uint32_t>(rintf(a * pow2(F::kMant - F::kEmin)));
  }
  constexpr int kShift = 23 - F::kMant;
  uint32_t b = floatBits(a);
  b += (1u << (kShift - 1)) - 1u + ((b >> kShift) & 1u);  // round to nearest even at kShift
  return (b >> kShift) - (static_cast<uint32_t>(127 - F::kBias) << F::kMant);
}

// float32 -> code, round to nearest even, finite overflow saturating to +-max.
template <typename F>
TERSE_HD uint32_t fpEncodeNearest(float x) {
  uint32_t b = floatBits(x);
  uint32_t sign = (b >> 31) ? F::kSign : 0u;
  uint32_t absb = b & 0x7fffffffu;
  if (absb > 0x7f800000u) return F::kNanCode ? (sign | F::kNanCode) : 0u;
  if (absb == 0x7f800000u) return sign | F::kInfCode;
  if (absb >= F::kMaxBits) return sign | F::kMaxCode;
  return sign | fpMagnitudeNearest<F>(bitsFloat(absb));
}

// Stochastic rounding between the two neighbouring codes of |x|: floor(|x| / step + u) * step
// with step the spacing of the format at |x|, so E[decode] = x for |x| <= max (ties cannot
// bias: u is uniform in [0, 1)). Sign applied after, so the rounding is symmetric. Non-finite
// inputs encode as fpEncodeNearest does; beyond max saturates.
template <typename F>
TERSE_HD uint32_t fpEncodeStochastic(float x, float u) {
  uint32_t b = floatBits(x);
  uint32_t absb = b & 0x7fffffffu;
  if (absb >= 0x7f800000u) return fpEncodeNearest<F>(x);
  uint32_t sign = (b >> 31) ? F::kSign : 0u;
  if (absb >= F::kMaxBits) return sign | F::kMaxCode;
  int e = static_cast<int>(absb >> 23) - 127;  // floor(log2 |x|) for normal float32
  e = e < F::kEmin ? F::kEmin : e;
  float a = bitsFloat(absb);
  float t = floorf(a * pow2(F::kMant - e) + u) * pow2(e - F::kMant);  // exact multiple of step
  float mx = fpMax<F>();
  t = t > mx ? mx : t;  // a + u can round up to one step past max
  return sign | fpMagnitudeNearest<F>(t);
}

template <typename F>
TERSE_HD uint32_t fpEncode(float x, bool stochastic, float u) {
  return stochastic ? fpEncodeStochastic<F>(x, u) : fpEncodeNearest<F>(x);
}

// Value of a finite magnitude code, exactly, without float32 subnormals (which cost a
// microcode assist per operation on x86): a normal code's bits move under float32's exponent
// with the bias changed by integer addition; a subnormal code is mantissa * 2^(emin - mant).
template <typename F>
TERSE_HD float fpMagnitudeValue(uint32_t mag) {
  float normal =
      bitsFloat((mag << (23 - F::kMant)) + (static_cast<uint32_t>(127 - F::kBias) << 23));
  float sub = static_cast<float>(static_cast<int32_t>(mag)) * pow2(F::kEmin - F::kMant);
  return (mag >> F::kMant) ? normal : sub;
}

// code -> float32 (exact); NaN codes decode to the quiet NaN, E5M2's Inf codes to Inf.
template <typename F>
TERSE_HD float fpDecode(uint32_t code) {
  uint32_t mag = code & (F::kSign - 1u);
  float v = fpMagnitudeValue<F>(mag);
  if (F::kNanCode && mag > F::kMaxCode) {  // E4M3: 0x7f; E5M2: 0x7c Inf, 0x7d..0x7f NaN
    v = (F::kInfCode != F::kNanCode && mag == F::kInfCode) ? bitsFloat(0x7f800000u)
                                                           : bitsFloat(0x7fc00000u);
  }
  return (code & F::kSign) ? -v : v;
}

// An element of a scaled block: x = v * inv, encoded. A NaN product (any element of a
// NaN-scaled block, or 0 * Inf when 1/scale overflowed for a float32-subnormal scale) writes
// code 0 and +-Inf saturates, so only the block scale carries non-finite input.
template <typename F>
TERSE_HD uint32_t fpEncodeScaled(float v, float inv, bool stochastic, float u) {
  float x = v * inv;
  float mx = fpMax<F>();
  x = x != x ? 0.0f : x;
  x = x > mx ? mx : (x < -mx ? -mx : x);
  return fpEncode<F>(x, stochastic, u);
}

// ---- fp8 with a float32 block scale -----------------------------------------------------------
// Same shape as int8: scale = absmax / max_finite, so the block's largest value lands on the
// format's largest; NaN scale for a non-finite block.
template <typename F>
TERSE_HD float fpBlockScale(float absmax, bool allFinite) {
  return blockScale(absmax, fpMax<F>(), allFinite);
}

// ---- OCP MX v1.0: E8M0 shared scale per 32 elements -----------------------------------------
// The spec's rule (section 6.3): X = 2^(floor(log2(absmax)) - emax_elem), emax_elem the element
// format's largest exponent (E4M3: 8, E2M1: 2); elements are V/X rounded and clamped to the
// element format. E8M0 holds exponents -127..127 (byte = exponent + 127), 0xFF is NaN. An
// all-zero block takes the smallest scale (its elements are zero whatever X is).
constexpr uint32_t kE8M0Nan = 0xffu;

// maxKey: magnitude bits of the block's largest |v| (magnitudeKey); >= 0x7f800000 means Inf/NaN.
template <typename F>
TERSE_HD uint32_t mxScaleCode(uint32_t maxKey) {
  if (maxKey >= 0x7f800000u) return kE8M0Nan;
  if (maxKey == 0) return 0u;
  int lg;
  if (maxKey >= 0x00800000u) {
    lg = static_cast<int>(maxKey >> 23) - 127;
  } else {  // float32 subnormal: exponent from the highest set bit
    int hi = 22;
    while (!(maxKey >> hi)) --hi;
    lg = hi - 149;
  }
  int e = lg - F::kEmax;
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<uint32_t>(e + 127);
}

// X as float32 (2^-127 is a float32 subnormal, still exact).
TERSE_HD float e8m0Decode(uint32_t code) {
  if (code == kE8M0Nan) return bitsFloat(0x7fc00000u);
  return code ? bitsFloat(code << 23) : bitsFloat(0x00400000u);
}

// 1/X, exact (2^(127 - code) fits a float32 for every code 0..254); 0 for a NaN scale, so the
// elements of a NaN block encode v * 0 (NaN for Inf/NaN inputs), decoding to NaN anyway.
TERSE_HD float e8m0Inverse(uint32_t code) {
  if (code == kE8M0Nan) return 0.0f;
  return code >= 1u ? e8m0Decode(254u - code) : pow2(127);
}

// ---- int4 -----------------------------------------------------------------------------------
// int8's scheme with 7 levels each side: scale = absmax / 7, q in [-7, 7], two's complement
// nibbles (element 2i in the low nibble of byte i). q = rint(v / scale), the quotient and not
// v * (1/scale), as docs/codecs.md states: the two differ where v / scale is a tie (v = -1.4375
// in a block of max 2.875 is -3.5 scales: -4 by the quotient, -3 by the product -3.4999998).
TERSE_HD float int4Scale(float absmax, bool allFinite) {
  return blockScale(absmax, 7.0f, allFinite);
}
// The divisor an int4 element is encoded with: the scale, or 1 for an all-zero block (0 / 1 is
// 0, where 0 / 0 would be NaN); NaN for a non-finite block (every code is then 0).
TERSE_HD float int4Divisor(float scale) { return scale == 0.0f ? 1.0f : scale; }
TERSE_HD uint32_t int4Quantize(float x, bool stochastic, float u) {
  float q = stochastic ? floorf(x + u) : rintf(x);
  q = q != q ? 0.0f : q;
  q = q > 7.0f ? 7.0f : (q < -7.0f ? -7.0f : q);
  return static_cast<uint32_t>(static_cast<int32_t>(q)) & 0xfu;
}
TERSE_HD float int4Dequantize(uint32_t nibble) {
  return static_cast<float>(static_cast<int32_t>(nibble << 28) >> 28);
}

// ---- the low-bit block formats as policies -----------------------------------------------------
// What the CPU and CUDA kernels need from a format, all from the formulas above: the scale of a
// block from its largest magnitude key, the scale's value and encoding factor (the inverse
// scale, which elements are multiplied by; int4's divisor, which they are divided by), an
// element's code and value. decoded = decode(code) * scaleValue(scale), on both sides of the
// wire.
template <typename F>
struct FpBlockPolicy {  // fp8: F elements, float32 scale per block
  using Scale = float;
  static constexpr bool kNibbles = false;
  static TERSE_HD float scaleFromKey(uint32_t key) {
    return fpBlockScale<F>(bitsFloat(key), key < 0x7f800000u);
  }
  static TERSE_HD float scaleValue(float s) { return s; }
  static TERSE_HD float factor(float s) { return int8InvScale(s); }
  static TERSE_HD uint32_t encode(float v, float inv, bool stochastic, float u) {
    return fpEncodeScaled<F>(v, inv, stochastic, u);
  }
  static TERSE_HD float decode(uint32_t c) { return fpDecode<F>(c); }
};

template <typename F>
struct MxPolicy {  // OCP MX: F elements, E8M0 scale per 32
  using Scale = uint8_t;
  static constexpr bool kNibbles = F::kSign == 0x8u;
  static TERSE_HD uint8_t scaleFromKey(uint32_t key) {
    return static_cast<uint8_t>(mxScaleCode<F>(key));
  }
  static TERSE_HD float scaleValue(uint8_t s) { return e8m0Decode(s); }
  static TERSE_HD float factor(uint8_t s) { return e8m0Inverse(s); }
  static TERSE_HD uint32_t encode(float v, float inv, bool stochastic, float u) {
    return fpEncodeScaled<F>(v, inv, stochastic, u);
  }
  static TERSE_HD float decode(uint32_t c) { return fpDecode<F>(c); }
};

struct Int4Policy {  // int4: float32 scale per block, nibbles
  using Scale = float;
  static constexpr bool kNibbles = true;
  static TERSE_HD float scaleFromKey(uint32_t key) {
    return int4Scale(bitsFloat(key), key < 0x7f800000u);
  }
  static TERSE_HD float scaleValue(float s) { return s; }
  static TERSE_HD float factor(float s) { return int4Divisor(s); }
  static TERSE_HD uint32_t encode(float v, float divisor, bool stochastic, float u) {
    return int4Quantize(v / divisor, stochastic, u);
  }
  static TERSE_HD float decode(uint32_t c) { return int4Dequantize(c); }
};

// ---- NVFP4: E2M1 elements, an E4M3 scale per 16, a float32 scale per message -----------------
// NVIDIA's NVFP4 (as TransformerEngine serves it): decoded = e2m1 * e4m3(block) * T. The
// message's (tensor's or chunk's) scale T = amax / (448 * 6) over its finite values, by
// blockScale (floor 2^-126, FLT_MAX edge), so the largest block's scale code is E4M3's largest
// and its largest element E2M1's. A block's scale code is E4M3 of bmax / (6 T), round to
// nearest even (saturating at 448; a block below E4M3's smallest step relative to the message's
// largest encodes as 0 and decodes to 0); its elements are E2M1 of v * (1 / S), S = e4m3 * T,
// saturating at 6. A block holding Inf/NaN gets the E4M3 NaN code 0x7F, so all of it decodes
// to NaN; an all-zero message has T = 0 and every code 0.
constexpr size_t kNvfp4Block = 16;
constexpr float kNvfp4Levels = 2688.0f;  // 448 * 6
// keyMax: magnitudeKey of the largest finite |v| of the message (0 if none).
TERSE_HD float nvfp4TensorScale(uint32_t keyMax) {
  return blockScale(bitsFloat(keyMax), kNvfp4Levels, true);
}
// The block's scale code from its largest magnitude key (>= 0x7f800000: Inf/NaN in the block).
TERSE_HD uint32_t nvfp4ScaleCode(uint32_t blockKey, float tensorScale) {
  if (blockKey >= 0x7f800000u) return E4M3::kNanCode;
  if (blockKey == 0 || tensorScale == 0.0f) return 0u;
  return fpEncodeNearest<E4M3>(bitsFloat(blockKey) / (6.0f * tensorScale));
}
// S, the block's scale value; NaN for the NaN code.
TERSE_HD float nvfp4ScaleValue(uint32_t code, float tensorScale) {
  return fpDecode<E4M3>(code) * tensorScale;
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
// The block's magnitude sum, in one order on every path: kOnebitLanes partial sums, lane l
// adding |v| of elements l, l + 8, l + 16, ... of the block in index order (the CPU's 8-wide
// loop; one GPU thread per lane), then combined by onebitLaneSum. A float sum's value depends on
// its order, and error feedback turns a one-ulp scale difference into flipped signs a few steps
// later, so the GPU must not sum in its own tree order (the first GPU check, 2026-11-28, saw
// device and host part by 2 x scale on elements near zero).
constexpr unsigned kOnebitLanes = 8;
TERSE_HD float onebitLaneSum(const float* part) {
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}
TERSE_HD bool onebitBit(float v) { return !(v < 0.0f); }  // zero and -0 map to +scale
TERSE_HD float onebitDecode(bool bit, float scale) { return bit ? scale : -scale; }

// ---- topk -----------------------------------------------------------------------------------
// Order key of |v| as an unsigned integer: larger magnitude -> larger key; NaN sorts above
// every number so a NaN is always selected (and propagates).
TERSE_HD uint32_t magnitudeKey(float v) { return floatBits(v) & 0x7fffffffu; }

}  // namespace num
}  // namespace terse
