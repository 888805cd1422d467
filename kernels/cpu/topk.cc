// Exact top-k by magnitude: a three-level radix select (11 + 11 + 9 bits of the 31-bit
// magnitude key) finds the k-th largest key T with per-thread histograms, then one stable pass
// writes every element with key > T and the lowest-indexed elements with key == T.
#include "cpu_common.h"

#include <algorithm>
#include <cstring>

namespace terse::kernels::cpu {
namespace {

constexpr int kLevels = 3;
constexpr int kShift[kLevels] = {20, 9, 0};
constexpr uint32_t kDigits[kLevels] = {2048, 2048, 512};
constexpr size_t kMaxDigits = 2048;

// Per-piece scratch: a histogram and the counts the write pass needs.
struct PieceState {
  uint64_t hist[kMaxDigits];
  uint64_t greater;  // elements of the piece with key > T
  uint64_t equal;    // elements of the piece with key == T
  uint64_t takeEqual;
  uint64_t outOffset;
};

size_t maxPieces() { return std::max<size_t>(1, parallelThreads()); }

template <typename In>
inline float valueAt(const In* in, const float* residual, size_t i) {
  return residual ? num::load(in, i) + residual[i] : num::load(in, i);
}

template <typename In>
struct TopkJob {
  const In* in;
  float* residual;
  size_t n;
  size_t pieces;
  size_t chunk;
  PieceState* state;
  uint32_t prefix = 0;      // key bits decided so far
  uint32_t prefixMask = 0;  // which bits those are
  int level = 0;
  uint32_t threshold = 0;
  uint32_t* indices = nullptr;
  float* values = nullptr;

  size_t begin(size_t p) const { return std::min(n, p * chunk); }
  size_t end(size_t p) const { return std::min(n, (p + 1) * chunk); }

  void histogram(size_t p) {
    uint64_t* h = state[p].hist;
    std::memset(h, 0, sizeof(uint64_t) * kDigits[level]);
    int shift = kShift[level];
    uint32_t dmask = kDigits[level] - 1;
    size_t b = begin(p), e = end(p);
    for (size_t i = b; i < e; ++i) {
      uint32_t key = num::magnitudeKey(valueAt(in, residual, i));
      if ((key & prefixMask) == prefix) ++h[(key >> shift) & dmask];
    }
  }

  void write(size_t p) {
    size_t out = state[p].outOffset;
    uint64_t eqLeft = state[p].takeEqual;
    size_t b = begin(p), e = end(p);
    for (size_t i = b; i < e; ++i) {
      float v = valueAt(in, residual, i);
      uint32_t key = num::magnitudeKey(v);
      bool take = key > threshold || (key == threshold && eqLeft > 0);
      if (take) {
        eqLeft -= key == threshold;
        indices[out] = static_cast<uint32_t>(i);
        values[out] = v;
        ++out;
      }
      if (residual) residual[i] = take ? 0.0f : v;
    }
  }
};

template <typename Job, typename Fn>
void forPieces(Job& job, Fn fn) {
  if (job.pieces == 1) {
    (job.*fn)(0);
    return;
  }
  Job* j = &job;
  parallelFor(job.pieces, 1, 1, [j, fn](size_t b, size_t e) {
    for (size_t p = b; p < e; ++p) (j->*fn)(p);
  });
}

}  // namespace

size_t topkScratchBytes(size_t n) { return sizeof(PieceState) * maxPieces() + alignof(PieceState); }

template <typename In>
size_t topkCompress(const In* in, size_t n, size_t k, float* residual, void* scratch,
                    uint32_t* indices, float* values) {
  k = std::min(k, n);
  if (k == 0) {  // nothing sent: the whole value stays in the residual
    if (residual)
      detail::forRange(n, 64, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) residual[i] = valueAt(in, residual, i);
      });
    return 0;
  }
  auto addr = reinterpret_cast<uintptr_t>(scratch);
  addr = (addr + alignof(PieceState) - 1) & ~uintptr_t{alignof(PieceState) - 1};

  TopkJob<In> job;
  job.in = in;
  job.residual = residual;
  job.n = n;
  job.pieces = std::min(maxPieces(), std::max<size_t>(1, n / detail::kMinPerThread));
  job.chunk = (n + job.pieces - 1) / job.pieces;
  job.state = reinterpret_cast<PieceState*>(addr);
  for (size_t p = 0; p < job.pieces; ++p) job.state[p].greater = 0;

  // Select T digit by digit: `remaining` is how many of the k still fall under the prefix.
  uint64_t remaining = k;
  for (int level = 0; level < kLevels; ++level) {
    job.level = level;
    forPieces(job, &TopkJob<In>::histogram);
    uint32_t digits = kDigits[level];
    uint32_t chosen = 0;
    uint64_t above = 0;
    for (uint32_t d = digits; d-- > 0;) {
      uint64_t c = 0;
      for (size_t p = 0; p < job.pieces; ++p) c += job.state[p].hist[d];
      if (above + c >= remaining) {
        chosen = d;
        break;
      }
      above += c;
    }
    // Elements in buckets above the chosen one are all selected.
    for (size_t p = 0; p < job.pieces; ++p) {
      uint64_t g = 0;
      for (uint32_t d = chosen + 1; d < digits; ++d) g += job.state[p].hist[d];
      job.state[p].greater += g;
      if (level == kLevels - 1) job.state[p].equal = job.state[p].hist[chosen];
    }
    remaining -= above;
    job.prefix |= chosen << kShift[level];
    job.prefixMask |= (digits - 1) << kShift[level];
  }
  job.threshold = job.prefix;
  // `remaining` elements equal to T are taken, lowest indices first: pieces in index order.
  uint64_t eqLeft = remaining, offset = 0;
  for (size_t p = 0; p < job.pieces; ++p) {
    PieceState& s = job.state[p];
    s.takeEqual = std::min(eqLeft, s.equal);
    eqLeft -= s.takeEqual;
    s.outOffset = offset;
    offset += s.greater + s.takeEqual;
  }
  job.indices = indices;
  job.values = values;
  forPieces(job, &TopkJob<In>::write);
  return k;
}

namespace {
bool indicesValid(const uint32_t* indices, size_t k, size_t n) {
  bool ok = true;
  for (size_t i = 0; i < k; ++i) {
    ok &= indices[i] < n;
    if (i) ok &= indices[i] > indices[i - 1];
  }
  return ok;
}
}  // namespace

template <typename Out>
bool topkDecompress(const uint32_t* indices, const float* values, size_t k, size_t n, Out* out) {
  if (!indicesValid(indices, k, n)) return false;
  detail::forRange(n, 64, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) num::store(out, i, 0.0f);
  });
  for (size_t i = 0; i < k; ++i) num::store(out, indices[i], values[i]);
  return true;
}

bool topkDecompressAccumulate(const uint32_t* indices, const float* values, size_t k, size_t n,
                              float* acc) {
  if (!indicesValid(indices, k, n)) return false;
  for (size_t i = 0; i < k; ++i) acc[indices[i]] += values[i];
  return true;
}

#define TERSE_TOPK(T)                                                                          \
  template size_t topkCompress<T>(const T*, size_t, size_t, float*, void*, uint32_t*, float*); \
  template bool topkDecompress<T>(const uint32_t*, const float*, size_t, size_t, T*);
TERSE_TOPK(float)
TERSE_TOPK(Half)
TERSE_TOPK(BFloat16)

}  // namespace terse::kernels::cpu
