// terse::kernels::cpu against plain scalar references (the CUDA tests compare cuda:: to cpu::,
// so these are what vouch for both). Sizes cross the multi-threading threshold.
#include "terse/kernels/kernels.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace terse::test {
namespace {

namespace cpu = kernels::cpu;
using kernels::Rounding;

const std::vector<size_t> kSizes = {0, 1, 31, 33, 255, 257, 4097, 300007};

template <typename T>
std::vector<T> typed(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) num::store(out.data(), i, v[i]);
  return out;
}

// ---- conversions against the compiler's own binary16 and an exact bfloat16 rounding ---------

#if defined(__FLT16_MANT_DIG__)  // the compiler has _Float16 (GCC 12, newer clang)
TEST(KernelNumeric, HalfToFloatMatchesCompilerForAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    _Float16 h;
    uint16_t bits = static_cast<uint16_t>(b);
    std::memcpy(&h, &bits, 2);
    float want = static_cast<float>(h);
    float got = num::halfBitsToFloat(bits);
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(got)) << b;
    else
      ASSERT_EQ(num::floatBits(got), num::floatBits(want)) << b;
  }
}

TEST(KernelNumeric, FloatToHalfMatchesCompilerExceptSaturation) {
  // Every 997th float32 bit pattern (about 4.3 million) plus the boundaries.
  auto check = [](uint32_t u) {
    float f = num::bitsFloat(u);
    uint16_t got = num::floatToHalfBits(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got & 0x7c00u, 0x7c00u);
      ASSERT_NE(got & 0x3ffu, 0u) << u;
      return;
    }
    _Float16 h = static_cast<_Float16>(f);  // IEEE round to nearest even, overflow -> inf
    uint16_t want;
    std::memcpy(&want, &h, 2);
    if (std::isfinite(f) && (want & 0x7fffu) == 0x7c00u) want = (want & 0x8000u) | 0x7bffu;
    ASSERT_EQ(got, want) << std::hex << u;
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997) check(static_cast<uint32_t>(u));
  for (uint32_t u : {0x477fefffu, 0x477ff000u, 0x477fffffu, 0x33000000u, 0x33000001u, 0x387fe000u,
                     0x38800000u, 0x7f800000u, 0xff800000u})
    check(u);
}

#else
TEST(KernelNumeric, HalfMatchesCompiler) { GTEST_SKIP() << "this compiler has no _Float16"; }
#endif

TEST(KernelNumeric, FloatToBf16RoundsToNearestEven) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 101) {
    float f = num::bitsFloat(static_cast<uint32_t>(u));
    uint16_t got = num::floatToBf16Bits(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(num::bf16BitsToFloat(got)));
      continue;
    }
    // Reference: the two bfloat16 neighbours, pick the nearer (even on ties), in double.
    uint16_t lo = static_cast<uint16_t>(u >> 16);
    double a = num::bf16BitsToFloat(lo);
    double b = num::bf16BitsToFloat(static_cast<uint16_t>(lo + 1));
    double da = std::fabs(f - a), db = std::isinf(b) && !std::isinf(f)
                                           ? std::fabs(std::fabs((double)f) - std::ldexp(1.0, 128))
                                           : std::fabs(f - b);
    uint16_t want = (da < db || (da == db && (lo & 1) == 0)) ? lo : static_cast<uint16_t>(lo + 1);
    if (std::isinf(f)) want = lo;
    ASSERT_EQ(got, want) << std::hex << u;
  }
}

