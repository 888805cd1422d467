// Golden wire vectors: fixed small inputs must produce exactly the bytes checked in under
// tests/compressors/golden/wire_v1.txt, and those bytes must keep decoding. A deliberate
// wire-format change bumps the version and regenerates the file (see docs/wire-format.md, "Golden
// vectors").
#include "test_util.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace terse::test {
namespace {

struct GoldenCase {
  std::string spec;
  DataType dt;
  size_t n;
  float scale;
  uint64_t nonce;
};

const std::vector<GoldenCase>& goldenCases() {
  static const std::vector<GoldenCase> cases = {
      {"none", DataType::kFloat32, 5, 1.0f, 0},
      {"none", DataType::kBFloat16, 5, 1.0f, 0},
      {"fp16", DataType::kFloat32, 9, 1.0f, 0},
      {"fp16", DataType::kFloat32, 9, 0.5f, 0},
      {"bf16", DataType::kFloat16, 9, 1.0f, 0},
      {"int8:block=32", DataType::kFloat32, 40, 1.0f, 0},
      {"int8:block=32,round=stochastic,seed=3", DataType::kFloat32, 40, 1.0f, 7},
      {"onebit:block=32", DataType::kFloat32, 40, 1.0f, 0},
      {"topk:ratio=0.25", DataType::kFloat32, 16, 1.0f, 0},
      {"fp8:format=e4m3,block=32", DataType::kFloat32, 40, 1.0f, 0},
      {"fp8:format=e5m2,block=32", DataType::kBFloat16, 40, 1.0f, 0},
      {"fp8:block=32,round=stochastic,seed=3", DataType::kFloat32, 40, 1.0f, 7},
      {"mxfp8", DataType::kFloat32, 40, 1.0f, 0},
      {"mxfp4", DataType::kFloat16, 41, 1.0f, 0},
      {"mxfp4:round=stochastic,seed=3", DataType::kFloat32, 40, 1.0f, 7},
      {"int4:block=32", DataType::kFloat32, 41, 0.5f, 0},
      {"nvfp4", DataType::kFloat32, 41, 1.0f, 0},
      {"nvfp4:round=stochastic,seed=3", DataType::kFloat16, 40, 0.5f, 7},
  };
  return cases;
}

// Exactly representable inputs in every type, so the vectors do not depend on the platform.
std::vector<float> goldenInput(size_t n) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(static_cast<int>(i * 37 % 41) - 20) / 8.0f;
  return x;
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

std::string caseName(const GoldenCase& c) {
  std::ostringstream os;
  os << c.spec << " " << typeName(c.dt) << " n=" << c.n << " scale=" << c.scale
     << " nonce=" << c.nonce;
  return os.str();
}

std::vector<uint8_t> encodeCase(const GoldenCase& c) {
  auto codec = codecOrDie(c.spec);
  auto in = TypedBuffer::fromFloat(c.dt, goldenInput(c.n));
  WireBuffer w(codec->maxWireBytes(c.n));
  CodecCall call;
  call.scale = c.scale;
  call.nonce = c.nonce;
  auto r = codec->compress(in.data(), c.dt, c.n, nullptr, w.data(), w.capacity(), call);
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  return std::vector<uint8_t>(w.u8(), w.u8() + (r.isOk() ? *r : 0));
}

const char* kGoldenPath = TERSE_SOURCE_DIR "/tests/compressors/golden/wire_v1.txt";

TEST(Golden, HeaderLayoutIsAsDocumented) {
  auto bytes = encodeCase({"int8:block=32", DataType::kBFloat16, 40, 1.0f, 0});
  ASSERT_GE(bytes.size(), 40u);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "TRSE");
  EXPECT_EQ(bytes[4], 1);  // version
  EXPECT_EQ(bytes[5], 3);  // codec id int8
  EXPECT_EQ(bytes[6], 2);  // bfloat16
  EXPECT_EQ(bytes[7], 0);  // flags
  uint64_t count = 0, payload = 0;
  for (int i = 7; i >= 0; --i) count = count << 8 | bytes[8 + i];
  for (int i = 7; i >= 0; --i) payload = payload << 8 | bytes[16 + i];
  EXPECT_EQ(count, 40u);
  EXPECT_EQ(payload, 2u * 4u + 40u);          // two scales, 40 int8 values
  EXPECT_EQ(bytes[24] | bytes[25] << 8, 32);  // block
  EXPECT_EQ(bytes.size(), 40u + payload);
}

TEST(Golden, BytesMatchCheckedInVectors) {
  std::ostringstream actual;
  actual << "# terse wire format v1 golden vectors: <case> | <hex bytes>\n";
  for (const auto& c : goldenCases()) {
    auto bytes = encodeCase(c);
    actual << caseName(c) << " | " << hex(bytes.data(), bytes.size()) << "\n";
  }
  std::ifstream f(kGoldenPath);
  std::stringstream expected;
  expected << f.rdbuf();
  if (expected.str() != actual.str()) {
    std::string out = "wire_v1.actual.txt";
    std::ofstream(out) << actual.str();
    FAIL() << "wire bytes differ from " << kGoldenPath << "; the bytes this build writes are in "
           << out << " (in the test's working directory). If the format change is deliberate, bump "
           << "the wire version and copy that file over the golden one (docs/wire-format.md).";
  }
}

TEST(Golden, CheckedInVectorsStillDecode) {
  std::ifstream f(kGoldenPath);
  ASSERT_TRUE(f.good()) << kGoldenPath;
  std::string line;
  size_t i = 0;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    ASSERT_LT(i, goldenCases().size());
    const auto& c = goldenCases()[i++];
    std::string h = line.substr(line.find(" | ") + 3);
    WireBuffer w(h.size() / 2);
    for (size_t j = 0; j < h.size() / 2; ++j)
      w.u8()[j] = static_cast<uint8_t>(std::stoi(h.substr(2 * j, 2), nullptr, 16));
    w.bytes = h.size() / 2;
    auto codec = codecOrDie(c.spec);
    std::vector<float> out(c.n);
    Status s = codec->decompress(w.data(), w.bytes, out.data(), DataType::kFloat32, c.n);
    ASSERT_TRUE(s.isOk()) << caseName(c) << ": " << s.toString();
    auto x = goldenInput(c.n);
    if (c.spec == "none" || c.spec == "fp16") {
      for (size_t j = 0; j < c.n; ++j) EXPECT_EQ(out[j], x[j] * c.scale) << caseName(c);
    }
  }
  EXPECT_EQ(i, goldenCases().size());
}

}  // namespace
}  // namespace terse::test
