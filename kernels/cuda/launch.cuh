// Helpers shared by the CUDA translation units: launch geometry, error propagation, and the
// vector loads/stores that the elementwise kernels use when every pointer is aligned.
#pragma once

#include "terse/kernels/cuda.h"
#include "terse/kernels/instantiate.h"

#include <cstddef>
#include <cstdint>

namespace terse::kernels::cuda::detail {

// 256 threads keep occupancy high on every architecture from sm_70 on and are a multiple of
// the warp size, which the ballot-based bit packing relies on.
constexpr int kThreads = 256;
// Grid-stride loops cover any n; capping the grid keeps launch overhead flat for huge buffers
// while still filling the largest GPUs (132 SMs x 2048 threads = 1056 blocks of 256).
constexpr size_t kMaxBlocks = 8192;

inline unsigned gridFor(size_t work) {
  size_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks == 0) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

// Launch errors (bad configuration, no device) surface through cudaGetLastError; asynchronous
// faults surface at the caller's next synchronization, as with any CUDA call.
inline cudaError_t lastLaunchError() { return cudaGetLastError(); }

#define TERSE_CUDA_TRY(expr)                          \
  do {                                                \
    cudaError_t terse_err_ = (expr);                  \
    if (terse_err_ != cudaSuccess) return terse_err_; \
  } while (0)

inline bool aligned(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

// ---- four-element vector access --------------------------------------------------------------
// float moves as float4 (16 bytes), the 16-bit types as uint2 (8 bytes). Only used after the
// host checked alignment, so the reinterpret_casts are valid vector accesses.
template <typename T>
struct Vec4;

template <>
struct Vec4<float> {
  static constexpr size_t kBytes = 16;
  static __device__ __forceinline__ void load(const float* p, size_t i, float v[4]) {
    float4 x = *reinterpret_cast<const float4*>(p + i);
    v[0] = x.x;
    v[1] = x.y;
    v[2] = x.z;
    v[3] = x.w;
  }
  static __device__ __forceinline__ void store(float* p, size_t i, const float v[4]) {
    *reinterpret_cast<float4*>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
  }
};

// Half and BFloat16 share the packing; only the bit conversion differs (numeric.h).
template <typename T>
struct Vec4Bits16 {
  static constexpr size_t kBytes = 8;
  static __device__ __forceinline__ void load(const T* p, size_t i, float v[4]) {
    uint2 x = *reinterpret_cast<const uint2*>(p + i);
    T e[4] = {T{static_cast<uint16_t>(x.x & 0xffffu)}, T{static_cast<uint16_t>(x.x >> 16)},
              T{static_cast<uint16_t>(x.y & 0xffffu)}, T{static_cast<uint16_t>(x.y >> 16)}};
    for (int j = 0; j < 4; ++j) v[j] = num::load(e, j);
  }
  static __device__ __forceinline__ void store(T* p, size_t i, const float v[4]) {
    T e[4];
    for (int j = 0; j < 4; ++j) num::store(e, j, v[j]);
    uint2 x;
    x.x = static_cast<uint32_t>(e[0].bits) | (static_cast<uint32_t>(e[1].bits) << 16);
    x.y = static_cast<uint32_t>(e[2].bits) | (static_cast<uint32_t>(e[3].bits) << 16);
    *reinterpret_cast<uint2*>(p + i) = x;
  }
};
template <>
struct Vec4<Half> : Vec4Bits16<Half> {};
template <>
struct Vec4<BFloat16> : Vec4Bits16<BFloat16> {};

// Where a decoder puts element i's value v: stored as Out (decompress), or added to a float32
// accumulator (decompress-accumulate); the low-bit and nvfp4 decoders take either.
template <typename Out>
struct StoreOut {
  Out* out;
  __device__ void operator()(size_t i, float v) const { num::store(out, i, v); }
};
struct AddTo {
  float* acc;
  __device__ void operator()(size_t i, float v) const { acc[i] += v; }
};

// The device flag that the topk decoders use to validate indices before writing. One 4-byte
// allocation per (host thread, device), made on first use and reused: the decoders synchronize
// before returning, so one host thread never has two validations in flight on the flag.
cudaError_t validationFlag(int** flag);

}  // namespace terse::kernels::cuda::detail
