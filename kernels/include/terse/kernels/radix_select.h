// The arithmetic of the CUDA top-k selection (kernels/cuda/topk.cu), as plain TERSE_HD
// functions: the kernels call them, and tests/gpu/kernels_test.cc runs the same functions on the
// CPU (no device needed) to check that the selection they define is the CPU top-k's, ties, NaN
// and Inf included.
//
// Order. The CPU takes larger magnitudes first and, among equal magnitudes, lower indices first.
// Both rules fold into one 63-bit rank per element, unique because indices are:
//   rank(i) = magnitudeKey(v_i) << 32 | ~i        (the key is 31 bits, ~i is 32)
// so the k chosen elements are exactly those whose rank is at least the k-th largest rank, T.
// Selection is then a predicate (rank >= T) that a stable compaction applies in index order,
// giving the wire's ascending indices with no sort.
//
// Finding T: a radix select over the rank, most significant digit first, six digits (the key's
// 31 bits as 11 + 11 + 9, the index's 32 as 11 + 11 + 10). At each level a histogram of the
// digit, counted over the ranks that match the digits decided so far, says which bucket holds the
// `remaining`-th largest of them; the ranks in higher buckets are all taken. When the chosen
// bucket is to be taken whole (remaining == its count), T is the prefix with every lower bit zero
// and the select stops: with distinct magnitudes at the threshold, it stops after the key's
// digits and never looks at an index.
#pragma once

#include "terse/common/hd.h"

#include <cstddef>
#include <cstdint>

namespace terse::kernels::radix {

constexpr int kLevels = 6;
// The largest digit: 11 bits.
constexpr uint32_t kMaxDigits = 2048;

TERSE_HD uint64_t rankOf(uint32_t magnitudeKey, uint32_t index) {
  return (static_cast<uint64_t>(magnitudeKey) << 32) | static_cast<uint32_t>(~index);
}
TERSE_HD uint32_t indexOfRank(uint64_t rank) { return ~static_cast<uint32_t>(rank); }

// Digit `level`'s lowest bit in the rank, and its width.
TERSE_HD int digitShift(int level) {
  switch (level) {
    case 0: return 52;
    case 1: return 41;
    case 2: return 32;
    case 3: return 21;
    case 4: return 10;
    default: return 0;
  }
}
TERSE_HD int digitBits(int level) { return level == 2 ? 9 : level == 5 ? 10 : 11; }
TERSE_HD uint32_t digitCount(int level) { return 1u << digitBits(level); }
TERSE_HD uint32_t digitOf(uint64_t rank, int level) {
  return static_cast<uint32_t>(rank >> digitShift(level)) & (digitCount(level) - 1);
}

// Where the select stands between levels. Zero-initialized, it is the state before level 0
// (remaining is then taken from k).
struct SelectState {
  uint64_t prefix;     // the rank bits decided so far; the rest zero (T once done)
  uint64_t mask;       // which bits those are
  uint64_t remaining;  // how many of the k are still to come from ranks matching the prefix
  uint32_t done;       // 1: every rank >= prefix is taken; prefix is T
  uint32_t level;      // the next level to histogram
};

TERSE_HD bool matchesPrefix(uint64_t rank, const SelectState& s) {
  return (rank & s.mask) == s.prefix;
}

// The search for the bucket, split the way a CUDA block does it: the digits are walked from the
// top in slices, slice j holding digits [top - (j + 1) * width, top - j * width) in descending
// order; `aboveSlice` counts the matching ranks in the digits of the slices before it. Exactly
// one slice finds the bucket (0 < remaining <= the total counted): it returns true with the
// digit, the count of ranks in higher digits (*above) and the bucket's own count (*inBucket).
TERSE_HD bool findBucketInSlice(const uint32_t* hist, uint32_t sliceTop, uint32_t width,
                                uint64_t aboveSlice, uint64_t remaining, uint32_t* digit,
                                uint64_t* above, uint64_t* inBucket) {
  uint64_t sum = aboveSlice;
  for (uint32_t j = 0; j < width && j < sliceTop; ++j) {
    uint32_t d = sliceTop - 1 - j;
    uint64_t count = hist[d];
    if (sum < remaining && remaining <= sum + count) {
      *digit = d;
      *above = sum;
      *inBucket = count;
      return true;
    }
    sum += count;
  }
  return false;
}

// Records the level's choice: the ranks above are taken, the bucket becomes the new prefix, and
// the select is done when the bucket is taken whole (always by the last level, where a bucket
// holds one rank).
TERSE_HD void decide(SelectState* s, uint32_t digit, uint64_t above, uint64_t inBucket) {
  const int level = static_cast<int>(s->level);
  s->remaining -= above;
  s->prefix |= static_cast<uint64_t>(digit) << digitShift(level);
  s->mask |= static_cast<uint64_t>(digitCount(level) - 1) << digitShift(level);
  s->level = static_cast<uint32_t>(level + 1);
  if (s->remaining == inBucket || s->level == static_cast<uint32_t>(kLevels)) s->done = 1;
}

}  // namespace terse::kernels::radix
