// The low-bit formats (fp8 E4M3/E5M2, OCP MXFP8/MXFP4, int4): numeric.h's element formulas and
// the CPU kernels against golden vectors made by an independent implementation (ml_dtypes, see
// tests/compressors/golden/gen_lowbit.py), then the kernels' own invariants: error bounds per
// format and block size, residuals, decode = accumulate, portable = AVX2 bit for bit, and
// stochastic rounding without bias.
#include "terse/kernels/kernels.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

namespace terse::test {
namespace {

namespace cpu = kernels::cpu;
using kernels::LowbitFormat;
using kernels::Rounding;

const char* kElementsPath = TERSE_SOURCE_DIR "/tests/compressors/golden/lowbit_elements.txt";
const char* kBlocksPath = TERSE_SOURCE_DIR "/tests/compressors/golden/lowbit_blocks.txt";

template <typename T>
std::vector<T> typed(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) num::store(out.data(), i, v[i]);
  return out;
}

uint32_t hexU32(const std::string& s) { return static_cast<uint32_t>(std::stoul(s, nullptr, 16)); }

float decodeAs(const std::string& fmt, uint32_t code) {
  if (fmt == "e4m3") return num::fpDecode<num::E4M3>(code);
  if (fmt == "e5m2") return num::fpDecode<num::E5M2>(code);
  if (fmt == "e2m1") return num::fpDecode<num::E2M1>(code);
  return num::e8m0Decode(code);
}

uint32_t encodeAs(const std::string& fmt, float x) {
  if (fmt == "e4m3") return num::fpEncodeNearest<num::E4M3>(x);
  if (fmt == "e5m2") return num::fpEncodeNearest<num::E5M2>(x);
  return num::fpEncodeNearest<num::E2M1>(x);
}

TEST(LowbitGolden, ElementsMatchMlDtypesBitForBit) {
  std::ifstream f(kElementsPath);
  ASSERT_TRUE(f.good()) << kElementsPath;
  std::string line;
  std::map<std::string, size_t> decoded, encoded;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    std::string kind, fmt, a, b;
    is >> kind >> fmt >> a >> b;
    if (kind == "dec") {
      uint32_t got = num::floatBits(decodeAs(fmt, hexU32(a)));
      ASSERT_EQ(got, hexU32(b)) << line;
      ++decoded[fmt];
    } else {
      ASSERT_EQ(kind, "enc") << line;
      ASSERT_EQ(encodeAs(fmt, num::bitsFloat(hexU32(a))), hexU32(b)) << line;
      ++encoded[fmt];
    }
  }
  // Every code point, and a large sample of inputs per format.
  EXPECT_EQ(decoded["e4m3"], 256u);
  EXPECT_EQ(decoded["e5m2"], 256u);
  EXPECT_EQ(decoded["e2m1"], 16u);
  EXPECT_EQ(decoded["e8m0"], 256u);
  for (const char* fmt : {"e4m3", "e5m2", "e2m1"}) EXPECT_GT(encoded[fmt], 5000u) << fmt;
}

LowbitFormat formatOf(const std::string& kind) {
  if (kind == "fp8-e4m3") return LowbitFormat::kFp8E4M3;
  if (kind == "fp8-e5m2") return LowbitFormat::kFp8E5M2;
  if (kind == "mxfp8") return LowbitFormat::kMxfp8;
  if (kind == "mxfp4") return LowbitFormat::kMxfp4;
  return LowbitFormat::kInt4;
}

// Element i's code from the packed codes.
uint32_t codeAt(LowbitFormat f, const std::vector<uint8_t>& codes, size_t i) {
  if (kernels::lowbitIsNibbles(f)) return (codes[i / 2] >> (4 * (i & 1))) & 0xfu;
  return codes[i];
}

