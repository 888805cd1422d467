// OneBitAdam's state and step (the design is in onebit_adam.h and docs/optim.md).
#include "terse/optim/onebit_adam.h"

#include "adam_common.h"
#include "checkpoint_io.h"
#include "kernels.h"
#include "terse/kernels/device.h"
#include "terse/optim/adam_math.h"

#include <terse/communicator.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace terse {

namespace {

constexpr uint32_t kMagic = 0x41424f54;  // "TOBA" little-endian
constexpr uint32_t kVersion = 1;
constexpr size_t kMaxSpecBytes = 256;

}  // namespace

Status validateOneBitAdamOptions(const OneBitAdamOptions& o) {
  TERSE_RETURN_IF_ERROR(optim::validateAdamHyperparameters("OneBitAdam", o));
  if (o.warmupSteps < 0)
    return errorInvalidArgument(
        "OneBitAdam: warmup steps %lld must be >= 0 (0 decides from the variance)",
        static_cast<long long>(o.warmupSteps));
  if (o.warmupSteps == 0) {
    if (o.varianceCheckInterval < 1)
      return errorInvalidArgument("OneBitAdam: variance check interval %lld must be >= 1",
                                  static_cast<long long>(o.varianceCheckInterval));
    if (!(std::isfinite(o.varianceTolerance) && o.varianceTolerance >= 0.0f))
      return errorInvalidArgument("OneBitAdam: variance tolerance %g must be >= 0",
                                  o.varianceTolerance);
    if (o.minWarmupSteps < 1 || o.maxWarmupSteps < o.minWarmupSteps)
      return errorInvalidArgument(
          "OneBitAdam: automatic warm-up needs 1 <= min (%lld) <= max (%lld) steps",
          static_cast<long long>(o.minWarmupSteps), static_cast<long long>(o.maxWarmupSteps));
  }
  if (o.codec.empty() || o.codec.size() > kMaxSpecBytes)
    return errorInvalidArgument("OneBitAdam: codec spec must have 1..%zu characters",
                                kMaxSpecBytes);
  return Status::ok();
}

// The state's device copy (CUDA builds, device buffers). Like ErrorFeedback's residuals the
// moments live in one place at a time: `current` says the device copy is the state.
struct OneBitAdam::Device {
  device::DeviceBuffer m;
  device::DeviceBuffer v;
  device::DeviceBuffer u;  // the compressed phase's preconditioned momentum
  bool current = false;
};

OneBitAdam::OneBitAdam() = default;
OneBitAdam::OneBitAdam(OneBitAdam&&) noexcept = default;
OneBitAdam& OneBitAdam::operator=(OneBitAdam&&) noexcept = default;
OneBitAdam::~OneBitAdam() = default;

Result<OneBitAdam> OneBitAdam::create(size_t count, const OneBitAdamOptions& options) {
  TERSE_RETURN_IF_ERROR(validateOneBitAdamOptions(options));
  auto fb = ErrorFeedback::create(options.codec, count);
  if (!fb.isOk()) return fb.status().withContext("OneBitAdam: codec");
  OneBitAdam a;
  a.count_ = count;
  a.options_ = options;
  a.options_.codec = fb->codecSpec();  // canonical, so every rank's checkpoints compare alike
  a.m_.assign(count, 0.0f);
  a.v_.assign(count, 0.0f);
  a.feedback_ = std::move(fb).value();
  return a;
}

void OneBitAdam::pullToHost() const {
  if (!device_ || !device_->current) return;
  // The device copy is current only after a device step, whose caller synchronized its stream
  // (step() does before returning), so a plain synchronous copy is safe here.
  (void)device::copyAsync(m_.data(), device_->m.data(), 4 * count_, nullptr);
  (void)device::copyAsync(v_.data(), device_->v.data(), 4 * count_, nullptr);
  (void)device::synchronize(nullptr);
  device_->current = false;
}

