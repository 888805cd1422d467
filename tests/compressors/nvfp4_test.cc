// nvfp4 against a reference written here from the format's definition (NVFP4 as NVIDIA and
// TransformerEngine define it; docs/codecs.md states terse's rules): element values and scale
// values come from the bit layouts, rounding from a search for the nearest value, not from
// numeric.h.
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace terse::test {
namespace {

// E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; no Inf or NaN.
float e2m1Value(uint32_t code) {
  static const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = kMag[code & 7u];
  return (code & 8u) ? -v : v;
}

// E4M3 (positive codes 0..126; 127 is NaN): 4 exponent bits (bias 7), 3 mantissa bits.
float e4m3Value(uint32_t code) {
  if (code == 0x7fu) return std::numeric_limits<float>::quiet_NaN();
  uint32_t e = code >> 3, m = code & 7u;
  return e == 0 ? std::ldexp(static_cast<float>(m), -9)
                : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, static_cast<int>(e) - 7);
}

// The code of [0, top] nearest to a (ties to the even code), by search.
template <typename ValueOf>
uint32_t nearestCode(float a, uint32_t top, ValueOf value) {
  uint32_t best = 0;
  for (uint32_t c = 1; c <= top; ++c) {
    float d = std::fabs(value(c) - a), bd = std::fabs(value(best) - a);
    if (d < bd || (d == bd && (c & 1u) == 0)) best = c;
  }
  return best;
}

// Reference decode(encode(v)) with nearest rounding, element by element.
std::vector<float> reference(const std::vector<float>& v, float* tensorScaleOut) {
  float amax = 0;
  for (float x : v)
    if (std::isfinite(x)) amax = std::max(amax, std::fabs(x));
  // T = amax / (448 * 6), at least float32's smallest normal; 0 for an all-zero message.
  float t = amax == 0 ? 0.0f : std::max(amax / 2688.0f, std::numeric_limits<float>::min());
  *tensorScaleOut = t;
  std::vector<float> out(v.size());
  for (size_t s = 0; s < v.size(); s += 16) {
    size_t end = std::min(v.size(), s + 16);
    float bmax = 0;
    bool finite = true;
    for (size_t i = s; i < end; ++i) {
      finite &= std::isfinite(v[i]);
      bmax = std::max(bmax, std::fabs(v[i]));
    }
    uint32_t scaleCode =
        !finite ? 0x7fu
        : (bmax == 0 || t == 0)
            ? 0u
            : nearestCode(std::min(bmax / (6.0f * t), 448.0f), 126u, e4m3Value);
    float scale = e4m3Value(scaleCode) * t;
    float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (size_t i = s; i < end; ++i) {
      float x = v[i] * inv;
      if (std::isnan(x)) x = 0;
      float a = std::min(std::fabs(x), 6.0f);
      uint32_t code = nearestCode(a, 7u, e2m1Value) | (std::signbit(x) ? 8u : 0u);
      out[i] = e2m1Value(code) * scale;
    }
  }
  return out;
}

void expectSameBits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    EXPECT_EQ(a, b) << "element " << i << ": got " << got[i] << ", reference " << want[i];
  }
}

std::vector<float> roundTrip(const Codec& c, const std::vector<float>& x, WireBuffer& w) {
  auto r = c.compress(x.data(), DataType::kFloat32, x.size(), nullptr, w.data(), w.capacity());
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  w.bytes = r.isOk() ? *r : 0;
  std::vector<float> out(x.size());
  Status s = c.decompress(w.data(), w.bytes, out.data(), DataType::kFloat32, x.size());
  EXPECT_TRUE(s.isOk()) << s.toString();
  return out;
}