// Whole 32-element blocks (scale rule, scaling, saturation, NaN/Inf blocks, float32-subnormal
// maxima) against the generator's independent computation, through the kernels on both paths.
TEST(LowbitGolden, BlocksMatchReferenceBitForBit) {
  std::ifstream f(kBlocksPath);
  ASSERT_TRUE(f.good()) << kBlocksPath;
  std::string line;
  size_t blocks = 0;
  struct Together {
    std::vector<float> in;
    std::vector<uint32_t> scales, codes;
  };
  std::map<std::string, Together> together;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    std::string kind, scaleHex, tok;
    is >> kind >> scaleHex;
    std::vector<float> in(32);
    std::vector<uint32_t> want(32);
    for (auto& v : in) {
      is >> tok;
      v = num::bitsFloat(hexU32(tok));
    }
    for (auto& c : want) {
      is >> tok;
      c = hexU32(tok);
    }
    ASSERT_FALSE(is.fail()) << line;
    LowbitFormat fmt = formatOf(kind);
    forEachIsa([&] {
      uint32_t scale[1] = {0};
      std::vector<uint8_t> codes(32, 0);
      cpu::lowbitQuantize(fmt, in.data(), 32, 32, Rounding::kNearest, 0, 0, nullptr, scale,
                          codes.data());
      uint32_t gotScale = kernels::lowbitIsMx(fmt) ? (scale[0] & 0xffu) : scale[0];
      ASSERT_EQ(gotScale, hexU32(scaleHex)) << kind << " block " << blocks;
      for (size_t i = 0; i < 32; ++i)
        ASSERT_EQ(codeAt(fmt, codes, i), want[i])
            << kind << " block " << blocks << " element " << i;
    });
    ++blocks;
    auto& all = together[kind];
    all.in.insert(all.in.end(), in.begin(), in.end());
    all.scales.push_back(hexU32(scaleHex));
    all.codes.insert(all.codes.end(), want.begin(), want.end());
  }
  EXPECT_GE(blocks, 5u * 90u);
  // The same blocks of a format in one call: the kernels' multi-block steps (the AVX2 mx path
  // computes eight blocks' scales at once) must give every block the same bits.
  for (const auto& [kind, all] : together) {
    LowbitFormat fmt = formatOf(kind);
    size_t n = all.in.size(), nb = n / 32;
    forEachIsa([&] {
      std::vector<uint32_t> scales(nb, 0);
      std::vector<uint8_t> codes(kernels::lowbitCodeBytes(fmt, n), 0);
      cpu::lowbitQuantize(fmt, all.in.data(), n, 32, Rounding::kNearest, 0, 0, nullptr,
                          scales.data(), codes.data());
      for (size_t b = 0; b < nb; ++b) {
        uint32_t got = kernels::lowbitIsMx(fmt) ? reinterpret_cast<const uint8_t*>(scales.data())[b]
                                                : scales[b];
        ASSERT_EQ(got, all.scales[b]) << kind << " block " << b << " of " << nb;
      }
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(codeAt(fmt, codes, i), all.codes[i]) << kind << " element " << i;
    });
  }
}

// ---- kernel invariants ----------------------------------------------------------------------

struct FormatCase {
  LowbitFormat fmt;
  const char* name;
  size_t block;
};

const std::vector<FormatCase>& formatCases() {
  static const std::vector<FormatCase> cases = {
      {LowbitFormat::kFp8E4M3, "fp8-e4m3", 32},   {LowbitFormat::kFp8E4M3, "fp8-e4m3", 256},
      {LowbitFormat::kFp8E4M3, "fp8-e4m3", 4096}, {LowbitFormat::kFp8E5M2, "fp8-e5m2", 32},
      {LowbitFormat::kFp8E5M2, "fp8-e5m2", 256},  {LowbitFormat::kMxfp8, "mxfp8", 32},
      {LowbitFormat::kMxfp4, "mxfp4", 32},        {LowbitFormat::kInt4, "int4", 32},
      {LowbitFormat::kInt4, "int4", 64},          {LowbitFormat::kInt4, "int4", 1024},
  };
  return cases;
}

size_t scaleCount(size_t n, size_t block) { return (n + block - 1) / block; }

// The decoded scale of block b (float32 or E8M0).
float scaleValue(LowbitFormat f, const std::vector<uint32_t>& scales, size_t b) {
  if (kernels::lowbitIsMx(f))
    return num::e8m0Decode(reinterpret_cast<const uint8_t*>(scales.data())[b]);
  return num::bitsFloat(scales[b]);
}

// Nearest-even error bound of one element v in a block with decoded scale s and largest |v|
// amax: half a step of the element grid at |v|, plus what saturation clips.
//  fp8 E4M3: step 2^(e-3) for |v/s| in [2^e, 2^(e+1)), e >= -6 (2^-9 below): |err| <=
//    2^-4 |v| + 2^-10 s;  E5M2: 2^-3 |v| + 2^-17 s;  E2M1: 2^-2 |v| + 2^-2 s;
//  mx: the same with s = X, plus max(0, |v| - max*X) where the top binade clips;
//  int4: s / 2.
double nearestBound(LowbitFormat f, double v, double s) {
  double a = std::fabs(v);
  switch (f) {
    case LowbitFormat::kFp8E4M3: return std::ldexp(a, -4) + std::ldexp(s, -10);
    case LowbitFormat::kFp8E5M2: return std::ldexp(a, -3) + std::ldexp(s, -17);
    case LowbitFormat::kMxfp8:
      return std::ldexp(a, -4) + std::ldexp(s, -10) + std::max(0.0, a - 448.0 * s);
    case LowbitFormat::kMxfp4:
      return std::ldexp(a, -2) + std::ldexp(s, -2) + std::max(0.0, a - 6.0 * s);
    case LowbitFormat::kInt4: return s / 2;
  }
  return 0;
}

