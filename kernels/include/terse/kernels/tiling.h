// How the CUDA block-quantize and decode kernels split an array among threads, as plain
// TERSE_HD arithmetic: the kernels call these functions for their index math, and
// tests/gpu/kernels_test.cc runs the same functions on the CPU (no device needed) to check that
// every element of every codec block is covered exactly once, for odd sizes and every shape.
//
// Quantize: a group of `lanes` consecutive lanes of one warp (8, 16 or 32) takes one codec
// block; lane l holds `chunks` chunks of kChunk consecutive elements in registers, chunk j of
// the lane being chunk j * lanes + l of the block (so each load instruction of the group reads
// lanes * kChunk consecutive elements). The group's lanes reduce the block's max by shuffles,
// then quantize the values they still hold: one pass over memory. A warp holds 32 / lanes
// groups, so it takes that many consecutive codec blocks per step.
//
// Decode: thread-sized groups of kDecodeGroup consecutive elements.
#pragma once

#include "terse/common/hd.h"

#include <cstddef>

namespace terse::kernels::tiling {

constexpr unsigned kWarp = 32;
// Elements a lane loads at once: 16 bytes of float32 (a float4), 8 of 16-bit types.
constexpr size_t kChunk = 4;
// Elements a decoding thread takes: 16 one-byte codes (16 bytes), 8 bytes of nibbles, 2 of bits.
constexpr size_t kDecodeGroup = 16;

// Lanes per codec block and chunks per lane; lanes == 0 means the block is too large to be held
// in registers (the kernels then use their CUDA-block-per-codec-block form).
struct QuantShape {
  unsigned lanes;
  unsigned chunks;
};
// The largest block held in registers: 32 lanes x 8 chunks x 4 elements.
constexpr size_t kMaxRegisterBlock = 32 * 8 * kChunk;

// The smallest shape that holds a block: few lanes for small blocks (so a warp takes several
// blocks and no lane idles), then more chunks per lane.
TERSE_HD QuantShape quantShapeFor(size_t block) {
  if (block == 0 || block > kMaxRegisterBlock) return QuantShape{0, 0};
  if (block <= 8 * kChunk) return QuantShape{8, 1};
  if (block <= 16 * kChunk) return QuantShape{16, 1};
  if (block <= 32 * kChunk) return QuantShape{32, 1};
  if (block <= 32 * 2 * kChunk) return QuantShape{32, 2};
  if (block <= 32 * 4 * kChunk) return QuantShape{32, 4};
  return QuantShape{32, 8};
}

TERSE_HD size_t blockCount(size_t n, size_t block) { return n / block + (n % block != 0); }

// Codec blocks a warp takes per step.
TERSE_HD size_t blocksPerWarp(unsigned lanes) { return kWarp / lanes; }

// The codec block that lane `laneInWarp` of warp `warp` works on in step `step`, when `warps`
// warps run (grid-stride over whole warps, so every lane of a warp runs the same steps and the
// shuffles see all their lanes). May be >= the block count: the lane then only joins shuffles.
TERSE_HD size_t codecBlockOf(size_t warp, size_t warps, size_t step, unsigned laneInWarp,
                             unsigned lanes) {
  return (warp + step * warps) * blocksPerWarp(lanes) + laneInWarp / lanes;
}

// Elements [first, last) of chunk j of lane l (0 <= l < lanes) in codec block b; empty
// (first == last) past the block's end or n.
struct Range {
  size_t first;
  size_t last;
};
TERSE_HD Range chunkRange(size_t n, size_t block, size_t b, unsigned lanes, unsigned l,
                          unsigned j) {
  size_t begin = b * block;
  size_t end = begin + block < n ? begin + block : n;
  if (begin > end) end = begin;  // b past the last block
  size_t first = begin + (size_t{j} * lanes + l) * kChunk;
  first = first < end ? first : end;
  size_t last = first + kChunk < end ? first + kChunk : end;
  return Range{first, last};
}

// Decode group g: elements [g * kDecodeGroup, min(+kDecodeGroup, n)).
TERSE_HD size_t decodeGroups(size_t n) { return n / kDecodeGroup + (n % kDecodeGroup != 0); }
TERSE_HD Range decodeRange(size_t n, size_t g) {
  size_t first = g * kDecodeGroup;
  first = first < n ? first : n;
  size_t last = first + kDecodeGroup < n ? first + kDecodeGroup : n;
  return Range{first, last};
}

// The scale index of consecutive elements first, first + 1, ... of a decode group: one division
// for the first, then a step at each block boundary (at most one per element, as block >= 1).
struct ScaleWalk {
  size_t index;
  size_t boundary;  // first element of the next codec block
  size_t block;
  TERSE_HD ScaleWalk(size_t first, size_t blockSize)
      : index(first / blockSize), boundary((first / blockSize + 1) * blockSize), block(blockSize) {}
  // Moves to element i, one past the previous (or the first); true when the block changed.
  TERSE_HD bool advance(size_t i) {
    if (i < boundary) return false;
    ++index;
    boundary += block;
    return true;
  }
};

}  // namespace terse::kernels::tiling
