// How a tensor of `count` elements is split among `size` ranks and into pipeline segments.
// Public because reduce-scatter and allgather callers need to know which part is theirs, and
// the tests' independent simulations need the same boundaries.
#pragma once

#include <algorithm>
#include <cstddef>

namespace terse {

struct Range {
  size_t begin = 0;
  size_t length = 0;
  size_t end() const { return begin + length; }
};

// Balanced split: the first count % size ranks get one element more. Used for the parts of
// reduce-scatter and allgather.
inline Range chunkRange(size_t count, int size, int rank) {
  size_t n = static_cast<size_t>(size), r = static_cast<size_t>(rank);
  size_t base = count / n, extra = count % n;
  return Range{r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

// Split with boundaries on multiples of `align` elements (a codec's block), the last rank taking
// what is left: used inside allreduce, where the split is terse's own business, so that chunk
// boundaries never cut a compression block in two.
inline Range alignedChunkRange(size_t count, int size, int rank, size_t align) {
  size_t units = (count + align - 1) / align;
  Range u = chunkRange(units, size, rank);
  size_t begin = std::min(count, u.begin * align);
  size_t end = std::min(count, u.end() * align);
  return Range{begin, end - begin};
}

// Pipeline segments of a chunk: `segment` elements each (the last one shorter). A zero-length
// chunk has no segments.
inline size_t segmentCount(size_t length, size_t segment) {
  return (length + segment - 1) / segment;
}
inline Range segmentRange(size_t length, size_t segment, size_t index) {
  size_t begin = std::min(length, index * segment);
  return Range{begin, std::min(length, begin + segment) - begin};
}

}  // namespace terse
