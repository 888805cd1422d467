// Wire-format validation: truncated, bit-flipped and mismatched messages are errors, never
// crashes or out-of-bounds writes, and a failed decode writes nothing.
#include "test_util.h"

#include <gtest/gtest.h>

namespace terse::test {
namespace {

const std::vector<std::string> kSpecs = {"none",
                                         "fp16",
                                         "bf16",
                                         "int8:block=32",
                                         "int8:round=stochastic",
                                         "onebit:block=32",
                                         "topk:ratio=0.2",
                                         "fp8:block=32",
                                         "mxfp8",
                                         "mxfp4",
                                         "int4:block=32"};

WireBuffer compressOrDie(const Codec& c, const std::vector<float>& x) {
  WireBuffer w(c.maxWireBytes(x.size()));
  auto r = c.compress(x.data(), DataType::kFloat32, x.size(), nullptr, w.data(), w.capacity());
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  w.bytes = r.isOk() ? *r : 0;
  return w;
}

// Decodes with both entry points into sentinel-filled outputs; on failure both must be
// untouched. Returns whether decoding succeeded.
bool decodeChecked(const Codec& c, const void* wire, size_t bytes, size_t n) {
  std::vector<float> out(n + 4, 1234.5f);
  std::vector<float> acc(n + 4, 1234.5f);
  Status a = c.decompress(wire, bytes, out.data(), DataType::kFloat32, n);
  Status b = c.decompressAccumulate(wire, bytes, acc.data(), n);
  EXPECT_EQ(a.isOk(), b.isOk()) << a.toString() << " vs " << b.toString();
  if (!a.isOk()) {
    EXPECT_FALSE(a.message().empty());
    for (float v : out) EXPECT_EQ(v, 1234.5f) << "a failed decompress wrote output";
  }
  if (!b.isOk()) {
    for (float v : acc) EXPECT_EQ(v, 1234.5f) << "a failed decompressAccumulate wrote output";
  }
  for (size_t i = n; i < n + 4; ++i) {
    EXPECT_EQ(out[i], 1234.5f) << "wrote past the end";
    EXPECT_EQ(acc[i], 1234.5f) << "wrote past the end";
  }
  return a.isOk();
}

TEST(Wire, EveryTruncationIsRejected) {
  for (const auto& spec : kSpecs) {
    SCOPED_TRACE(spec);
    auto c = codecOrDie(spec);
    auto x = randomValues(77, 1);
    auto w = compressOrDie(*c, x);
    ASSERT_TRUE(decodeChecked(*c, w.data(), w.bytes, x.size()));
    for (size_t len = 0; len < w.bytes; ++len) {
      // Copy into an exactly-sized buffer so ASan sees any read past `len`.
      std::unique_ptr<uint8_t[]> exact(new uint8_t[len + 4]);
      auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(exact.get()) + 3) &
                                                 ~uintptr_t{3});
      std::memcpy(aligned, w.data(), len);
      EXPECT_FALSE(decodeChecked(*c, aligned, len, x.size())) << "accepted " << len << " bytes";
      EXPECT_FALSE(parseWireHeader(aligned, len).isOk());
    }
  }
}

TEST(Wire, HeaderBitFlipsAreRejectedAndPayloadFlipsNeverCrash) {
  std::mt19937_64 rng(5);
  for (const auto& spec : kSpecs) {
    SCOPED_TRACE(spec);
    auto c = codecOrDie(spec);
    auto x = randomValues(300, 2);
    auto w = compressOrDie(*c, x);
    // Every single-bit flip of the 40-byte header is caught.
    for (size_t bit = 0; bit < 40 * 8; ++bit) {
      WireBuffer f = w;
      f.u8()[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      EXPECT_FALSE(decodeChecked(*c, f.data(), f.bytes, x.size())) << "header bit " << bit;
    }
    // Random flips anywhere (several at once): an error or a decode, never a crash or stray write.
    for (int trial = 0; trial < 300; ++trial) {
      WireBuffer f = w;
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int j = 0; j < flips; ++j)
        f.u8()[rng() % f.bytes] ^= static_cast<uint8_t>(1 + rng() % 255);
      decodeChecked(*c, f.data(), f.bytes, x.size());
    }
  }
}

TEST(Wire, TopkIndexCorruptionIsRejected) {
  auto c = codecOrDie("topk:ratio=0.1");
  auto x = randomValues(1000, 3);
  auto w = compressOrDie(*c, x);
  const size_t kHeader = 40;
  for (auto mutate : std::vector<std::function<void(uint32_t*)>>{
           [](uint32_t* p) { p[1] = p[0]; },            // duplicate
           [](uint32_t* p) { std::swap(p[2], p[3]); },  // not ascending
           [](uint32_t* p) { p[99] = 1000; },           // out of range
           [](uint32_t* p) { p[99] = 0xffffffffu; }}) {
    WireBuffer f = w;
    mutate(reinterpret_cast<uint32_t*>(f.u8() + kHeader));
    EXPECT_FALSE(decodeChecked(*c, f.data(), f.bytes, x.size()));
    std::vector<float> out(1000);
    Status s = c->decompress(f.data(), f.bytes, out.data(), DataType::kFloat32, 1000);
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    EXPECT_NE(s.message().find("ascending"), std::string::npos) << s.message();
  }
}

