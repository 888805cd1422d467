// The CUDA side of OneBitAdam: stream-ordered elementwise kernels over device (or managed)
// memory, each the loop of the CPU path with numeric formulas from adam_math.h. In builds
// without CUDA every function returns kUnsupported (optim/src/kernels_none.cc).
#pragma once

#include "terse/common/status.h"
#include "terse/optim/adam_math.h"

#include <cstddef>
#include <cstdint>

namespace terse::optim::cuda {

// Warm-up step: m, v updated from the (averaged) gradient g, then the AdamW update of p.
Status adamWarmup(float* p, const float* g, float* m, float* v, size_t n, const AdamStepScalars& s,
                  void* stream);
// Compressed phase, before the allreduce: u = adamPreconditioned(beta1 m + (1 - beta1) g, v).
Status preconditioned(float* u, const float* m, const float* g, const float* v, size_t n,
                      const AdamStepScalars& s, void* stream);
// Compressed phase, after the allreduce: m from the averaged u, and the AdamW update of p.
Status update(float* p, float* m, const float* u, const float* v, size_t n,
              const AdamStepScalars& s, void* stream);

// ShardedOneBitAdam, compressed phase: x = adamScaleDown(g, e) over the whole tensor ...
Status scaleGradient(float* x, const float* g, const int8_t* e, size_t n, void* stream);
// ... or, with local momentum, x = adamLocalMomentum(mLocal, g, e, beta1) (the rank's new local
// momentum; mLocal is read only) ...
Status localMomentum(float* x, const float* mLocal, const float* g, const int8_t* e, size_t n,
                     float beta1, void* stream);
// ... and the owner's step on its shard: the averaged x unscaled, m updated in place (0 where
// v == 0; with fromAverage, m = adamMomentumFromAverage: the average is the momentum), the new
// parameters written to pNew (p is read only).
Status shardUpdate(float* pNew, float* m, const float* xAvg, const float* p, const float* v,
                   const int8_t* e, size_t n, const AdamStepScalars& s, bool fromAverage,
                   void* stream);

}  // namespace terse::optim::cuda
