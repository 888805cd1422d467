// Shared by the GPU tests: the skip when no device is usable, status assertions, and typed
// random inputs.
#pragma once

#include "terse/common/status.h"
#include "terse/kernels/device.h"
#include "terse/kernels/element_type.h"
#include "terse/kernels/numeric.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

// Skips (not fails) the test on machines without a usable CUDA device.
#define TERSE_REQUIRE_DEVICE()                                                                \
  do {                                                                                        \
    if (!::terse::device::available())                                                        \
      GTEST_SKIP() << "no CUDA device: this GPU path is built but cannot run on this "        \
                      "machine (cudaGetDeviceCount found none); run `ctest -L gpu` on a GPU " \
                      "host to test it";                                                      \
  } while (0)

namespace terse::gputest {

// Status or Result<T>: both say isOk(); only the message is reached differently.
inline std::string messageOf(const Status& s) { return s.toString(); }
template <typename T>
std::string messageOf(const Result<T>& r) {
  return r.status().toString();
}

// n standard-normal values stored as dt, reproducible from seed.
inline std::vector<uint8_t> randomInput(DataType dt, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint8_t> out(n * dataTypeSize(dt));
  for (size_t i = 0; i < n; ++i) storeElement(dt, out.data(), i, dist(rng));
  return out;
}

inline float loadAt(const std::vector<uint8_t>& b, DataType dt, size_t i) {
  return loadElement(dt, b.data(), i);
}

}  // namespace terse::gputest

#define ASSERT_OK(expr)                                                    \
  do {                                                                     \
    const auto& terse_s_ = (expr);                                         \
    ASSERT_TRUE(terse_s_.isOk()) << ::terse::gputest::messageOf(terse_s_); \
  } while (0)
