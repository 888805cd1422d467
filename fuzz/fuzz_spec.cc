// fuzz_spec: the codec spec parser (makeCodec) and the auto policy parser (parseAutoSpec) on
// arbitrary strings.
//
// Checked: no crash or UB; an accepted spec's canonical form is accepted again and is a fixed
// point (makeCodec(c->spec())->spec() == c->spec(), as codec.h promises); an accepted codec can
// compress and decompress a small tensor; an accepted auto spec is canonical-stable and every
// candidate it lists is a valid canonical codec spec.
#include "fuzz_util.h"
#include "terse/compressors/auto_spec.h"
#include "terse/compressors/codec.h"

#include <functional>
#include <string>
#include <vector>

namespace {

const char* const kSeeds[] = {
    "none",
    "fp16",
    "bf16",
    "int8",
    "int8:block=256",
    "int8:block=32,round=stochastic,seed=3",
    "int8:round=nearest",
    "onebit",
    "onebit:block=2048",
    "topk",
    "topk:ratio=0.01",
    "topk:ratio=1",
    "topk:ratio=1e-3",
    "auto",
    "auto:max=int8",
    "auto:max=onebit",
    "auto:max=topk",
    "auto:max=none",
    "int8:block=0",
    "topk:ratio=-1",
    "int8:block=99999999999999999999",
};

void writeSeeds(const std::function<void(const std::vector<uint8_t>&)>& put) {
  for (const char* s : kSeeds) put(std::vector<uint8_t>(s, s + std::string(s).size()));
}

void checkCodec(const std::string& spec) {
  auto made = terse::makeCodec(spec);
  if (!made.isOk()) {
    if (made.status().message().empty()) terse::fuzz::fail("makeCodec error without a message");
    return;
  }
  const terse::Codec& c = *made.value();
  const std::string canonical = c.spec();
  auto again = terse::makeCodec(canonical);
  if (!again.isOk()) terse::fuzz::fail("makeCodec rejects its own canonical spec");
  if (again.value()->spec() != canonical) terse::fuzz::fail("canonical spec is not a fixed point");
  if (again.value()->id() != c.id()) terse::fuzz::fail("canonical spec names another codec");

  // The codec must work: compress then decompress 37 elements.
  const size_t n = 37;
  std::vector<float> in(n), out(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.25f - 4.0f;
  std::vector<uint8_t> wire(c.maxWireBytes(n));
  auto written =
      c.compress(in.data(), terse::DataType::kFloat32, n, nullptr, wire.data(), wire.size());
  if (!written.isOk()) terse::fuzz::fail("an accepted codec fails to compress");
  if (written.value() > wire.size()) terse::fuzz::fail("compress wrote more than maxWireBytes");
  if (!c.decompress(wire.data(), written.value(), out.data(), terse::DataType::kFloat32, n).isOk())
    terse::fuzz::fail("an accepted codec cannot decode its own message");
}

void checkAuto(const std::string& spec) {
  if (!terse::isAutoSpec(spec)) return;
  auto parsed = terse::parseAutoSpec(spec);
  if (!parsed.isOk()) return;
  auto again = terse::parseAutoSpec(parsed.value().canonical);
  if (!again.isOk()) terse::fuzz::fail("parseAutoSpec rejects its own canonical form");
  if (again.value().canonical != parsed.value().canonical)
    terse::fuzz::fail("auto canonical form is not a fixed point");
  if (parsed.value().candidates.empty()) terse::fuzz::fail("auto spec allows no codec");
  for (const std::string& cand : parsed.value().candidates) {
    auto c = terse::makeCodec(cand);
    if (!c.isOk() || c.value()->spec() != cand)
      terse::fuzz::fail("auto candidate is not a canonical codec spec");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  terse::fuzz::maybeWriteSeeds(writeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // specs are short; long inputs only slow the search down
  std::string spec(reinterpret_cast<const char*>(data), size);
  checkCodec(spec);
  checkAuto(spec);
  return 0;
}
