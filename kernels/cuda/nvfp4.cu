// NVFP4 on CUDA, over numeric.h's nvfp4 formulas like kernels/cpu/nvfp4.cc, so both write the
// same bytes: the message's largest finite magnitude is an integer max (order independent), the
// rest per block. Three kernels on the stream: the max (atomicMax into device scratch), the
// blocks (a thread per 16-element block, reading the max), and the float32 scale from the max.
#include "launch.cuh"

namespace terse::kernels::cuda {
namespace {

using detail::gridFor;
using detail::kThreads;

constexpr size_t kBlock = num::kNvfp4Block;

template <typename In>
__device__ __forceinline__ float inputValue(const In* in, const float* residual, size_t i) {
  float v = num::load(in, i);
  return residual ? num::feedbackSum(v, residual[i]) : v;
}

template <typename In>
__global__ void amaxKernel(const In* in, size_t n, const float* residual, uint32_t* keyMax) {
  uint32_t m = 0;
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads) {
    uint32_t key = num::magnitudeKey(inputValue(in, residual, i));
    if (key < 0x7f800000u) m = key > m ? key : m;
  }
  for (int d = 16; d > 0; d >>= 1) {
    uint32_t other = __shfl_xor_sync(0xffffffffu, m, d);
    m = other > m ? other : m;
  }
  if ((threadIdx.x & 31u) == 0 && m) atomicMax(keyMax, m);
}

template <typename In>
__global__ void quantizeKernel(const In* in, size_t n, bool st, uint64_t seed, float* residual,
                               const uint32_t* keyMax, uint8_t* scales, uint8_t* codes) {
  float t = num::nvfp4TensorScale(*keyMax);
  size_t blocks = n / kBlock + (n % kBlock != 0);
  for (size_t b = blockIdx.x * size_t{kThreads} + threadIdx.x; b < blocks;
       b += size_t{gridDim.x} * kThreads) {
    size_t s = b * kBlock, end = s + kBlock < n ? s + kBlock : n;
    uint32_t blockKey = 0;
    for (size_t i = s; i < end; ++i) {
      uint32_t key = num::magnitudeKey(inputValue(in, residual, i));
      blockKey = key > blockKey ? key : blockKey;
    }
    uint32_t code = num::nvfp4ScaleCode(blockKey, t);
    scales[b] = static_cast<uint8_t>(code);
    float sv = num::nvfp4ScaleValue(code, t);
    float inv = num::int8InvScale(sv);
    uint32_t lo = 0;
    for (size_t i = s; i < end; ++i) {
      float v = inputValue(in, residual, i);
      uint32_t c = num::fpEncodeScaled<num::E2M1>(v, inv, st, st ? num::uniform01(seed, i) : 0.0f);
      if (residual) residual[i] = num::residualOf(v, num::fpDecode<num::E2M1>(c) * sv);
      if (i & 1)
        codes[i / 2] = static_cast<uint8_t>(lo | (c << 4));
      else
        lo = c;
    }
    if (end & 1) codes[end / 2] = static_cast<uint8_t>(lo);  // an odd n: high nibble 0
  }
}

__global__ void tensorScaleKernel(const uint32_t* keyMax, float* tensorScale) {
  *tensorScale = num::nvfp4TensorScale(*keyMax);
}

template <typename Put>
__global__ void decodeKernel(const float* tensorScale, const uint8_t* scales, const uint8_t* codes,
                             size_t n, Put put) {
  float t = *tensorScale;
  size_t pairs = (n + 1) / 2;
  for (size_t p = blockIdx.x * size_t{kThreads} + threadIdx.x; p < pairs;
       p += size_t{gridDim.x} * kThreads) {
    size_t i = 2 * p;
    uint32_t byte = codes[p];
    float sv = num::nvfp4ScaleValue(scales[i / kBlock], t);  // i and i + 1 share a block
    put(i, num::fpDecode<num::E2M1>(byte & 0xfu) * sv);
    if (i + 1 < n) put(i + 1, num::fpDecode<num::E2M1>(byte >> 4) * sv);
  }
}

}  // namespace

template <typename In>
cudaError_t nvfp4Quantize(const In* in, size_t n, Rounding rounding, uint64_t seed, float* residual,
                          uint32_t* amaxScratch, float* tensorScale, uint8_t* scales,
                          uint8_t* codes, cudaStream_t stream) {
  if (amaxScratch == nullptr || tensorScale == nullptr) return cudaErrorInvalidValue;
  if (n > 0 && (in == nullptr || scales == nullptr || codes == nullptr))
    return cudaErrorInvalidValue;
  TERSE_CUDA_TRY(cudaMemsetAsync(amaxScratch, 0, sizeof(uint32_t), stream));
  if (n > 0) {
    amaxKernel<In><<<gridFor(n), kThreads, 0, stream>>>(in, n, residual, amaxScratch);
    TERSE_CUDA_TRY(detail::lastLaunchError());
    size_t blocks = n / kBlock + (n % kBlock != 0);
    quantizeKernel<In><<<gridFor(blocks), kThreads, 0, stream>>>(
        in, n, rounding == Rounding::kStochastic, seed, residual, amaxScratch, scales, codes);
    TERSE_CUDA_TRY(detail::lastLaunchError());
  }
  tensorScaleKernel<<<1, 1, 0, stream>>>(amaxScratch, tensorScale);
  return detail::lastLaunchError();
}

template <typename Out>
cudaError_t nvfp4Dequantize(const float* tensorScale, const uint8_t* scales, const uint8_t* codes,
                            size_t n, Out* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (!tensorScale || !scales || !codes || !out) return cudaErrorInvalidValue;
  decodeKernel<<<gridFor((n + 1) / 2), kThreads, 0, stream>>>(tensorScale, scales, codes, n,
                                                              detail::StoreOut<Out>{out});
  return detail::lastLaunchError();
}

cudaError_t nvfp4DequantizeAccumulate(const float* tensorScale, const uint8_t* scales,
                                      const uint8_t* codes, size_t n, float* acc,
                                      cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (!tensorScale || !scales || !codes || !acc) return cudaErrorInvalidValue;
  decodeKernel<<<gridFor((n + 1) / 2), kThreads, 0, stream>>>(tensorScale, scales, codes, n,
                                                              detail::AddTo{acc});
  return detail::lastLaunchError();
}

#define TERSE_PER_TYPE(T)                                                                        \
  template cudaError_t nvfp4Quantize<T>(const T*, size_t, Rounding, uint64_t, float*, uint32_t*, \
                                        float*, uint8_t*, uint8_t*, cudaStream_t);               \
  template cudaError_t nvfp4Dequantize<T>(const float*, const uint8_t*, const uint8_t*, size_t,  \
                                          T*, cudaStream_t);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_PER_TYPE)
#undef TERSE_PER_TYPE

}  // namespace terse::kernels::cuda
