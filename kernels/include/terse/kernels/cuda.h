// CUDA versions of kernels.h: same names, same arguments, device pointers, plus the stream last.
// All calls are asynchronous on `stream` unless documented otherwise. Only declared when the
// build has CUDA (TERSE_HAVE_CUDA=1); the CPU build never sees cuda_runtime.h.
#pragma once

#include "terse/kernels/kernels.h"

#if TERSE_HAVE_CUDA
#include <cuda_runtime.h>

namespace terse::kernels::cuda {

using Rounding = ::terse::kernels::Rounding;

// Device queries (is there a device, what memory is a pointer) are terse::device's
// (kernels/include/terse/kernels/device.h): this header is the kernels alone.

template <typename In, typename Out>
cudaError_t convert(const In* in, Out* out, size_t n, float scale, float* residual,
                    cudaStream_t stream);
template <typename In>
cudaError_t accumulate(const In* in, float* acc, size_t n, cudaStream_t stream);

template <typename In>
cudaError_t int8Quantize(const In* in, size_t n, size_t block, Rounding rounding, uint64_t seed,
                         uint64_t offset, float* residual, float* scales, int8_t* q,
                         cudaStream_t stream);
template <typename Out>
cudaError_t int8Dequantize(const float* scales, const int8_t* q, size_t n, size_t block, Out* out,
                           cudaStream_t stream);
cudaError_t int8DequantizeAccumulate(const float* scales, const int8_t* q, size_t n, size_t block,
                                     float* acc, cudaStream_t stream);

template <typename In>
cudaError_t onebitCompress(const In* in, size_t n, size_t block, float* residual, float* scales,
                           uint32_t* bits, cudaStream_t stream);
template <typename Out>
cudaError_t onebitDecompress(const float* scales, const uint32_t* bits, size_t n, size_t block,
                             Out* out, cudaStream_t stream);
cudaError_t onebitDecompressAccumulate(const float* scales, const uint32_t* bits, size_t n,
                                       size_t block, float* acc, cudaStream_t stream);

// The low-bit block formats (kernels.h's layout and contract; block >= 32 and even).
using LowbitFormat = ::terse::kernels::LowbitFormat;
template <typename In>
cudaError_t lowbitQuantize(LowbitFormat f, const In* in, size_t n, size_t block, Rounding rounding,
                           uint64_t seed, uint64_t offset, float* residual, void* scales,
                           uint8_t* codes, cudaStream_t stream);
template <typename Out>
cudaError_t lowbitDequantize(LowbitFormat f, const void* scales, const uint8_t* codes, size_t n,
                             size_t block, Out* out, cudaStream_t stream);
cudaError_t lowbitDequantizeAccumulate(LowbitFormat f, const void* scales, const uint8_t* codes,
                                       size_t n, size_t block, float* acc, cudaStream_t stream);

// NVFP4 (kernels.h's layout and contract). amaxScratch: 4 bytes of device memory for the
// message's largest magnitude between the kernels (the wire may be pinned host memory, where
// device atomics are not to be relied on).
template <typename In>
cudaError_t nvfp4Quantize(const In* in, size_t n, Rounding rounding, uint64_t seed, float* residual,
                          uint32_t* amaxScratch, float* tensorScale, uint8_t* scales,
                          uint8_t* codes, cudaStream_t stream);
template <typename Out>
cudaError_t nvfp4Dequantize(const float* tensorScale, const uint8_t* scales, const uint8_t* codes,
                            size_t n, Out* out, cudaStream_t stream);
cudaError_t nvfp4DequantizeAccumulate(const float* tensorScale, const uint8_t* scales,
                                      const uint8_t* codes, size_t n, float* acc,
                                      cudaStream_t stream);

// Device scratch for topkCompress (CUB temp storage included).
size_t topkScratchBytes(size_t n);
// Exact top-k (CUB radix select over magnitude keys); writes *kOut (host pointer) after
// synchronizing the stream, since the wire size depends on it.
template <typename In>
cudaError_t topkCompress(const In* in, size_t n, size_t k, float* residual, void* scratch,
                         size_t scratchBytes, uint32_t* indices, float* values, size_t* kOut,
                         cudaStream_t stream);
// Validates indices on the device first; *valid (host) is false and nothing is written when an
// index is out of range or not ascending. Synchronizes the stream.
template <typename Out>
cudaError_t topkDecompress(const uint32_t* indices, const float* values, size_t k, size_t n,
                           Out* out, bool* valid, cudaStream_t stream);
cudaError_t topkDecompressAccumulate(const uint32_t* indices, const float* values, size_t k,
                                     size_t n, float* acc, bool* valid, cudaStream_t stream);

cudaError_t scaleInPlace(float* acc, size_t n, float scale, cudaStream_t stream);

}  // namespace terse::kernels::cuda
#endif