TEST(Wire, MismatchedCodecParametersNameBoth) {
  auto x = randomValues(600, 4);
  struct Pair {
    std::string writer, reader, a, b;
  };
  for (const auto& p :
       std::vector<Pair>{{"int8:block=256", "int8:block=128", "block=256", "block=128"},
                         {"int8", "int8:round=stochastic", "round=nearest", "round=stochastic"},
                         {"onebit:block=64", "onebit:block=2048", "block=64", "block=2048"},
                         {"topk:ratio=0.01", "topk:ratio=0.02", "ratio=0.01", "ratio=0.02"},
                         {"fp16", "bf16", "fp16", "bf16"},
                         {"int8", "onebit", "int8", "onebit"},
                         {"fp8:format=e4m3", "fp8:format=e5m2", "format=e4m3", "format=e5m2"},
                         {"fp8:block=64", "fp8:block=256", "block=64", "block=256"},
                         {"mxfp8", "mxfp8:round=stochastic", "round=nearest", "round=stochastic"},
                         {"int4:block=32", "int4", "block=32", "block=64"},
                         {"mxfp8", "mxfp4", "mxfp8", "mxfp4"},
                         {"int4", "int8", "int4", "int8"}}) {
    SCOPED_TRACE(p.writer + " -> " + p.reader);
    auto w = compressOrDie(*codecOrDie(p.writer), x);
    auto r = codecOrDie(p.reader);
    std::vector<float> out(600, 1.0f);
    Status s = r->decompress(w.data(), w.bytes, out.data(), DataType::kFloat32, 600);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find(p.a), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(p.b), std::string::npos) << s.message();
    EXPECT_EQ(out, std::vector<float>(600, 1.0f));
  }
  // Same codec, different parameters that do not travel (the seed): decodes fine.
  auto w = compressOrDie(*codecOrDie("int8:round=stochastic,seed=1"), x);
  EXPECT_TRUE(decodeChecked(*codecOrDie("int8:round=stochastic,seed=2"), w.data(), w.bytes, 600));
}

TEST(Wire, CountMismatchAndBadArguments) {
  auto c = codecOrDie("int8");
  auto x = randomValues(100, 5);
  auto w = compressOrDie(*c, x);
  std::vector<float> out(200);
  Status s = c->decompress(w.data(), w.bytes, out.data(), DataType::kFloat32, 99);
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("100"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("99"), std::string::npos) << s.message();

  // Too small a wire buffer, null pointers, misalignment, device buffers.
  WireBuffer small(64);
  auto r = c->compress(x.data(), DataType::kFloat32, 100, nullptr, small.data(), 64);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("maxWireBytes"), std::string::npos);
  WireBuffer big(c->maxWireBytes(100) + 8);
  EXPECT_FALSE(
      c->compress(nullptr, DataType::kFloat32, 100, nullptr, big.data(), big.capacity()).isOk());
  EXPECT_FALSE(c->compress(x.data(), DataType::kFloat32, 100, nullptr, nullptr, 1 << 20).isOk());
  EXPECT_FALSE(
      c->compress(x.data(), DataType::kFloat32, 100, nullptr, big.u8() + 1, big.capacity() - 1)
          .isOk());
  EXPECT_FALSE(
      c->compress(x.data(), static_cast<DataType>(9), 100, nullptr, big.data(), big.capacity())
          .isOk());
  CodecCall dev;
  dev.device = true;
  r = c->compress(x.data(), DataType::kFloat32, 100, nullptr, big.data(), big.capacity(), dev);
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("device"), std::string::npos);
  EXPECT_EQ(c->decompress(w.data(), w.bytes, out.data(), DataType::kFloat32, 100, dev).code(),
            StatusCode::kUnsupported);
  CodecCall nanScale;
  nanScale.scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(
      c->compress(x.data(), DataType::kFloat32, 100, nullptr, big.data(), big.capacity(), nanScale)
          .isOk());
  EXPECT_FALSE(c->decompress(nullptr, w.bytes, out.data(), DataType::kFloat32, 100).isOk());
  EXPECT_FALSE(c->decompress(w.data(), w.bytes, nullptr, DataType::kFloat32, 100).isOk());
  EXPECT_FALSE(parseWireHeader(nullptr, 100).isOk());
  // Garbage that is not a terse message at all.
  std::vector<uint32_t> junk(64, 0x12345678u);
  auto info = parseWireHeader(junk.data(), junk.size() * 4);
  ASSERT_FALSE(info.isOk());
  EXPECT_NE(info.status().message().find("magic"), std::string::npos);
}

TEST(Wire, SourceTypeTravelsAndAnyOutputTypeDecodes) {
  // `none` keeps the sender's element type on the wire; a receiver may decode into any type.
  auto c = codecOrDie("none");
  auto x = randomValues(50, 6);
  auto in = TypedBuffer::fromFloat(DataType::kBFloat16, x);
  WireBuffer w(c->maxWireBytes(50));
  auto r = c->compress(in.data(), DataType::kBFloat16, 50, nullptr, w.data(), w.capacity());
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(*r, 40u + 100u);
  std::vector<float> out(50);
  ASSERT_TRUE(c->decompress(w.data(), *r, out.data(), DataType::kFloat32, 50).isOk());
  EXPECT_EQ(out, in.toFloat());
}

}  // namespace
}  // namespace terse::test