TEST(Nvfp4, MatchesTheReferenceAndTheLayout) {
  auto codec = codecOrDie("nvfp4");
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{17}, size_t{1001}, size_t{4096},
                   size_t{200001}}) {  // the last in parallel pieces
    SCOPED_TRACE(n);
    std::vector<float> x = randomValues(n, 7 + n, 3.0f);
    // A block far below the message's largest (its scale code underflows or is subnormal).
    for (size_t i = 0; i < 16 && 32 + i < n; ++i) x[32 + i] *= 1e-5f;
    WireBuffer w(codec->maxWireBytes(n));
    std::vector<float> got = roundTrip(*codec, x, w);
    float t = 0;
    expectSameBits(got, reference(x, &t));
    // payload: float32 scale, ceil(n/16) E4M3 bytes padded to 4, ceil(n/2) nibble bytes padded
    size_t scales = (n + 15) / 16, codes = (n + 1) / 2;
    EXPECT_EQ(w.bytes, 40 + 4 + (scales + 3) / 4 * 4 + (codes + 3) / 4 * 4);
    EXPECT_EQ(w.bytes, codec->maxWireBytes(n));
    float wireT;
    std::memcpy(&wireT, w.u8() + 40, 4);
    EXPECT_EQ(wireT, t);
    EXPECT_EQ(w.u8()[5], 10);  // codec id
  }
}

TEST(Nvfp4, ANonFiniteBlockDecodesToNanAndLeavesTheOthers) {
  auto codec = codecOrDie("nvfp4");
  std::vector<float> x = randomValues(64, 3, 1.0f);
  x[20] = std::numeric_limits<float>::infinity();
  x[50] = std::numeric_limits<float>::quiet_NaN();
  WireBuffer w(codec->maxWireBytes(x.size()));
  std::vector<float> got = roundTrip(*codec, x, w);
  float t = 0;
  std::vector<float> want = reference(x, &t);
  for (size_t i = 16; i < 32; ++i) EXPECT_TRUE(std::isnan(got[i])) << i;
  for (size_t i = 48; i < 64; ++i) EXPECT_TRUE(std::isnan(got[i])) << i;
  expectSameBits(got, want);
}

TEST(Nvfp4, ErrorFeedbackKeepsWhatWasNotSent) {
  auto codec = codecOrDie("nvfp4:round=stochastic,seed=5");
  std::vector<float> x = randomValues(333, 11, 2.0f), residual(333, 0.0f);
  for (size_t i = 0; i < residual.size(); ++i) residual[i] = 0.01f * static_cast<float>(i % 7);
  std::vector<float> v(x.size());
  for (size_t i = 0; i < x.size(); ++i) v[i] = x[i] + residual[i];
  WireBuffer w(codec->maxWireBytes(x.size()));
  auto r = codec->compress(x.data(), DataType::kFloat32, x.size(), residual.data(), w.data(),
                           w.capacity());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  std::vector<float> sent(x.size(), 0.0f);
  ASSERT_TRUE(codec->decompressAccumulate(w.data(), *r, sent.data(), x.size()).isOk());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(sent[i] + residual[i], v[i], 1e-6f * (1 + std::fabs(v[i]))) << i;
}

TEST(Nvfp4, SpecAndMismatchedDecoders) {
  EXPECT_EQ(codecOrDie("nvfp4")->spec(), "nvfp4:round=nearest,seed=0");
  EXPECT_EQ(codecOrDie("nvfp4:seed=3,round=stochastic")->spec(), "nvfp4:round=stochastic,seed=3");
  EXPECT_STREQ(codecName(CodecId::kNvfp4), "nvfp4");
  EXPECT_TRUE(codecOrDie("nvfp4")->wantsErrorFeedback());
  auto bad = makeCodec("nvfp4:block=32");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("always 16 elements"), std::string::npos)
      << bad.status().message();
  // A message of the stochastic codec is refused by the nearest one, naming both.
  std::vector<float> x = randomValues(40, 1);
  auto st = codecOrDie("nvfp4:round=stochastic");
  WireBuffer w(st->maxWireBytes(x.size()));
  auto r = st->compress(x.data(), DataType::kFloat32, x.size(), nullptr, w.data(), w.capacity());
  ASSERT_TRUE(r.isOk());
  std::vector<float> out(x.size());
  Status s = codecOrDie("nvfp4")->decompress(w.data(), *r, out.data(), DataType::kFloat32,
                                              x.size());
  EXPECT_EQ(s.code(), StatusCode::kInvalidUsage);
  EXPECT_NE(s.message().find("stochastic"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace terse::test