// Stochastic rounding moves to one of the two neighbours: less than one step (twice the bound
// above), and never more than saturation clips.
double stochasticBound(LowbitFormat f, double v, double s) { return 2 * nearestBound(f, v, s); }

struct Encoded {
  std::vector<uint32_t> scales;  // float32 bits, or E8M0 bytes packed 4 to a word
  std::vector<uint8_t> codes;
};

template <typename T>
Encoded encode(const FormatCase& c, const std::vector<T>& in, Rounding r, uint64_t seed,
               float* residual) {
  size_t n = in.size();
  Encoded e;
  e.scales.assign(scaleCount(n, c.block) + 1, 0);
  e.codes.assign(kernels::lowbitCodeBytes(c.fmt, n) + 1, 0);
  cpu::lowbitQuantize(c.fmt, in.data(), n, c.block, r, seed, 0, residual, e.scales.data(),
                      e.codes.data());
  return e;
}

TEST(KernelLowbit, RoundTripWithinBoundsForEveryFormatAndBlock) {
  for (const auto& c : formatCases()) {
    for (Rounding r : {Rounding::kNearest, Rounding::kStochastic}) {
      for (size_t n : {size_t{1}, size_t{31}, size_t{33}, size_t{257}, size_t{300007}}) {
        SCOPED_TRACE(std::string(c.name) + " block=" + std::to_string(c.block) + " n=" +
                     std::to_string(n) + (r == Rounding::kNearest ? " nearest" : " stochastic"));
        auto x = randomValues(n, 17 + n, 3.0f);
        Encoded e = encode(c, x, r, 5, nullptr);
        std::vector<float> out(n);
        cpu::lowbitDequantize(c.fmt, e.scales.data(), e.codes.data(), n, c.block, out.data());
        for (size_t i = 0; i < n; ++i) {
          double s = scaleValue(c.fmt, e.scales, i / c.block);
          double bound = (r == Rounding::kNearest ? nearestBound(c.fmt, x[i], s)
                                                  : stochasticBound(c.fmt, x[i], s)) *
                             (1 + 1e-6) +
                         1e-37;
          ASSERT_LE(std::fabs(out[i] - static_cast<double>(x[i])), bound)
              << "element " << i << " value " << x[i] << " decoded " << out[i] << " scale " << s;
        }
      }
    }
  }
}

// The bound is not vacuous: the mean error is of the size the format's step predicts, and
// smaller blocks (fp8, int4) are no worse than larger ones.
TEST(KernelLowbit, ErrorShrinksWithFinerFormats) {
  size_t n = 1 << 16;
  auto x = randomValues(n, 3, 1.0f);
  auto rms = [&](FormatCase c) {
    Encoded e = encode(c, x, Rounding::kNearest, 0, nullptr);
    std::vector<float> out(n);
    cpu::lowbitDequantize(c.fmt, e.scales.data(), e.codes.data(), n, c.block, out.data());
    double s2 = 0, x2 = 0;
    for (size_t i = 0; i < n; ++i) {
      s2 += (out[i] - x[i]) * double(out[i] - x[i]);
      x2 += double(x[i]) * x[i];
    }
    return std::sqrt(s2 / x2);
  };
  double e4m3 = rms({LowbitFormat::kFp8E4M3, "", 256}),
         e5m2 = rms({LowbitFormat::kFp8E5M2, "", 256});
  double mx8 = rms({LowbitFormat::kMxfp8, "", 32}), mx4 = rms({LowbitFormat::kMxfp4, "", 32});
  double i4a = rms({LowbitFormat::kInt4, "", 32}), i4b = rms({LowbitFormat::kInt4, "", 1024});
  EXPECT_GT(e4m3, 0.0);
  EXPECT_LT(e4m3, 0.04);  // 3 mantissa bits: relative rms about 2^-4 / sqrt(3)
  EXPECT_LT(e4m3, e5m2);
  EXPECT_LT(mx8, 0.05);
  EXPECT_LT(mx8, mx4);
  EXPECT_LT(i4a, i4b);
  EXPECT_LT(mx4, 0.25);
}

