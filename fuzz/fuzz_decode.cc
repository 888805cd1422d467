// fuzz_decode: every codec's decoders on arbitrary bytes.
//
// Input: byte 0 picks a codec spec from kSpecs, byte 1 the output type (bits 0-1), whether to
// re-stamp the header check field (bit 2, so mutations get past the checksum and reach the
// codec's own length and parameter checks) and how to choose n (bits 3-4); byte 2 is a small n
// for that mode. The rest is the wire message.
//
// Checked: no crash, no out-of-bounds access (ASan), no UB (UBSan); parseWireHeader agrees with
// decompress about the header; decompress and decompressAccumulate agree on success or failure
// and, on success, accumulating into zeros gives what decompressing to float32 gives.
#include "fuzz_util.h"
#include "terse/compressors/codec.h"

#include <cmath>
#include <functional>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

namespace {

using terse::Codec;
using terse::DataType;

const char* const kSpecs[] = {
    "none",
    "fp16",
    "bf16",
    "int8",
    "int8:block=32",
    "int8:block=32,round=stochastic,seed=3",
    "int8:block=65536",
    "onebit",
    "onebit:block=32",
    "onebit:block=65536",
    "topk",
    "topk:ratio=0.25",
    "topk:ratio=1",
    "fp8",
    "fp8:format=e5m2,block=32,round=stochastic,seed=1",
    "mxfp8",
    "mxfp4",
    "mxfp4:round=stochastic,seed=2",
    "int4",
    "int4:block=32",
};
constexpr size_t kNumSpecs = sizeof(kSpecs) / sizeof(kSpecs[0]);
constexpr size_t kMaxN = 1u << 18;  // bounds the output buffers per input

const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                           DataType::kFloat32};

std::vector<std::shared_ptr<const Codec>>& codecs() {
  static std::vector<std::shared_ptr<const Codec>> all = [] {
    std::vector<std::shared_ptr<const Codec>> v;
    for (const char* spec : kSpecs) {
      auto c = terse::makeCodec(spec);
      if (!c.isOk()) terse::fuzz::fail("a built-in fuzz spec is rejected by makeCodec");
      v.push_back(c.value());
    }
    return v;
  }();
  return all;
}

void writeGoldenSeeds(const std::function<void(const std::vector<uint8_t>&)>& put);

void writeSeeds(const std::function<void(const std::vector<uint8_t>&)>& put) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (size_t s = 0; s < kNumSpecs; ++s) {
    for (int t = 0; t < 3; ++t)
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{40}, size_t{300}}) {
        // Compress from float32 (so every type's decoder sees a real message); byte 1 asks for
        // output type t and n = the header's count.
        std::vector<float> in(n);
        for (auto& x : in) x = normal(rng);
        const Codec& c = *codecs()[s];
        std::vector<uint8_t> wire(c.maxWireBytes(n));
        auto r = c.compress(in.data(), DataType::kFloat32, n, nullptr, wire.data(), wire.size());
        if (!r.isOk()) terse::fuzz::fail("compress failed while writing seeds");
        std::vector<uint8_t> seed = {static_cast<uint8_t>(s), static_cast<uint8_t>(t), 0};
        seed.insert(seed.end(), wire.begin(), wire.begin() + r.value());
        put(seed);
      }
  }
  writeGoldenSeeds(put);
}

// The golden vectors of tests/compressors/golden/wire_v1.txt ("<spec> <type> n=.. | <hex>") as
// seeds decoded to float32 with n from the header.
void writeGoldenSeeds(const std::function<void(const std::vector<uint8_t>&)>& put) {
  std::ifstream in(std::string(TERSE_SOURCE_DIR) + "/tests/compressors/golden/wire_v1.txt");
  if (!in) terse::fuzz::fail("cannot read tests/compressors/golden/wire_v1.txt for seeds");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t bar = line.find(" | ");
    if (bar == std::string::npos) continue;
    auto golden = terse::makeCodec(line.substr(0, line.find(' ')));
    if (!golden.isOk()) continue;
    for (size_t s = 0; s < kNumSpecs; ++s) {
      if (codecs()[s]->spec() != golden.value()->spec()) continue;
      std::vector<uint8_t> seed = {static_cast<uint8_t>(s), 0, 0};
      std::string hex = line.substr(bar + 3);
      for (size_t i = 0; i + 1 < hex.size(); i += 2)
        seed.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
      put(seed);
    }
  }
}

bool sameFloat(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  terse::fuzz::maybeWriteSeeds(writeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const Codec& codec = *codecs()[data[0] % kNumSpecs];
  const DataType dt = kTypes[data[1] & 3];
  const bool restamp = data[1] & 4;
  const int nMode = (data[1] >> 3) & 3;
  // An exact-size heap copy: ASan catches a decoder reading even one byte past the message.
  std::vector<uint8_t> wire(data + 3, data + size);
  if (restamp && wire.size() >= 36) {
    uint32_t check = terse::fuzz::wireHeaderCheck(wire.data());
    std::memcpy(wire.data() + 32, &check, 4);
  }

  auto info = terse::parseWireHeader(wire.data(), wire.size());
  if (info.isOk() && info.value().totalBytes > wire.size())
    terse::fuzz::fail("parseWireHeader accepted a message longer than its buffer");
  uint64_t count = info.isOk() ? info.value().count : data[2];
  size_t n = 0;
  switch (nMode) {
    case 0: n = count; break;
    case 1: n = count + 1; break;
    case 2: n = count ? count - 1 : 0; break;
    default: n = data[2]; break;
  }
  if (n > kMaxN) n = data[2];

  std::vector<uint8_t> out(n * terse::dataTypeSize(dt) + 1, 0xa5);
  terse::Status st = codec.decompress(wire.data(), wire.size(), out.data(), dt, n);
  if (!st.isOk()) {
    // A failed decode writes nothing.
    for (uint8_t b : out)
      if (b != 0xa5) terse::fuzz::fail("decompress failed but wrote to its output");
  }
  if (out.back() != 0xa5) terse::fuzz::fail("decompress wrote past n elements");
  if (st.isOk() && !info.isOk()) terse::fuzz::fail("decompress accepted a header parse rejects");

  std::vector<float> acc(n, 0.0f);
  terse::Status sa = codec.decompressAccumulate(wire.data(), wire.size(), acc.data(), n);
  if (sa.isOk() != st.isOk() && dt == DataType::kFloat32)
    terse::fuzz::fail("decompress and decompressAccumulate disagree on validity");
  if (sa.isOk() && dt == DataType::kFloat32) {
    const float* dec = reinterpret_cast<const float*>(out.data());
    for (size_t i = 0; i < n; ++i) {
      float d;
      std::memcpy(&d, dec + i, 4);
      if (!sameFloat(d + 0.0f, acc[i]))
        terse::fuzz::fail("decompressAccumulate into zeros differs from decompress");
    }
  }
  return 0;
}
