// Issue #35's edge values through the codecs, both CPU paths (portable and AVX2): int8 blocks
// holding +-FLT_MAX, error feedback on inputs near the top of float32's range over several
// calls, blocks of tiny values in every low-bit codec, and int4's rounding of x / s at a tie.
// Bounds are docs/codecs.md's, computed here in double from the input.
#include "test_util.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

namespace terse::test {
namespace {

constexpr float kFltMax = FLT_MAX;

struct Coded {
  std::vector<uint8_t> wire;  // the message, for comparing paths byte for byte
  std::vector<float> decoded;
};

// One compress (with the residual when given) and decompress of float32 values.
Coded roundTrip(const Codec& c, const std::vector<float>& x, float* residual = nullptr,
                uint64_t nonce = 0) {
  size_t n = x.size();
  WireBuffer w(c.maxWireBytes(n));
  CodecCall call;
  call.nonce = nonce;
  auto r = c.compress(x.data(), DataType::kFloat32, n, residual, w.data(), w.capacity(), call);
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  Coded out;
  if (!r.isOk()) return out;
  w.bytes = *r;
  out.wire.assign(w.u8(), w.u8() + w.bytes);
  out.decoded.assign(n, 12345.0f);
  Status s = c.decompress(w.data(), w.bytes, out.decoded.data(), DataType::kFloat32, n);
  EXPECT_TRUE(s.isOk()) << s.toString();
  return out;
}

// ---- finding 3: int8 and FLT_MAX ----------------------------------------------------------------

TEST(EdgeValues, Int8BlockHoldingFltMaxDecodesFinite) {
  // absmax / 127 rounded up, and 127 times it is Inf: the block's largest element decoded to
  // Inf and the allreduce's re-compression then made all of its block NaN.
  for (std::string spec : {"int8", "int8:block=32", "int8:round=stochastic,seed=3"}) {
    SCOPED_TRACE(spec);
    auto codec = codecOrDie(spec);
    ASSERT_TRUE(codec);
    std::vector<float> x(512);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 ? 1.0f : -2.5e37f) * (1.0f + i % 7);
    x[0] = kFltMax;
    x[5] = -kFltMax;
    x[300] = kFltMax;
    x[301] = -kFltMax;
    bool stochastic = spec.find("stochastic") != std::string::npos;
    size_t block = spec == "int8:block=32" ? 32 : 256;
    forEachIsa([&] {
      for (uint64_t nonce : {0u, 1u, 2u}) {
        Coded c = roundTrip(*codec, x, nullptr, nonce);
        ASSERT_EQ(c.decoded.size(), x.size());
        for (size_t b = 0; b < x.size(); b += block) {
          double absmax = 0;
          for (size_t i = b; i < b + block; ++i) absmax = std::max(absmax, std::fabs((double)x[i]));
          double s = absmax / 127.0;
          for (size_t i = b; i < b + block; ++i) {
            ASSERT_TRUE(std::isfinite(c.decoded[i])) << "i=" << i << " d=" << c.decoded[i];
            ASSERT_LE(std::fabs(c.decoded[i] - (double)x[i]), (stochastic ? 1.0 : 0.5) * s * 1.0001)
                << "i=" << i;
          }
        }
        // What the allreduce's server does with a reduced chunk: compress the decoded values.
        Coded again = roundTrip(*codec, c.decoded, nullptr, nonce);
        for (size_t i = 0; i < x.size(); ++i)
          ASSERT_TRUE(std::isfinite(again.decoded[i])) << "again i=" << i;
      }
    });
  }
}

// ---- finding 4: error feedback near the top of the range ----------------------------------------

std::vector<std::string> allCodecSpecs() {
  return {"none",
          "fp16",
          "bf16",
          "int8",
          "int8:block=32",
          "int8:round=stochastic,seed=7",
          "onebit",
          "onebit:block=64",
          "topk",
          "topk:ratio=0.3",
          "fp8",
          "fp8:format=e5m2,block=32",
          "fp8:format=e4m3,block=1024,round=stochastic,seed=3",
          "mxfp8",
          "mxfp8:round=stochastic,seed=2",
          "mxfp4",
          "mxfp4:round=stochastic,seed=5",
          "int4",
          "int4:block=1024,round=stochastic"};
}

TEST(EdgeValues, ErrorFeedbackKeepsHugeFiniteInputFinite) {
  // The residual guard kept v - d finite, but v = input + residual itself overflowed on the
  // next call (onebit at 2e38, mxfp4 at FLT_MAX): a NaN block from finite input. Every codec,
  // several calls, inputs at and near the top of the range with both signs. bfloat16 is the
  // documented exception for values that round past its largest finite value (3.3895e38), so
  // its inputs stay below that: only the residual can push them over.
  const size_t n = 4096 + 37;  // whole 8-block batches and a partial block
  for (const std::string& spec : allCodecSpecs()) {
    SCOPED_TRACE(spec);
    auto codec = codecOrDie(spec);
    ASSERT_TRUE(codec);
    const float big = spec == "bf16" ? 3.3e38f : kFltMax;
    const float mags[] = {big, 2e38f, 3e38f, 1.0f, 0.0f, 1e38f, big, 2e38f};
    forEachIsa([&] {
      std::vector<float> residual(n, 0.0f);
      for (int call = 0; call < 6; ++call) {
        std::vector<float> x(n);
        for (size_t i = 0; i < n; ++i) {
          float m = mags[(i + call) % 8];
          x[i] = ((i / 3 + call) % 2 ? -m : m);
        }
        Coded c = roundTrip(*codec, x, residual.data(), call);
        ASSERT_EQ(c.decoded.size(), n);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(std::isfinite(c.decoded[i]))
              << "call " << call << " i=" << i << " x=" << x[i] << " d=" << c.decoded[i];
          ASSERT_TRUE(std::isfinite(residual[i])) << "call " << call << " i=" << i;
        }
      }
    });
  }
}