TEST(KernelLowbit, ResidualIsValueMinusDecodedAndDecodersAgree) {
  for (const auto& c : formatCases()) {
    for (Rounding r : {Rounding::kNearest, Rounding::kStochastic}) {
      SCOPED_TRACE(std::string(c.name) + " block=" + std::to_string(c.block));
      size_t n = 70001;
      auto x = randomValues(n, 9, 1.0f);
      auto prev = randomValues(n, 10, 0.01f);
      std::vector<float> res = prev;
      Encoded e = encode(c, x, r, 3, res.data());
      std::vector<float> out(n), acc(n, 0.5f);
      cpu::lowbitDequantize(c.fmt, e.scales.data(), e.codes.data(), n, c.block, out.data());
      cpu::lowbitDequantizeAccumulate(c.fmt, e.scales.data(), e.codes.data(), n, c.block,
                                      acc.data());
      for (size_t i = 0; i < n; ++i) {
        float v = x[i] + prev[i];
        ASSERT_EQ(num::floatBits(res[i]), num::floatBits(num::residualOf(v, out[i]))) << i;
        ASSERT_EQ(num::floatBits(acc[i]), num::floatBits(0.5f + out[i])) << i;
      }
    }
  }
}

TEST(KernelLowbit, PortableAndAvx2WriteTheSameBytes) {
  for (const auto& c : formatCases()) {
    for (Rounding r : {Rounding::kNearest, Rounding::kStochastic}) {
      size_t n = 200003;
      auto x = randomValues(n, 21, 100.0f);
      x[5] = std::nanf("");
      x[70000] = -INFINITY;
      x[9] = 1e-42f;
      std::vector<Encoded> runs;
      std::vector<std::vector<float>> residuals, outs;
      forEachIsa([&] {
        std::vector<float> res(n, 0.25f);
        runs.push_back(encode(c, typed<BFloat16>(x), r, 8, res.data()));
        residuals.push_back(res);
        std::vector<float> out(n);
        cpu::lowbitDequantize(c.fmt, runs.back().scales.data(), runs.back().codes.data(), n,
                              c.block, out.data());
        outs.push_back(out);
      });
      for (size_t k = 1; k < runs.size(); ++k) {
        EXPECT_EQ(runs[k].scales, runs[0].scales) << c.name;
        EXPECT_EQ(runs[k].codes, runs[0].codes) << c.name;
        EXPECT_EQ(0, std::memcmp(residuals[k].data(), residuals[0].data(), n * 4)) << c.name;
        EXPECT_EQ(0, std::memcmp(outs[k].data(), outs[0].data(), n * 4)) << c.name;
      }
    }
  }
}

// The element grid of a format at scale 1 (non-negative values, rising) and its largest value.
std::vector<float> gridOf(LowbitFormat f) {
  std::vector<float> grid;
  auto minifloat = [&](auto format) {
    using F = decltype(format);
    for (uint32_t c = 0; c <= F::kMaxCode; ++c) grid.push_back(num::fpDecode<F>(c));
  };
  switch (f) {
    case LowbitFormat::kFp8E4M3:
    case LowbitFormat::kMxfp8: minifloat(num::E4M3{}); break;
    case LowbitFormat::kFp8E5M2: minifloat(num::E5M2{}); break;
    case LowbitFormat::kMxfp4: minifloat(num::E2M1{}); break;
    case LowbitFormat::kInt4:
      for (int k = 0; k <= 7; ++k) grid.push_back(static_cast<float>(k));
      break;
  }
  return grid;
}

// Every rounding decision at its edge: blocks whose first element is the format's largest value
// (so the scale is 1), then the grid's values, the midpoints between neighbours (ties) and the
// floats just either side of each, the largest value's neighbours, both signs. The vector
// encoders decide ties their own way (the minifloats by a float addition that rounds to the
// element grid, the residual's decoded value from the rounded bits), so they
// must agree with the formulas here, code for code and residual bit for bit.
TEST(KernelLowbit, Avx2MatchesThePortablePathAtEveryRoundingEdge) {
  kernels::cpu::detail::setAvx2Enabled(true);
  if (!kernels::cpu::detail::useAvx2())
    GTEST_SKIP() << "this CPU has no AVX2: only the portable path exists";
  for (const auto& c : formatCases()) {
    SCOPED_TRACE(std::string(c.name) + " block=" + std::to_string(c.block));
    std::vector<float> grid = gridOf(c.fmt);
    std::vector<float> edges;
    for (size_t k = 0; k < grid.size(); ++k) {
      edges.push_back(grid[k]);
      if (k + 1 < grid.size()) {
        float mid = (grid[k] + grid[k + 1]) * 0.5f;
        edges.insert(edges.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)});
      }
    }
    edges.push_back(std::nextafter(grid.back(), 0.0f));
    std::vector<float> x;
    for (float sign : {1.0f, -1.0f}) {
      for (size_t i = 0; i < edges.size(); ++i) {
        if (x.size() % c.block == 0) x.push_back(grid.back());
        x.push_back(sign * edges[i]);
      }
    }
    while (x.size() % c.block != 0) x.push_back(0.0f);
    for (bool withResidual : {false, true}) {
      std::vector<Encoded> runs;
      std::vector<std::vector<float>> residuals;
      forEachIsa([&] {
        std::vector<float> res(x.size(), 0.0f);
        runs.push_back(encode(c, x, Rounding::kNearest, 0, withResidual ? res.data() : nullptr));
        residuals.push_back(res);
      });
      ASSERT_EQ(runs.size(), 2u);
      for (size_t b = 0; b < x.size() / c.block; ++b)
        ASSERT_EQ(scaleValue(c.fmt, runs[1].scales, b), 1.0f) << "block " << b;
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(codeAt(c.fmt, runs[1].codes, i), codeAt(c.fmt, runs[0].codes, i))
            << "element " << i << " = " << x[i] << (withResidual ? " with" : " without")
            << " a residual";
        ASSERT_EQ(num::floatBits(residuals[1][i]), num::floatBits(residuals[0][i]))
            << "element " << i << " = " << x[i];
      }
    }
  }
}

