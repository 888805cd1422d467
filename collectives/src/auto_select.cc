#include "terse/collectives/auto_select.h"

#include "terse/collectives/measure.h"
#include "terse/common/logging.h"
#include "terse/kernels/element_type.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace terse {

Result<std::unique_ptr<AutoSelector>> AutoSelector::create(const std::string& spec,
                                                           double contenderMargin) {
  TERSE_ASSIGN_OR_RETURN(AutoSpec parsed, parseAutoSpec(spec));
  auto s = std::unique_ptr<AutoSelector>(new AutoSelector());
  s->spec_ = parsed;
  s->contenderMargin_ = std::max(1.0, contenderMargin);
  for (const auto& c : parsed.candidates) {
    TERSE_ASSIGN_OR_RETURN(std::shared_ptr<const Codec> codec, makeCodec(c));
    s->codecs_.push_back(codec);
  }
  return s;
}

Status AutoSelector::calibrate(CollectiveEngine& engine, Algorithm algorithm,
                               const std::function<Status()>& agree) {
  const int n = engine.transport().size();
  const size_t k = codecs_.size();
  // Every candidate's own allreduce at two sizes on this communicator: the fit a_c + b_c * count
  // then holds the link (bandwidth and latency), the codec's speed on these cores, and how well
  // the pipeline overlaps the two, which a sum of separately timed parts would miss.
  const size_t sizes[2] = {size_t{1} << 16, size_t{1} << 20};
  Measurement m;
  m.what = "auto codec calibration";
  m.agree = agree;
  for (size_t c = 0; c < k; ++c)
    for (int s = 0; s < 2; ++s) {
      CollectiveOp op;
      op.count = sizes[s];
      op.codec = codecs_[c].get();
      op.algorithm = algorithm;
      m.candidates.push_back(op);
      m.names.push_back(codecs_[c]->spec() + " at " + std::to_string(sizes[s]) + " elements");
    }
  // Every rank adopts the slowest rank's figures, so all of them decide alike.
  TERSE_ASSIGN_OR_RETURN(std::vector<double> worst, measureCandidates(engine, m));

  Fit fit;
  fit.intercept.assign(k, 0.0);
  fit.slope.assign(k, 0.0);
  const double span = static_cast<double>(sizes[1] - sizes[0]);
  for (size_t c = 0; c < k; ++c) {
    fit.slope[c] = std::max(1e-15, (worst[2 * c + 1] - worst[2 * c]) / span);
    fit.intercept[c] = std::max(0.0, worst[2 * c] - fit.slope[c] * sizes[0]);
  }
  const double factor = 2.0 * (n - 1) / n;  // bytes each rank sends per input byte (none)
  TERSE_INFO(kSubsysColl,
             "auto (%s): calibrated %s on %d ranks: none %.1f us + %.2f GB/s on the wire",
             spec_.canonical.c_str(), algorithmName(algorithm), n, fit.intercept[0] * 1e6,
             factor * 4.0 / fit.slope[0] * 1e-9);
  fits_[static_cast<int>(algorithm)] = std::move(fit);
  return Status::ok();
}

std::vector<std::pair<std::string, double>> AutoSelector::predict(const CollectiveOp& op,
                                                                  int n) const {
  std::vector<std::pair<std::string, double>> out;
  // Calibrated on float32 allreduces. A 16-bit tensor halves what `none` sends (the codecs'
  // wire does not depend on the input type); reduce-scatter and allgather move half an
  // allreduce's bytes.
  if (fits_.empty()) return out;
  auto fit = fits_.find(static_cast<int>(op.algorithm));
  if (fit == fits_.end()) fit = fits_.begin();
  double elems = static_cast<double>(op.count);
  if (op.kind != CollectiveKind::kAllReduce) elems *= 0.5;
  for (size_t c = 0; c < codecs_.size(); ++c) {
    double e = c == 0 ? elems * dataTypeSize(op.dtype) / 4.0 : elems;
    out.emplace_back(codecs_[c]->spec(), fit->second.intercept[c] + fit->second.slope[c] * e);
  }
  return out;
}

