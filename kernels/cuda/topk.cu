// Exact top-k on the GPU and the validating sparse decoders.
//
// Selection (kernels/include/terse/kernels/radix_select.h has the arithmetic and why it is the
// CPU's choice): each element gets the unique rank magnitudeKey(v) << 32 | ~index, a radix
// select finds T, the k-th largest rank, and a stable compaction (cub::DeviceSelect::If) keeps
// every index whose rank is >= T, in ascending order, as the wire wants them. Memory passes:
//   level 0   reads the input (and the residual, storing v = in + residual back into it) and
//             counts digit 0 of every rank;
//   level 1   reads v again, counts digit 1 of the ranks in level 0's bucket and keeps those
//             ranks as candidates (about 1% of n for gradients at a 1% ratio);
//   levels 2-5 count over the candidates only, and return at once when T is already known;
//   select    reads v once more and writes the k indices; a gather writes the k values and
//             zeroes their residuals.
// No level waits for the host: the last CUDA block of each histogram pass picks the bucket
// (its blocks' counts are complete by then) and leaves the state for the next pass, so the only
// synchronization is the one at the end, which the caller needs anyway (k sizes the message).
//
// Scratch (caller-owned, sized by topkScratchBytes): the control block (state and histogram),
// n candidate ranks of 8 bytes, then CUB's temp storage. Every region starts on a 256-byte
// boundary.
#include "launch.cuh"
#include "terse/kernels/radix_select.h"

#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <atomic>
#include <limits>

namespace terse::kernels::cuda {
namespace {

namespace cg = cooperative_groups;
using detail::gridFor;
using detail::kThreads;

constexpr size_t kAlign = 256;
size_t alignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Digits each thread of the picking block looks at: kThreads slices cover the widest digit.
constexpr uint32_t kSliceWidth = radix::kMaxDigits / kThreads;
static_assert(kSliceWidth * kThreads == radix::kMaxDigits, "slices must cover every digit");

// Device-side state of one selection, zeroed before level 0.
struct Control {
  radix::SelectState state;
  unsigned int blocksDone;  // blocks of the current pass that have added their counts
  unsigned int keep;        // 1: level 1 keeps candidates (level 0's bucket is small enough)
  unsigned int candidates;  // ranks kept by level 1
  unsigned int selected;    // what the compaction kept (k, unless something is badly wrong)
  uint32_t hist[radix::kMaxDigits];
};

// Where each element's v comes from in a pass.
enum class Source {
  kInput,     // v = in[i] (no error feedback)
  kFeedback,  // v = in[i] + residual[i], stored back into residual[i] (level 0)
  kResidual,  // v = residual[i], already stored by level 0
};

template <typename In>
struct Values {
  const In* in;
  float* residual;
  Source source;