// Every half pattern and a sweep of float patterns through the kernels (both paths) against
// the numeric.h formulas, bit for bit.
TEST(KernelConvert, BitPatternsMatchFormulas) {
  std::vector<Half> halves(65536);
  for (uint32_t b = 0; b < 65536; ++b) halves[b].bits = static_cast<uint16_t>(b);
  std::vector<BFloat16> bf(65536);
  for (uint32_t b = 0; b < 65536; ++b) bf[b].bits = static_cast<uint16_t>(b);
  std::vector<float> floats;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099)
    floats.push_back(num::bitsFloat(static_cast<uint32_t>(u)));
  for (uint32_t u : {0x477fefffu, 0x477ff000u, 0x477fffffu, 0x33000000u, 0x33000001u, 0x387fe000u,
                     0x38800000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00001u, 0x7f7fffffu,
                     0x7f7f8000u, 0x00000001u, 0x80000000u})
    floats.push_back(num::bitsFloat(u));
  forEachIsa([&] {
    std::vector<float> f(65536);
    cpu::convert(halves.data(), f.data(), 65536, 1.0f, nullptr);
    for (uint32_t b = 0; b < 65536; ++b)
      ASSERT_EQ(num::floatBits(f[b]), num::floatBits(num::halfBitsToFloat(halves[b].bits))) << b;
    cpu::convert(bf.data(), f.data(), 65536, 1.0f, nullptr);
    for (uint32_t b = 0; b < 65536; ++b)
      ASSERT_EQ(num::floatBits(f[b]), num::floatBits(num::bf16BitsToFloat(bf[b].bits))) << b;
    std::vector<Half> h(floats.size());
    std::vector<BFloat16> g(floats.size());
    cpu::convert(floats.data(), h.data(), floats.size(), 1.0f, nullptr);
    cpu::convert(floats.data(), g.data(), floats.size(), 1.0f, nullptr);
    for (size_t i = 0; i < floats.size(); ++i) {
      ASSERT_EQ(h[i].bits, num::floatToHalfBits(floats[i]))
          << std::hex << num::floatBits(floats[i]);
      ASSERT_EQ(g[i].bits, num::floatToBf16Bits(floats[i]))
          << std::hex << num::floatBits(floats[i]);
    }
    // Half <-> bfloat16 directly, every pattern.
    std::vector<BFloat16> hb(65536);
    cpu::convert(halves.data(), hb.data(), 65536, 1.0f, nullptr);
    for (uint32_t b = 0; b < 65536; ++b)
      ASSERT_EQ(hb[b].bits, num::floatToBf16Bits(num::halfBitsToFloat(halves[b].bits))) << b;
  });
}

// ---- convert / accumulate / scale -------------------------------------------------------------

template <typename In, typename Out>
void checkConvert() {
  for (size_t n : kSizes) {
    auto src = typed<In>(randomValues(n, n + 1));
    auto res = randomValues(n, n + 2, 0.01f);
    auto res0 = res;
    std::vector<Out> out(n + 1), plain(n + 1);
    cpu::convert(src.data(), out.data(), n, 0.5f, res.data());
    cpu::convert(src.data(), plain.data(), n, 1.0f, nullptr);
    for (size_t i = 0; i < n; ++i) {
      float v = num::load(src.data(), i) * 0.5f + res0[i];
      Out want[1];
      num::store(want, 0, v);
      ASSERT_EQ(std::memcmp(&out[i], want, sizeof(Out)), 0) << i;
      ASSERT_EQ(res[i], v - num::load(want, 0)) << i;
      num::store(want, 0, num::load(src.data(), i));
      ASSERT_EQ(std::memcmp(&plain[i], want, sizeof(Out)), 0) << i;
    }
  }
}

TEST(KernelConvert, AllTypePairsMatchScalar) {
  forEachIsa([&] {
    checkConvert<float, float>();
    checkConvert<float, Half>();
    checkConvert<float, BFloat16>();
    checkConvert<Half, float>();
    checkConvert<Half, Half>();
    checkConvert<Half, BFloat16>();
    checkConvert<BFloat16, float>();
    checkConvert<BFloat16, Half>();
    checkConvert<BFloat16, BFloat16>();
  });
}

template <typename In>
void checkAccumulate() {
  for (size_t n : kSizes) {
    auto src = typed<In>(randomValues(n, n + 3));
    auto acc = randomValues(n, n + 4);
    auto want = acc;
    for (size_t i = 0; i < n; ++i) want[i] += num::load(src.data(), i);
    cpu::accumulate(src.data(), acc.data(), n);
    ASSERT_EQ(acc, want) << n;
  }
}

TEST(KernelConvert, AccumulateAndScale) {
  forEachIsa([&] {
    checkAccumulate<float>();
    checkAccumulate<Half>();
    checkAccumulate<BFloat16>();
    auto v = randomValues(300007, 1);
    auto want = v;
    for (float& x : want) x *= 0.125f;
    cpu::scaleInPlace(v.data(), v.size(), 0.125f);
    EXPECT_EQ(v, want);
  });
}

