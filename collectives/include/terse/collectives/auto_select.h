// The `auto` codec policy: per call, the codec (or none) expected to finish first, among those
// the user's loss budget allows (compressors/auto_spec.h).
//
// Model, for an allreduce of S bytes on n ranks (docs/benchmarks.md discusses it):
//   T(none)  = a + b * wireBytes(none)
//   T(codec) = a + b * wireBytes(codec) + S * work(codec)
// where a and b come from two uncompressed allreduces timed on this communicator (so b holds
// the measured link bandwidth and the CPU cost of an uncompressed reduction), wireBytes is what
// each algorithm sends, and work(codec) is the measured per-byte cost of the compressions and
// decompressions that the compressed algorithm adds. Calibration runs once, on the first call,
// and every rank uses the slowest rank's figures, so all ranks pick the same codec without
// talking about it. The pick is logged at INFO the first time each (size, codec) appears.
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
  std::vector<double> workPerByte_;   // seconds per input byte added by each codec
  double latency_ = 0, perByte_ = 0;  // a, b of the model
  bool calibrated_ = false;
  std::map<std::pair<size_t, std::string>, bool> logged_;
};

}  // namespace terse