  __device__ float one(size_t i) const {
    switch (source) {
      case Source::kInput: return num::load(in, i);
      case Source::kResidual: return residual[i];
      default: {
        float v = num::feedbackSum(num::load(in, i), residual[i]);
        residual[i] = v;
        return v;
      }
    }
  }
  // Four elements from i on; only called when the host found every pointer vector-aligned.
  __device__ void four(size_t i, float v[4]) const {
    if (source == Source::kResidual) {
      detail::Vec4<float>::load(residual, i, v);
      return;
    }
    detail::Vec4<In>::load(in, i, v);
    if (source == Source::kFeedback) {
      float r[4];
      detail::Vec4<float>::load(residual, i, r);
      for (int j = 0; j < 4; ++j) v[j] = num::feedbackSum(v[j], r[j]);
      detail::Vec4<float>::store(residual, i, v);
    }
  }
};

template <typename In>
bool vectorizable(const In* in, const float* residual, Source source) {
  bool inOk = source == Source::kResidual || detail::aligned(in, detail::Vec4<In>::kBytes);
  bool resOk = source == Source::kInput || detail::aligned(residual, 16);
  return inOk && resOk;
}

// Calls visit(i, v) for every element, 16-byte loads where `vec` (grid-stride over groups of
// four, then the tail one by one).
template <typename In, typename Visit>
__device__ void forEachValue(const Values<In>& values, size_t n, bool vec, Visit visit) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  const size_t first = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (vec) {
    const size_t groups = n / 4;
    for (size_t g = first; g < groups; g += stride) {
      float v[4];
      values.four(4 * g, v);
      for (int j = 0; j < 4; ++j) visit(4 * g + j, v[j]);
    }
    done = 4 * groups;
  }
  for (size_t i = done + first; i < n; i += stride) visit(i, values.one(i));
}

// Counts a digit in the block's shared histogram; the threads counting together combine equal
// digits first, so skewed data (a gradient mostly zero) costs one atomic per distinct digit in a
// warp instead of 32 conflicting ones on the same counter.
__device__ void countDigit(uint32_t* local, uint32_t digit) {
  cg::coalesced_group g = cg::coalesced_threads();
  const unsigned peers = g.match_any(digit);  // in g's thread ranks
  if (g.thread_rank() == static_cast<unsigned>(__ffs(peers) - 1))
    atomicAdd(&local[digit], static_cast<uint32_t>(__popc(peers)));
}

// Appends one rank to the global candidates; the threads appending together share one atomic.
__device__ void appendCandidate(unsigned int* count, uint64_t* cand, uint64_t rank) {
  cg::coalesced_group g = cg::coalesced_threads();
  unsigned int base = 0;
  if (g.thread_rank() == 0) base = atomicAdd(count, g.size());
  base = g.shfl(base, 0);
  cand[base + g.thread_rank()] = rank;
}

// A block's candidates wait in shared memory and go out with one global atomic at the end of the
// pass (a block sees about 1% of its thousands of elements at a 1% ratio); past kStaged they go
// out at once.
constexpr unsigned kStaged = 1024;
struct Staging {
  unsigned count;
  unsigned base;
  uint64_t ranks[kStaged];
};

__device__ void stageCandidate(Staging* st, Control* c, uint64_t* cand, uint64_t rank) {
  const unsigned slot = atomicAdd(&st->count, 1u);
  if (slot < kStaged)
    st->ranks[slot] = rank;
  else
    appendCandidate(&c->candidates, cand, rank);
}

__device__ void flushStaged(Staging* st, Control* c, uint64_t* cand) {
  __syncthreads();
  const unsigned staged = st->count < kStaged ? st->count : kStaged;
  if (threadIdx.x == 0 && staged) st->base = atomicAdd(&c->candidates, staged);
  __syncthreads();
  for (unsigned j = threadIdx.x; j < staged; j += kThreads) cand[st->base + j] = st->ranks[j];
}

// After a block has counted into `local` (shared, radix::kMaxDigits entries): adds its counts to
// the pass's histogram, and the pass's last block to finish picks the bucket. That block reads
// and clears the histogram (atomicExch, so it sees every block's atomics and leaves zeros for
// the next pass), finds the bucket with the slice search of radix_select.h, and records the
// choice; the next kernel on the stream sees it. After level 0 it also decides whether level 1
// keeps candidates: only when the bucket is at most keepCap ranks (a mostly-zero gradient puts
// nearly every element in it, and then levels 2-5 read v again instead of n candidates).
__device__ void finishLevel(uint32_t* local, int level, Control* c, uint64_t k, size_t keepCap) {
  using Scan = cub::BlockScan<unsigned long long, kThreads>;
  __shared__ typename Scan::TempStorage scanStorage;
  __shared__ bool last;
  const uint32_t digits = radix::digitCount(level);
  __syncthreads();
  for (uint32_t d = threadIdx.x; d < digits; d += kThreads)
    if (local[d]) atomicAdd(&c->hist[d], local[d]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&c->blocksDone, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // order this block's reads after every block's counts (the ticket's acquire)

  radix::SelectState s = c->state;
  if (s.level == 0) s.remaining = k;
  for (uint32_t d = threadIdx.x; d < digits; d += kThreads) local[d] = atomicExch(&c->hist[d], 0u);
  __syncthreads();
  // Slice t: digits [sliceTop - kSliceWidth, sliceTop), walked from the top.
  const uint32_t start = threadIdx.x * kSliceWidth;
  const uint32_t sliceTop = digits > start ? digits - start : 0;
  unsigned long long sliceSum = 0;
  for (uint32_t j = 0; j < kSliceWidth && j < sliceTop; ++j) sliceSum += local[sliceTop - 1 - j];
  unsigned long long aboveSlice = 0;
  Scan(scanStorage).ExclusiveSum(sliceSum, aboveSlice);
  uint32_t digit = 0;
  uint64_t above = 0, inBucket = 0;
  if (radix::findBucketInSlice(local, sliceTop, kSliceWidth, aboveSlice, s.remaining, &digit,
                               &above, &inBucket)) {
    radix::decide(&s, digit, above, inBucket);
    c->state = s;
    if (level == 0) c->keep = inBucket <= keepCap ? 1u : 0u;
  }
  if (threadIdx.x == 0) c->blocksDone = 0;
}

__device__ void zeroLocal(uint32_t* local) {
  for (uint32_t d = threadIdx.x; d < radix::kMaxDigits; d += kThreads) local[d] = 0;
}

// One histogram level (see the file comment): level 0 and 1 over every element, levels 2-5
// over the candidates level 1 kept, or over every element again when it kept none.
template <typename In>
__global__ void __launch_bounds__(kThreads)
    levelKernel(Values<In> values, size_t n, bool vec, Control* c, uint64_t* cand, uint64_t k,
                size_t keepCap) {
  __shared__ uint32_t local[radix::kMaxDigits];
  __shared__ Staging staging;
  // Uniform across the grid: the state changes only in the last block, after every ticket.
  if (c->state.done) return;
  const radix::SelectState s = c->state;
  const int level = static_cast<int>(s.level);
  const bool kept = level >= 1 && c->keep;
  zeroLocal(local);
  if (threadIdx.x == 0) staging.count = 0;
  __syncthreads();
  if (level >= 2 && kept) {
    const size_t count = c->candidates;
    for (size_t j = size_t{blockIdx.x} * kThreads + threadIdx.x; j < count;
         j += size_t{gridDim.x} * kThreads) {
      const uint64_t rank = cand[j];
      if (radix::matchesPrefix(rank, s)) countDigit(local, radix::digitOf(rank, level));
    }
  } else {
    const bool collect = level == 1 && kept;
    forEachValue(values, n, vec, [&](size_t i, float v) {
      const uint64_t rank = radix::rankOf(num::magnitudeKey(v), static_cast<uint32_t>(i));
      if (!radix::matchesPrefix(rank, s)) return;
      countDigit(local, radix::digitOf(rank, level));
      if (collect) stageCandidate(&staging, c, cand, rank);
    });
    if (collect) flushStaged(&staging, c, cand);
  }
  finishLevel(local, level, c, k, keepCap);
}

// The compaction's predicate: element i is chosen when its rank reaches T.
template <typename In>
struct ReachesThreshold {
  Values<In> values;  // kInput or kResidual: never stores
  const radix::SelectState* state;
  __device__ bool operator()(uint32_t i) const {
    return radix::rankOf(num::magnitudeKey(values.one(i)), i) >= state->prefix;
  }
};

// Copies the compacted indices to the wire with v of each; with error feedback their residuals
// become zero. The compaction writes to scratch and the copy stops at what it kept, so even a
// wrong count (which the host then reports; ranks are unique, so it is always k) cannot write
// past the caller's k entries or touch an element that was not chosen.
template <typename In>
__global__ void topkGatherKernel(Values<In> values, const uint32_t* chosen, const unsigned* kept,
                                 size_t k, uint32_t* indices, float* out) {
  const size_t count = *kept < k ? *kept : k;
  for (size_t j = blockIdx.x * size_t{kThreads} + threadIdx.x; j < count;
       j += size_t{gridDim.x} * kThreads) {
    uint32_t i = chosen[j];
    indices[j] = i;
    out[j] = values.one(i);
    if (values.source == Source::kResidual) values.residual[i] = 0.0f;
  }
}

template <typename In>
__global__ void feedbackOnlyKernel(const In* in, size_t n, float* residual) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads)
    residual[i] = num::feedbackSum(num::load(in, i), residual[i]);
}