// ---- int8 ------------------------------------------------------------------------------------

template <typename In>
void checkInt8(Rounding rounding) {
  for (size_t block : {32, 256}) {
    for (size_t n : kSizes) {
      SCOPED_TRACE("n=" + std::to_string(n) + " block=" + std::to_string(block));
      auto src = typed<In>(randomValues(n, n + 7));
      auto res = randomValues(n, n + 8, 0.01f);
      auto res0 = res;
      size_t nb = (n + block - 1) / block;
      std::vector<float> scales(nb);
      std::vector<int8_t> q(n);
      cpu::int8Quantize(src.data(), n, block, rounding, 42, 1000, res.data(), scales.data(),
                        q.data());
      for (size_t b = 0; b < nb; ++b) {
        size_t s = b * block, e = std::min(n, s + block);
        float absmax = 0;
        for (size_t i = s; i < e; ++i)
          absmax = std::max(absmax, std::fabs(num::load(src.data(), i) + res0[i]));
        ASSERT_EQ(scales[b], absmax / 127.0f) << b;
        float inv = absmax > 0 ? 1.0f / scales[b] : 0.0f;
        for (size_t i = s; i < e; ++i) {
          float v = num::load(src.data(), i) + res0[i];
          float t = v * inv;
          int want = rounding == Rounding::kNearest
                         ? static_cast<int>(std::nearbyint(t))
                         : static_cast<int>(std::floor(t + num::uniform01(42, 1000 + i)));
          want = std::clamp(want, -127, 127);
          ASSERT_EQ(q[i], want) << i;
          ASSERT_EQ(res[i], v - static_cast<float>(want) * scales[b]) << i;
        }
      }
      // Dequantize, into each type and accumulating.
      std::vector<float> out(n);
      cpu::int8Dequantize(scales.data(), q.data(), n, block, out.data());
      auto acc = randomValues(n, 3);
      auto acc0 = acc;
      cpu::int8DequantizeAccumulate(scales.data(), q.data(), n, block, acc.data());
      std::vector<Half> outH(n);
      cpu::int8Dequantize(scales.data(), q.data(), n, block, outH.data());
      for (size_t i = 0; i < n; ++i) {
        float want = static_cast<float>(q[i]) * scales[i / block];
        ASSERT_EQ(out[i], want);
        ASSERT_EQ(acc[i], acc0[i] + want);
        ASSERT_EQ(outH[i].bits, num::floatToHalfBits(want));
      }
    }
  }
}

TEST(KernelInt8, NearestMatchesScalar) {
  forEachIsa([&] {
    checkInt8<float>(Rounding::kNearest);
    checkInt8<Half>(Rounding::kNearest);
    checkInt8<BFloat16>(Rounding::kNearest);
  });
}
TEST(KernelInt8, StochasticMatchesScalar) {
  forEachIsa([&] {
    checkInt8<float>(Rounding::kStochastic);
    checkInt8<BFloat16>(Rounding::kStochastic);
  });
}

// ---- onebit ----------------------------------------------------------------------------------

