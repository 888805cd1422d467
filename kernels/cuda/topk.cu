// Exact top-k on the GPU and the validating sparse decoders.
//
// Selection: a stable descending radix sort of (magnitudeKey(v), index) pairs. Stability keeps
// equal keys in index order, so the first k pairs are exactly the CPU's choice (larger |v|
// first, lower index on ties, NaN above every number). The k chosen indices are then sorted
// ascending (second radix sort over only the bits an index can use) and gathered.
//
// Scratch (caller-owned, sized by topkScratchBytes): two key buffers and two index buffers of
// n uint32 each (CUB's DoubleBuffer mode, so CUB itself needs only its small temp storage),
// then CUB's temp storage. Every region starts on a 256-byte boundary.
#include "launch.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <limits>

namespace terse::kernels::cuda {
namespace {

using detail::gridFor;
using detail::kThreads;

constexpr size_t kAlign = 256;
// magnitudeKey clears the sign bit, so the keys use bits [0, 31).
constexpr int kKeyBits = 31;

size_t alignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Bits needed to represent every index below n (at least 1: CUB treats an empty bit range
// as nothing to do).
int indexBits(size_t n) {
  int bits = 1;
  while (bits < 32 && ((n - 1) >> bits) != 0) ++bits;
  return bits;
}

// Bytes of the four key/index arrays for n elements (before CUB's temp storage).
size_t arrayBytes(size_t n) { return 4 * alignUp(n * sizeof(uint32_t)); }

cudaError_t sortTempBytes(size_t n, size_t* bytes) {
  // Size queries only (null temp storage): nothing is launched and the pointers are not read.
  cub::DoubleBuffer<uint32_t> keys(nullptr, nullptr);
  cub::DoubleBuffer<uint32_t> ids(nullptr, nullptr);
  size_t pairsBytes = 0;
  size_t keysBytes = 0;
  auto items = static_cast<uint32_t>(n);
  TERSE_CUDA_TRY(cub::DeviceRadixSort::SortPairsDescending(nullptr, pairsBytes, keys, ids, items, 0,
                                                           kKeyBits));
  TERSE_CUDA_TRY(cub::DeviceRadixSort::SortKeys(nullptr, keysBytes, ids, items, 0, indexBits(n)));
  *bytes = std::max(pairsBytes, keysBytes);
  return cudaSuccess;
}

template <typename In>
__global__ void topkKeysKernel(const In* in, size_t n, float* residual, uint32_t* keys,
                               uint32_t* ids) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads) {
    float v = num::load(in, i);
    if (residual) {
      v = num::feedbackSum(v, residual[i]);
      residual[i] = v;  // unselected elements keep all of v; selected ones are zeroed later
    }
    if (keys) {
      keys[i] = num::magnitudeKey(v);
      ids[i] = static_cast<uint32_t>(i);
    }
  }
}

// chosen[0..k) are ascending indices. With a residual it already holds v (topkKeysKernel).
template <typename In>
__global__ void topkGatherKernel(const In* in, const uint32_t* chosen, size_t k, float* residual,
                                 uint32_t* indices, float* values) {
  for (size_t j = blockIdx.x * size_t{kThreads} + threadIdx.x; j < k;
       j += size_t{gridDim.x} * kThreads) {
    uint32_t i = chosen[j];
    indices[j] = i;
    if (residual) {
      values[j] = residual[i];
      residual[i] = 0.0f;
    } else {
      values[j] = num::load(in, i);
    }
  }
}

__global__ void topkValidateKernel(const uint32_t* indices, size_t k, size_t n, int* bad) {
  for (size_t j = blockIdx.x * size_t{kThreads} + threadIdx.x; j < k;
       j += size_t{gridDim.x} * kThreads) {
    uint32_t i = indices[j];
    // Every offender writes the same value, so the race between them is benign.
    if (i >= n || (j > 0 && indices[j - 1] >= i)) *bad = 1;
  }
}

template <typename Out>
__global__ void topkScatterKernel(const uint32_t* indices, const float* values, size_t k,
                                  Out* out) {
  for (size_t j = blockIdx.x * size_t{kThreads} + threadIdx.x; j < k;
       j += size_t{gridDim.x} * kThreads) {
    num::store(out, indices[j], values[j]);
  }
}

__global__ void topkScatterAddKernel(const uint32_t* indices, const float* values, size_t k,
                                     float* acc) {
  // Indices were validated strictly ascending, so no two threads touch the same element.
  for (size_t j = blockIdx.x * size_t{kThreads} + threadIdx.x; j < k;
       j += size_t{gridDim.x} * kThreads) {
    uint32_t i = indices[j];
    acc[i] = acc[i] + values[j];
  }
}

// Runs the validation kernel and reads its verdict back (synchronizes the stream).
cudaError_t validateIndices(const uint32_t* indices, size_t k, size_t n, bool* ok,
                            cudaStream_t stream) {
  *ok = false;
  // k > n cannot be strictly ascending below n; this also rejects every n == 0, k > 0 case.
  if (k > n) return cudaSuccess;
  if (k == 0) {
    *ok = true;
    return cudaSuccess;
  }
  if (indices == nullptr) return cudaErrorInvalidValue;
  int* flag = nullptr;
  TERSE_CUDA_TRY(detail::validationFlag(&flag));
  TERSE_CUDA_TRY(cudaMemsetAsync(flag, 0, sizeof(int), stream));
  topkValidateKernel<<<gridFor(k), kThreads, 0, stream>>>(indices, k, n, flag);
  TERSE_CUDA_TRY(detail::lastLaunchError());
  int bad = 1;
  TERSE_CUDA_TRY(cudaMemcpyAsync(&bad, flag, sizeof(int), cudaMemcpyDeviceToHost, stream));
  TERSE_CUDA_TRY(cudaStreamSynchronize(stream));
  *ok = bad == 0;
  return cudaSuccess;
}

}  // namespace