TEST(EdgeValues, SaturatedSumKeepsTheSign) {
  // input + residual past the range is taken as +-FLT_MAX: the sign survives, and what was
  // not sent stays in the residual (finite).
  for (std::string spec : {"fp16", "int8", "fp8", "mxfp4", "int4", "onebit:block=64", "topk"}) {
    SCOPED_TRACE(spec);
    auto codec = codecOrDie(spec);
    forEachIsa([&] {
      std::vector<float> x(256, 3e38f), residual(256, 2e38f);
      for (size_t i = 1; i < x.size(); i += 2) {
        x[i] = -3e38f;
        residual[i] = -2e38f;
      }
      Coded c = roundTrip(*codec, x, residual.data());
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(std::isfinite(c.decoded[i]) && std::isfinite(residual[i])) << i;
        if (c.decoded[i] != 0.0f) {
          ASSERT_EQ(std::signbit(c.decoded[i]), (i & 1) != 0) << i;
        }
        // sent + residual is the saturated sum, to one rounding
        double v = (i & 1) ? -(double)kFltMax : (double)kFltMax;
        ASSERT_NEAR((double)c.decoded[i] + residual[i], v, std::ldexp(v < 0 ? -v : v, -22)) << i;
      }
    });
  }
}

// ---- finding 8: blocks of tiny values -----------------------------------------------------------

// The documented bound of docs/codecs.md for a low-bit block (nearest rounding), in double.
struct LowbitFormat {
  std::string spec;
  size_t block;
  bool mx, intGrid;  // mx: E8M0 scale; intGrid: int4 / int8 (uniform grid)
  double divisor;    // absmax / divisor (fp8, int4, int8); the element format's max for mx
  int mant, emin, emax;
};

std::vector<LowbitFormat> lowbitFormats() {
  return {{"fp8", 256, false, false, 448.0, 3, -6, 8},
          {"fp8:format=e5m2", 256, false, false, 57344.0, 2, -14, 15},
          {"fp8:block=32", 32, false, false, 448.0, 3, -6, 8},
          {"mxfp8", 32, true, false, 448.0, 3, -6, 8},
          {"mxfp4", 32, true, false, 6.0, 1, 0, 2},
          {"int4", 64, false, true, 7.0, 0, 0, 0},
          {"int4:block=256", 256, false, true, 7.0, 0, 0, 0},
          {"int8", 256, false, true, 127.0, 0, 0, 0},
          {"int8:block=32", 32, false, true, 127.0, 0, 0, 0}};
}

// The scale docs/codecs.md states: float32 scales have a floor of 2^-126 (float32's smallest
// normal, whose inverse is finite), E8M0 one of 2^-127.
double documentedScale(const LowbitFormat& f, double absmax) {
  if (absmax == 0) return 0;
  if (f.mx) {
    int ex = 0;
    std::frexp(absmax, &ex);
    return std::ldexp(1.0, std::max(-127, ex - 1 - f.emax));
  }
  return std::max((double)(float)(absmax / f.divisor), std::ldexp(1.0, -126));
}

double documentedBound(const LowbitFormat& f, double x, double s) {
  double ax = std::fabs(x);
  if (f.intGrid) return s / 2;
  double sat = f.mx ? std::max(0.0, ax - f.divisor * s) : 0.0;
  // half a step at |x|: 2^-(mant+1) |x|, and the subnormal range's half step
  return std::ldexp(ax, -(f.mant + 1)) + std::ldexp(s, f.emin - f.mant - 1) + sat;
}