template <typename In>
void checkOnebit() {
  for (size_t block : {32, 2048}) {
    for (size_t n : kSizes) {
      SCOPED_TRACE("n=" + std::to_string(n) + " block=" + std::to_string(block));
      auto src = typed<In>(randomValues(n, n + 9));
      auto res = randomValues(n, n + 10, 0.01f);
      auto res0 = res;
      size_t nb = (n + block - 1) / block, nw = (n + 31) / 32;
      std::vector<float> scales(nb);
      std::vector<uint32_t> bits(nw, 0xdeadbeef);
      cpu::onebitCompress(src.data(), n, block, res.data(), scales.data(), bits.data());
      for (size_t b = 0; b < nb; ++b) {
        size_t s = b * block, e = std::min(n, s + block);
        double sum = 0;
        for (size_t i = s; i < e; ++i)
          sum += std::fabs((double)(num::load(src.data(), i) + res0[i]));
        ASSERT_NEAR(scales[b], sum / (e - s), 1e-5 * sum / (e - s)) << b;
      }
      for (size_t i = 0; i < n; ++i) {
        float v = num::load(src.data(), i) + res0[i];
        bool bit = (bits[i / 32] >> (i % 32)) & 1;
        ASSERT_EQ(bit, v >= 0) << i;
        float dec = bit ? scales[i / block] : -scales[i / block];
        ASSERT_EQ(res[i], v - dec) << i;
      }
      if (n % 32) {
        ASSERT_EQ(bits[nw - 1] >> (n % 32), 0u) << "unused high bits must be zero";
      }
      std::vector<float> out(n);
      std::vector<BFloat16> outB(n);
      auto acc = randomValues(n, 5);
      auto acc0 = acc;
      cpu::onebitDecompress(scales.data(), bits.data(), n, block, out.data());
      cpu::onebitDecompress(scales.data(), bits.data(), n, block, outB.data());
      cpu::onebitDecompressAccumulate(scales.data(), bits.data(), n, block, acc.data());
      for (size_t i = 0; i < n; ++i) {
        float want = ((bits[i / 32] >> (i % 32)) & 1) ? scales[i / block] : -scales[i / block];
        ASSERT_EQ(out[i], want);
        ASSERT_EQ(outB[i].bits, num::floatToBf16Bits(want));
        ASSERT_EQ(acc[i], acc0[i] + want);
      }
    }
  }
}

TEST(KernelOnebit, MatchesScalar) {
  forEachIsa([&] {
    checkOnebit<float>();
    checkOnebit<Half>();
    checkOnebit<BFloat16>();
  });
}

// ---- topk ------------------------------------------------------------------------------------

// Brute force: stable sort by magnitude key (NaN largest), lower index first on ties.
std::vector<uint32_t> bruteTopk(const std::vector<float>& v, size_t k) {
  std::vector<uint32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return num::magnitudeKey(v[a]) > num::magnitudeKey(v[b]);
  });
  order.resize(std::min(k, v.size()));
  std::sort(order.begin(), order.end());
  return order;
}

template <typename In>
void checkTopk(const std::vector<float>& raw, size_t k, bool withResidual) {
  size_t n = raw.size();
  auto src = typed<In>(raw);
  auto res = withResidual ? randomValues(n, n + 11, 0.01f) : std::vector<float>();
  auto res0 = res;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = withResidual ? num::load(src.data(), i) + res0[i] : num::load(src.data(), i);
  auto want = bruteTopk(v, k);
  std::vector<uint8_t> scratch(cpu::topkScratchBytes(n));
  std::vector<uint32_t> idx(want.size() + 1, 0xffffffffu);
  std::vector<float> val(want.size() + 1, -1.0f);
  size_t got = cpu::topkCompress(src.data(), n, k, withResidual ? res.data() : nullptr,
                                 scratch.data(), idx.data(), val.data());
  ASSERT_EQ(got, want.size());
  ASSERT_EQ(idx[got], 0xffffffffu) << "wrote past k";
  idx.resize(got);
  ASSERT_EQ(idx, want);
  std::vector<bool> sel(n, false);
  for (size_t j = 0; j < got; ++j) {
    sel[idx[j]] = true;
    ASSERT_EQ(num::floatBits(val[j]), num::floatBits(v[idx[j]])) << j;
  }
  if (withResidual) {
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(res[i], sel[i] ? 0.0f : v[i]) << i;
  }
}

TEST(KernelTopk, MatchesBruteForce) {
  forEachIsa([&] {
    for (size_t n : kSizes) {
      for (size_t k : {size_t{0}, size_t{1}, n / 100 + 1, n / 3, n, n + 5}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
        auto raw = randomValues(n, n * 7 + k);
        checkTopk<float>(raw, k, false);
        checkTopk<float>(raw, k, true);
        checkTopk<Half>(raw, k, true);
        checkTopk<BFloat16>(raw, k, false);
      }
    }
  });
}

TEST(KernelTopk, TiesTakeLowerIndicesAcrossThreads) {
  forEachIsa([&] {
    // Many equal magnitudes spread over the whole range, so the cut falls inside a run of ties
    // that spans thread pieces.
    size_t n = 400000;
    std::vector<float> raw(n);
    for (size_t i = 0; i < n; ++i) raw[i] = (i % 7 == 0) ? ((i & 1) ? -2.0f : 2.0f) : 1.0f;
    for (size_t k : {size_t{1000}, size_t{57143}, size_t{57144}, size_t{60000}, size_t{399999}}) {
      SCOPED_TRACE(k);
      checkTopk<float>(raw, k, true);
    }
    std::vector<float> zeros(n, 0.0f);
    checkTopk<float>(zeros, 12345, true);
  });
}