Result<size_t> AutoSelector::refine(CollectiveEngine& engine, const CollectiveOp& op,
                                    const std::vector<size_t>& contenders,
                                    const std::function<Status()>& agree) {
  // The call's own kind, type and size (capped as measure.h caps every trial).
  const size_t count = std::min(op.count, kMaxMeasuredElements);
  Measurement m;
  m.what = "auto codec measurement at the call's size";
  m.agree = agree;
  for (size_t c : contenders) {
    CollectiveOp trial;
    trial.kind = op.kind;
    trial.count = count;
    trial.dtype = op.dtype;
    trial.op = op.op;
    trial.algorithm = op.algorithm;  // resolved by choose()
    trial.codec = codecs_[c].get();
    m.candidates.push_back(trial);
    m.names.push_back(codecs_[c]->spec());
  }
  TERSE_ASSIGN_OR_RETURN(std::vector<double> worst, measureCandidates(engine, m));
  size_t best = 0;
  std::string report;
  for (size_t i = 0; i < contenders.size(); ++i) {
    if (worst[i] < worst[best]) best = i;
    char ms[32];
    std::snprintf(ms, sizeof ms, " %.2f ms", worst[i] * 1e3);
    report += (i ? ", " : "") + codecs_[contenders[i]]->spec() + ms;
  }
  TERSE_INFO(kSubsysColl, "auto (%s): measured at %zu elements: %s", spec_.canonical.c_str(), count,
             report.c_str());
  return contenders[best];
}

Result<const Codec*> AutoSelector::choose(CollectiveEngine& engine, const CollectiveOp& asked) {
  const int n = engine.transport().size();
  if (n == 1 || asked.count == 0) return codecs_.front().get();  // nothing to send: no loss needed
  // The algorithm the engine will run the call with: the model, the calibration and the
  // measurements are of that one. A call whose algorithm cannot run is refused by the engine
  // itself, on every rank, when it runs (with any codec).
  auto algorithm = engine.resolveAlgorithm(asked);
  if (!algorithm.isOk()) return codecs_.front().get();
  CollectiveOp op = asked;
  op.algorithm = algorithm.value();
  // The ranks agree on the call before the first measurement it needs (at most once).
  bool agreed = false;
  const std::function<Status()> agreeOnCall = [&]() -> Status {
    if (agreed) return Status::ok();
    agreed = true;
    CollectiveOp mine = op;
    mine.codec = nullptr;  // not chosen yet
    return engine.agree(mine);
  };
  if (!fits_.count(static_cast<int>(op.algorithm)))
    TERSE_RETURN_IF_ERROR(calibrate(engine, op.algorithm, agreeOnCall));
  auto predictions = predict(op, n);
  size_t best = 0;
  for (size_t c = 1; c < predictions.size(); ++c)
    if (predictions[c].second < predictions[best].second) best = c;
  const size_t es = dataTypeSize(op.dtype);
  const size_t sizeClass = sizeClassOfBytes(op.count * es);
  if (op.count >= kMinRefinedElements) {
    // Every call above kMaxMeasuredElements is measured at that size: they share one class.
    const size_t measuredClass =
        sizeClassOfBytes(std::min(op.count, kMaxMeasuredElements + 1) * es);
    const auto key = std::make_tuple(static_cast<int>(op.algorithm), static_cast<int>(op.kind),
                                     static_cast<int>(op.dtype), measuredClass);
    auto it = refined_.find(key);
    if (it == refined_.end()) {
      std::vector<size_t> contenders;
      for (size_t c = 0; c < predictions.size(); ++c)
        if (predictions[c].second <= contenderMargin_ * predictions[best].second)
          contenders.push_back(c);
      size_t pick = best;
      if (contenders.size() > 1) {
        TERSE_ASSIGN_OR_RETURN(pick, refine(engine, op, contenders, agreeOnCall));
      }
      it = refined_.emplace(key, pick).first;
    }
    best = it->second;
  }
  // Log each (size class, pick) once.
  auto logKey = std::make_pair(sizeClass, predictions[best].first);
  if (!logged_[logKey]) {
    logged_[logKey] = true;
    TERSE_INFO(kSubsysColl, "auto (%s): %zu elements -> %s (model: %.2f ms; none %.2f ms)",
               spec_.canonical.c_str(), op.count, predictions[best].first.c_str(),
               predictions[best].second * 1e3, predictions[0].second * 1e3);
  }
  return codecs_[best].get();
}

}  // namespace terse