TEST(EdgeValues, TinyBlocksDecodeWithinTheDocumentedBound) {
  // Blocks whose largest |x| makes absmax / max a float32 subnormal: 1/s overflowed (fp8 below
  // ~1.3e-36 for e4m3, int4 below ~2.1e-38) and every nonzero element decoded to about
  // +-max|x|.
  const double maxima[] = {1.3034e-36, 6e-37, 1.7e-34, 5e-35, 8e-38, 2.05e-38, 1e-38,
                           3e-39,      1e-40, 1.4e-45, 1e-36, 1e-30, 2.5e-37};
  for (const auto& f : lowbitFormats()) {
    SCOPED_TRACE(f.spec);
    auto codec = codecOrDie(f.spec);
    ASSERT_TRUE(codec);
    // 8 blocks per maximum (the AVX2 path encodes 8 short blocks at a time), plus a partial one.
    std::vector<float> x;
    for (double mx : maxima) {
      for (size_t j = 0; j < 8 * f.block; ++j) {
        // a spread over the block: the maximum, values down to 1e-3 of it, zeros, signs
        double frac = (j % f.block == 3) ? 1.0 : std::pow(10.0, -3.0 * ((j * 37) % 101) / 100.0);
        float v = (float)(mx * frac);
        if (j % 11 == 5) v = 0.0f;
        x.push_back((j % 5 == 1) ? -v : v);
      }
    }
    x.push_back(3.716e-37f);  // the example, a lone one in the partial block
    x.push_back(1.3034e-36f);
    x.push_back(1.4e-45f);
    Coded portable;
    forEachIsa([&] {
      Coded c = roundTrip(*codec, x);
      ASSERT_EQ(c.decoded.size(), x.size());
      if (portable.wire.empty())
        portable = c;
      else
        EXPECT_EQ(c.wire, portable.wire) << "AVX2 and portable bytes differ";
      for (size_t b = 0; b < x.size(); b += f.block) {
        size_t e = std::min(x.size(), b + f.block);
        double absmax = 0;
        for (size_t i = b; i < e; ++i) absmax = std::max(absmax, std::fabs((double)x[i]));
        double s = documentedScale(f, absmax);
        for (size_t i = b; i < e; ++i) {
          double err = std::fabs(c.decoded[i] - (double)x[i]);
          ASSERT_LE(err, documentedBound(f, x[i], s) * (1 + 1e-5) + 1e-45)
              << "i=" << i << " x=" << x[i] << " d=" << c.decoded[i] << " block max " << absmax;
        }
      }
    });
  }
}

// ---- finding 8: int4 rounds x / s ---------------------------------------------------------------

TEST(EdgeValues, Int4RoundsTheQuotientToNearestEven) {
  // Block max 2.875: s = 2.875 / 7, and x = -1.4375 is -3.5 s. docs/codecs.md says
  // q = round(x / s) (float32 quotient, ties to even): -4. Rounding x * (1/s) instead gave
  // -3.4999998 -> -3.
  for (std::string spec : {"int4", "int4:block=256"}) {
    SCOPED_TRACE(spec);
    auto codec = codecOrDie(spec);
    size_t block = spec == "int4" ? 64 : 256;
    std::vector<float> x(8 * block + 5, 0.25f);
    for (size_t b = 0; b < x.size(); b += block) {
      x[b] = 2.875f;
      if (b + 2 < x.size()) x[b + 1] = -1.4375f;
      if (b + 2 < x.size()) x[b + 2] = 1.4375f;
    }
    // and random values: q must be the float32 quotient rounded to nearest even
    std::vector<float> r = randomValues(8 * block, 11);
    forEachIsa([&] {
      for (const auto* in : {&x, &r}) {
        Coded c = roundTrip(*codec, *in);
        for (size_t b = 0; b < in->size(); b += block) {
          size_t e = std::min(in->size(), b + block);
          float absmax = 0;
          for (size_t i = b; i < e; ++i) absmax = std::max(absmax, std::fabs((*in)[i]));
          float s = absmax / 7.0f;
          for (size_t i = b; i < e; ++i) {
            float q = s > 0 ? std::nearbyint((*in)[i] / s) : 0.0f;
            ASSERT_EQ(c.decoded[i], q * s) << "i=" << i << " x=" << (*in)[i];
          }
        }
      }
      Coded c = roundTrip(*codec, x);
      float s = 2.875f / 7.0f;
      EXPECT_EQ(c.decoded[1], -4.0f * s);
      EXPECT_EQ(c.decoded[2], 4.0f * s);
    });
  }
}

}  // namespace
}  // namespace terse::test
