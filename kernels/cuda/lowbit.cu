// CUDA versions of the low-bit block formats (fp8, mxfp8, mxfp4, int4), over numeric.h's format
// policies like kernels/cpu/lowbit.cc, so both write the same bytes: the scale comes from an
// integer max (order independent), and every element from the same formulas.
//
// Encoding: blocks up to tiling::kMaxRegisterBlock (every codec default: mx 32, int4 64, fp8
// 256) take blockcodec.cuh's one-pass register kernel, a group of lanes per codec block; larger
// blocks take one CUDA block each, a thread per element pair. Each element is read and written
// by one thread only, so the residual is read before it is overwritten. Decoding is
// blockcodec.cuh's group decoder.
#include "blockcodec.cuh"
#include "launch.cuh"

#include <cub/block/block_reduce.cuh>

namespace terse::kernels::cuda {
namespace {

using detail::kThreads;

struct MaxKeyOp {
  __device__ __forceinline__ uint32_t operator()(uint32_t a, uint32_t b) const {
    return a > b ? a : b;
  }
};
using BlockReduceU = cub::BlockReduce<uint32_t, kThreads>;

template <typename In>
__device__ __forceinline__ float inputValue(const In* in, const float* residual, size_t i) {
  float v = num::load(in, i);
  return residual ? num::feedbackSum(v, residual[i]) : v;
}

__host__ __device__ inline size_t blockCount(size_t n, size_t block) {
  return n / block + (n % block != 0);
}

// Code of element i (and its residual), given the block's scale.
template <typename P, typename In>
__device__ __forceinline__ uint32_t encodeOne(const In* in, size_t i, float* residual, float inv,
                                              float sv, bool st, uint64_t seed, uint64_t offset) {
  float v = inputValue(in, residual, i);
  uint32_t c = P::encode(v, inv, st, st ? num::uniform01(seed, offset + i) : 0.0f);
  if (residual) residual[i] = num::residualOf(v, P::decode(c) * sv);
  return c;
}

// Larger blocks: CUDA block per codec block, thread t takes element pairs 2t, 2t+1, ...
template <typename P, typename In>
__global__ void quantizeBlockKernel(const In* in, size_t n, size_t block, bool st, uint64_t seed,
                                    uint64_t offset, float* residual, typename P::Scale* scales,
                                    uint8_t* codes) {
  __shared__ typename BlockReduceU::TempStorage temp;
  __shared__ uint32_t blockKey;
  size_t blocks = blockCount(n, block);
  for (size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    size_t begin = b * block;
    size_t end = begin + block < n ? begin + block : n;
    uint32_t maxKey = 0;
    for (size_t i = begin + threadIdx.x; i < end; i += kThreads)
      maxKey = MaxKeyOp{}(maxKey, num::magnitudeKey(inputValue(in, residual, i)));
    uint32_t k = BlockReduceU(temp).Reduce(maxKey, MaxKeyOp{});
    if (threadIdx.x == 0) blockKey = k;
    __syncthreads();
    typename P::Scale s = P::scaleFromKey(blockKey);
    if (threadIdx.x == 0) scales[b] = s;
    float inv = P::factor(s), sv = P::scaleValue(s);
    for (size_t i = begin + 2 * size_t{threadIdx.x}; i < end; i += 2 * size_t{kThreads}) {
      uint32_t lo = encodeOne<P>(in, i, residual, inv, sv, st, seed, offset);
      uint32_t hi = i + 1 < end ? encodeOne<P>(in, i + 1, residual, inv, sv, st, seed, offset) : 0u;
      if constexpr (P::kNibbles) {
        codes[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
      } else {
        codes[i] = static_cast<uint8_t>(lo);
        if (i + 1 < end) codes[i + 1] = static_cast<uint8_t>(hi);
      }
    }
    __syncthreads();  // temp and blockKey are reused by the next codec block
  }
}

template <typename Fn>
cudaError_t withPolicy(LowbitFormat f, Fn&& fn) {
  switch (f) {
    case LowbitFormat::kFp8E4M3: return fn(num::FpBlockPolicy<num::E4M3>{});
    case LowbitFormat::kFp8E5M2: return fn(num::FpBlockPolicy<num::E5M2>{});
    case LowbitFormat::kMxfp8: return fn(num::MxPolicy<num::E4M3>{});
    case LowbitFormat::kMxfp4: return fn(num::MxPolicy<num::E2M1>{});
    case LowbitFormat::kInt4: return fn(num::Int4Policy{});
  }
  return cudaErrorInvalidValue;
}

unsigned gridForBlocks(size_t blocks) {
  return static_cast<unsigned>(blocks < detail::kMaxBlocks ? blocks : detail::kMaxBlocks);
}

}  // namespace

template <typename In>
cudaError_t lowbitQuantize(LowbitFormat f, const In* in, size_t n, size_t block, Rounding rounding,
                           uint64_t seed, uint64_t offset, float* residual, void* scales,
                           uint8_t* codes, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block < 32 || block % 2 != 0 || in == nullptr || scales == nullptr || codes == nullptr)
    return cudaErrorInvalidValue;
  bool st = rounding == Rounding::kStochastic;
  return withPolicy(f, [&](auto p) {
    using P = decltype(p);
    auto* sc = static_cast<typename P::Scale*>(scales);
    if (detail::registerQuantizeFits(block)) {
      return detail::launchRegisterQuantize<detail::LowbitCodec<P>>(in, n, block, st, seed, offset,
                                                                    residual, sc, codes, stream);
    }
    quantizeBlockKernel<P, In><<<gridForBlocks(blockCount(n, block)), kThreads, 0, stream>>>(
        in, n, block, st, seed, offset, residual, sc, codes);
    return detail::lastLaunchError();
  });
}

template <typename Out>
cudaError_t lowbitDequantize(LowbitFormat f, const void* scales, const uint8_t* codes, size_t n,
                             size_t block, Out* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block == 0 || scales == nullptr || codes == nullptr || out == nullptr)
    return cudaErrorInvalidValue;
  return withPolicy(f, [&](auto p) {
    using P = decltype(p);
    return detail::launchGroupDecode<detail::LowbitCodec<P>>(
        static_cast<const typename P::Scale*>(scales), codes, n, block,
        detail::GroupStore<Out>{out}, stream);
  });
}

cudaError_t lowbitDequantizeAccumulate(LowbitFormat f, const void* scales, const uint8_t* codes,
                                       size_t n, size_t block, float* acc, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block == 0 || scales == nullptr || codes == nullptr || acc == nullptr)
    return cudaErrorInvalidValue;
  return withPolicy(f, [&](auto p) {
    using P = decltype(p);
    return detail::launchGroupDecode<detail::LowbitCodec<P>>(
        static_cast<const typename P::Scale*>(scales), codes, n, block, detail::GroupAdd{acc},
        stream);
  });
}

#define TERSE_PER_TYPE(T)                                                                     \
  template cudaError_t lowbitQuantize<T>(LowbitFormat, const T*, size_t, size_t, Rounding,    \
                                         uint64_t, uint64_t, float*, void*, uint8_t*,         \
                                         cudaStream_t);                                       \
  template cudaError_t lowbitDequantize<T>(LowbitFormat, const void*, const uint8_t*, size_t, \
                                           size_t, T*, cudaStream_t);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_PER_TYPE)
#undef TERSE_PER_TYPE

}  // namespace terse::kernels::cuda
