// Exact top-k by magnitude: a three-level radix select (11 + 11 + 9 bits of the 31-bit
// magnitude key) finds the k-th largest key T with per-thread histograms, then one stable pass
// writes every element with key > T and the lowest-indexed elements with key == T.
#include "cpu_common.h"
#include "simd_avx2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

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
  uint64_t candBegin;  // this piece's slice of the candidate arrays
  uint64_t candCount;
};

// Candidates (elements in the level-0 bucket that holds the k-th key) are kept when they are
// at most this fraction of n plus a constant; otherwise levels 1 and 2 rescan the input.
size_t candidateCapacity(size_t n) { return std::min(n, n / 8 + 1024); }

size_t maxPieces() { return std::max<size_t>(1, parallelThreads()); }

template <typename In>
inline float valueAt(const In* in, const float* residual, size_t i) {
  return residual ? num::feedbackSum(num::load(in, i), residual[i]) : num::load(in, i);
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
  uint32_t* candIdx = nullptr;
  uint32_t* candKey = nullptr;
  uint32_t bucket0 = 0;     // the chosen level-0 digit
  uint32_t lowerBound = 0;  // sampled path: keep every key >= this
  size_t candCap = 0;       // sampled path: candidate slots per piece
  bool avx = false;

  size_t begin(size_t p) const { return std::min(n, p * chunk); }
  size_t end(size_t p) const { return std::min(n, (p + 1) * chunk); }

  void histogramScalar(size_t p) {
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

  // Stable list of the elements whose level-0 digit is bucket0, with their keys.
  void collectScalar(size_t p) {
    size_t out = state[p].candBegin;
    size_t b = begin(p), e = end(p);
    for (size_t i = b; i < e; ++i) {
      uint32_t key = num::magnitudeKey(valueAt(in, residual, i));
      if ((key >> kShift[0]) == bucket0) {
        candIdx[out] = static_cast<uint32_t>(i);
        candKey[out] = key;
        ++out;
      }
    }
  }

  // Sampled path: every element with key >= lowerBound, up to candCap per piece; candCount
  // counts them all, so an overflow is visible.
  void collectAboveScalar(size_t p) {
    PieceState& st = state[p];
    uint64_t count = 0;
    collectAboveRange(begin(p), end(p), st, count);
    st.candCount = count;
  }
  void collectAboveRange(size_t b, size_t e, PieceState& st, uint64_t& count) {
    for (size_t i = b; i < e; ++i) {
      float v = valueAt(in, residual, i);
      if (residual) residual[i] = v;  // provisional: unselected keeps v (selected reset later)
      uint32_t key = num::magnitudeKey(v);
      if (key >= lowerBound) {
        if (count < candCap) {
          candIdx[st.candBegin + count] = static_cast<uint32_t>(i);
          candKey[st.candBegin + count] = key;
        }
        ++count;
      }
    }
  }
  void collectAbove(size_t p) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx) return collectAboveAvx2(p);
#endif
    collectAboveScalar(p);
  }

  void writeScalar(size_t p) {
    size_t out = state[p].outOffset;
    uint64_t eqLeft = state[p].takeEqual;
    writeRange(begin(p), end(p), &out, &eqLeft);
  }

  // Writes the selected elements of [b, e) at *out and the residuals of all of them.
  void writeRange(size_t b, size_t e, size_t* out, uint64_t* eqLeft) {
    for (size_t i = b; i < e; ++i) {
      float v = valueAt(in, residual, i);
      uint32_t key = num::magnitudeKey(v);
      bool take = key > threshold || (key == threshold && *eqLeft > 0);
      if (take) {
        *eqLeft -= key == threshold;
        indices[*out] = static_cast<uint32_t>(i);
        values[*out] = v;
        ++*out;
      }
      if (residual) residual[i] = take ? 0.0f : v;
    }
  }

  void histogram(size_t p) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx) return histogramAvx2(p);
#endif
    histogramScalar(p);
  }
  void collect(size_t p) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx) return collectAvx2(p);
#endif
    collectScalar(p);
  }
  void write(size_t p) {
#if TERSE_CPU_HAVE_AVX2_PATH
    if (avx) return writeAvx2(p);
#endif
    writeScalar(p);
  }