// Every float32 of magnitude below twice the format's largest value (a stride through them by
// default, every one with TERSE_EXHAUSTIVE=1: 6 min for the four), both signs, each in a block
// whose first element is the largest value (scale 1): the vector encoders' codes and residuals
// against the formulas'. The edge test above picks the decisions it knows; this one also
// covers those nobody thought of (subnormal float32 inputs, the underflow to code 0, every
// binade's carry). 2026-11-27: exhaustive for every minifloat format, no difference.
TEST(KernelLowbit, Avx2MatchesThePortablePathOverEveryFloatInRange) {
  kernels::cpu::detail::setAvx2Enabled(true);
  if (!kernels::cpu::detail::useAvx2())
    GTEST_SKIP() << "this CPU has no AVX2: only the portable path exists";
  const char* all = std::getenv("TERSE_EXHAUSTIVE");
  const uint32_t stride = all && std::string(all) == "1" ? 1 : 4099;  // a prime: every mantissa
  for (const auto& c : formatCases()) {
    if (c.fmt == LowbitFormat::kInt4 || c.block != 32) continue;  // int4 is rintf: KernelPaths
    SCOPED_TRACE(c.name);
    const float top = gridOf(c.fmt).back();
    const uint32_t end = num::floatBits(2.0f * top);
    const size_t kBlocks = 1 << 16, n = kBlocks * 32;
    std::vector<float> x(n);
    for (uint32_t sign : {0u, 0x80000000u}) {
      uint64_t next = 0;
      while (next < end) {
        for (size_t b = 0; b < kBlocks; ++b) {
          x[b * 32] = top;
          for (size_t k = 1; k < 32; ++k) {
            x[b * 32 + k] = num::bitsFloat(static_cast<uint32_t>(next < end ? next : 0) | sign);
            next += stride;
          }
        }
        for (bool withResidual : {false, true}) {
          std::vector<Encoded> runs;
          std::vector<std::vector<float>> residuals;
          forEachIsa([&] {
            std::vector<float> res(n, 0.0f);
            runs.push_back(
                encode(c, x, Rounding::kNearest, 0, withResidual ? res.data() : nullptr));
            residuals.push_back(std::move(res));
          });
          ASSERT_EQ(runs.size(), 2u);
          ASSERT_EQ(runs[1].scales, runs[0].scales);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(codeAt(c.fmt, runs[1].codes, i), codeAt(c.fmt, runs[0].codes, i))
                << "x = " << x[i] << " (0x" << std::hex << num::floatBits(x[i]) << ")"
                << (withResidual ? " with" : " without") << " a residual";
            ASSERT_EQ(num::floatBits(residuals[1][i]), num::floatBits(residuals[0][i]))
                << "x = " << x[i];
          }
        }
      }
    }
  }
}

