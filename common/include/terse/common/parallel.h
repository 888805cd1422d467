// Multi-threading for CPU kernels on large buffers. One process-wide pool sized by
// TERSE_CPU_THREADS (default: the hardware's thread count); small ranges run inline so the
// per-call cost stays near zero for the small chunks collectives hand to codecs.
#pragma once

#include <cstddef>
#include <functional>

namespace terse {

// Runs body(begin, end) over [0, n) split into at most threads() contiguous pieces whose
// boundaries are multiples of `align` (so blockwise codecs never split a block). Ranges below
// `minPerThread` elements per thread run on the calling thread. Blocks until every piece is done.
// Safe to call from several threads at once; nested calls run inline.
void parallelFor(size_t n, size_t align, size_t minPerThread,
                 const std::function<void(size_t begin, size_t end)>& body);

// Number of threads parallelFor uses (including the caller).
size_t parallelThreads();

}  // namespace terse
