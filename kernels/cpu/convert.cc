// Element casts (codecs none/fp16/bf16), accumulation and scaling.
#include "cpu_common.h"
#include "simd_avx2.h"

namespace terse::kernels::cpu {
namespace {

template <typename In, typename Out>
void convertRange(const In* TERSE_RESTRICT in, Out* TERSE_RESTRICT out, size_t n, float scale,
                  float* TERSE_RESTRICT residual) {
  if (residual) {
    for (size_t i = 0; i < n; ++i) {
      float v = num::feedbackSum(num::load(in, i) * scale, residual[i]);
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

#if TERSE_CPU_HAVE_AVX2_PATH
template <typename In, typename Out>
TERSE_AVX2 void convertRangeAvx2(const In* TERSE_RESTRICT in, Out* TERSE_RESTRICT out, size_t n,
                                 float scale, float* TERSE_RESTRICT residual) {
  using namespace avx2;
  size_t i = 0;
  const __m256 s = _mm256_set1_ps(scale);
  if (residual) {
    for (; i + 8 <= n; i += 8) {
      __m256 v = feedbackSum8(_mm256_mul_ps(load8(in + i), s), _mm256_loadu_ps(residual + i));
      __m256 d = store8(out + i, v);
      _mm256_storeu_ps(residual + i, avx2::residualOf(v, d));
    }
  } else if (scale == 1.0f) {
    for (; i + 8 <= n; i += 8) store8(out + i, load8(in + i));
  } else {
    for (; i + 8 <= n; i += 8) store8(out + i, _mm256_mul_ps(load8(in + i), s));
  }
  convertRange(in + i, out + i, n - i, scale, residual ? residual + i : nullptr);
}

template <typename In>
TERSE_AVX2 void accumulateRangeAvx2(const In* TERSE_RESTRICT in, float* TERSE_RESTRICT acc,
                                    size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), avx2::load8(in + i)));
  accumulateRange(in + i, acc + i, n - i);
}
#endif

}  // namespace

template <typename In, typename Out>
void convert(const In* in, Out* out, size_t n, float scale, float* residual) {
  detail::forRange(n, 64, [&](size_t b, size_t e) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (detail::useAvx2())
      return convertRangeAvx2(in + b, out + b, e - b, scale, residual ? residual + b : nullptr);
#endif
    convertRange(in + b, out + b, e - b, scale, residual ? residual + b : nullptr);
  });
}

template <typename In>
void accumulate(const In* in, float* acc, size_t n) {
  detail::forRange(n, 64, [&](size_t b, size_t e) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (detail::useAvx2()) return accumulateRangeAvx2(in + b, acc + b, e - b);
#endif
    accumulateRange(in + b, acc + b, e - b);
  });
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
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_CONVERT_ALL)

}  // namespace terse::kernels::cpu
