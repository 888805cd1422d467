// NCCL's CollNet datatypes and reduction ops mapped to terse's, and the kinds of reduce call the
// plugin runs. Everything terse does not reduce is declined with the reason.
#pragma once

#include "abi/nccl_plugin.h"

#include "terse/common/status.h"
#include "terse/types.h"

#include <cstdint>

namespace terse::plugin::collnet {

// The reduce calls that take a codec (allgather is never compressed).
enum class Kind : uint8_t { kAllReduce, kReduceScatter };
const char* kindName(Kind k);

// float32/float16/bfloat16; anything else is an InvalidArgument naming the accepted ones.
Result<DataType> mapType(int dataType);
// sum and avg; anything else is an InvalidArgument naming the accepted ones.
Result<ReduceOp> mapOp(int redOp);

// True for the (NCCL datatype, NCCL op) pairs terse reduces: float32/float16/bfloat16 with sum
// and avg. Everything else is declined.
bool supported(int dataType, int redOp);

}  // namespace terse::plugin::collnet