#if TERSE_CPU_HAVE_AVX2_PATH
  // v = in (+ residual, num::feedbackSum) for 8 elements.
  TERSE_AVX2 __m256 value8(size_t i) const {
    __m256 v = avx2::load8(in + i);
    return residual ? avx2::feedbackSum8(v, _mm256_loadu_ps(residual + i)) : v;
  }

  TERSE_AVX2 void histogramAvx2(size_t p) {
    // Four interleaved sub-histograms: runs of keys in the same bucket (common in gradients)
    // would otherwise serialize on one counter.
    uint32_t sub[4][kMaxDigits];
    uint32_t digits = kDigits[level];
    for (auto& h : sub) std::memset(h, 0, sizeof(uint32_t) * digits);
    int shift = kShift[level];
    const __m256i dmask = _mm256_set1_epi32(static_cast<int>(digits - 1));
    const __m256i pmask = _mm256_set1_epi32(static_cast<int>(prefixMask));
    const __m256i pref = _mm256_set1_epi32(static_cast<int>(prefix));
    const __m128i sh = _mm_cvtsi32_si128(shift);
    size_t b = begin(p), e = end(p), i = b;
    alignas(32) uint32_t d[8];
    for (; i + 8 <= e; i += 8) {
      __m256i key = avx2::magnitudeKey(value8(i));
      __m256i digit = _mm256_and_si256(_mm256_srl_epi32(key, sh), dmask);
      __m256i match = _mm256_cmpeq_epi32(_mm256_and_si256(key, pmask), pref);
      // Non-matching lanes count into a bucket that does not exist (digits): dropped below.
      digit = _mm256_blendv_epi8(_mm256_set1_epi32(static_cast<int>(digits)), digit, match);
      _mm256_store_si256(reinterpret_cast<__m256i*>(d), digit);
      for (int l = 0; l < 8; ++l)
        if (d[l] < digits) ++sub[l & 3][d[l]];
    }
    uint64_t* h = state[p].hist;
    for (uint32_t x = 0; x < digits; ++x)
      h[x] = uint64_t{sub[0][x]} + sub[1][x] + sub[2][x] + sub[3][x];
    for (; i < e; ++i) {
      uint32_t key = num::magnitudeKey(valueAt(in, residual, i));
      if ((key & prefixMask) == prefix) ++h[(key >> shift) & (digits - 1)];
    }
  }

  TERSE_AVX2 void collectAvx2(size_t p) {
    size_t out = state[p].candBegin;
    size_t b = begin(p), e = end(p), i = b;
    const __m256i want = _mm256_set1_epi32(static_cast<int>(bucket0));
    alignas(32) uint32_t keys[8];
    for (; i + 8 <= e; i += 8) {
      __m256i key = avx2::magnitudeKey(value8(i));
      __m256i hit = _mm256_cmpeq_epi32(_mm256_srli_epi32(key, kShift[0]), want);
      int m = _mm256_movemask_ps(_mm256_castsi256_ps(hit));
      if (!m) continue;
      _mm256_store_si256(reinterpret_cast<__m256i*>(keys), key);
      for (; m; m &= m - 1) {
        int l = __builtin_ctz(static_cast<unsigned>(m));
        candIdx[out] = static_cast<uint32_t>(i + l);
        candKey[out] = keys[l];
        ++out;
      }
    }
    for (; i < e; ++i) {
      uint32_t key = num::magnitudeKey(valueAt(in, residual, i));
      if ((key >> kShift[0]) == bucket0) {
        candIdx[out] = static_cast<uint32_t>(i);
        candKey[out] = key;
        ++out;
      }
    }
  }

  TERSE_AVX2 void collectAboveAvx2(size_t p) {
    PieceState& st = state[p];
    uint64_t count = 0;
    size_t b = begin(p), e = end(p), i = b;
    const __m256i atLeast = _mm256_set1_epi32(static_cast<int>(lowerBound) - 1);
    alignas(32) uint32_t keys[8];
    for (; i + 8 <= e; i += 8) {
      __m256 v = value8(i);
      if (residual) _mm256_storeu_ps(residual + i, v);  // provisional, as in the scalar loop
      __m256i key = avx2::magnitudeKey(v);
      int m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, atLeast)));
      if (!m) continue;
      _mm256_store_si256(reinterpret_cast<__m256i*>(keys), key);
      for (; m; m &= m - 1) {
        int l = __builtin_ctz(static_cast<unsigned>(m));
        if (count < candCap) {
          candIdx[st.candBegin + count] = static_cast<uint32_t>(i + l);
          candKey[st.candBegin + count] = keys[l];
        }
        ++count;
      }
    }
    collectAboveRange(i, e, st, count);
    st.candCount = count;
  }

  TERSE_AVX2 void writeAvx2(size_t p) {
    size_t out = state[p].outOffset;
    uint64_t eqLeft = state[p].takeEqual;
    size_t b = begin(p), e = end(p), i = b;
    // Keys are below 2^31, so the signed compare orders them; threshold - 1 turns >= into >.
    const __m256i atLeast = _mm256_set1_epi32(static_cast<int>(threshold) - 1);
    for (; i + 8 <= e; i += 8) {
      __m256 v = value8(i);
      __m256i key = avx2::magnitudeKey(v);
      int m = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, atLeast)));
      if (m) {
        writeRange(i, i + 8, &out, &eqLeft);  // rare: a selected element or a tie among these 8
      } else if (residual) {
        _mm256_storeu_ps(residual + i, v);
      }
    }
    writeRange(i, e, &out, &eqLeft);
  }