// CUB's temp storage for compacting n elements (a size query: nothing runs).
template <typename In>
cudaError_t selectTempBytes(size_t n, size_t* bytes) {
  ReachesThreshold<In> pred{{nullptr, nullptr, Source::kInput}, nullptr};
  return cub::DeviceSelect::If(nullptr, *bytes, thrust::counting_iterator<uint32_t>(0),
                               static_cast<uint32_t*>(nullptr), static_cast<unsigned int*>(nullptr),
                               static_cast<int64_t>(n), pred);
}

// How many levelKernel<In> blocks the current device holds at once: SMs x blocks per SM. A
// property of the device and the compiled kernel, so it is asked once per device, not per call.
template <typename In>
cudaError_t residentBlocks(unsigned* blocks) {
  constexpr int kMaxDevices = 64;
  static std::atomic<unsigned> known[kMaxDevices];  // 0: not asked yet
  int device = 0;
  TERSE_CUDA_TRY(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  unsigned got = known[device].load(std::memory_order_relaxed);
  if (got == 0) {
    int sms = 0, perSm = 0;
    TERSE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    TERSE_CUDA_TRY(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, levelKernel<In>, kThreads, 0));
    got = static_cast<unsigned>(std::max(1, sms) * std::max(1, perSm));
    known[device].store(got, std::memory_order_relaxed);
  }
  *blocks = got;
  return cudaSuccess;
}

