// The `auto` codec policy: per call, the codec (or none) expected to finish first, among those
// the user's loss budget allows (compressors/auto_spec.h).
//
// Model: T_c(count) = a_c + b_c * count for each candidate c, fitted from that candidate's own
// float32 allreduce timed at 2^16 and 2^20 elements on this communicator the first time the
// policy is used (docs/benchmarks.md discusses it). Timing whole collectives, rather than adding
// a link model to separately timed codec work, keeps what the pipeline overlaps, the latency of
// each algorithm and the CPU contention of this machine in the figures. Every rank uses the
// slowest rank's figures, so all ranks pick the same codec without talking about it. The pick is
// logged at INFO the first time each (size class, codec) appears.
#pragma once

#include "terse/collectives/engine.h"
#include "terse/compressors/auto_spec.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace terse {

class AutoSelector {
 public:
  static Result<std::unique_ptr<AutoSelector>> create(const std::string& spec);

  // Collective on first use (every rank must call it for the same call). Returns the codec to
  // run `op` with (op.codec is ignored).
  Result<const Codec*> choose(CollectiveEngine& engine, const CollectiveOp& op);

  // Predicted seconds for each candidate for `op` (after calibration), for tests and logs.
  std::vector<std::pair<std::string, double>> predict(const CollectiveOp& op, int worldSize) const;
  bool calibrated() const { return calibrated_; }

 private:
  Status calibrate(CollectiveEngine& engine);

  AutoSpec spec_;
  std::vector<std::shared_ptr<const Codec>> codecs_;
  std::vector<double> intercept_, slope_;  // a_c (seconds), b_c (seconds per element)
  bool calibrated_ = false;
  std::map<std::pair<size_t, std::string>, bool> logged_;
};

}  // namespace terse
