// Helpers shared by the codec tests: typed buffers, deterministic inputs, and references.
#pragma once

#include "terse/compressors/codec.h"
#include "terse/kernels/numeric.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace terse::kernels::cpu::detail {
bool useAvx2();
void setAvx2Enabled(bool enabled);
}  // namespace terse::kernels::cpu::detail

namespace terse::test {

// Runs fn once with the portable kernel loops and once with the AVX2 ones (when the CPU has
// them), so both paths are held to the same references.
template <typename Fn>
void forEachIsa(Fn&& fn) {
  for (bool avx2 : {false, true}) {
    kernels::cpu::detail::setAvx2Enabled(avx2);
    if (avx2 && !kernels::cpu::detail::useAvx2()) break;
    SCOPED_TRACE(avx2 ? "AVX2 path" : "portable path");
    fn();
  }
  kernels::cpu::detail::setAvx2Enabled(true);
}

// A buffer of n elements of a runtime DataType, with float32 views for checking.
struct TypedBuffer {
  DataType dt = DataType::kFloat32;
  size_t n = 0;
  std::vector<uint8_t> bytes;

  TypedBuffer() = default;
  TypedBuffer(DataType type, size_t count)
      : dt(type), n(count), bytes(count * dataTypeSize(type) + 1) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  float get(size_t i) const;
  void set(size_t i, float v);  // rounds to the type with numeric.h's store
  std::vector<float> toFloat() const;
  static TypedBuffer fromFloat(DataType dt, const std::vector<float>& v);
};

// Gradient-like values: mixed signs and magnitudes over a few decades, with exact zeros and
// repeated values sprinkled in (ties for top-k).
std::vector<float> randomValues(size_t n, uint64_t seed, float scale = 1.0f);

// Wire buffer sized by the codec and 8-byte aligned.
struct WireBuffer {
  std::vector<uint64_t> words;
  size_t bytes = 0;
  explicit WireBuffer(size_t capacity) : words((capacity + 7) / 8 + 1) {}
  void* data() { return words.data(); }
  const void* data() const { return words.data(); }
  uint8_t* u8() { return reinterpret_cast<uint8_t*>(words.data()); }
  size_t capacity() const { return words.size() * 8; }
};

std::shared_ptr<const Codec> codecOrDie(const std::string& spec);

// The element bytes a decompress call must leave untouched on failure.
constexpr uint8_t kSentinel = 0xA5;

const std::vector<DataType>& allTypes();
std::string typeName(DataType dt);

}  // namespace terse::test
