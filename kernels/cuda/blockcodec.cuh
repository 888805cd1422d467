// The one-pass kernels shared by the blockwise codecs (int8, fp8, mxfp8, mxfp4, int4) and the
// decoders of those and of onebit. Only the data movement and the split among threads live
// here (tiling.h holds the index math, tested on the CPU); every value comes from numeric.h's
// functions, called exactly as the CPU kernels call them, so results stay bitwise equal.
//
// Why this shape (docs/cuda.md, "Kernel design for memory speed"): the earlier kernels gave a
// whole CUDA block of 256 threads to one codec block of 256 elements, read every element twice
// (once for the max, once to quantize) with 4-byte loads, and synchronized the block twice per
// codec block; the decoders did a 64-bit division (i / block) per element. Here a group of
// lanes holds its codec block in registers, loaded 16 bytes at a time, reduces the max by
// shuffles and quantizes what it holds; decoders take 16 elements a thread with one division.
#pragma once

#include "launch.cuh"
#include "terse/kernels/tiling.h"

namespace terse::kernels::cuda::detail {

using tiling::kChunk;
using tiling::kDecodeGroup;
using tiling::Range;

static_assert(kChunk == 4, "a chunk is one Vec4 access");
static_assert(kThreads % tiling::kWarp == 0, "whole warps per CUDA block");
static_assert(kDecodeGroup == 16, "a decode group is one 16-byte load of byte codes");

// ---- codecs as policies --------------------------------------------------------------------
// Q (quantize) and D (decode) provide: Scale; kCodeBits (8, 4 or 1); scaleFromKey(key) from the
// block's largest magnitude key; factor(s) and scaleValue(s) as the CPU computes them;
// encode(v, factor, stochastic, u) -> code; decoded(code, scaleValue) for residuals;
// value(code, s) for decoders.
struct Int8Codec {
  using Scale = float;
  static constexpr unsigned kCodeBits = 8;
  static __device__ __forceinline__ float scaleFromKey(uint32_t key) {
    return num::int8Scale(num::bitsFloat(key), key < 0x7f800000u);
  }
  static __device__ __forceinline__ float factor(float s) { return num::int8InvScale(s); }
  static __device__ __forceinline__ float scaleValue(float s) { return s; }
  static __device__ __forceinline__ uint32_t encode(float v, float inv, bool st, float u) {
    int8_t q = st ? num::int8QuantizeStochastic(v, inv, u) : num::int8QuantizeNearest(v, inv);
    return static_cast<uint8_t>(q);
  }
  static __device__ __forceinline__ int8_t asInt8(uint32_t c) {
    return static_cast<int8_t>(static_cast<uint8_t>(c));
  }
  static __device__ __forceinline__ float decoded(uint32_t c, float sv) {
    return num::int8Dequantize(asInt8(c), sv);
  }
  static __device__ __forceinline__ float value(uint32_t c, float s) {
    return num::int8Dequantize(asInt8(c), s);
  }
};

// numeric.h's low-bit format policies (FpBlockPolicy, MxPolicy, Int4Policy).
template <typename P>
struct LowbitCodec : P {
  static constexpr unsigned kCodeBits = P::kNibbles ? 4 : 8;
  static __device__ __forceinline__ float decoded(uint32_t c, float sv) {
    return P::decode(c) * sv;
  }
  static __device__ __forceinline__ float value(uint32_t c, typename P::Scale s) {
    return P::decode(c) * P::scaleValue(s);
  }
};

// onebit decoding: bit j of the bits array (LSB first in little-endian words) is element j.
struct OnebitCodec {
  using Scale = float;
  static constexpr unsigned kCodeBits = 1;
  static __device__ __forceinline__ float value(uint32_t c, float s) {
    return num::onebitDecode(c != 0u, s);
  }
};

// ---- element access --------------------------------------------------------------------------
template <typename In>
__device__ __forceinline__ float inputValue(const In* in, const float* residual, size_t i) {
  float v = num::load(in, i);
  return residual ? num::feedbackSum(v, residual[i]) : v;
}

// The values of chunk r (v = in, plus residual); elements past r.last read as 0, which cannot
// raise a max of magnitudes and are never stored. vec: the host checked alignment, and a chunk
// of kChunk elements then starts on a multiple of kChunk (block % kChunk == 0).
template <typename In>
__device__ __forceinline__ void loadChunk(const In* in, const float* residual, Range r, bool vec,
                                          float v[kChunk]) {
  if (vec && r.last - r.first == kChunk) {
    Vec4<In>::load(in, r.first, v);
    if (residual) {
      float e[kChunk];
      Vec4<float>::load(residual, r.first, e);
#pragma unroll
      for (unsigned k = 0; k < kChunk; ++k) v[k] = num::feedbackSum(v[k], e[k]);
    }
  } else {
#pragma unroll
    for (unsigned k = 0; k < kChunk; ++k)
      v[k] = r.first + k < r.last ? inputValue(in, residual, r.first + k) : 0.0f;
  }
}

// Codes c[0..kChunk) of chunk r (c[k] == 0 past r.last). Byte codes: element i is byte i.
// Nibbles: element i is the low (i even) or high nibble of byte i / 2; chunks start on even
// elements (lowbit blocks are even), so an odd-length tail leaves the last high nibble 0.
template <unsigned kBits>
__device__ __forceinline__ void storeCodes(uint8_t* codes, Range r, bool vec,
                                           const uint32_t c[kChunk]) {
  static_assert(kBits == 8 || kBits == 4, "byte or nibble codes");
  const bool full = vec && r.last - r.first == kChunk;
  if constexpr (kBits == 8) {
    if (full) {
      *reinterpret_cast<uint32_t*>(codes + r.first) =
          c[0] | (c[1] << 8) | (c[2] << 16) | (c[3] << 24);
    } else {
#pragma unroll
      for (unsigned k = 0; k < kChunk; ++k)
        if (r.first + k < r.last) codes[r.first + k] = static_cast<uint8_t>(c[k]);
    }
  } else {
    if (full) {
      *reinterpret_cast<uint16_t*>(codes + r.first / 2) =
          static_cast<uint16_t>((c[0] | (c[1] << 4)) | ((c[2] | (c[3] << 4)) << 8));
    } else {
#pragma unroll
      for (unsigned k = 0; k < kChunk; k += 2)
        if (r.first + k < r.last)
          codes[(r.first + k) / 2] = static_cast<uint8_t>(c[k] | (c[k + 1] << 4));
    }
  }
}

__device__ __forceinline__ void storeResidual(float* residual, Range r, bool vec,
                                              const float e[kChunk]) {
  if (vec && r.last - r.first == kChunk) {
    Vec4<float>::store(residual, r.first, e);
  } else {
#pragma unroll
    for (unsigned k = 0; k < kChunk; ++k)
      if (r.first + k < r.last) residual[r.first + k] = e[k];
  }
}

// ---- one-pass block quantization -------------------------------------------------------------
// kLanes lanes per codec block, kChunks chunks of kChunk elements per lane (tiling.h). Each
// element is read once (input and residual together), its value kept in registers through the
// max and the encoding, and its code and residual written by the lane that read it.
template <typename Q, typename In, unsigned kLanes, unsigned kChunks>
__global__ void __launch_bounds__(kThreads)
    registerQuantizeKernel(const In* in, size_t n, size_t block, bool vec, bool st, uint64_t seed,
                           uint64_t offset, float* residual, typename Q::Scale* scales,
                           uint8_t* codes) {
  static_assert(tiling::kWarp % kLanes == 0, "codec-block groups tile a warp");
  const unsigned laneInWarp = threadIdx.x % tiling::kWarp;
  const unsigned lane = laneInWarp % kLanes;
  const size_t warp = (size_t{blockIdx.x} * kThreads + threadIdx.x) / tiling::kWarp;
  const size_t warps = size_t{gridDim.x} * (kThreads / tiling::kWarp);
  const size_t blocks = tiling::blockCount(n, block);
  // The exit test uses the warp's first block only, so every lane of a warp runs the same steps
  // and the full-mask shuffles below always see all 32 lanes.
  for (size_t step = 0; tiling::codecBlockOf(warp, warps, step, 0, kLanes) < blocks; ++step) {
    const size_t b = tiling::codecBlockOf(warp, warps, step, laneInWarp, kLanes);
    float v[kChunks][kChunk];
    uint32_t key = 0;
#pragma unroll
    for (unsigned j = 0; j < kChunks; ++j) {
      const Range r = tiling::chunkRange(n, block, b, kLanes, lane, j);
      loadChunk(in, residual, r, vec, v[j]);
#pragma unroll
      for (unsigned k = 0; k < kChunk; ++k) {
        uint32_t kk = num::magnitudeKey(v[j][k]);
        key = kk > key ? kk : key;
      }
    }
    // An integer max is order independent: the CPU's scale, bit for bit. xor offsets below
    // kLanes stay inside the aligned group of kLanes lanes.
#pragma unroll
    for (unsigned d = kLanes / 2; d > 0; d >>= 1) {
      uint32_t other = __shfl_xor_sync(0xffffffffu, key, d);
      key = other > key ? other : key;
    }
    const typename Q::Scale s = Q::scaleFromKey(key);
    if (b < blocks && lane == 0) scales[b] = s;
    const float f = Q::factor(s), sv = Q::scaleValue(s);
#pragma unroll
    for (unsigned j = 0; j < kChunks; ++j) {
      const Range r = tiling::chunkRange(n, block, b, kLanes, lane, j);
      if (r.first == r.last) continue;
      uint32_t c[kChunk];
      float e[kChunk];
#pragma unroll
      for (unsigned k = 0; k < kChunk; ++k) {
        c[k] = 0u;
        e[k] = 0.0f;
        if (r.first + k < r.last) {
          const float u = st ? num::uniform01(seed, offset + r.first + k) : 0.0f;
          c[k] = Q::encode(v[j][k], f, st, u);
          e[k] = num::residualOf(v[j][k], Q::decoded(c[k], sv));
        }
      }
      storeCodes<Q::kCodeBits>(codes, r, vec, c);
      if (residual) storeResidual(residual, r, vec, e);
    }
  }
}

inline unsigned gridForWarps(size_t warps) {
  constexpr size_t kWarpsPerBlock = kThreads / tiling::kWarp;
  size_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks == 0) blocks = 1;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// Whether a codec block fits the register kernel; larger ones take the caller's
// CUDA-block-per-codec-block kernel.
inline bool registerQuantizeFits(size_t block) { return tiling::quantShapeFor(block).lanes != 0; }

// Launches the register kernel for this block size (registerQuantizeFits(block) must hold).
// in/residual/codes are only accessed as vectors when every codec block starts on a chunk
// boundary and the pointers allow it.
template <typename Q, typename In>
cudaError_t launchRegisterQuantize(const In* in, size_t n, size_t block, bool st, uint64_t seed,
                                   uint64_t offset, float* residual, typename Q::Scale* scales,
                                   uint8_t* codes, cudaStream_t stream) {
  const tiling::QuantShape shape = tiling::quantShapeFor(block);
  const bool vec = block % kChunk == 0 && aligned(in, Vec4<In>::kBytes) &&
                   (residual == nullptr || aligned(residual, Vec4<float>::kBytes)) &&
                   aligned(codes, kChunk * Q::kCodeBits / 8);
  const size_t warps = (tiling::blockCount(n, block) + tiling::blocksPerWarp(shape.lanes) - 1) /
                       tiling::blocksPerWarp(shape.lanes);
  const unsigned grid = gridForWarps(warps);
#define TERSE_QUANTIZE_SHAPE(L, C)                                      \
  if (shape.lanes == L && shape.chunks == C) {                          \
    registerQuantizeKernel<Q, In, L, C><<<grid, kThreads, 0, stream>>>( \
        in, n, block, vec, st, seed, offset, residual, scales, codes);  \
    return lastLaunchError();                                           \
  }
  TERSE_QUANTIZE_SHAPE(8, 1)
  TERSE_QUANTIZE_SHAPE(16, 1)
  TERSE_QUANTIZE_SHAPE(32, 1)
  TERSE_QUANTIZE_SHAPE(32, 2)
  TERSE_QUANTIZE_SHAPE(32, 4)
  TERSE_QUANTIZE_SHAPE(32, 8)
#undef TERSE_QUANTIZE_SHAPE
  return cudaErrorInvalidValue;  // a block too large: registerQuantizeFits was not asked
}

// ---- group decoding --------------------------------------------------------------------------
// Where decoded values go: stored as Out, or added to a float32 accumulator (acc[i] + v, the
// CPU's order). vec: full groups move as Vec4s (the host checked alignment).
template <typename Out>
struct GroupStore {
  Out* out;
  static constexpr size_t kAlign = Vec4<Out>::kBytes;
  const void* target() const { return out; }
  __device__ __forceinline__ void operator()(Range r, bool vec, const float v[kDecodeGroup]) const {
    if (vec && r.last - r.first == kDecodeGroup) {
#pragma unroll
      for (unsigned q = 0; q < kDecodeGroup; q += kChunk) Vec4<Out>::store(out, r.first + q, v + q);
    } else {
#pragma unroll
      for (unsigned k = 0; k < kDecodeGroup; ++k)
        if (r.first + k < r.last) num::store(out, r.first + k, v[k]);
    }
  }
};
struct GroupAdd {
  float* acc;
  static constexpr size_t kAlign = Vec4<float>::kBytes;
  const void* target() const { return acc; }
  __device__ __forceinline__ void operator()(Range r, bool vec, const float v[kDecodeGroup]) const {
    if (vec && r.last - r.first == kDecodeGroup) {
#pragma unroll
      for (unsigned q = 0; q < kDecodeGroup; q += kChunk) {
        float a[kChunk];
        Vec4<float>::load(acc, r.first + q, a);
#pragma unroll
        for (unsigned k = 0; k < kChunk; ++k) a[k] = a[k] + v[q + k];
        Vec4<float>::store(acc, r.first + q, a);
      }
    } else {
#pragma unroll
      for (unsigned k = 0; k < kDecodeGroup; ++k)
        if (r.first + k < r.last) acc[r.first + k] = acc[r.first + k] + v[k];
    }
  }
};

// Bytes of codes a decode group reads: 16 (bytes), 8 (nibbles), 2 (bits).
template <typename D>
constexpr size_t groupCodeBytes() {
  return kDecodeGroup * D::kCodeBits / 8;
}

// How a decode group loads its codes: one vector load (codes aligned to the group's bytes),
// 32-bit words (4-byte aligned, as codes inside a message are), or byte by byte.
enum class CodeLoad { kVector, kWords, kBytes };

// One thread per group of kDecodeGroup elements: one load of the group's codes, one division
// for its first scale index (tiling::ScaleWalk), then a step at each block boundary.
template <typename D, typename Put>
__global__ void __launch_bounds__(kThreads)
    groupDecodeKernel(const typename D::Scale* scales, const uint8_t* codes, size_t n, size_t block,
                      CodeLoad load, bool vecOut, Put put) {
  constexpr unsigned kBits = D::kCodeBits;
  constexpr unsigned kBytes = static_cast<unsigned>(groupCodeBytes<D>());
  static_assert(kBytes == 16 || kBytes == 8 || kBytes == 2, "one vector load per group");
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const size_t groups = tiling::decodeGroups(n);
  for (size_t g = size_t{blockIdx.x} * kThreads + threadIdx.x; g < groups;
       g += size_t{gridDim.x} * kThreads) {
    const Range r = tiling::decodeRange(n, g);
    const uint8_t* src = codes + r.first / 8 * kBits;  // r.first is a multiple of 16
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    const bool whole = r.last - r.first == kDecodeGroup;
    if (whole && load == CodeLoad::kWords && kBytes >= 4) {
      // Codes inside a message start 4-byte aligned (after the header and the padded scales), so
      // this is the path real wire buffers take when they are not 16-byte aligned.
#pragma unroll
      for (unsigned k = 0; k < kBytes / 4; ++k) w[k] = reinterpret_cast<const uint32_t*>(src)[k];
    } else if (whole && load == CodeLoad::kVector) {
      if constexpr (kBytes == 16) {
        uint4 x = *reinterpret_cast<const uint4*>(src);
        w[0] = x.x;
        w[1] = x.y;
        w[2] = x.z;
        w[3] = x.w;
      } else if constexpr (kBytes == 8) {
        uint2 x = *reinterpret_cast<const uint2*>(src);
        w[0] = x.x;
        w[1] = x.y;
      } else {
        w[0] = *reinterpret_cast<const uint16_t*>(src);
      }
    } else {
      // Only the bytes holding the group's elements: the array may end right after them.
      const size_t bytes = ((r.last - r.first) * kBits + 7) / 8;
#pragma unroll
      for (unsigned k = 0; k < kBytes; ++k)
        if (k < bytes) w[k / 4] |= static_cast<uint32_t>(src[k]) << (8 * (k % 4));
    }
    tiling::ScaleWalk walk(r.first, block);
    typename D::Scale s = scales[walk.index];
    float v[kDecodeGroup];
#pragma unroll
    for (unsigned k = 0; k < kDecodeGroup; ++k) {
      if (r.first + k < r.last && walk.advance(r.first + k)) s = scales[walk.index];
      const uint32_t c = (w[(k * kBits) / 32] >> ((k * kBits) % 32)) & kMask;
      v[k] = D::value(c, s);
    }
    put(r, vecOut, v);
  }
}

template <typename D, typename Put>
cudaError_t launchGroupDecode(const typename D::Scale* scales, const uint8_t* codes, size_t n,
                              size_t block, Put put, cudaStream_t stream) {
  // The codes' alignment and the output's are independent: a message's codes are only 4-byte
  // aligned (header, padded scales), which must not cost the output its vector stores.
  const CodeLoad load = aligned(codes, groupCodeBytes<D>()) ? CodeLoad::kVector
                        : aligned(codes, 4)                 ? CodeLoad::kWords
                                                            : CodeLoad::kBytes;
  const bool vecOut = aligned(put.target(), Put::kAlign);
  groupDecodeKernel<D, Put><<<gridFor(tiling::decodeGroups(n)), kThreads, 0, stream>>>(
      scales, codes, n, block, load, vecOut, put);
  return lastLaunchError();
}

}  // namespace terse::kernels::cuda::detail