TEST(KernelTopk, UnrepresentativeSampleFallsBackExactly) {
  // The sampled fast path looks at every 64th element here: make those the largest, so its
  // guessed bound keeps fewer than k elements and the exact radix path has to take over.
  size_t n = size_t{1} << 20;
  std::vector<float> raw(n);
  for (size_t i = 0; i < n; ++i)
    raw[i] = i % 64 == 0 ? 10.0f : (i % 7 == 3 ? -5.0f : 1.0f + i * 1e-7f);
  forEachIsa([&] {
    checkTopk<float>(raw, 20000, true);
    checkTopk<float>(raw, 16384, false);
    checkTopk<float>(raw, 16385, true);
  });
}

TEST(KernelTopk, NaNAndInfAreSelectedFirst) {
  forEachIsa([&] {
    auto raw = randomValues(1000, 77);
    raw[500] = std::numeric_limits<float>::quiet_NaN();
    raw[10] = -std::numeric_limits<float>::infinity();
    raw[999] = std::numeric_limits<float>::infinity();
    checkTopk<float>(raw, 3, false);
    checkTopk<float>(raw, 20, true);
  });
}

TEST(KernelTopk, DecodersRejectBadIndicesWithoutWriting) {
  size_t n = 100;
  std::vector<float> vals = {1, 2, 3};
  std::vector<float> out(n, 7.0f), acc(n, 7.0f);
  for (std::vector<uint32_t> bad :
       {std::vector<uint32_t>{1, 1, 2}, {5, 3, 9}, {1, 2, 100}, {0, 2, 0xffffffffu}}) {
    EXPECT_FALSE(cpu::topkDecompress(bad.data(), vals.data(), 3, n, out.data()));
    EXPECT_FALSE(cpu::topkDecompressAccumulate(bad.data(), vals.data(), 3, n, acc.data()));
    EXPECT_EQ(out, std::vector<float>(n, 7.0f));
    EXPECT_EQ(acc, std::vector<float>(n, 7.0f));
  }
  std::vector<uint32_t> good = {0, 50, 99};
  ASSERT_TRUE(cpu::topkDecompress(good.data(), vals.data(), 3, n, out.data()));
  ASSERT_TRUE(cpu::topkDecompressAccumulate(good.data(), vals.data(), 3, n, acc.data()));
  for (size_t i = 0; i < n; ++i) {
    float want = i == 0 ? 1 : i == 50 ? 2 : i == 99 ? 3 : 0;
    EXPECT_EQ(out[i], want);
    EXPECT_EQ(acc[i], 7.0f + want);
  }
}

}  // namespace
}  // namespace terse::test