// The AVX2 encoders take eight whole blocks at a time at block lengths 32 and 64 (256 runs the
// per-block path), their scales computed together in vectors, and a batch of tame blocks
// (simd_avx2.h) without the NaN and residual guards. Two layouts, with and without a residual:
// blocks that stress each lane's scale rule (zero, float32 subnormal maxima, FLT_MAX, Inf, NaN,
// a lone large value among small ones) mixed so that every lane meets each; and batches of
// ordinary blocks with exactly one bad block, in every lane and of every kind, so that both the
// tame body and the one lane that must switch it off are exercised.
TEST(KernelLowbit, EightBlockBatchesMatchThePortablePath) {
  kernels::cpu::detail::setAvx2Enabled(true);
  if (!kernels::cpu::detail::useAvx2())
    GTEST_SKIP() << "this CPU has no AVX2: only the portable path exists";
  const float kHostile[] = {0.0f,          1e-40f, 1.2e-38f, 3.4028235e38f, INFINITY,
                            std::nanf(""), 448.0f, 6.0f,     7.0f,          1.0f};
  const FormatCase kFormats[] = {{LowbitFormat::kFp8E4M3, "fp8-e4m3", 0},
                                 {LowbitFormat::kFp8E5M2, "fp8-e5m2", 0},
                                 {LowbitFormat::kMxfp8, "mxfp8", 0},
                                 {LowbitFormat::kMxfp4, "mxfp4", 0},
                                 {LowbitFormat::kInt4, "int4", 0}};
  for (const auto& c : kFormats) {
    for (size_t block : {size_t{32}, size_t{64}, size_t{256}}) {
      if (kernels::lowbitIsMx(c.fmt) && block != kernels::kMxBlock) continue;
      SCOPED_TRACE(std::string(c.name) + " block=" + std::to_string(block));
      for (int layout : {0, 1}) {
        SCOPED_TRACE(layout == 0 ? "mixed blocks" : "one bad block per batch");
        // mixed: 3 batches and a tail of 3 blocks, then a partial block; one bad block: a batch
        // per lane and kind (4 kinds) and a tame one, then the same tail
        size_t n = ((layout == 0 ? 3 : 8 * 4 + 1) * 8 + 3) * block + 5;
        auto x = randomValues(n, 41 + block, 2.0f);
        for (size_t b = 0; layout == 1 && b < 8 * 8 * 4; b += 8) {
          size_t t = b / 8, lane = t % 8, kind = t / 8;
          float* blk = x.data() + (b + lane) * block;
          switch (kind) {
            case 0:  // subnormal maximum with zeros: the inverse overflows, 0 * Inf must be 0
              for (size_t i = 0; i < block; ++i) blk[i] = i % 2 ? 1e-40f : 0.0f;
              break;
            case 1: blk[block / 3] = INFINITY; break;
            case 2: blk[block / 2] = std::nanf(""); break;
            default: blk[block - 1] = -3.4028235e38f; break;
          }
        }
        for (size_t b = 0; layout == 0 && b * block < n; ++b) {
          float* blk = x.data() + b * block;
          size_t len = std::min(block, n - b * block);
          switch (b % 11) {
            case 0: std::fill(blk, blk + len, 0.0f); break;
            case 1:
              for (size_t i = 0; i < len; ++i) blk[i] *= 1e-40f;
              break;  // subnormal maxima
            case 2: blk[len / 2] = kHostile[b % 10]; break;
            case 3: blk[0] = -3.4028235e38f; break;
            case 4: blk[len - 1] = -INFINITY; break;
            case 5: blk[1 % len] = std::nanf(""); break;
            case 6:
              for (size_t i = 0; i < len; ++i) blk[i] *= 1e-30f;
              blk[2 % len] = 1e30f;
              break;
            default: break;
          }
        }
        for (bool withResidual : {false, true}) {
          std::vector<Encoded> runs;
          std::vector<std::vector<float>> residuals;
          forEachIsa([&] {
            std::vector<float> res =
                withResidual ? randomValues(n, 7, 0.25f) : std::vector<float>(n, 0.0f);
            runs.push_back(encode({c.fmt, c.name, block}, x, Rounding::kNearest, 0,
                                  withResidual ? res.data() : nullptr));
            residuals.push_back(res);
          });
          ASSERT_EQ(runs.size(), 2u);
          EXPECT_EQ(runs[1].scales, runs[0].scales) << (withResidual ? "with" : "without");
          EXPECT_EQ(runs[1].codes, runs[0].codes) << (withResidual ? "with" : "without");
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(num::floatBits(residuals[1][i]), num::floatBits(residuals[0][i]))
                << "element " << i << " = " << x[i];
        }
      }
    }
  }
}

TEST(KernelLowbit, NonFiniteBlocksDecodeToNanOnly) {
  for (const auto& c : formatCases()) {
    size_t n = 3 * c.block;
    std::vector<float> x(n, 1.5f);
    x[c.block + 3] = INFINITY;
    x[2 * c.block + 1] = std::nanf("");
    Encoded e = encode(c, x, Rounding::kNearest, 0, nullptr);
    std::vector<float> out(n);
    cpu::lowbitDequantize(c.fmt, e.scales.data(), e.codes.data(), n, c.block, out.data());
    for (size_t i = 0; i < n; ++i) {
      if (i < c.block)
        ASSERT_TRUE(std::isfinite(out[i])) << c.name << " " << i;
      else
        ASSERT_TRUE(std::isnan(out[i])) << c.name << " " << i;
    }
  }
}

// Element value of a code (positive codes 0..maxCode are increasing in every format).
float decodeCode(LowbitFormat f, uint32_t c) {
  switch (f) {
    case LowbitFormat::kFp8E5M2: return num::fpDecode<num::E5M2>(c);
    case LowbitFormat::kMxfp4: return num::fpDecode<num::E2M1>(c);
    case LowbitFormat::kInt4: return num::int4Dequantize(c);
    default: return num::fpDecode<num::E4M3>(c);
  }
}
uint32_t maxCode(LowbitFormat f) {
  switch (f) {
    case LowbitFormat::kFp8E5M2: return num::E5M2::kMaxCode;
    case LowbitFormat::kMxfp4: return num::E2M1::kMaxCode;
    case LowbitFormat::kInt4: return 7;
    default: return num::E4M3::kMaxCode;
  }
}

