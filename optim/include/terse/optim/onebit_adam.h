// OneBitAdam: AdamW whose communication, after a warm-up, is a compressed allreduce of the
// momentum (the 1-bit Adam scheme of Tang et al. 2021, as in DeepSpeed's OnebitAdam), on flat
// float32 buffers so the C++ trainer, the C API and the Python optimizer share one
// implementation. docs/optim.md has the algorithm, its choices and the measurements.
//
// Why the momentum and not the gradient: Adam divides by a running estimate of the gradient's
// second moment. Compressing gradients with error feedback changes that estimate (a 1-bit
// message has a very different variance from the true gradient) and training degrades. Once the
// variance has settled it can be frozen; the update is then linear in the momentum, so averaging
// compressed momenta with error feedback is as good as averaging gradients.
//
// Phases, decided identically on every rank:
//  - warm-up (steps 1..W): the gradients are averaged (by this class with an uncompressed
//    allreduce, or by the caller, e.g. DDP, when averageGradients is false) and a plain AdamW
//    step follows.
//  - compressed (steps > W): the variance v is frozen at its value after step W (with its bias
//    correction 1 - beta2^W). Each rank forms m_i = beta1 m + (1 - beta1) g_i from its own,
//    unaveraged gradient, preconditions it by the frozen denominator d = sqrt(v / c2) + eps
//    (the same on every rank, so averaging commutes with it; adam_math.h says why), and
//    u = allreduce_avg(m_i / d) runs with the codec and this object's error feedback (worker
//    and server residuals, as terse's compressed allreduce keeps them). Then m = u d and the
//    AdamW update p = p (1 - lr wd) - lr / (1 - beta1^t) u.
//
// Buffers are host memory, or (CUDA builds) device memory for both params and grads, in which
// case the state moves to the device on the first step and every kernel runs on `stream`.
//
// Not thread-safe; one step at a time per object, and every rank steps with the same count,
// options and learning rate.
#pragma once

#include "terse/common/status.h"
#include "terse/compressors/error_feedback.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace terse {

class Communicator;

struct OneBitAdamOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weightDecay = 0.01f;  // decoupled (AdamW); 0 gives Adam
  // The codec of the momentum allreduce after warm-up: any terse spec ("onebit", "topk:ratio=
  // 0.01", "int8", "none", ...). Error feedback is always kept; codecs that lose nothing simply
  // leave zero residuals.
  std::string codec = "onebit";
  // > 0: freeze the variance after exactly this many steps. 0: decide from the variance itself
  // (the four fields below).
  int64_t warmupSteps = 100;
  // Automatic warm-up: every varianceCheckInterval steps the bias-corrected variance is compared
  // with the one at the previous check; once sum|vhat - vhat_prev| / sum|vhat| (averaged over
  // the ranks, so every rank decides alike) is at most varianceTolerance, the variance freezes.
  // Never before minWarmupSteps, always by maxWarmupSteps.
  int64_t varianceCheckInterval = 20;
  float varianceTolerance = 0.1f;
  int64_t minWarmupSteps = 40;
  int64_t maxWarmupSteps = 2000;
  // True: during warm-up step() averages the gradients with an uncompressed allreduce (in place,
  // in the caller's grads buffer). False: the caller already averaged them (DDP's allreduce).
  bool averageGradients = true;
};

class OneBitAdam {
 public:
  // State for `count` parameters; moments and residuals start at zero. Invalid options
  // (betas outside [0, 1), eps <= 0, a bad codec spec, ...) are kInvalidArgument.
  static Result<OneBitAdam> create(size_t count, const OneBitAdamOptions& options);

  OneBitAdam(OneBitAdam&&) noexcept;
  OneBitAdam& operator=(OneBitAdam&&) noexcept;
  ~OneBitAdam();

  // One optimizer step at learning rate `lr` (schedules are the caller's: pass the step's
  // value). params and grads hold count() floats; see the phases above for what is exchanged.
  // grads is left unchanged in the compressed phase (and overwritten with the average during
  // warm-up when averageGradients). A failed collective leaves the parameters untouched.
  Status step(Communicator& comm, float* params, float* grads, float lr, void* stream = nullptr);