const std::vector<float>& OneBitAdam::momentum() const {
  pullToHost();
  return m_;
}
const std::vector<float>& OneBitAdam::variance() const {
  pullToHost();
  return v_;
}

Status OneBitAdam::replaceFeedback(ErrorFeedback feedback) {
  TERSE_RETURN_IF_ERROR(
      feedback.checkCompatible(options_.codec, count_).withContext("OneBitAdam::replaceFeedback"));
  feedback_ = std::move(feedback);
  return Status::ok();
}

OneBitAdam::WarmupEnd OneBitAdam::warmupEndAt(int64_t t) const {
  const OneBitAdamOptions& o = options_;
  if (o.warmupSteps > 0) return WarmupEnd::kFixedSteps;
  if (t >= o.maxWarmupSteps) return WarmupEnd::kCapReached;
  if (t % o.varianceCheckInterval != 0) return WarmupEnd::kNoCheck;
  return WarmupEnd::kMeasure;
}

bool OneBitAdam::nextStepCommunicates() const {
  if (frozen() || options_.averageGradients) return true;
  // Warm-up on gradients the caller averaged: only varianceSettled's measurements after its
  // first one talk.
  return warmupEndAt(steps_ + 1) == WarmupEnd::kMeasure && !vCheck_.empty();
}

Status OneBitAdam::step(Communicator& comm, float* params, float* grads, float lr, void* stream) {
  Status bad;
  bool devP = device::isDeviceMemory(params), devG = device::isDeviceMemory(grads);
  if (count_ > 0 && (!params || !grads))
    bad =
        errorInvalidArgument("OneBitAdam::step: params or grads is null for %zu elements", count_);
  else if (!std::isfinite(lr) || lr < 0.0f)
    bad =
        errorInvalidArgument("OneBitAdam::step: learning rate %g must be a finite number >= 0", lr);
  else if (devP != devG)
    bad = errorInvalidArgument(
        "OneBitAdam::step: params and grads must both be device memory or both host memory");
  if (!bad.isOk()) {
    // The other ranks' step goes on to its collective: this rank's refusal stands in for it, so
    // they fail this step at once instead of pairing it with this rank's next one.
    if (nextStepCommunicates()) (void)comm.reject(bad).wait();
    return bad;
  }
  return devP ? stepDevice(comm, params, grads, lr, stream) : stepHost(comm, params, grads, lr);
}

Status OneBitAdam::shrink(Communicator& shrunk) {
  // Always collective, whatever this rank's step count: survivors can be a step apart (one
  // finished a call the others failed), so a local "nothing to move yet" would leave the others
  // waiting. A state that has not stepped holds no server residual and simply takes part. The
  // old rank and world come from the shrunk communicator, which a state reloaded from a
  // checkpoint (a rolled-back survivor's) cannot remember.
  const auto [oldRank, oldWorld] = shrunk.shrunkFrom();
  if (oldWorld == 0)
    return errorInvalidArgument(
        "OneBitAdam::shrink: the communicator was not made by Communicator::shrink, so this "
        "rank's place in the old world is unknown");
  Status s = relayoutFeedback(shrunk, oldRank, oldWorld, {&feedback_});
  if (!s.isOk()) return s.withContext("OneBitAdam::shrink");
  return Status::ok();
}

