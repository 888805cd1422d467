// Public value types shared by every layer and by the C API: element types, reduction ops,
// and status codes. Types only; no behaviour lives here.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types a collective or codec accepts. Values are part of the wire format. */
/* The _RANGE_ enumerators are not values: they make the enum span every int, so that a value a
 * careless caller passes (256, -1) is a value of the type that terse refuses with an error, not
 * undefined behaviour in C++ before any check can run. */
typedef enum terse_dtype {
  TERSE_FLOAT32 = 0,
  TERSE_FLOAT16 = 1,
  TERSE_BFLOAT16 = 2,
  TERSE_DTYPE_RANGE_MIN_ = -0x7fffffff - 1,
  TERSE_DTYPE_RANGE_MAX_ = 0x7fffffff,
} terse_dtype_t;

/* Reductions. AVG divides by the world size in float32 before any narrowing cast. */
typedef enum terse_redop {
  TERSE_SUM = 0,
  TERSE_AVG = 1,
  TERSE_REDOP_RANGE_MIN_ = -0x7fffffff - 1,
  TERSE_REDOP_RANGE_MAX_ = 0x7fffffff,
} terse_redop_t;

/* Status codes of every fallible call. A message function gives the details of the last one. */
typedef enum terse_status {
  TERSE_OK = 0,
  TERSE_INVALID_ARGUMENT = 1, /* a caller's argument is wrong (null buffer, bad size, bad spec) */
  TERSE_INVALID_USAGE = 2,    /* calls in the wrong order or ranks disagree on a collective */
  TERSE_CORRUPT = 3,          /* a payload or serialized state failed validation */
  TERSE_TIMEOUT = 4,          /* an operation did not finish within TERSE_TIMEOUT_MS */
  TERSE_REMOTE_ERROR = 5,     /* a peer died or its connection broke */
  TERSE_SYSTEM_ERROR = 6,     /* the OS, UCX or CUDA reported a failure */
  TERSE_UNSUPPORTED = 7,      /* valid but not available in this build or configuration */
  TERSE_INTERNAL = 8,         /* a bug in terse: please report it */
  TERSE_IN_PROGRESS = 9,      /* a nonblocking operation has not finished yet */
} terse_status_t;

#ifdef __cplusplus
}  // extern "C"

#include <cstddef>

namespace terse {

enum class DataType : uint8_t {
  kFloat32 = TERSE_FLOAT32,
  kFloat16 = TERSE_FLOAT16,
  kBFloat16 = TERSE_BFLOAT16,
};

enum class ReduceOp : uint8_t {
  kSum = TERSE_SUM,
  kAvg = TERSE_AVG,
};

constexpr size_t dataTypeSize(DataType t) { return t == DataType::kFloat32 ? 4 : 2; }
const char* dataTypeName(DataType t);   // "float32", "float16", "bfloat16"
const char* reduceOpName(ReduceOp op);  // "sum", "avg"

}  // namespace terse
#endif