// A pinned host word per host thread for the one value each call reads back (the compaction's
// count, the decoders' verdict): a copy into pageable memory would be staged and synchronous.
// Allocated on first use; every call synchronizes before returning, so it is never shared by
// two copies in flight.
cudaError_t pinnedWord(unsigned int** word) {
  struct Word {
    unsigned int* p = nullptr;
    ~Word() {
      if (p) cudaFreeHost(p);  // errors ignored: at exit the runtime may be unloading
    }
  };
  thread_local Word w;
  if (w.p == nullptr) {
    void* p = nullptr;
    TERSE_CUDA_TRY(cudaMallocHost(&p, sizeof(unsigned int)));
    w.p = static_cast<unsigned int*>(p);
  }
  *word = w.p;
  return cudaSuccess;
}

// ---- decoders ------------------------------------------------------------------------------

__global__ void topkValidateKernel(const uint32_t* indices, size_t k, size_t n, int* bad) {
  for (size_t j = blockIdx.x * size_t{kThreads} + threadIdx.x; j < k;
       j += size_t{gridDim.x} * kThreads) {
    uint32_t i = indices[j];
    // Every offender writes the same value, so the race between them is benign.
    if (i >= n || (j > 0 && indices[j - 1] >= i)) *bad = 1;
  }
}

// Zeroes `bytes` bytes at p unless the validation flagged the payload (16-byte stores for the
// aligned body). All-zero bits are +0 in float, binary16 and bfloat16 alike.
__global__ void zeroUnlessBadKernel(unsigned char* p, size_t bytes, const int* bad) {
  if (*bad) return;
  const size_t misaligned = (16 - reinterpret_cast<uintptr_t>(p) % 16) % 16;
  const size_t head = misaligned < bytes ? misaligned : bytes;
  const size_t body = (bytes - head) / 16;
  const size_t first = blockIdx.x * size_t{kThreads} + threadIdx.x;
  const size_t stride = size_t{gridDim.x} * kThreads;
  auto* vec = reinterpret_cast<uint4*>(p + head);
  for (size_t j = first; j < body; j += stride) vec[j] = make_uint4(0, 0, 0, 0);
  for (size_t j = first; j < head; j += stride) p[j] = 0;
  for (size_t j = head + 16 * body + first; j < bytes; j += stride) p[j] = 0;
}

template <typename Out>
__global__ void topkScatterKernel(const uint32_t* indices, const float* values, size_t k, Out* out,
                                  const int* bad) {
  if (*bad) return;
  for (size_t j = blockIdx.x * size_t{kThreads} + threadIdx.x; j < k;
       j += size_t{gridDim.x} * kThreads) {
    num::store(out, indices[j], values[j]);
  }
}

__global__ void topkScatterAddKernel(const uint32_t* indices, const float* values, size_t k,
                                     float* acc, const int* bad) {
  if (*bad) return;
  // Indices were validated strictly ascending, so no two threads touch the same element.
  for (size_t j = blockIdx.x * size_t{kThreads} + threadIdx.x; j < k;
       j += size_t{gridDim.x} * kThreads) {
    uint32_t i = indices[j];
    acc[i] = acc[i] + values[j];
  }
}

// Queues the validation of k indices below n; the writing kernels queued after it read the
// device flag and do nothing for a bad payload, so the destination is untouched without a
// host round trip in between. *flag stays null when there is nothing for a kernel to check.
cudaError_t queueValidation(const uint32_t* indices, size_t k, size_t n, int** flag,
                            cudaStream_t stream) {
  *flag = nullptr;
  if (k == 0) return cudaSuccess;
  if (indices == nullptr) return cudaErrorInvalidValue;
  TERSE_CUDA_TRY(detail::validationFlag(flag));
  TERSE_CUDA_TRY(cudaMemsetAsync(*flag, 0, sizeof(int), stream));
  topkValidateKernel<<<gridFor(k), kThreads, 0, stream>>>(indices, k, n, *flag);
  return detail::lastLaunchError();
}

