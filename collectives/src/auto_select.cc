#include "terse/collectives/auto_select.h"

#include "terse/common/logging.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

namespace terse {

namespace {

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best of `reps` timings after one untimed warm-up: the machine is noisy and the minimum is the
// least disturbed estimate of what the operation itself costs.
template <typename F>
Result<double> bestOf(int reps, F&& f) {
  TERSE_RETURN_IF_ERROR(f());
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    TERSE_RETURN_IF_ERROR(f());
    best = std::min(best, seconds(t0));
  }
  return best;
}

}  // namespace

Result<std::unique_ptr<AutoSelector>> AutoSelector::create(const std::string& spec) {
  TERSE_ASSIGN_OR_RETURN(AutoSpec parsed, parseAutoSpec(spec));
  auto s = std::unique_ptr<AutoSelector>(new AutoSelector());
  s->spec_ = parsed;
  for (const auto& c : parsed.candidates) {
    TERSE_ASSIGN_OR_RETURN(std::shared_ptr<const Codec> codec, makeCodec(c));
    s->codecs_.push_back(codec);
  }
  return s;
}

Status AutoSelector::calibrate(CollectiveEngine& engine) {
  const int n = engine.transport().size();
  const size_t k = 2 + codecs_.size();
  std::vector<float> mine(k, 0.0f);

  // Two uncompressed allreduces give the line a + b * wireBytes.
  const size_t smallCount = size_t{1} << 16, largeCount = size_t{1} << 20;
  std::vector<float> buf(largeCount, 1.0f), out(largeCount);
  auto none = codecs_.front();  // candidates start with "none"
  for (int i = 0; i < 2 && n > 1; ++i) {
    CollectiveOp op;
    op.send = buf.data();
    op.recv = out.data();
    op.count = i == 0 ? smallCount : largeCount;
    op.codec = none.get();
    TERSE_ASSIGN_OR_RETURN(double t, bestOf(2, [&] { return engine.run(op); }));
    mine[i] = static_cast<float>(t);
  }
  // Each codec's added work, timed locally on the same buffer: the whole input compressed once,
  // the owned chunk once more, the contributions and the result decompressed once each.
  std::vector<uint8_t> wire;
  std::vector<float> residual(largeCount, 0.0f), acc(largeCount, 0.0f);
  for (size_t c = 1; c < codecs_.size(); ++c) {
    const Codec& codec = *codecs_[c];
    wire.resize(codec.maxWireBytes(largeCount));
    size_t bytes = 0;
    float* res = codec.wantsErrorFeedback() ? residual.data() : nullptr;
    TERSE_ASSIGN_OR_RETURN(double tc, bestOf(2, [&]() -> Status {
                             TERSE_ASSIGN_OR_RETURN(
                                 bytes, codec.compress(buf.data(), DataType::kFloat32, largeCount,
                                                       res, wire.data(), wire.size()));
                             return Status::ok();
                           }));
    TERSE_ASSIGN_OR_RETURN(double td, bestOf(2, [&] {
                             return codec.decompressAccumulate(wire.data(), bytes, acc.data(),
                                                               largeCount);
                           }));
    mine[1 + c] = static_cast<float>(tc * (1.0 + 1.0 / n) + 2.0 * td);
  }

  // Every rank adopts the slowest rank's figures, so all of them decide alike.
  std::vector<float> all(k * n);
  CollectiveOp gather;
  gather.kind = CollectiveKind::kAllGather;
  gather.send = mine.data();
  gather.recv = all.data();
  gather.count = k * n;
  gather.codec = none.get();
  TERSE_RETURN_IF_ERROR(engine.run(gather));
  std::vector<double> worst(k, 0.0);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < k; ++i) worst[i] = std::max<double>(worst[i], all[r * k + i]);

  if (n > 1) {
    double w1 = 2.0 * (n - 1) / n * smallCount * 4, w2 = 2.0 * (n - 1) / n * largeCount * 4;
    perByte_ = std::max(1e-12, (worst[1] - worst[0]) / (w2 - w1));
    latency_ = std::max(0.0, worst[0] - perByte_ * w1);
  }
  workPerByte_.assign(codecs_.size(), 0.0);
  for (size_t c = 1; c < codecs_.size(); ++c) workPerByte_[c] = worst[1 + c] / (largeCount * 4.0);
  calibrated_ = true;
  TERSE_INFO(kSubsysColl,
             "auto (%s): calibrated on %d ranks: latency %.1f us, %.2f GB/s effective uncompressed "
             "bandwidth",
             spec_.canonical.c_str(), n, latency_ * 1e6, 1e-9 / perByte_);
  return Status::ok();
}

std::vector<std::pair<std::string, double>> AutoSelector::predict(const CollectiveOp& op,
                                                                  int n) const {
  std::vector<std::pair<std::string, double>> out;
  const double factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  for (size_t c = 0; c < codecs_.size(); ++c) {
    const Codec& codec = *codecs_[c];
    double wire = c == 0 ? factor * op.count * dataTypeSize(op.dtype)
                         : factor * op.count * codec.wireBytesPerElement();
    double t = latency_ + perByte_ * wire + workPerByte_[c] * op.count * 4.0;
    out.emplace_back(codec.spec(), t);
  }
  return out;
}

Result<const Codec*> AutoSelector::choose(CollectiveEngine& engine, const CollectiveOp& op) {
  const int n = engine.transport().size();
  if (n == 1 || op.count == 0) return codecs_.front().get();  // nothing to send: no loss needed
  if (!calibrated_) TERSE_RETURN_IF_ERROR(calibrate(engine).withContext("auto codec calibration"));
  auto predictions = predict(op, n);
  size_t best = 0;
  for (size_t c = 1; c < predictions.size(); ++c)
    if (predictions[c].second < predictions[best].second) best = c;
  // Log each (size class, pick) once: sizes in powers of two.
  size_t sizeClass = 0;
  while ((size_t{1} << sizeClass) < op.count) ++sizeClass;
  auto key = std::make_pair(sizeClass, predictions[best].first);
  if (!logged_[key]) {
    logged_[key] = true;
    TERSE_INFO(kSubsysColl, "auto (%s): %zu elements -> %s (predicted %.2f ms; none %.2f ms)",
               spec_.canonical.c_str(), op.count, predictions[best].first.c_str(),
               predictions[best].second * 1e3, predictions[0].second * 1e3);
  }
  return codecs_[best].get();
}

}  // namespace terse
