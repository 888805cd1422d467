// Shared helpers of the CPU kernels (private to kernels/cpu).
#pragma once

#include "terse/common/parallel.h"
#include "terse/kernels/instantiate.h"
#include "terse/kernels/kernels.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#define TERSE_RESTRICT __restrict__

namespace terse::kernels::cpu::detail {

// Below this many elements per thread a piece is not worth handing to the pool: the wake-up
// costs more than streaming 64K floats.
constexpr size_t kMinPerThread = size_t{1} << 16;

// True when the AVX2 + F16C paths run (the CPU has them and testing did not turn them off).
bool useAvx2();
// For tests: false runs the portable loops everywhere, true restores detection.
void setAvx2Enabled(bool enabled);

// parallelFor over [0, n) with pieces aligned to `align` elements.
template <typename Body>
void forRange(size_t n, size_t align, Body&& body) {
  if (n <= kMinPerThread) {
    if (n) body(size_t{0}, n);
    return;
  }
  parallelFor(n, align, kMinPerThread, [&](size_t b, size_t e) { body(b, e); });
}

// Runs body(blockIndex, begin, length) for every block of `block` elements (the last may be
// shorter), whole blocks spread over threads.
template <typename Body>
void forBlocks(size_t n, size_t block, Body&& body) {
  forRange(n, block, [&](size_t b, size_t e) {
    for (size_t s = b; s < e; s += block) body(s / block, s, std::min(block, e - s));
  });
}

}  // namespace terse::kernels::cpu::detail