// Waits for the queued work and reads the verdict (true without a flag: nothing to check).
cudaError_t readVerdict(const int* flag, bool* ok, cudaStream_t stream) {
  if (flag == nullptr) {
    TERSE_CUDA_TRY(cudaStreamSynchronize(stream));
    *ok = true;
    return cudaSuccess;
  }
  unsigned int* word = nullptr;
  TERSE_CUDA_TRY(pinnedWord(&word));
  TERSE_CUDA_TRY(cudaMemcpyAsync(word, flag, sizeof(int), cudaMemcpyDeviceToHost, stream));
  TERSE_CUDA_TRY(cudaStreamSynchronize(stream));
  *ok = *word == 0;
  return cudaSuccess;
}

}  // namespace

size_t topkScratchBytes(size_t n) {
  if (n == 0) return 0;
  if (n > std::numeric_limits<uint32_t>::max()) return 0;  // indices are uint32 on the wire
  size_t temp = 0;
  // Without a usable device CUB cannot pick its tuning, so there is no size to report; 0 makes
  // topkCompress reject the scratch instead of overrunning it. The element types share one size
  // in practice; the largest is kept in case a CUB release tunes them apart.
  size_t f32 = 0, f16 = 0, b16 = 0;
  if (selectTempBytes<float>(n, &f32) != cudaSuccess ||
      selectTempBytes<Half>(n, &f16) != cudaSuccess ||
      selectTempBytes<BFloat16>(n, &b16) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  temp = std::max({f32, f16, b16});
  return kAlign + alignUp(sizeof(Control)) + alignUp(n * sizeof(uint64_t)) + alignUp(temp);
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
      feedbackOnlyKernel<In><<<gridFor(n), kThreads, 0, stream>>>(in, n, residual);
      TERSE_CUDA_TRY(detail::lastLaunchError());
    }
    return cudaStreamSynchronize(stream);
  }
  if (indices == nullptr || values == nullptr || scratch == nullptr) return cudaErrorInvalidValue;

  // Carve the scratch; the temp storage needed is queried for this device and this n.
  auto base = reinterpret_cast<uintptr_t>(scratch);
  uintptr_t start = (base + kAlign - 1) / kAlign * kAlign;
  size_t usable = scratchBytes > start - base ? scratchBytes - (start - base) : 0;
  const size_t controlBytes = alignUp(sizeof(Control));
  const size_t candBytes = alignUp(n * sizeof(uint64_t));
  if (usable < controlBytes + candBytes) return cudaErrorInvalidValue;
  auto* p = reinterpret_cast<char*>(start);
  auto* control = reinterpret_cast<Control*>(p);
  auto* cand = reinterpret_cast<uint64_t*>(p + controlBytes);
  void* temp = p + controlBytes + candBytes;
  size_t tempAvailable = usable - controlBytes - candBytes;
  size_t need = 0;
  TERSE_CUDA_TRY(selectTempBytes<In>(n, &need));
  if (need > tempAvailable) return cudaErrorInvalidValue;
  // As many blocks as the SMs hold at once (a second, partial wave would stretch a pass), no
  // more, since every block adds its histogram to the same global counters. Levels 2-5 take the
  // same grid: without candidates they read every element again, and with them most blocks
  // find nothing to count and finish at once.
  unsigned resident = 1;
  TERSE_CUDA_TRY(residentBlocks<In>(&resident));
  const unsigned fullBlocks = std::min(gridFor((n + 3) / 4), resident);
  // Level 1 keeps candidates when level 0's bucket is at most this many ranks.
  const size_t keepCap = n / 8 + 1024;

  const Source after = residual ? Source::kResidual : Source::kInput;
  const Values<In> first{in, residual, residual ? Source::kFeedback : Source::kInput};
  const Values<In> again{in, residual, after};
  const bool vecFirst = vectorizable(in, residual, first.source);
  const bool vecAgain = vectorizable(in, residual, after);

  TERSE_CUDA_TRY(cudaMemsetAsync(control, 0, sizeof(Control), stream));
  for (int level = 0; level < radix::kLevels; ++level) {
    levelKernel<In><<<fullBlocks, kThreads, 0, stream>>>(
        level == 0 ? first : again, n, level == 0 ? vecFirst : vecAgain, control, cand, k, keepCap);
    TERSE_CUDA_TRY(detail::lastLaunchError());
  }

  // The candidates are spent: their space takes the compacted indices (room for 2n).
  auto* chosen = reinterpret_cast<uint32_t*>(cand);
  ReachesThreshold<In> pred{again, &control->state};
  TERSE_CUDA_TRY(cub::DeviceSelect::If(temp, need, thrust::counting_iterator<uint32_t>(0), chosen,
                                       &control->selected, static_cast<int64_t>(n), pred, stream));
  topkGatherKernel<In>
      <<<gridFor(k), kThreads, 0, stream>>>(again, chosen, &control->selected, k, indices, values);
  TERSE_CUDA_TRY(detail::lastLaunchError());
  // The wire size depends on k, and the scratch may be reused as soon as we return.
  unsigned int* selected = nullptr;
  TERSE_CUDA_TRY(pinnedWord(&selected));
  TERSE_CUDA_TRY(cudaMemcpyAsync(selected, &control->selected, sizeof(unsigned int),
                                 cudaMemcpyDeviceToHost, stream));
  TERSE_CUDA_TRY(cudaStreamSynchronize(stream));
  // Ranks are unique, so exactly k reach the k-th largest; anything else is a defect here.
  if (*selected != k) return cudaErrorUnknown;
  if (kOut) *kOut = k;
  return cudaSuccess;
}