Result<bool> OneBitAdam::varianceSettled(Communicator& comm, int64_t t, const float* vNext) const {
  const OneBitAdamOptions& o = options_;
  switch (warmupEndAt(t)) {
    case WarmupEnd::kFixedSteps: return t >= o.warmupSteps;
    case WarmupEnd::kCapReached: return true;
    case WarmupEnd::kNoCheck: return false;
    case WarmupEnd::kMeasure: break;
  }
  // The first measurement only records (recordVarianceCheck): every rank has the same step
  // count, so all skip this check alike.
  if (vCheck_.empty()) return false;
  const double c2 = optim::varianceCorrection(o.beta2, t);
  auto vhatAt = [&](size_t i) { return static_cast<float>(vNext[i] / c2); };
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < count_; ++i) {
    const float vhat = vhatAt(i);
    diff += std::fabs(static_cast<double>(vhat) - vCheck_[i]);
    norm += std::fabs(static_cast<double>(vhat));
  }
  // The gradients were averaged, so the variances should agree; averaging the figure makes the
  // decision identical on every rank even if the caller's averaging was not bit-exact.
  float rel = norm > 0.0 ? static_cast<float>(diff / norm) : 0.0f;
  Status s = comm.allreduce(&rel, &rel, 1, DataType::kFloat32, ReduceOp::kAvg);
  if (!s.isOk()) return s.withContext("OneBitAdam: deciding the end of warm-up");
  return t >= o.minWarmupSteps && rel <= o.varianceTolerance;
}

void OneBitAdam::recordVarianceCheck(int64_t t, const float* vNext) {
  if (warmupEndAt(t) != WarmupEnd::kMeasure) return;
  const double c2 =
      optim::varianceCorrection(options_.beta2, t);  // vhat as varianceSettled reads it
  vCheck_.resize(count_);
  for (size_t i = 0; i < count_; ++i) vCheck_[i] = static_cast<float>(vNext[i] / c2);
}

Status OneBitAdam::stepHost(Communicator& comm, float* params, float* grads, float lr) {
  pullToHost();
  const OneBitAdamOptions& o = options_;
  const int64_t t = steps_ + 1;
  const size_t n = count_;
  if (!frozen()) {
    if (o.averageGradients) {
      Status s = comm.allreduce(grads, grads, n, DataType::kFloat32, ReduceOp::kAvg);
      if (!s.isOk()) return s.withContext("OneBitAdam: averaging the warm-up gradients");
    }
    optim::AdamStepScalars s = optim::adamScalars(o, lr, t, t);
    float* m = m_.data();
    float* v = v_.data();
    if (warmupEndAt(t) == WarmupEnd::kMeasure) {
      scratch_.resize(n);  // the variance this step leaves, measured before anything changes
      for (size_t i = 0; i < n; ++i) scratch_[i] = optim::adamVariance(v[i], grads[i], s.beta2);
    }
    auto settled = varianceSettled(comm, t, scratch_.data());
    if (!settled.isOk()) return settled.status();
    for (size_t i = 0; i < n; ++i) {
      m[i] = optim::adamMomentum(m[i], grads[i], s.beta1);
      v[i] = optim::adamVariance(v[i], grads[i], s.beta2);
      params[i] = optim::adamParam(params[i], m[i], v[i], s);
    }
    recordVarianceCheck(t, scratch_.data());
    steps_ = t;
    if (settled.value()) frozenAt_ = t;
    return Status::ok();
  }
  // Compressed phase: u = (beta1 m + (1 - beta1) g) / denom goes through the allreduce
  // (adam_math.h says why the preconditioned momentum); m and p change only once it succeeded.
  optim::AdamStepScalars sc = optim::adamScalars(o, lr, t, frozenAt_);
  std::vector<float>& u = scratch_;  // reused: no allocation per step
  u.resize(n);
  const float* m = m_.data();
  const float* v = v_.data();
  for (size_t i = 0; i < n; ++i)
    u[i] = optim::adamPreconditioned(optim::adamMomentum(m[i], grads[i], o.beta1), v[i], sc);
  CollectiveOptions co;
  co.codec = o.codec;
  co.feedback = &feedback_;
  Status s = comm.allreduce(u.data(), u.data(), n, DataType::kFloat32, ReduceOp::kAvg, co);
  if (!s.isOk()) return s.withContext("OneBitAdam: allreducing the momentum");
  float* mm = m_.data();
  for (size_t i = 0; i < n; ++i) {
    mm[i] = optim::adamMomentumFrom(u[i], v[i], sc);
    params[i] = optim::adamParamFrom(params[i], u[i], v[i], sc);
  }
  steps_ = t;
  return Status::ok();
}