size_t topkScratchBytes(size_t n) {
  if (n == 0) return 0;
  if (n > std::numeric_limits<uint32_t>::max()) return 0;  // indices are uint32 on the wire
  size_t temp = 0;
  // Without a usable device CUB cannot pick its tuning, so there is no size to report; 0 makes
  // topkCompress reject the scratch instead of overrunning it.
  if (sortTempBytes(n, &temp) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return kAlign + arrayBytes(n) + alignUp(temp);
}

template <typename In>
cudaError_t topkCompress(const In* in, size_t n, size_t k, float* residual, void* scratch,
                         size_t scratchBytes, uint32_t* indices, float* values, size_t* kOut,
                         cudaStream_t stream) {
  if (kOut) *kOut = 0;
  if (n > std::numeric_limits<uint32_t>::max()) return cudaErrorInvalidValue;
  k = std::min(k, n);
  if (n == 0) return cudaStreamSynchronize(stream);
  if (in == nullptr) return cudaErrorInvalidValue;
  if (k == 0) {
    // Nothing is selected: the residual becomes v for every element.
    if (residual) {
      topkKeysKernel<In><<<gridFor(n), kThreads, 0, stream>>>(in, n, residual, nullptr, nullptr);
      TERSE_CUDA_TRY(detail::lastLaunchError());
    }
    return cudaStreamSynchronize(stream);
  }
  if (indices == nullptr || values == nullptr || scratch == nullptr) return cudaErrorInvalidValue;

  // Carve the scratch; the temp storage needed is queried for this device and these sizes.
  auto base = reinterpret_cast<uintptr_t>(scratch);
  uintptr_t start = (base + kAlign - 1) / kAlign * kAlign;
  size_t usable = scratchBytes > start - base ? scratchBytes - (start - base) : 0;
  size_t arrays = arrayBytes(n);
  if (usable < arrays) return cudaErrorInvalidValue;
  size_t slot = alignUp(n * sizeof(uint32_t));
  auto* p = reinterpret_cast<char*>(start);
  uint32_t* keys0 = reinterpret_cast<uint32_t*>(p);
  uint32_t* keys1 = reinterpret_cast<uint32_t*>(p + slot);
  uint32_t* ids0 = reinterpret_cast<uint32_t*>(p + 2 * slot);
  uint32_t* ids1 = reinterpret_cast<uint32_t*>(p + 3 * slot);
  void* temp = p + arrays;
  size_t tempAvailable = usable - arrays;

  cub::DoubleBuffer<uint32_t> keys(keys0, keys1);
  cub::DoubleBuffer<uint32_t> ids(ids0, ids1);
  auto items = static_cast<uint32_t>(n);
  size_t need = 0;
  TERSE_CUDA_TRY(cub::DeviceRadixSort::SortPairsDescending(nullptr, need, keys, ids, items, 0,
                                                           kKeyBits, stream));
  if (need > tempAvailable) return cudaErrorInvalidValue;

  topkKeysKernel<In><<<gridFor(n), kThreads, 0, stream>>>(in, n, residual, keys0, ids0);
  TERSE_CUDA_TRY(detail::lastLaunchError());
  TERSE_CUDA_TRY(
      cub::DeviceRadixSort::SortPairsDescending(temp, need, keys, ids, items, 0, kKeyBits, stream));

  // The first k of ids.Current() are the chosen indices; sort them ascending in place, using
  // the other index buffer as the alternate.
  cub::DoubleBuffer<uint32_t> chosen(ids.Current(), ids.Alternate());
  auto kItems = static_cast<uint32_t>(k);
  int bits = indexBits(n);
  need = 0;
  TERSE_CUDA_TRY(cub::DeviceRadixSort::SortKeys(nullptr, need, chosen, kItems, 0, bits, stream));
  if (need > tempAvailable) return cudaErrorInvalidValue;
  TERSE_CUDA_TRY(cub::DeviceRadixSort::SortKeys(temp, need, chosen, kItems, 0, bits, stream));

  topkGatherKernel<In>
      <<<gridFor(k), kThreads, 0, stream>>>(in, chosen.Current(), k, residual, indices, values);
  TERSE_CUDA_TRY(detail::lastLaunchError());
  // The wire size depends on k, and the scratch may be reused as soon as we return.
  TERSE_CUDA_TRY(cudaStreamSynchronize(stream));
  if (kOut) *kOut = k;
  return cudaSuccess;
}

template <typename Out>
cudaError_t topkDecompress(const uint32_t* indices, const float* values, size_t k, size_t n,
                           Out* out, bool* valid, cudaStream_t stream) {
  if (valid == nullptr) return cudaErrorInvalidValue;
  *valid = false;
  bool ok = false;
  TERSE_CUDA_TRY(validateIndices(indices, k, n, &ok, stream));
  if (!ok) return cudaSuccess;
  if (n > 0) {
    if (out == nullptr || (k > 0 && values == nullptr)) return cudaErrorInvalidValue;
    // All-zero bits are +0 in float, binary16 and bfloat16 alike.
    TERSE_CUDA_TRY(cudaMemsetAsync(out, 0, n * sizeof(Out), stream));
  }
  if (k > 0) {
    topkScatterKernel<Out><<<gridFor(k), kThreads, 0, stream>>>(indices, values, k, out);
    TERSE_CUDA_TRY(detail::lastLaunchError());
  }
  TERSE_CUDA_TRY(cudaStreamSynchronize(stream));
  *valid = true;
  return cudaSuccess;
}

cudaError_t topkDecompressAccumulate(const uint32_t* indices, const float* values, size_t k,
                                     size_t n, float* acc, bool* valid, cudaStream_t stream) {
  if (valid == nullptr) return cudaErrorInvalidValue;
  *valid = false;
  bool ok = false;
  TERSE_CUDA_TRY(validateIndices(indices, k, n, &ok, stream));
  if (!ok) return cudaSuccess;
  if (k > 0) {
    if (acc == nullptr || values == nullptr) return cudaErrorInvalidValue;
    topkScatterAddKernel<<<gridFor(k), kThreads, 0, stream>>>(indices, values, k, acc);
    TERSE_CUDA_TRY(detail::lastLaunchError());
  }
  TERSE_CUDA_TRY(cudaStreamSynchronize(stream));
  *valid = true;
  return cudaSuccess;
}

#define TERSE_PER_TYPE(T)                                                                          \
  template cudaError_t topkCompress<T>(const T*, size_t, size_t, float*, void*, size_t, uint32_t*, \
                                       float*, size_t*, cudaStream_t);                             \
  template cudaError_t topkDecompress<T>(const uint32_t*, const float*, size_t, size_t, T*, bool*, \
                                         cudaStream_t);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_PER_TYPE)
#undef TERSE_PER_TYPE

}  // namespace terse::kernels::cuda