#endif
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

size_t topkScratchBytes(size_t n) {
  return alignof(PieceState) + sizeof(PieceState) * maxPieces() + 8 * candidateCapacity(n);
}

namespace {

// The digit of the bucket holding the `remaining`-th largest key, scanning from the top;
// *above receives how many keys lie in higher buckets.
uint32_t chooseDigit(const uint64_t* hist, uint32_t digits, uint64_t remaining, uint64_t* above) {
  *above = 0;
  for (uint32_t d = digits; d-- > 0;) {
    if (*above + hist[d] >= remaining) return d;
    *above += hist[d];
  }
  return 0;  // unreachable while remaining <= the number of keys counted
}

}  // namespace

constexpr size_t kSamples = 16384;

// A key that about 2k + 1024 of the n elements reach, from kSamples evenly spaced ones.
template <typename In>
uint32_t sampleBound(const TopkJob<In>& job, size_t k) {
  static thread_local uint32_t keys[kSamples];
  size_t n = job.n;
  for (size_t j = 0; j < kSamples; ++j)
    keys[j] = num::magnitudeKey(valueAt(job.in, job.residual, j * n / kSamples));
  double target = 2.0 * static_cast<double>(k) + 1024.0;
  size_t rank = static_cast<size_t>(std::ceil(target * kSamples / static_cast<double>(n)));
  if (rank >= kSamples) return 0;
  std::nth_element(keys, keys + rank, keys + kSamples, std::greater<uint32_t>());
  return keys[rank];
}

// Places the selection: `remaining` keys equal to T are taken, lowest indices first (pieces
// in index order), then one stable pass per piece writes indices, values and residuals.
template <typename In>
size_t finish(TopkJob<In>& job, uint64_t remaining, uint32_t* indices, float* values, size_t k) {
  job.threshold = job.prefix;
  uint64_t eqLeft = remaining, offset = 0;
  for (size_t p = 0; p < job.pieces; ++p) {
    PieceState& st = job.state[p];
    st.takeEqual = std::min(eqLeft, st.equal);
    eqLeft -= st.takeEqual;
    st.outOffset = offset;
    offset += st.greater + st.takeEqual;
  }
  job.indices = indices;
  job.values = values;
  forPieces(job, &TopkJob<In>::write);
  return k;
}