Status OneBitAdam::stepDevice(Communicator& comm, float* params, float* grads, float lr,
                              void* stream) {
  const OneBitAdamOptions& o = options_;
  const int64_t t = steps_ + 1;
  const size_t n = count_;
  if (!device_) device_ = std::make_unique<Device>();
  if (!device_->current) {
    TERSE_RETURN_IF_ERROR(device_->m.reserve(4 * n).status());
    TERSE_RETURN_IF_ERROR(device_->v.reserve(4 * n).status());
    TERSE_RETURN_IF_ERROR(device::copyAsync(device_->m.data(), m_.data(), 4 * n, stream));
    TERSE_RETURN_IF_ERROR(device::copyAsync(device_->v.data(), v_.data(), 4 * n, stream));
    device_->current = true;
  }
  auto* dm = static_cast<float*>(device_->m.data());
  auto* dv = static_cast<float*>(device_->v.data());
  if (!frozen()) {
    if (o.averageGradients) {
      CollectiveOptions co;
      co.stream = stream;
      Status s = comm.allreduce(grads, grads, n, DataType::kFloat32, ReduceOp::kAvg, co);
      if (!s.isOk()) return s.withContext("OneBitAdam: averaging the warm-up gradients");
    }
    const optim::AdamStepScalars sc = optim::adamScalars(o, lr, t, t);
    std::vector<float> vNext;
    if (warmupEndAt(t) == WarmupEnd::kMeasure) {
      // The variance this step leaves, computed on the host from the current one and the
      // gradients before the kernel changes anything (the figure is averaged over the ranks, so
      // the host's rounding of the formula decides alike everywhere).
      vNext.resize(n);
      std::vector<float> gHost(n);
      TERSE_RETURN_IF_ERROR(device::copyAsync(vNext.data(), dv, 4 * n, stream));
      TERSE_RETURN_IF_ERROR(device::copyAsync(gHost.data(), grads, 4 * n, stream));
      TERSE_RETURN_IF_ERROR(device::synchronize(stream));
      for (size_t i = 0; i < n; ++i) vNext[i] = optim::adamVariance(vNext[i], gHost[i], sc.beta2);
    }
    auto settled = varianceSettled(comm, t, vNext.data());
    if (!settled.isOk()) return settled.status();
    TERSE_RETURN_IF_ERROR(optim::cuda::adamWarmup(params, grads, dm, dv, n, sc, stream));
    TERSE_RETURN_IF_ERROR(device::synchronize(stream));
    recordVarianceCheck(t, vNext.data());
    steps_ = t;
    if (settled.value()) frozenAt_ = t;
    return Status::ok();
  }
  optim::AdamStepScalars sc = optim::adamScalars(o, lr, t, frozenAt_);
  TERSE_RETURN_IF_ERROR(device_->u.reserve(4 * n).status());
  auto* du = static_cast<float*>(device_->u.data());
  TERSE_RETURN_IF_ERROR(optim::cuda::preconditioned(du, dm, grads, dv, n, sc, stream));
  CollectiveOptions co;
  co.codec = o.codec;
  co.feedback = &feedback_;
  co.stream = stream;
  Status s = comm.allreduce(du, du, n, DataType::kFloat32, ReduceOp::kAvg, co);
  if (!s.isOk()) return s.withContext("OneBitAdam: allreducing the momentum");
  TERSE_RETURN_IF_ERROR(optim::cuda::update(params, dm, du, dv, n, sc, stream));
  TERSE_RETURN_IF_ERROR(device::synchronize(stream));
  steps_ = t;
  return Status::ok();
}

