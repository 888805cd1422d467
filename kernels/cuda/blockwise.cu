// Blockwise CUDA encoders: int8 (absmax scale per block) and onebit (mean-magnitude scale per
// block, signs packed 32 to a word). int8 blocks up to tiling::kMaxRegisterBlock take the
// one-pass register kernel of blockcodec.cuh (a group of lanes per codec block); larger ones
// keep one CUDA block per codec block, reduced with cub::BlockReduce. Either way the
// per-element work uses the scale through numeric.h, exactly as the CPU path does.
//
// int8 scales are a max, which is order independent, so they match the CPU bitwise. onebit
// scales are a float sum, computed in the CPU's order (numeric.h, onebitLaneSum: eight lanes,
// one thread each), so they match bitwise too; bits and residuals follow from the scale.
// Residuals go through num::residualOf (non-finite differences leave 0), like the CPU.
#include "blockcodec.cuh"
#include "launch.cuh"

#include <cub/block/block_reduce.cuh>

namespace terse::kernels::cuda {
namespace {

using detail::gridFor;
using detail::kThreads;

struct MaxKeyOp {
  __device__ __forceinline__ uint32_t operator()(uint32_t a, uint32_t b) const {
    return a > b ? a : b;
  }
};
using BlockReduceU = cub::BlockReduce<uint32_t, kThreads>;

// Keys at or above this are Inf or NaN (magnitudeKey clears the sign).
constexpr uint32_t kNonFiniteKey = 0x7f800000u;

template <typename In>
__device__ __forceinline__ float inputValue(const In* in, const float* residual, size_t i) {
  float v = num::load(in, i);
  return residual ? num::feedbackSum(v, residual[i]) : v;
}

__host__ __device__ inline size_t blockCount(size_t n, size_t block) {
  return n / block + (n % block != 0);
}

unsigned gridForBlocks(size_t blocks) {
  return static_cast<unsigned>(blocks < detail::kMaxBlocks ? blocks : detail::kMaxBlocks);
}

// ---- int8 -----------------------------------------------------------------------------------
// Blocks larger than the register kernel holds: one CUDA block per codec block (grid-stride over
// blocks): reduce absmax and all-finite, then quantize the same elements. Each element is read and
// written by one thread only, so reading the residual twice sees the old value both times.
template <typename In>
__global__ void int8QuantizeKernel(const In* in, size_t n, size_t block, Rounding rounding,
                                   uint64_t seed, uint64_t offset, float* residual, float* scales,
                                   int8_t* q) {
  __shared__ typename BlockReduceU::TempStorage temp;
  __shared__ float blockScale;
  size_t blocks = blockCount(n, block);
  for (size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    size_t begin = b * block;
    size_t end = begin + block < n ? begin + block : n;
    // The largest magnitude as its order-preserving key (as on the CPU): an integer max is
    // exact, and a key >= kNonFiniteKey flags Inf/NaN in the block.
    uint32_t maxKey = 0;
    for (size_t i = begin + threadIdx.x; i < end; i += kThreads) {
      uint32_t key = num::magnitudeKey(inputValue(in, residual, i));
      maxKey = key > maxKey ? key : maxKey;
    }
    uint32_t blockMax = BlockReduceU(temp).Reduce(maxKey, MaxKeyOp{});
    if (threadIdx.x == 0) {
      float s = num::int8Scale(num::bitsFloat(blockMax), blockMax < kNonFiniteKey);
      scales[b] = s;
      blockScale = s;
    }
    __syncthreads();
    float scale = blockScale;
    float inv = num::int8InvScale(scale);
    for (size_t i = begin + threadIdx.x; i < end; i += kThreads) {
      float v = inputValue(in, residual, i);
      int8_t qi = rounding == Rounding::kStochastic
                      ? num::int8QuantizeStochastic(v, inv, num::uniform01(seed, offset + i))
                      : num::int8QuantizeNearest(v, inv);
      q[i] = qi;
      if (residual) residual[i] = num::residualOf(v, num::int8Dequantize(qi, scale));
    }
    __syncthreads();  // temp and blockScale are reused by the next codec block
  }
}

// ---- onebit ---------------------------------------------------------------------------------
// One pass, for blocks that are multiples of 32 up to kOnebitTile (the codec's 2048 included):
// a CUDA block takes a tile of whole codec blocks, kOnebitTile elements at most, each thread 8
// consecutive elements, loaded once and kept in registers. The signs need no scale, so the
// thread's 8 bits go out at once (4 threads' bytes make a word; tiles start on whole words).
// The magnitudes go to shared memory, where thread 8c + l adds lane l of codec block c
// (elements l, l + 8, ... in index order, numeric.h's onebitLaneSum order, the CPU's): a sum is
// order dependent, so its order is the CPU's and only the loads are parallel. The scales then
// come back through shared memory for the residuals of the values still in registers.
constexpr size_t kOnebitTile = 2048;
constexpr unsigned kOnebitPerThread = 8;
static_assert(kOnebitTile == size_t{kThreads} * kOnebitPerThread, "8 elements a thread");
static_assert(kOnebitPerThread == 2 * detail::kChunk, "two Vec4 accesses a thread");
static_assert(num::kOnebitLanes == 8 && 32 % num::kOnebitLanes == 0, "lane groups tile a warp");

bool onebitTileFits(size_t block) { return block % 32 == 0 && block <= kOnebitTile; }

template <typename In>
__global__ void __launch_bounds__(kThreads)
    onebitTileKernel(const In* in, size_t n, size_t block, bool vec, float* residual, float* scales,
                     uint32_t* bits) {
  constexpr unsigned kLanes = num::kOnebitLanes;
  __shared__ float mag[kOnebitTile];
  __shared__ float tileScale[kOnebitTile / 32];  // codec blocks of a tile: block >= 32
  const size_t perTile = kOnebitTile / block;
  const size_t tileLen = perTile * block;  // a multiple of 32: words never straddle tiles
  const size_t tiles = blockCount(n, tileLen);
  const size_t chains = perTile * kLanes;  // one per (codec block, lane)
  const size_t chainSteps = (chains + kThreads - 1) / kThreads;
  const unsigned first = threadIdx.x * kOnebitPerThread;             // tile-relative
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // uniform per CUDA block
    const size_t base = tile * tileLen;
    const size_t len = n - base < tileLen ? n - base : tileLen;
    const size_t mine =
        first < len ? (len - first < kOnebitPerThread ? len - first : kOnebitPerThread) : 0;
    float v[kOnebitPerThread];
    if (vec && mine == kOnebitPerThread) {
      detail::Vec4<In>::load(in, base + first, v);
      detail::Vec4<In>::load(in, base + first + 4, v + 4);
      if (residual) {
        float e[kOnebitPerThread];
        detail::Vec4<float>::load(residual, base + first, e);
        detail::Vec4<float>::load(residual, base + first + 4, e + 4);
#pragma unroll
        for (unsigned k = 0; k < kOnebitPerThread; ++k) v[k] = num::feedbackSum(v[k], e[k]);
      }
    } else {
#pragma unroll
      for (unsigned k = 0; k < kOnebitPerThread; ++k)
        v[k] = k < mine ? inputValue(in, residual, base + first + k) : 0.0f;
    }
    uint32_t byte = 0;
#pragma unroll
    for (unsigned k = 0; k < kOnebitPerThread; ++k) {
      // The CPU adds bitsFloat(magnitudeKey(v)) (|v|, NaN included); zeros past the end are
      // never added (the chains stop at the codec block's end).
      mag[first + k] = num::bitsFloat(num::magnitudeKey(v[k]));
      if (k < mine) byte |= static_cast<uint32_t>(num::onebitBit(v[k])) << k;
    }
    // Word w of the tile is threads 4w..4w+3's bytes; bits past n stay 0, as on the CPU.
    const uint32_t word = byte | (__shfl_down_sync(0xffffffffu, byte, 1) << 8) |
                          (__shfl_down_sync(0xffffffffu, byte, 2) << 16) |
                          (__shfl_down_sync(0xffffffffu, byte, 3) << 24);
    if (threadIdx.x % 4 == 0 && mine > 0) bits[(base + first) / 32] = word;
    __syncthreads();
    for (size_t step = 0; step < chainSteps; ++step) {  // the same count on every thread
      const size_t chain = step * kThreads + threadIdx.x;
      const size_t c = chain / kLanes;
      const unsigned lane = threadIdx.x % kLanes;
      const size_t cbBegin = c * block;
      const size_t cbEnd =
          c < perTile && cbBegin < len ? (cbBegin + block < len ? cbBegin + block : len) : cbBegin;
      float part = 0.0f;
      int finite = 1;
      for (size_t i = cbBegin + lane; i < cbEnd; i += kLanes) {
        part += mag[i];
        finite &= num::isFinite(mag[i]) ? 1 : 0;
      }
      float parts[kLanes];
      int allFinite = 1;
      const unsigned groupBase = (threadIdx.x % 32) / kLanes * kLanes;
#pragma unroll
      for (unsigned l = 0; l < kLanes; ++l) {
        parts[l] = __shfl_sync(0xffffffffu, part, groupBase + l);
        allFinite &= __shfl_sync(0xffffffffu, finite, groupBase + l);
      }
      if (lane == 0 && cbBegin < cbEnd) {
        const auto count = static_cast<uint32_t>(cbEnd - cbBegin);
        float scale = num::onebitScale(num::onebitLaneSum(parts), count, allFinite != 0);
        if (num::onebitSumOverflowed(scale, allFinite != 0)) {
          // Rare (magnitudes near 3e38): the CPU's plain index-order loop, on this one thread.
          float scaled = 0.0f;
          for (size_t i = cbBegin; i < cbEnd; ++i) scaled += mag[i] * num::kOnebitWideSumScale;
          scale = num::onebitScaleFromScaledSum(scaled, count);
        }
        scales[tile * perTile + c] = scale;
        tileScale[c] = scale;
      }
    }
    __syncthreads();
    if (residual && mine > 0) {
      // block % 8 == 0: a thread's 8 elements lie in one codec block.
      const float scale = tileScale[first / block];
      float e[kOnebitPerThread];
#pragma unroll
      for (unsigned k = 0; k < kOnebitPerThread; ++k)
        e[k] = num::residualOf(v[k], num::onebitDecode(num::onebitBit(v[k]), scale));
      if (vec && mine == kOnebitPerThread) {
        detail::Vec4<float>::store(residual, base + first, e);
        detail::Vec4<float>::store(residual, base + first + 4, e + 4);
      } else {
#pragma unroll
        for (unsigned k = 0; k < kOnebitPerThread; ++k)
          if (k < mine) residual[base + first + k] = e[k];
      }
    }
    __syncthreads();  // mag and tileScale are reused by the next tile
  }
}

// Other block sizes: two kernels, the scales first.
// Eight threads per codec block, one per lane of numeric.h's sum order: lane l adds |v| of the
// block's elements l, l + 8, ... in index order, the group's first thread gathers the eight
// partial sums by shuffle and combines them as the CPU does. Four groups share a warp, and every
// warp runs the same trip count (the bound is rounded up to whole warps) so the shuffles see all
// their lanes. Reads stay in full 32-byte sectors (eight consecutive floats a group and step).
template <typename In>
__global__ void onebitScaleKernel(const In* in, size_t n, size_t block, const float* residual,
                                  float* scales) {
  constexpr unsigned kLanes = num::kOnebitLanes;
  constexpr size_t kGroupsPerWarp = 32 / kLanes;
  const size_t blocks = blockCount(n, block);
  const size_t stride = size_t{gridDim.x} * blockDim.x / kLanes;
  const size_t limit = (blocks + kGroupsPerWarp - 1) / kGroupsPerWarp * kGroupsPerWarp;
  const unsigned lane = threadIdx.x % kLanes;
  const unsigned groupBase = (threadIdx.x % 32) / kLanes * kLanes;
  for (size_t b = (size_t{blockIdx.x} * blockDim.x + threadIdx.x) / kLanes; b < limit;
       b += stride) {
    const size_t begin = b * block;
    const size_t end = b < blocks ? (begin + block < n ? begin + block : n) : begin;
    float part = 0.0f;
    int finite = 1;
    for (size_t i = begin + lane; i < end; i += kLanes) {
      float v = inputValue(in, residual, i);
      part += fabsf(v);
      finite &= num::isFinite(v) ? 1 : 0;
    }
    float parts[kLanes];
    int allFinite = 1;
    for (unsigned l = 0; l < kLanes; ++l) {
      parts[l] = __shfl_sync(0xffffffffu, part, groupBase + l);
      allFinite &= __shfl_sync(0xffffffffu, finite, groupBase + l);
    }
    if (lane != 0 || b >= blocks) continue;
    const auto count = static_cast<uint32_t>(end - begin);
    float scale = num::onebitScale(num::onebitLaneSum(parts), count, allFinite != 0);
    if (num::onebitSumOverflowed(scale, allFinite != 0)) {
      // Rare (magnitudes near 3e38): the CPU's plain index-order loop, on this one thread.
      float scaled = 0.0f;
      for (size_t i = begin; i < end; ++i)
        scaled += fabsf(inputValue(in, residual, i)) * num::kOnebitWideSumScale;
      scale = num::onebitScaleFromScaledSum(scaled, count);
    }
    scales[b] = scale;
  }
}

// Element i is handled by lane i % 32 of some warp (blocks of 256 threads and a grid stride
// that is a multiple of 32), so one ballot yields word i / 32 and lane 0 stores it. The loop
// bound is rounded up to whole words so every lane of a warp takes the same trip count.
template <typename In>
__global__ void onebitPackKernel(const In* in, size_t n, size_t block, float* residual,
                                 const float* scales, uint32_t* bits) {
  size_t padded = (n + 31) / 32 * 32;
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < padded;
       i += size_t{gridDim.x} * kThreads) {
    bool inRange = i < n;
    float v = 0.0f;
    bool bit = false;
    if (inRange) {
      v = inputValue(in, residual, i);
      bit = num::onebitBit(v);
    }
    uint32_t word = __ballot_sync(0xffffffffu, inRange && bit);
    if ((threadIdx.x & 31u) == 0) bits[i / 32] = word;
    if (inRange && residual)
      residual[i] = num::residualOf(v, num::onebitDecode(bit, scales[i / block]));
  }
}

}  // namespace

