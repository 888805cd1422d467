// Single-process models of the compressed collectives' arithmetic: the same chunks, segments,
// compression points, residuals and reduction order as CollectiveEngine's scatter-reduce and
// compressed allgather, with no transport, pipelining or tags. Because the engine reduces in a
// fixed order, a correct multi-rank run reproduces these results bit for bit for every
// deterministic codec (all but int8 with stochastic rounding, whose nonces depend on the
// engine's call sequence). tests/collectives and `terse-bench soak` check the engine against it.
#pragma once

#include "terse/collectives/collective_op.h"

#include <cstdint>
#include <vector>

namespace terse {

// Residuals carried from call to call, per rank, like each rank's ErrorFeedback. Empty outer
// vectors mean no error feedback. worker[r]: the tensor's count elements (allgather: rank r's
// part); server[r]: rank r's allreduce chunk (sized on first use).
struct SimulatedResiduals {
  std::vector<std::vector<float>> worker;
  std::vector<std::vector<float>> server;
};

// The result every rank of an n-rank compressed `kind` would hold, given each rank's input
// (allreduce and reduce-scatter: count elements; allgather: its chunkRange part). Reduce-scatter
// returns rank r's part in element r. `segmentElements` is the engine's segmentElements().
Result<std::vector<std::vector<uint8_t>>> simulateCompressedCollective(
    CollectiveKind kind, const std::vector<const void*>& inputs, size_t count, DataType dtype,
    ReduceOp op, const Codec& codec, size_t segmentElements, SimulatedResiduals* residuals);

}  // namespace terse