namespace terse::test {
namespace {

// The portable and AVX2 paths must agree bit for bit on everything they write (the GPU tests
// compare against whichever path this machine runs).
TEST(KernelPaths, PortableAndAvx2AgreeBitForBit) {
  kernels::cpu::detail::setAvx2Enabled(true);
  if (!kernels::cpu::detail::useAvx2()) GTEST_SKIP() << "this CPU has no AVX2/F16C";
  auto raw = randomValues(200003, 5);
  raw[17] = std::numeric_limits<float>::quiet_NaN();
  raw[70001] = std::numeric_limits<float>::infinity();
  raw[90000] = 1e6f;
  raw[90001] = -0.0f;
  auto res0 = randomValues(raw.size(), 6, 0.01f);
  size_t n = raw.size();
  struct Out {
    std::vector<uint8_t> bytes;
    std::vector<float> res;
  };
  auto runBoth = [&](auto fn) {
    Out o[2];
    for (int p = 0; p < 2; ++p) {
      kernels::cpu::detail::setAvx2Enabled(p == 1);
      o[p].res = res0;
      o[p].bytes = fn(o[p].res.data());
    }
    kernels::cpu::detail::setAvx2Enabled(true);
    EXPECT_EQ(o[0].bytes, o[1].bytes);
    ASSERT_EQ(o[0].res.size(), o[1].res.size());
    for (size_t i = 0; i < o[0].res.size(); ++i)
      ASSERT_EQ(num::floatBits(o[0].res[i]), num::floatBits(o[1].res[i]))
          << "residual " << i << ": " << o[0].res[i] << " vs " << o[1].res[i];
  };
  // The bytes of the vectors, one after the other.
  auto asBytes = [](const auto&... vs) {
    std::vector<uint8_t> b;
    auto append = [&b](const auto& v) {
      auto* p = reinterpret_cast<const uint8_t*>(v.data());
      b.insert(b.end(), p, p + v.size() * sizeof(v[0]));
    };
    (append(vs), ...);
    return b;
  };
  // int8 decoded into every output type and accumulated, as bytes.
  auto int8DequantizeAll = [&](const std::vector<float>& scales, const std::vector<int8_t>& q,
                               size_t block) {
    size_t m = q.size();
    std::vector<float> out(m), acc = randomValues(m, 9);
    std::vector<Half> outH(m);
    std::vector<BFloat16> outB(m);
    cpu::int8Dequantize(scales.data(), q.data(), m, block, out.data());
    cpu::int8Dequantize(scales.data(), q.data(), m, block, outH.data());
    cpu::int8Dequantize(scales.data(), q.data(), m, block, outB.data());
    cpu::int8DequantizeAccumulate(scales.data(), q.data(), m, block, acc.data());
    return asBytes(out, outH, outB, acc);
  };
  auto h = typed<Half>(raw);
  for (size_t block : {32, 256, 2048}) {
    SCOPED_TRACE(block);
    for (Rounding rounding : {Rounding::kNearest, Rounding::kStochastic})
      runBoth([&](float* res) {
        std::vector<float> scales((n + block - 1) / block);
        std::vector<int8_t> q(n);
        cpu::int8Quantize(h.data(), n, block, rounding, 77, 5, res, scales.data(), q.data());
        return asBytes(scales, q, int8DequantizeAll(scales, q, block));
      });
    // float32 blocks at the top of the range, where a decoded value can round past FLT_MAX and
    // the residual must become 0, next to blocks just under and over kTameBlockMaxKey
    // (2^121), where the AVX2 path stops testing the residual for finiteness, and blocks of
    // subnormals, whose inverse scale is Inf (0 * Inf must still encode as 0).
    std::vector<float> big = raw;
    for (size_t i = 0; i < n; ++i) {
      size_t b = i / block;
      if (b % 5 == 1) big[i] *= 3.4028235e38f / 4;
      if (b % 5 == 2) big[i] *= 1.0e36f;  // randomValues reach a few units: both sides of 2^121
      if (b % 5 == 3 && i % block == 0) big[i] = -3.4028235e38f;
      if (b % 5 == 4) big[i] *= 1e-42f;  // subnormal maxima: inverse scales past FLT_MAX
    }
    // with a residual, and without one, which would lift the subnormal blocks out of range
    for (bool withResidual : {true, false})
      runBoth([&](float* res) {
        std::vector<float> scales((n + block - 1) / block);
        std::vector<int8_t> q(n);
        cpu::int8Quantize(big.data(), n, block, Rounding::kNearest, 77, 5,
                          withResidual ? res : nullptr, scales.data(), q.data());
        // decoded values near FLT_MAX overflow Half and BFloat16 to Inf on both paths alike
        return asBytes(scales, q, int8DequantizeAll(scales, q, block));
      });
    runBoth([&](float* res) {
      std::vector<float> scales((n + block - 1) / block);
      std::vector<uint32_t> bits((n + 31) / 32);
      cpu::onebitCompress(raw.data(), n, block, res, scales.data(), bits.data());
      std::vector<BFloat16> out(n);
      cpu::onebitDecompress(scales.data(), bits.data(), n, block, out.data());
      return asBytes(scales, bits, out);
    });
  }
  runBoth([&](float* res) {
    std::vector<Half> out(n);
    cpu::convert(raw.data(), out.data(), n, 0.5f, res);
    return asBytes(out);
  });
}

}  // namespace
}  // namespace terse::test
