// fuzz_feedback: ErrorFeedback::deserialize (the checkpoint decoder) on arbitrary bytes.
//
// Each input is tried as is, then with its trailing checksum re-stamped so that mutations reach
// the length, spec and server-chunk checks behind it. Checked: no crash, leak or UB; a checkpoint
// that decodes serializes back to exactly the same bytes (the format has one encoding per state),
// and the decoded state is self-consistent (checkCompatible with its own spec and count).
#include "fuzz_util.h"
#include "terse/compressors/error_feedback.h"

#include <cstring>
#include <functional>
#include <vector>

namespace {

void writeSeeds(const std::function<void(const std::vector<uint8_t>&)>& put) {
  struct Case {
    const char* spec;
    size_t count;
    int world;  // 0: no server residual
  };
  const Case cases[] = {{"none", 0, 0},           {"fp16", 3, 0},
                        {"int8", 16, 2},          {"onebit", 40, 4},
                        {"topk:ratio=0.5", 9, 3}, {"auto:max=onebit", 12, 2},
                        {"int8:block=32", 1, 1},  {"mxfp4", 33, 2},
                        {"int4:block=32", 17, 3}, {"fp8:format=e5m2", 5, 0},
                        {"mxfp8", 64, 4}};
  for (const Case& c : cases) {
    auto ef = terse::ErrorFeedback::create(c.spec, c.count);
    if (!ef.isOk()) terse::fuzz::fail("seed state cannot be created");
    for (size_t i = 0; i < c.count; ++i) ef.value().worker()[i] = 0.5f * static_cast<float>(i);
    if (c.world > 0) {
      size_t len = c.count / static_cast<size_t>(c.world);
      float* s = ef.value().server(c.world, c.count - len, len);
      for (size_t i = 0; i < len; ++i) s[i] = -1.0f - static_cast<float>(i);
    }
    put(ef.value().serialize());
  }
}

void check(const uint8_t* p, size_t size) {
  auto ef = terse::ErrorFeedback::deserialize(p, size);
  if (!ef.isOk()) {
    if (ef.status().message().empty()) terse::fuzz::fail("deserialize error without a message");
    return;
  }
  std::vector<uint8_t> again = ef.value().serialize();
  if (again.size() != size || std::memcmp(again.data(), p, size) != 0)
    terse::fuzz::fail("serialize(deserialize(x)) != x");
  const auto& state = ef.value();
  if (!state.checkCompatible(state.codecSpec(), state.count()).isOk())
    terse::fuzz::fail("a decoded state is incompatible with its own spec and count");
  if (state.serverOffset() + state.serverLength() > state.count())
    terse::fuzz::fail("decoded server chunk lies outside the tensor");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  terse::fuzz::maybeWriteSeeds(writeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Exact-size heap copies so ASan sees any read past the end.
  std::vector<uint8_t> raw(data, data + size);
  check(raw.data(), raw.size());
  if (size >= 48) {
    uint64_t sum = terse::fuzz::checkpointCheck(raw.data(), size - 8);
    std::memcpy(raw.data() + size - 8, &sum, 8);
    check(raw.data(), raw.size());
  }
  return 0;
}
