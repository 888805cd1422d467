// Elementwise CUDA kernels: casts (none/fp16/bf16 codecs), accumulation, scaling, and the
// int8/onebit decoders (blockcodec.cuh's group decoder). Each output element depends on one input
// element (plus its block's scale), so every result is bitwise identical to the CPU path: both use
// numeric.h and the build disables FMA contraction (sources.cmake) so a*b+c rounds twice on both
// sides.
#include "blockcodec.cuh"
#include "launch.cuh"

#include <array>

namespace terse::kernels::cuda {
namespace {

using detail::gridFor;
using detail::kThreads;
using detail::Vec4;

// ---- convert --------------------------------------------------------------------------------
// The value sent for element i, with the CPU's exact operation sequence: no multiply when
// scale is 1 and there is no residual (so NaN payloads pass through untouched, as on the CPU),
// otherwise x * scale + e rounded twice. With a residual, v is parked in residual[i] until the
// narrowed value is known.
__device__ __forceinline__ float convertValue(float x, float scale, float* residual, size_t i) {
  if (residual) {
    float v = num::feedbackSum(x * scale, residual[i]);
    residual[i] = v;
    return v;
  }
  return scale == 1.0f ? x : x * scale;
}

template <typename In, typename Out>
__global__ void convertScalarKernel(const In* in, Out* out, size_t n, float scale,
                                    float* residual) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads) {
    num::store(out, i, convertValue(num::load(in, i), scale, residual, i));
    if (residual) residual[i] = num::residualOf(residual[i], num::load(out, i));
  }
}

// Four elements per thread with vector loads; the tail (n % 4) is done element by element.
template <typename In, typename Out>
__global__ void convertVecKernel(const In* in, Out* out, size_t n, float scale, float* residual) {
  size_t groups = n / 4;
  size_t stride = size_t{gridDim.x} * kThreads;
  for (size_t g = blockIdx.x * size_t{kThreads} + threadIdx.x; g < groups; g += stride) {
    size_t i = g * 4;
    float v[4];
    Vec4<In>::load(in, i, v);
    if (residual) {
      float e[4];
      Vec4<float>::load(residual, i, e);
      for (int j = 0; j < 4; ++j) v[j] = v[j] * scale + e[j];
      Vec4<Out>::store(out, i, v);
      for (int j = 0; j < 4; ++j) {
        Out sent[1];  // what the store above wrote, without reading it back from memory
        num::store(sent, 0, v[j]);
        e[j] = num::residualOf(v[j], num::load(sent, 0));
      }
      Vec4<float>::store(residual, i, e);
    } else {
      if (scale != 1.0f)
        for (int j = 0; j < 4; ++j) v[j] = v[j] * scale;
      Vec4<Out>::store(out, i, v);
    }
  }
  size_t t = blockIdx.x * size_t{kThreads} + threadIdx.x;
  if (t < 4 && groups * 4 + t < n) {
    size_t i = groups * 4 + t;
    num::store(out, i, convertValue(num::load(in, i), scale, residual, i));
    if (residual) residual[i] = num::residualOf(residual[i], num::load(out, i));
  }
}

// ---- accumulate / scale -------------------------------------------------------------------
template <typename In>
__global__ void accumulateScalarKernel(const In* in, float* acc, size_t n) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads) {
    acc[i] = acc[i] + num::load(in, i);
  }
}

template <typename In>
__global__ void accumulateVecKernel(const In* in, float* acc, size_t n) {
  size_t groups = n / 4;
  size_t stride = size_t{gridDim.x} * kThreads;
  for (size_t g = blockIdx.x * size_t{kThreads} + threadIdx.x; g < groups; g += stride) {
    size_t i = g * 4;
    float x[4], a[4];
    Vec4<In>::load(in, i, x);
    Vec4<float>::load(acc, i, a);
    for (int j = 0; j < 4; ++j) a[j] = a[j] + x[j];
    Vec4<float>::store(acc, i, a);
  }
  size_t t = blockIdx.x * size_t{kThreads} + threadIdx.x;
  if (t < 4 && groups * 4 + t < n) {
    size_t i = groups * 4 + t;
    acc[i] = acc[i] + num::load(in, i);
  }
}

__global__ void scaleKernel(float* acc, size_t n, float scale) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads) {
    acc[i] = acc[i] * scale;
  }
}

template <typename T>
bool vecAligned(const T* p) {
  return detail::aligned(p, Vec4<T>::kBytes);
}

}  // namespace

