// Residuals of error-feedback codecs, one per position in the training step's call sequence.
// NCCL repeats the same calls every step; CallSequence (ef_period.h) maps each call to a
// position of the given or learned period, or to none while the period is being learned. This
// class owns the residuals of those positions and says, once per event, what happened (the
// CollNet log lines of docs/nccl-plugin.md, "Error feedback").
#pragma once

#include "collnet_stats.h"
#include "collnet_types.h"
#include "ef_period.h"

#include "terse/common/status.h"
#include "terse/compressors/error_feedback.h"

#include <memory>
#include <string>
#include <vector>

namespace terse::plugin::collnet {

class ResidualSequence {
 public:
  struct Plan {
    ErrorFeedback* feedback = nullptr;  // nullptr: run without residuals
    const std::string* codec = nullptr;
  };

  // `counters` (the CollComm's, guarded by its mutex like this object) gets each call's figures.
  ResidualSequence(std::string codec, std::string warmupCodec, const PeriodSetting& setting,
                   CollNetCounters* counters);

  // The period for the statistics line.
  std::string periodText() const;

  // The codec and residual of the next reduce call of `count` elements.
  Result<Plan> next(Kind kind, size_t count, DataType type);

 private:
  void warnChanged(const CallSequence::Decision& d, Kind kind, size_t count, DataType type);

  std::string codec_;
  std::string warmupCodec_;
  CallSequence sequence_;
  CollNetCounters* counters_;
  std::vector<std::unique_ptr<ErrorFeedback>> slots_;
};

}  // namespace terse::plugin::collnet
