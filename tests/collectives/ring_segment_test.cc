// The flat ring's segment per call (collectives/src/ring.cc, ringSegmentElements): a chunk gets
// about four segments at any world size, within the bounds, where a fixed segment left chunks of
// one or two segments at 512 ranks (docs/simulation.md).
#include "algorithm.h"
#include "requests.h"

#include "terse/collectives/partition.h"

#include <gtest/gtest.h>

namespace terse {
namespace {

using detail::ringSegmentElements;

constexpr size_t kDefault = size_t{1} << 18;  // TERSE_SEGMENT_BYTES' 1 MiB, in float32 elements

size_t segmentsPerChunk(size_t seg, int n, size_t count) {
  return segmentCount(chunkRange(count, n, 0).length, seg);
}

TEST(RingSegment, FourSegmentsAChunkAtAnyWorldSize) {
  const size_t gib = size_t{1} << 28;  // 1 GiB of float32
  for (int n : {64, 128, 256, 512, 1024}) {
    const size_t seg = ringSegmentElements(kDefault, n, gib);
    EXPECT_LE(seg, kDefault) << n;
    const size_t chunk = chunkRange(gib, n, 0).length;
    if (chunk >= 4 * kDefault)
      EXPECT_EQ(seg, kDefault) << n << " ranks: large chunks keep the configured segment";
    else
      EXPECT_EQ(segmentsPerChunk(seg, n, gib), 4u) << n << " ranks";
  }
  // The case the simulation found: 512 ranks, 1 GiB, 2 MiB chunks had 2 segments of 1 MiB.
  EXPECT_EQ(segmentCount(chunkRange(size_t{1} << 28, 512, 0).length, kDefault), 2u);
  EXPECT_EQ(ringSegmentElements(kDefault, 512, size_t{1} << 28), size_t{1} << 17);
}

TEST(RingSegment, BoundsAndSmallCalls) {
  // Never below 64 Ki elements: a 1 MiB call on 4 ranks keeps its one segment a chunk.
  EXPECT_EQ(ringSegmentElements(kDefault, 4, size_t{1} << 18), size_t{1} << 16);
  EXPECT_EQ(ringSegmentElements(kDefault, 4, 1000), size_t{1} << 16);
  EXPECT_EQ(ringSegmentElements(kDefault, 4, 0), kDefault);
  // 64 MiB on 4 ranks: 16 MiB chunks keep the configured segment.
  EXPECT_EQ(ringSegmentElements(kDefault, 4, size_t{1} << 24), kDefault);
  // A larger configured segment is a ceiling, not a floor.
  EXPECT_EQ(ringSegmentElements(size_t{1} << 22, 4, size_t{1} << 24), size_t{1} << 20);
  // Coarse enough for the tag space: n x segments a chunk stays within the tag index.
  for (int n : {2, 3, 1000, 4096, 100000}) {
    const size_t count = size_t{1} << 34;
    const size_t seg = ringSegmentElements(kDefault, n, count);
    EXPECT_LE(n * segmentsPerChunk(seg, n, count), detail::kMaxTagIndex) << n;
  }
}

}  // namespace
}  // namespace terse
