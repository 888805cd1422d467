#include "collnet_types.h"

namespace terse::plugin::collnet {

const char* kindName(Kind k) { return k == Kind::kAllReduce ? "allreduce" : "reduce-scatter"; }

Result<DataType> mapType(int dataType) {
  switch (dataType) {
    case ncclCollFloat32: return DataType::kFloat32;
    case ncclCollFloat16: return DataType::kFloat16;
    case ncclCollBfloat16: return DataType::kBFloat16;
    default: break;
  }
  return errorInvalidArgument(
      "NCCL datatype %d is not reduced by terse's CollNet (reduceSupport declined it): only "
      "float16 (6), float32 (7) and bfloat16 (9) are",
      dataType);
}

Result<ReduceOp> mapOp(int redOp) {
  if (redOp == ncclCollSum) return ReduceOp::kSum;
  if (redOp == ncclCollAvg) return ReduceOp::kAvg;
  return errorInvalidArgument(
      "NCCL reduction op %d is not reduced by terse's CollNet (reduceSupport declined it): only "
      "sum (0) and avg (4) are",
      redOp);
}

bool supported(int dataType, int redOp) { return mapType(dataType).isOk() && mapOp(redOp).isOk(); }

}  // namespace terse::plugin::collnet
