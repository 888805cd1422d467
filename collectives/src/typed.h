// Element-type dispatch over the CPU kernels: the collectives move float32 accumulators and the
// caller's float32/float16/bfloat16 buffers between each other.
#pragma once

#include "terse/kernels/kernels.h"

#include <terse/types.h>

#include <cstring>
#include <type_traits>

namespace terse::detail {

template <typename F>
void withType(DataType dt, F&& f) {
  switch (dt) {
    case DataType::kFloat32: f(static_cast<float*>(nullptr)); break;
    case DataType::kFloat16: f(static_cast<Half*>(nullptr)); break;
    case DataType::kBFloat16: f(static_cast<BFloat16*>(nullptr)); break;
  }
}

// out[i] = float(in[i])
inline void toFloat(const void* in, DataType dt, float* out, size_t n) {
  if (n == 0 || in == out) return;
  if (dt == DataType::kFloat32) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  withType(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    kernels::cpu::convert<T, float>(static_cast<const T*>(in), out, n, 1.0f, nullptr);
  });
}

// out[i] = T(in[i] * scale)
inline void fromFloat(const float* in, float scale, DataType dt, void* out, size_t n) {
  if (n == 0) return;
  if (dt == DataType::kFloat32 && in == out) {  // in place: the kernels assume no aliasing
    if (scale != 1.0f) kernels::cpu::scaleInPlace(static_cast<float*>(out), n, scale);
    return;
  }
  if (dt == DataType::kFloat32 && scale == 1.0f) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  withType(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    kernels::cpu::convert<float, T>(in, static_cast<T*>(out), n, scale, nullptr);
  });
}

// acc[i] += float(in[i])
inline void accumulateTyped(const void* in, DataType dt, float* acc, size_t n) {
  if (n == 0) return;
  withType(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    kernels::cpu::accumulate<T>(static_cast<const T*>(in), acc, n);
  });
}

}  // namespace terse::detail