template <typename In>
cudaError_t int8Quantize(const In* in, size_t n, size_t block, Rounding rounding, uint64_t seed,
                         uint64_t offset, float* residual, float* scales, int8_t* q,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block == 0 || in == nullptr || scales == nullptr || q == nullptr)
    return cudaErrorInvalidValue;
  if (detail::registerQuantizeFits(block)) {
    return detail::launchRegisterQuantize<detail::Int8Codec>(
        in, n, block, rounding == Rounding::kStochastic, seed, offset, residual, scales,
        reinterpret_cast<uint8_t*>(q), stream);
  }
  int8QuantizeKernel<In><<<gridForBlocks(blockCount(n, block)), kThreads, 0, stream>>>(
      in, n, block, rounding, seed, offset, residual, scales, q);
  return detail::lastLaunchError();
}

template <typename In>
cudaError_t onebitCompress(const In* in, size_t n, size_t block, float* residual, float* scales,
                           uint32_t* bits, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block == 0 || in == nullptr || scales == nullptr || bits == nullptr)
    return cudaErrorInvalidValue;
  if (onebitTileFits(block)) {
    const bool vec =
        detail::aligned(in, detail::Vec4<In>::kBytes) &&
        (residual == nullptr || detail::aligned(residual, detail::Vec4<float>::kBytes));
    const size_t tiles = blockCount(n, kOnebitTile / block * block);
    onebitTileKernel<In>
        <<<gridForBlocks(tiles), kThreads, 0, stream>>>(in, n, block, vec, residual, scales, bits);
    return detail::lastLaunchError();
  }
  // Two kernels because a 32-element word can straddle two codec blocks when block % 32 != 0;
  // the scales are complete before any residual is updated.
  onebitScaleKernel<In><<<gridFor(blockCount(n, block) * num::kOnebitLanes), kThreads, 0, stream>>>(
      in, n, block, residual, scales);
  TERSE_CUDA_TRY(detail::lastLaunchError());
  onebitPackKernel<In><<<gridFor(n), kThreads, 0, stream>>>(in, n, block, residual, scales, bits);
  return detail::lastLaunchError();
}

#define TERSE_PER_TYPE(T)                                                                      \
  template cudaError_t int8Quantize<T>(const T*, size_t, size_t, Rounding, uint64_t, uint64_t, \
                                       float*, float*, int8_t*, cudaStream_t);                 \
  template cudaError_t onebitCompress<T>(const T*, size_t, size_t, float*, float*, uint32_t*,  \
                                         cudaStream_t);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_PER_TYPE)
#undef TERSE_PER_TYPE

}  // namespace terse::kernels::cuda