template <typename Out>
cudaError_t topkDecompress(const uint32_t* indices, const float* values, size_t k, size_t n,
                           Out* out, bool* valid, cudaStream_t stream) {
  if (valid == nullptr) return cudaErrorInvalidValue;
  *valid = false;
  // k > n cannot be strictly ascending below n; this also rejects every n == 0, k > 0 case.
  if (k > n) return cudaSuccess;
  if (n > 0 && (out == nullptr || (k > 0 && values == nullptr))) return cudaErrorInvalidValue;
  int* flag = nullptr;
  TERSE_CUDA_TRY(queueValidation(indices, k, n, &flag, stream));
  if (n > 0) {
    if (flag) {
      zeroUnlessBadKernel<<<gridFor((n * sizeof(Out) + 15) / 16), kThreads, 0, stream>>>(
          reinterpret_cast<unsigned char*>(out), n * sizeof(Out), flag);
      TERSE_CUDA_TRY(detail::lastLaunchError());
      topkScatterKernel<Out><<<gridFor(k), kThreads, 0, stream>>>(indices, values, k, out, flag);
      TERSE_CUDA_TRY(detail::lastLaunchError());
    } else {
      TERSE_CUDA_TRY(cudaMemsetAsync(out, 0, n * sizeof(Out), stream));
    }
  }
  return readVerdict(flag, valid, stream);
}

cudaError_t topkDecompressAccumulate(const uint32_t* indices, const float* values, size_t k,
                                     size_t n, float* acc, bool* valid, cudaStream_t stream) {
  if (valid == nullptr) return cudaErrorInvalidValue;
  *valid = false;
  if (k > n) return cudaSuccess;
  if (k > 0 && (acc == nullptr || values == nullptr)) return cudaErrorInvalidValue;
  int* flag = nullptr;
  TERSE_CUDA_TRY(queueValidation(indices, k, n, &flag, stream));
  if (flag) {
    topkScatterAddKernel<<<gridFor(k), kThreads, 0, stream>>>(indices, values, k, acc, flag);
    TERSE_CUDA_TRY(detail::lastLaunchError());
  }
  return readVerdict(flag, valid, stream);
}

#define TERSE_PER_TYPE(T)                                                                          \
  template cudaError_t topkCompress<T>(const T*, size_t, size_t, float*, void*, size_t, uint32_t*, \
                                       float*, size_t*, cudaStream_t);                             \
  template cudaError_t topkDecompress<T>(const uint32_t*, const float*, size_t, size_t, T*, bool*, \
                                         cudaStream_t);
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_PER_TYPE)
#undef TERSE_PER_TYPE

}  // namespace terse::kernels::cuda