std::vector<uint8_t> OneBitAdam::serialize() const {
  pullToHost();
  const OneBitAdamOptions& o = options_;
  optim::CheckpointWriter w(kMagic, kVersion);
  optim::putAdamHeader(w, count_, steps_, frozenAt_, o);
  w.put<int64_t>(o.varianceCheckInterval);
  w.put<float>(o.varianceTolerance);
  w.put<uint32_t>(o.averageGradients ? 1 : 0);
  w.put<int64_t>(o.minWarmupSteps);
  w.put<int64_t>(o.maxWarmupSteps);
  w.put<uint32_t>(static_cast<uint32_t>(o.codec.size()));
  w.bytes(o.codec.data(), o.codec.size());
  w.floats(m_);
  w.floats(v_);
  w.floats(vCheck_);
  std::vector<uint8_t> fb = feedback_.serialize();
  w.put<uint64_t>(fb.size());
  w.bytes(fb.data(), fb.size());
  return w.finish();
}

Result<OneBitAdam> OneBitAdam::deserialize(const void* bytes, size_t size) {
  const char* what = "OneBitAdam checkpoint";
  TERSE_ASSIGN_OR_RETURN(
      optim::CheckpointReader r,
      optim::CheckpointReader::open(bytes, size, kMagic, kVersion, what, "TOBA"));
  OneBitAdam a;
  OneBitAdamOptions& o = a.options_;
  uint64_t count = 0;
  uint32_t avg = 0, specLen = 0;
  bool ok = optim::getAdamHeader(r, &count, &a.steps_, &a.frozenAt_, o) &&
            r.get(&o.varianceCheckInterval) && r.get(&o.varianceTolerance) && r.get(&avg) &&
            r.get(&o.minWarmupSteps) && r.get(&o.maxWarmupSteps) && r.get(&specLen);
  if (!ok || specLen == 0 || specLen > kMaxSpecBytes || avg > 1)
    return errorCorrupt("%s: its header is truncated or invalid", what);
  o.averageGradients = avg == 1;
  o.codec.resize(specLen);
  if (!r.bytes(o.codec.data(), specLen) || count > r.left() / 8)
    return errorCorrupt("%s: truncated codec spec or impossible count %llu", what,
                        static_cast<unsigned long long>(count));
  a.count_ = count;
  uint64_t checkCount = 0;
  if (!r.floats(&a.m_, count) || !r.floats(&a.v_, count))
    return errorCorrupt("%s: moments missing or not of %llu elements", what,
                        static_cast<unsigned long long>(count));
  optim::CheckpointReader peek = r;
  if (!peek.get(&checkCount) || (checkCount != 0 && checkCount != count) ||
      !r.floats(&a.vCheck_, checkCount))
    return errorCorrupt("%s: variance snapshot invalid", what);
  uint64_t fbLen = 0;
  if (!r.get(&fbLen) || fbLen != r.left())
    return errorCorrupt("%s: error-feedback section has the wrong length", what);
  Status valid = validateOneBitAdamOptions(o);
  if (!valid.isOk()) return errorCorrupt("%s: %s", what, valid.message().c_str());
  if (a.steps_ < 0 || a.frozenAt_ < 0 || a.frozenAt_ > a.steps_)
    return errorCorrupt("%s: step %lld / frozen at %lld are inconsistent", what,
                        static_cast<long long>(a.steps_), static_cast<long long>(a.frozenAt_));
  auto fb = ErrorFeedback::deserialize(r.here(), fbLen);
  if (!fb.isOk()) return fb.status().withContext(what);
  if (fb->count() != count || fb->codecSpec() != o.codec)
    return errorCorrupt("%s: its residuals are for '%s' x %zu, the optimizer for '%s' x %llu", what,
                        fb->codecSpec().c_str(), fb->count(), o.codec.c_str(),
                        static_cast<unsigned long long>(count));
  a.feedback_ = std::move(fb).value();
  return a;
}

}  // namespace terse
