// Element casts (codecs none/fp16/bf16), accumulation and scaling.
#include "cpu_common.h"

namespace terse::kernels::cpu {
namespace {

template <typename In, typename Out>
void convertRange(const In* TERSE_RESTRICT in, Out* TERSE_RESTRICT out, size_t n, float scale,
                  float* TERSE_RESTRICT residual) {
  if (residual) {
    for (size_t i = 0; i < n; ++i) {
      float v = num::load(in, i) * scale + residual[i];
      num::store(out, i, v);
      residual[i] = num::residualOf(v, num::load(out, i));
    }
  } else if (scale == 1.0f) {
    for (size_t i = 0; i < n; ++i) num::store(out, i, num::load(in, i));
  } else {
    for (size_t i = 0; i < n; ++i) num::store(out, i, num::load(in, i) * scale);
  }
}

template <typename In>
void accumulateRange(const In* TERSE_RESTRICT in, float* TERSE_RESTRICT acc, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += num::load(in, i);
}

}  // namespace

template <typename In, typename Out>
void convert(const In* in, Out* out, size_t n, float scale, float* residual) {
  detail::forRange(n, 64, [&](size_t b, size_t e) {
    convertRange(in + b, out + b, e - b, scale, residual ? residual + b : nullptr);
  });
}

template <typename In>
void accumulate(const In* in, float* acc, size_t n) {
  detail::forRange(n, 64, [&](size_t b, size_t e) { accumulateRange(in + b, acc + b, e - b); });
}

void scaleInPlace(float* acc, size_t n, float scale) {
  detail::forRange(n, 64, [&](size_t b, size_t e) {
    float* TERSE_RESTRICT p = acc + b;
    for (size_t i = 0, m = e - b; i < m; ++i) p[i] *= scale;
  });
}

#define TERSE_CONVERT(In, Out) \
  template void convert<In, Out>(const In*, Out*, size_t, float, float*);
#define TERSE_CONVERT_ALL(In) \
  TERSE_CONVERT(In, float)    \
  TERSE_CONVERT(In, Half)     \
  TERSE_CONVERT(In, BFloat16) \
  template void accumulate<In>(const In*, float*, size_t);
TERSE_CONVERT_ALL(float)
TERSE_CONVERT_ALL(Half)
TERSE_CONVERT_ALL(BFloat16)

}  // namespace terse::kernels::cpu
