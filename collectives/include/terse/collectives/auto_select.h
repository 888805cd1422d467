// The `auto` codec policy: per call, the codec (or none) expected to finish first, among those
// the user's loss budget allows (compressors/auto_spec.h).
//
// Model: T_c(count) = a_c + b_c * count for each candidate c, fitted from that candidate's own
// float32 allreduce timed at 2^16 and 2^20 elements on this communicator the first time the
// policy is used (docs/benchmarks.md discusses it). Timing whole collectives, rather than adding
// a link model to separately timed codec work, keeps what the pipeline overlaps, the latency of
// each algorithm and the CPU contention of this machine in the figures. Every rank uses the
// slowest rank's figures, so all ranks pick the same codec without talking about it. The fit
// is per algorithm (flat or two-level, as the engine resolves the call): a call that asks for
// flat on a two-level communicator is predicted from flat collectives, and calibrates them the
// first time one is asked for.
//
// Refinement: a straight line through two points cannot know that a codec slows down once its
// arrays leave the caches, or how the pipeline overlaps at sizes far beyond 2^20, and under load
// its extrapolation to 64 MiB missed by more than the gap between close candidates. So the
// first call of each (kind, type, power-of-two size class) above the calibrated range, where
// the model leaves more than one candidate within kContenderMargin of its best, times those
// contenders' own collective of that kind, type and size (capped at kMaxMeasuredElements), and
// the class keeps the fastest by the slowest rank's figures. The contenders, sizes and order
// follow from agreed figures, so every rank runs the same measurement. Picks are logged at INFO
// the first time each (size class, codec) appears, with the measured times when a class was
// refined.
//
// Calibration and refinement time their collectives with auto's one measurement routine
// (measure.h), which the engine's choice of algorithm uses too: scratch buffers, a warm-up
// round, best of two timed rounds on the engine's clock (the simulator's simulated time under
// terse-sim), the slowest rank's figures. Size classes are measure.h's, by bytes.
#pragma once

#include "terse/collectives/engine.h"
#include "terse/compressors/auto_spec.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace terse {

class AutoSelector {
 public:
  // contenderMargin: candidates predicted within this factor of the best are measured at a
  // refined class's own size (tests widen it to make every candidate contend).
  static Result<std::unique_ptr<AutoSelector>> create(const std::string& spec,
                                                      double contenderMargin = kContenderMargin);

  // Collective on first use (every rank must call it for the same call). Returns the codec to
  // run `op` with (op.codec is ignored). Before it runs collectives of its own (calibration, a
  // measurement), the ranks agree on `op` itself (CollectiveEngine::agree, with op.requested
  // naming the auto spec), so a rank that called something else hears of the caller's call.
  Result<const Codec*> choose(CollectiveEngine& engine, const CollectiveOp& op);

  // Predicted seconds for each candidate for `op` (after calibration), for tests and logs: from
  // the fit of op.algorithm when one was made, else from the first fit made.
  std::vector<std::pair<std::string, double>> predict(const CollectiveOp& op, int worldSize) const;
  bool calibrated() const { return !fits_.empty(); }
  // Algorithms calibrated so far.
  size_t calibratedAlgorithms() const { return fits_.size(); }
  // The canonical auto spec ("auto:max=int8").
  const std::string& spec() const { return spec_.canonical; }
  // Size classes measured at their own size so far (see Refinement above).
  size_t refinedClasses() const { return refined_.size(); }

  // Candidates predicted within this factor of the best are measured at the call's own size.
  static constexpr double kContenderMargin = 1.3;
  // Calls above 2^20 elements are refined. Measurements stop at kMaxMeasuredElements
  // (measure.h): every larger call shares one class, measured at that size.
  static constexpr size_t kMinRefinedElements = (size_t{1} << 20) + 1;

 private:
  // Fits the model for `algorithm` (a resolved one: flat or two-level). `agree`: the ranks'
  // agreement on the caller's call, run before the first trial.
  Status calibrate(CollectiveEngine& engine, Algorithm algorithm,
                   const std::function<Status()>& agree);
  // Index into codecs_ of the measured-fastest contender for op's class.
  Result<size_t> refine(CollectiveEngine& engine, const CollectiveOp& op,
                        const std::vector<size_t>& contenders,
                        const std::function<Status()>& agree);

  AutoSpec spec_;
  double contenderMargin_ = kContenderMargin;
  std::vector<std::shared_ptr<const Codec>> codecs_;
  struct Fit {
    std::vector<double> intercept, slope;  // a_c (seconds), b_c (seconds per element)
  };
  std::map<int, Fit> fits_;  // by Algorithm
  std::map<std::pair<size_t, std::string>, bool> logged_;
  // (algorithm, kind, dtype, size class) -> index into codecs_, for refined classes.
  std::map<std::tuple<int, int, int, size_t>, size_t> refined_;
};

}  // namespace terse
