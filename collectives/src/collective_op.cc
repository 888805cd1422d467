#include "terse/collectives/collective_op.h"

namespace terse {

const char* collectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "allreduce";
    case CollectiveKind::kReduceScatter: return "reducescatter";
    case CollectiveKind::kAllGather: return "allgather";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "unknown-collective";
}

const char* algorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kFlat: return "flat";
    case Algorithm::kTwoLevel: return "twolevel";
  }
  return "unknown-algorithm";
}

Result<Algorithm> parseAlgorithm(std::string_view name) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kFlat, Algorithm::kTwoLevel})
    if (name == algorithmName(a)) return a;
  return errorInvalidArgument("algorithm '%.*s' is not auto, flat or twolevel",
                              static_cast<int>(name.size()), name.data());
}

}  // namespace terse