namespace detail {

cudaError_t validationFlag(int** flag) {
  // Up to 64 devices per process; more fail clearly instead of indexing out of bounds.
  constexpr int kMaxDevices = 64;
  struct Flags {
    std::array<int*, kMaxDevices> ptr{};
    ~Flags() {
      // Errors are ignored: at process exit the runtime may already be unloading.
      for (int* p : ptr)
        if (p) cudaFree(p);
    }
  };
  thread_local Flags flags;
  int device = 0;
  TERSE_CUDA_TRY(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  if (flags.ptr[device] == nullptr) {
    void* p = nullptr;
    TERSE_CUDA_TRY(cudaMalloc(&p, sizeof(int)));
    flags.ptr[device] = static_cast<int*>(p);
  }
  *flag = flags.ptr[device];
  return cudaSuccess;
}

}  // namespace detail

// ---- entry points -------------------------------------------------------------------------
template <typename In, typename Out>
cudaError_t convert(const In* in, Out* out, size_t n, float scale, float* residual,
                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (in == nullptr || out == nullptr) return cudaErrorInvalidValue;
  bool vec = vecAligned(in) && vecAligned(out) && (residual == nullptr || vecAligned(residual));
  if (vec) {
    convertVecKernel<In, Out><<<gridFor(n / 4), kThreads, 0, stream>>>(in, out, n, scale, residual);
  } else {
    convertScalarKernel<In, Out><<<gridFor(n), kThreads, 0, stream>>>(in, out, n, scale, residual);
  }
  return detail::lastLaunchError();
}

template <typename In>
cudaError_t accumulate(const In* in, float* acc, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (in == nullptr || acc == nullptr) return cudaErrorInvalidValue;
  if (vecAligned(in) && vecAligned(acc)) {
    accumulateVecKernel<In><<<gridFor(n / 4), kThreads, 0, stream>>>(in, acc, n);
  } else {
    accumulateScalarKernel<In><<<gridFor(n), kThreads, 0, stream>>>(in, acc, n);
  }
  return detail::lastLaunchError();
}

cudaError_t scaleInPlace(float* acc, size_t n, float scale, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (acc == nullptr) return cudaErrorInvalidValue;
  scaleKernel<<<gridFor(n), kThreads, 0, stream>>>(acc, n, scale);
  return detail::lastLaunchError();
}

template <typename Out>
cudaError_t int8Dequantize(const float* scales, const int8_t* q, size_t n, size_t block, Out* out,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block == 0 || scales == nullptr || q == nullptr || out == nullptr)
    return cudaErrorInvalidValue;
  return detail::launchGroupDecode<detail::Int8Codec>(
      scales, reinterpret_cast<const uint8_t*>(q), n, block, detail::GroupStore<Out>{out}, stream);
}

cudaError_t int8DequantizeAccumulate(const float* scales, const int8_t* q, size_t n, size_t block,
                                     float* acc, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block == 0 || scales == nullptr || q == nullptr || acc == nullptr)
    return cudaErrorInvalidValue;
  return detail::launchGroupDecode<detail::Int8Codec>(scales, reinterpret_cast<const uint8_t*>(q),
                                                      n, block, detail::GroupAdd{acc}, stream);
}

template <typename Out>
cudaError_t onebitDecompress(const float* scales, const uint32_t* bits, size_t n, size_t block,
                             Out* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block == 0 || scales == nullptr || bits == nullptr || out == nullptr)
    return cudaErrorInvalidValue;
  return detail::launchGroupDecode<detail::OnebitCodec>(
      scales, reinterpret_cast<const uint8_t*>(bits), n, block, detail::GroupStore<Out>{out},
      stream);
}

cudaError_t onebitDecompressAccumulate(const float* scales, const uint32_t* bits, size_t n,
                                       size_t block, float* acc, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block == 0 || scales == nullptr || bits == nullptr || acc == nullptr)
    return cudaErrorInvalidValue;
  return detail::launchGroupDecode<detail::OnebitCodec>(
      scales, reinterpret_cast<const uint8_t*>(bits), n, block, detail::GroupAdd{acc}, stream);
}

// ---- explicit instantiations ----------------------------------------------------------------
#define TERSE_CONVERT(In, Out) \
  template cudaError_t convert<In, Out>(const In*, Out*, size_t, float, float*, cudaStream_t);
#define TERSE_CONVERT_FROM(In) \
  TERSE_CONVERT(In, float)     \
  TERSE_CONVERT(In, Half)      \
  TERSE_CONVERT(In, BFloat16)
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_CONVERT_FROM)
#undef TERSE_CONVERT_FROM
#undef TERSE_CONVERT

#define TERSE_PER_TYPE(T)                                                                     \
  template cudaError_t accumulate<T>(const T*, float*, size_t, cudaStream_t);                 \
  template cudaError_t int8Dequantize<T>(const float*, const int8_t*, size_t, size_t, T*,     \
                                         cudaStream_t);                                       \
  template cudaError_t onebitDecompress<T>(const float*, const uint32_t*, size_t, size_t, T*, \
                                           cudaStream_t);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_PER_TYPE)
#undef TERSE_PER_TYPE

}  // namespace terse::kernels::cuda
