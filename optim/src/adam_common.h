// What OneBitAdam and ShardedOneBitAdam share on the host: the checks of the AdamW
// hyperparameters both take, the scalars of a step computed from them, and the checkpoint fields
// both write first (count, steps, freeze step, hyperparameters, warm-up steps), in one order.
// Options is either optimizer's options struct.
#pragma once

#include "checkpoint_io.h"
#include "terse/common/status.h"
#include "terse/optim/adam_math.h"

#include <cmath>
#include <cstdint>

namespace terse::optim {

inline bool inUnit(float b) { return std::isfinite(b) && b >= 0.0f && b < 1.0f; }

// betas, eps and weight decay; `who` names the optimizer in the message.
template <typename Options>
Status validateAdamHyperparameters(const char* who, const Options& o) {
  if (!inUnit(o.beta1) || !inUnit(o.beta2))
    return errorInvalidArgument("%s: betas (%g, %g) must lie in [0, 1)", who, o.beta1, o.beta2);
  if (!(std::isfinite(o.eps) && o.eps > 0.0f))
    return errorInvalidArgument("%s: eps %g must be a positive number", who, o.eps);
  if (!(std::isfinite(o.weightDecay) && o.weightDecay >= 0.0f))
    return errorInvalidArgument("%s: weight decay %g must be >= 0", who, o.weightDecay);
  return Status::ok();
}

// Adam's bias correction of the second moment after t updates, 1 - beta2^t.
inline double varianceCorrection(float beta2, int64_t t) {
  return 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
}

// The scalars of step t whose variance was last updated at step varianceT.
template <typename Options>
AdamStepScalars adamScalars(const Options& o, float lr, int64_t t, int64_t varianceT) {
  AdamStepScalars s;
  s.beta1 = o.beta1;
  s.beta2 = o.beta2;
  s.eps = o.eps;
  s.decayFactor = 1.0f - lr * o.weightDecay;
  double c1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(t));
  double c2 = varianceCorrection(o.beta2, varianceT);
  s.stepSize = static_cast<float>(lr / c1);
  s.sqrtC2 = static_cast<float>(std::sqrt(c2));
  return s;
}

// The checkpoint's first fields after the magic and version; getAdamHeader reads them back.
template <typename Options>
void putAdamHeader(CheckpointWriter& w, uint64_t count, int64_t steps, int64_t frozenAt,
                   const Options& o) {
  w.put<uint64_t>(count);
  w.put<int64_t>(steps);
  w.put<int64_t>(frozenAt);
  w.put<float>(o.beta1);
  w.put<float>(o.beta2);
  w.put<float>(o.eps);
  w.put<float>(o.weightDecay);
  w.put<int64_t>(o.warmupSteps);
}
template <typename Options>
bool getAdamHeader(CheckpointReader& r, uint64_t* count, int64_t* steps, int64_t* frozenAt,
                   Options& o) {
  return r.get(count) && r.get(steps) && r.get(frozenAt) && r.get(&o.beta1) && r.get(&o.beta2) &&
         r.get(&o.eps) && r.get(&o.weightDecay) && r.get(&o.warmupSteps);
}

}  // namespace terse::optim