  size_t count() const { return count_; }
  const OneBitAdamOptions& options() const { return options_; }
  // Steps taken so far (t of the bias corrections).
  int64_t steps() const { return steps_; }
  // Whether the variance is frozen (the compressed phase), and the step it froze after (0: not).
  bool frozen() const { return frozenAt_ > 0; }
  int64_t frozenAt() const { return frozenAt_; }
  // Host copies of the state (moved back from the device first when it lives there).
  const std::vector<float>& momentum() const;
  const std::vector<float>& variance() const;
  const ErrorFeedback& feedback() const { return feedback_; }
  // Replaces the residuals, e.g. with ones re-partitioned for another world size (the C++
  // trainer's resume). kInvalidArgument unless made for this codec and count().
  Status replaceFeedback(ErrorFeedback feedback);
  // Zeroes the worker and server residuals (a rank that loaded another rank's checkpoint: its
  // residuals are that rank's compression error, which must not be applied twice).
  void resetFeedback() { feedback_.reset(); }

  // After Communicator::shrink: continue on `shrunk` (the survivors). The state is replicated,
  // so the moments, the step and the phase stay as they are; the error-feedback residuals were
  // laid out for the world of the last step and are re-laid out for the new one with
  // relayoutFeedback (communicator.h): this rank's worker residual stays, the server residuals
  // are re-cut for the new world's chunks, the dead ranks' part of them lost. Collective over
  // `shrunk` (made by Communicator::shrink): every survivor calls it, whatever its step count
  // (survivors may be a step apart). On failure the state is unchanged.
  Status shrink(Communicator& shrunk);

  // Checkpoint form: versioned, little-endian, checksummed (docs/optim.md). It holds the
  // options, the step, the phase, both moments and the error-feedback residuals. Loading at a
  // different world size is allowed: the server residual then restarts at zero (ErrorFeedback
  // never applies a residual of another partition).
  std::vector<uint8_t> serialize() const;
  static Result<OneBitAdam> deserialize(const void* bytes, size_t size);

 private:
  // Whether the next step runs a collective (which one depends on the phase and options): a
  // step refused for its arguments stands in for that collective on the other ranks.
  bool nextStepCommunicates() const;
  // What the end of warm-up step t does about freezing. One answer serves varianceSettled (which
  // acts on it), the device step (which copies v to the host only to measure) and
  // nextStepCommunicates (a measurement after the first one talks), so they cannot disagree.
  enum class WarmupEnd { kFixedSteps, kCapReached, kNoCheck, kMeasure };
  WarmupEnd warmupEndAt(int64_t t) const;
  struct Device;
  OneBitAdam();
  Status stepHost(Communicator& comm, float* params, float* grads, float lr);
  Status stepDevice(Communicator& comm, float* params, float* grads, float lr, void* stream);
  // Whether warm-up step t ends the warm-up. vNext is the variance step t will leave, on the
  // host, needed only when warmupEndAt(t) is kMeasure. Its collective runs before step t
  // changes anything and it changes nothing itself: the step calls recordVarianceCheck once
  // its own update has succeeded too (on a device, after the kernel), so a failure anywhere
  // leaves the optimizer as it was and the step can be retried.
  Result<bool> varianceSettled(Communicator& comm, int64_t t, const float* vNext) const;
  // Keeps vNext's bias-corrected variance as the next check's reference (kMeasure steps only).
  void recordVarianceCheck(int64_t t, const float* vNext);
  void pullToHost() const;

  size_t count_ = 0;
  OneBitAdamOptions options_;
  int64_t steps_ = 0;
  int64_t frozenAt_ = 0;
  mutable std::vector<float> m_;
  mutable std::vector<float> v_;
  // Until the step's collective succeeded: the compressed phase's new momentum, or the variance
  // a measuring warm-up step would leave.
  std::vector<float> scratch_;
  std::vector<float> vCheck_;  // automatic warm-up: vhat at the previous check (empty before)
  ErrorFeedback feedback_;
  mutable std::unique_ptr<Device> device_;
};

// Checks options without building state (the C API and the Python wrapper report the same
// messages).
Status validateOneBitAdamOptions(const OneBitAdamOptions& options);

}  // namespace terse