// The decoders take any bytes off the wire, not only what the encoders write: every code
// (NaN and Inf codes, -0) under scales at the edges (E8M0 0, 2^120..2^127 and NaN; float32
// subnormal, largest, NaN), in blocks that exercise every step width and the scalar tail,
// decoded to float32, float16 and bfloat16 and accumulated onto +-0, NaN and Inf, must give
// the same bits on both paths and the formula's bits (decode(code) * scale [+ acc]). A NaN
// times a NaN (a NaN code in a NaN-scaled block) returns either operand's NaN, whichever the
// compiler put first, so NaNs compare as NaN, not by sign and payload.
TEST(KernelLowbit, DecodersAgreeOnEveryCodeAndEdgeScale) {
  const std::vector<uint32_t> mxScales = {0,   1,   2,   100, 119, 120, 121, 126, 127,
                                          128, 200, 246, 247, 248, 253, 254, 255};
  const std::vector<float> fpScales = {1.0f,    0.0f,    -0.0f,         1e-40f,  1.17549435e-38f,
                                       7.6e35f, 3.4e38f, std::nanf(""), 2.5e-3f, -3.0f};
  for (auto [fmt, name] : {std::pair{LowbitFormat::kFp8E4M3, "fp8-e4m3"},
                           {LowbitFormat::kFp8E5M2, "fp8-e5m2"},
                           {LowbitFormat::kMxfp8, "mxfp8"},
                           {LowbitFormat::kMxfp4, "mxfp4"},
                           {LowbitFormat::kInt4, "int4"}}) {
    bool mx = kernels::lowbitIsMx(fmt), nib = kernels::lowbitIsNibbles(fmt);
    for (size_t block : {size_t{32}, size_t{56}}) {
      if (mx && block != kernels::kMxBlock) continue;
      SCOPED_TRACE(std::string(name) + " block=" + std::to_string(block));
      size_t nScales = mx ? mxScales.size() : fpScales.size();
      size_t blocks = nScales * (nib ? 1 : 8);  // 8-bit codes: every scale meets every code
      size_t n = blocks * block - 3;            // a short last block: the scalar tail
      std::vector<uint32_t> scales(blocks);
      for (size_t b = 0; b < blocks; ++b)
        scales[b] = mx ? 0 : num::floatBits(fpScales[b % nScales]);
      if (mx) {
        auto* bytes = reinterpret_cast<uint8_t*>(scales.data());
        for (size_t b = 0; b < blocks; ++b) bytes[b] = static_cast<uint8_t>(mxScales[b % nScales]);
      }
      std::vector<uint8_t> codes(kernels::lowbitCodeBytes(fmt, n));
      // Every code in each 256 bytes, except that every other 256 bytes hold no NaN code (bits 2
      // and 6 cleared), so steps that skip NaN codes meet every scale too.
      for (size_t i = 0; i < codes.size(); ++i) {
        codes[i] = static_cast<uint8_t>(i * 7 + i / 256);
        if ((i / 256) & 1) codes[i] &= 0xbb;
      }
      const float accInit[] = {0.0f, -0.0f, 1.0f, -INFINITY, std::nanf(""), 3e38f, -1e-40f};
      std::vector<std::vector<uint8_t>> runs;
      forEachIsa([&] {
        std::vector<float> f32(n), acc(n);
        std::vector<Half> f16(n);
        std::vector<BFloat16> bf16(n);
        for (size_t i = 0; i < n; ++i) acc[i] = accInit[i % 7];
        cpu::lowbitDequantize(fmt, scales.data(), codes.data(), n, block, f32.data());
        cpu::lowbitDequantize(fmt, scales.data(), codes.data(), n, block, f16.data());
        cpu::lowbitDequantize(fmt, scales.data(), codes.data(), n, block, bf16.data());
        cpu::lowbitDequantizeAccumulate(fmt, scales.data(), codes.data(), n, block, acc.data());
        for (size_t i = 0; i < n; ++i) {
          float sv =
              mx ? num::e8m0Decode(reinterpret_cast<const uint8_t*>(scales.data())[i / block])
                 : num::bitsFloat(scales[i / block]);
          float want = decodeCode(fmt, codeAt(fmt, codes, i)) * sv;
          if (want == want) {  // NaN bits may come from either operand
            ASSERT_EQ(num::floatBits(f32[i]), num::floatBits(want)) << i;
            ASSERT_EQ(num::floatBits(acc[i]), num::floatBits(accInit[i % 7] + want)) << i;
          } else {
            ASSERT_TRUE(std::isnan(f32[i]) && std::isnan(acc[i])) << i;
          }
        }
        for (size_t i = 0; i < n; ++i) {
          if (std::isnan(f32[i])) f32[i] = std::nanf("");
          if (std::isnan(acc[i])) acc[i] = std::nanf("");
          if ((f16[i].bits & 0x7fffu) > 0x7c00u) f16[i].bits = 0x7e00u;
          if ((bf16[i].bits & 0x7fffu) > 0x7f80u) bf16[i].bits = 0x7fc0u;
        }
        std::vector<uint8_t> all(n * 12);
        std::memcpy(all.data(), f32.data(), n * 4);
        std::memcpy(all.data() + n * 4, acc.data(), n * 4);
        std::memcpy(all.data() + n * 8, f16.data(), n * 2);
        std::memcpy(all.data() + n * 10, bf16.data(), n * 2);
        runs.push_back(std::move(all));
      });
      for (size_t k = 1; k < runs.size(); ++k) {
        auto diff = std::mismatch(runs[k].begin(), runs[k].end(), runs[0].begin());
        EXPECT_TRUE(diff.first == runs[k].end())
            << "first difference at byte " << (diff.first - runs[k].begin()) << " of 12 x " << n;
      }
    }
  }
}