template <typename In>
size_t topkSelect(const In* in, size_t n, size_t k, float* residual, void* scratch,
                  uint32_t* indices, float* values, bool allowSampling) {
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
  job.avx = detail::useAvx2();
  job.candIdx = reinterpret_cast<uint32_t*>(job.state + maxPieces());
  job.candKey = job.candIdx + candidateCapacity(n);
  for (size_t p = 0; p < job.pieces; ++p) job.state[p].greater = 0;

  uint64_t total[kMaxDigits];
  auto sumHist = [&](uint32_t digits) {
    for (uint32_t d = 0; d < digits; ++d) {
      total[d] = 0;
      for (size_t p = 0; p < job.pieces; ++p) total[d] += job.state[p].hist[d];
    }
  };
  // Select T digit by digit: `remaining` is how many of the k still fall under the prefix.
  uint64_t remaining = k;
  auto decide = [&](int level, uint32_t chosen, uint64_t above) {
    remaining -= above;
    job.prefix |= chosen << kShift[level];
    job.prefixMask |= (kDigits[level] - 1) << kShift[level];
  };

  // Sampled path: a lower bound on the k-th key guessed from a sample keeps a small superset of
  // the selection in one pass; the exact select then runs on that superset. When the guess
  // keeps too few (fewer than k) or too many (past the scratch) the radix path below runs.
  size_t perPiece = candidateCapacity(n) / job.pieces;
  if (allowSampling && n >= kSamples && 3 * k + 2048 <= perPiece) {
    job.lowerBound = sampleBound(job, k);
    job.candCap = perPiece;
    for (size_t p = 0; p < job.pieces; ++p) job.state[p].candBegin = p * perPiece;
    forPieces(job, &TopkJob<In>::collectAbove);
    uint64_t found = 0;
    bool overflow = false;
    for (size_t p = 0; p < job.pieces; ++p) {
      found += job.state[p].candCount;
      overflow |= job.state[p].candCount > perPiece;
    }
    if (!overflow && found >= k) {
      for (int level = 0; level < kLevels; ++level) {
        uint32_t digits = kDigits[level];
        std::fill(total, total + digits, 0);
        for (size_t p = 0; p < job.pieces; ++p) {
          const PieceState& st = job.state[p];
          for (size_t c = st.candBegin; c < st.candBegin + st.candCount; ++c) {
            uint32_t key = job.candKey[c];
            if ((key & job.prefixMask) == job.prefix)
              ++total[(key >> kShift[level]) & (digits - 1)];
          }
        }
        uint64_t above;
        uint32_t d = chooseDigit(total, digits, remaining, &above);
        decide(level, d, above);
      }
      // Every key >= T is a candidate (T >= lowerBound because >= k keys are) and the
      // candidates are in index order, so the selection is read off them; the residual already
      // holds v everywhere and only the selected positions drop to 0.
      uint32_t t = job.prefix;
      uint64_t eqLeft = remaining;
      size_t out = 0;
      for (size_t p = 0; p < job.pieces; ++p) {
        const PieceState& st = job.state[p];
        for (size_t c = st.candBegin; c < st.candBegin + st.candCount; ++c) {
          uint32_t key = job.candKey[c];
          if (key < t || (key == t && eqLeft == 0)) continue;
          eqLeft -= key == t;
          uint32_t i = job.candIdx[c];
          indices[out] = i;
          if (residual) {
            values[out] = residual[i];
            residual[i] = 0.0f;
          } else {
            values[out] = num::load(in, i);
          }
          ++out;
        }
      }
      return out;
    }
    if (residual) {
      // The residual already holds v = in + old residual: select from it alone.
      size_t got = topkSelect(static_cast<const float*>(residual), n, k, nullptr, scratch, indices,
                              values, false);
      for (size_t j = 0; j < got; ++j) residual[indices[j]] = 0.0f;
      return got;
    }
  }

  // Level 0 over the whole input (parallel).
  job.level = 0;
  forPieces(job, &TopkJob<In>::histogram);
  sumHist(kDigits[0]);
  uint64_t above;
  uint32_t d0 = chooseDigit(total, kDigits[0], remaining, &above);
  for (size_t p = 0; p < job.pieces; ++p)
    for (uint32_t d = d0 + 1; d < kDigits[0]; ++d) job.state[p].greater += job.state[p].hist[d];
  decide(0, d0, above);
  job.bucket0 = d0;

  if (total[d0] <= candidateCapacity(n)) {
    // Levels 1 and 2 over the (usually few) candidates of bucket d0 only.
    uint64_t off = 0;
    for (size_t p = 0; p < job.pieces; ++p) {
      job.state[p].candBegin = off;
      job.state[p].candCount = job.state[p].hist[d0];
      off += job.state[p].candCount;
    }
    forPieces(job, &TopkJob<In>::collect);
    size_t cands = off;
    for (int level = 1; level < kLevels; ++level) {
      uint32_t digits = kDigits[level];
      std::fill(total, total + digits, 0);
      for (size_t c = 0; c < cands; ++c) {
        uint32_t key = job.candKey[c];
        if ((key & job.prefixMask) == job.prefix) ++total[(key >> kShift[level]) & (digits - 1)];
      }
      uint32_t d = chooseDigit(total, digits, remaining, &above);
      decide(level, d, above);
    }
    uint32_t t = job.prefix;
    for (size_t p = 0; p < job.pieces; ++p) {
      PieceState& st = job.state[p];
      uint64_t g = 0, eq = 0;
      for (size_t c = st.candBegin; c < st.candBegin + st.candCount; ++c) {
        g += job.candKey[c] > t;
        eq += job.candKey[c] == t;
      }
      st.greater += g;
      st.equal = eq;
    }
  } else {
    // Too many ties near the cut to keep aside: rescan the input for each level.
    for (int level = 1; level < kLevels; ++level) {
      job.level = level;
      forPieces(job, &TopkJob<In>::histogram);
      uint32_t digits = kDigits[level];
      sumHist(digits);
      uint32_t chosen = chooseDigit(total, digits, remaining, &above);
      for (size_t p = 0; p < job.pieces; ++p) {
        for (uint32_t d = chosen + 1; d < digits; ++d) job.state[p].greater += job.state[p].hist[d];
        if (level == kLevels - 1) job.state[p].equal = job.state[p].hist[chosen];
      }
      decide(level, chosen, above);
    }
  }
  return finish(job, remaining, indices, values, k);
}

template <typename In>
size_t topkCompress(const In* in, size_t n, size_t k, float* residual, void* scratch,
                    uint32_t* indices, float* values) {
  return topkSelect(in, n, k, residual, scratch, indices, values, true);
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
TERSE_FOR_EACH_ELEMENT_TYPE(TERSE_TOPK)

}  // namespace terse::kernels::cpu
