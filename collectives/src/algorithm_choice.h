// How `auto` picks flat or two-level for a call: by timing both at the call's own size once per
// (collective, codec, element type, size class) and adopting the faster by the slowest rank's
// figures, which every rank holds alike (docs/design.md, "Choosing the algorithm"). The pure
// parts live here so tests can check them without ranks; CollectiveEngine::chooseAlgorithm has
// the trials timed by auto's measurement routine (terse/collectives/measure.h), which the codec
// choice shares.
#pragma once

#include "terse/collectives/collective_op.h"

#include <cstddef>
#include <string>
#include <vector>

namespace terse::detail {

// The key a choice is kept and reported under, e.g. "allreduce int8 float32 2^26 B".
std::string algorithmChoiceKey(CollectiveKind kind, const std::string& codecSpec, DataType dtype,
                               size_t sizeClass);

struct AlgorithmChoice {
  Algorithm algorithm = Algorithm::kFlat;
  // Two-level in one segment (CollectiveOp::twoLevelWhole): the pipeline's overlap cost more
  // than it saved (hosts with fewer cores than ranks and threads, docs/benchmarks.md).
  bool twoLevelWhole = false;
  std::string reason;  // what was measured, for the statistics and the INFO log
};

// Flat or two-level from the slowest rank's best time of each at `elements` elements. A tie
// goes to flat (one step, no node staging); a time that is not a finite positive number (a
// clock that did not move, a broken trial) loses to one that is. `wholeSeconds`, where the call
// pipelines (negative: not tried), is two-level in one segment: it stands for two-level when it
// is usable and faster than the pipelined `twoLevelSeconds` (a tie keeps the pipeline).
AlgorithmChoice chooseByTime(double flatSeconds, double twoLevelSeconds, size_t elements,
                             double wholeSeconds = -1);

}  // namespace terse::detail