// Element 0 is the format's largest value, so the block scale is exactly 1 in every format;
// every other element sits 30% of the way from one representable value to the next. Nearest
// rounding is then biased (-0.3 step, always down), and stochastic rounding must average out:
// the mean error over many seeds is within 4.5 standard errors of zero for every element.
TEST(KernelLowbit, StochasticRoundingIsUnbiased) {
  for (const auto& c : formatCases()) {
    SCOPED_TRACE(std::string(c.name) + " block=" + std::to_string(c.block));
    size_t n = c.block;
    uint32_t top = maxCode(c.fmt);
    std::vector<float> x(n);
    x[0] = decodeCode(c.fmt, top);
    for (size_t i = 1; i < n; ++i) {
      uint32_t k = static_cast<uint32_t>(i % top);
      float lo = decodeCode(c.fmt, k), hi = decodeCode(c.fmt, k + 1);
      x[i] = (lo + 0.3f * (hi - lo)) * (i % 2 ? 1.0f : -1.0f);
    }
    const int kSeeds = c.block > 256 ? 1500 : 4000;
    std::vector<double> sum(n, 0), sum2(n, 0);
    for (int s = 0; s < kSeeds; ++s) {
      Encoded e = encode(c, x, Rounding::kStochastic, 1000 + s, nullptr);
      ASSERT_EQ(scaleValue(c.fmt, e.scales, 0), 1.0f);
      std::vector<float> out(n);
      cpu::lowbitDequantize(c.fmt, e.scales.data(), e.codes.data(), n, c.block, out.data());
      for (size_t i = 0; i < n; ++i) {
        double d = out[i] - double(x[i]);
        sum[i] += d;
        sum2[i] += d * d;
      }
    }
    Encoded nearest = encode(c, x, Rounding::kNearest, 0, nullptr);
    std::vector<float> near(n);
    cpu::lowbitDequantize(c.fmt, nearest.scales.data(), nearest.codes.data(), n, c.block,
                          near.data());
    for (size_t i = 1; i < n; ++i) {
      double mean = sum[i] / kSeeds;
      double var = sum2[i] / kSeeds - mean * mean;
      double se = std::sqrt(std::max(var, 0.0) / kSeeds);
      ASSERT_GT(se, 0.0) << "element " << i << " never moved";
      // 4.5 standard errors (p = 7e-6 per element). The seeds are fixed, so this is
      // deterministic; another seed set would trip some element of the ~6000 with p ~ 4%.
      ASSERT_LE(std::fabs(mean), 4.5 * se) << "element " << i << " value " << x[i];
      ASSERT_GT(std::fabs(near[i] - x[i]), 4.5 * se) << "nearest is biased, element " << i;
    }
  }
}

TEST(KernelLowbit, StochasticReplaysForSeedAndDiffersAcross) {
  FormatCase c{LowbitFormat::kMxfp4, "mxfp4", 32};
  auto x = randomValues(4096, 2, 1.0f);
  EXPECT_EQ(encode(c, x, Rounding::kStochastic, 1, nullptr).codes,
            encode(c, x, Rounding::kStochastic, 1, nullptr).codes);
  EXPECT_NE(encode(c, x, Rounding::kStochastic, 1, nullptr).codes,
            encode(c, x, Rounding::kStochastic, 2, nullptr).codes);
}

}  // namespace
}  // namespace terse::test
