/* What every NCCL plugin ABI version shares: result codes, the logger, pointer kinds, limits and
 * CollNet's datatype/op numbering, plus the assert macros the version headers pin their layouts
 * with. Nothing here is versioned: NCCL has kept these values since before v8.
 *
 * Written from /work/shared/design/nccl-plugin-abi.md; no NCCL package installs its plugin
 * headers, and a plugin is expected to declare the tables it implements itself.
 * Plain C so the C dlopen test can include it too. */
#ifndef TERSE_PLUGIN_ABI_COMMON_H_
#define TERSE_PLUGIN_ABI_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_MAX_NET_SIZE_BYTES (1ull << 30)
#define NCCL_MAX_COLLNET_SIZE_BYTES (512ull << 20)
#define NCCL_NET_DEVICE_HOST 0
#define NCCL_NET_DEVICE_UNPACK 1

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;

typedef enum {
  NCCL_INIT = 1,
  NCCL_COLL = 2,
  NCCL_P2P = 4,
  NCCL_SHM = 8,
  NCCL_NET = 16,
  NCCL_ALL = ~0,
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);
/* Handed to init from v10 on; terse ignores it. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);

/* NCCL's datatype and reduction numbering as the CollNet calls pass them (every version). */
enum {
  ncclCollInt8 = 0,
  ncclCollUint8 = 1,
  ncclCollInt32 = 2,
  ncclCollUint32 = 3,
  ncclCollInt64 = 4,
  ncclCollUint64 = 5,
  ncclCollFloat16 = 6,
  ncclCollFloat32 = 7,
  ncclCollFloat64 = 8,
  ncclCollBfloat16 = 9,
  ncclCollFp8E4M3 = 10,
  ncclCollFp8E5M2 = 11,
  ncclCollNumTypes = 12,
};
enum {
  ncclCollSum = 0,
  ncclCollProd = 1,
  ncclCollMax = 2,
  ncclCollMin = 3,
  ncclCollAvg = 4,
  ncclCollNumOps = 5,
};

/* ---- layout pins ------------------------------------------------------------------------------
 * Each version header asserts the offsets and sizes NCCL expects, worked out by hand from the
 * field lists on LP64, so an edit that moves a field fails the build instead of corrupting
 * NCCL's view of a struct. tests/plugin/abi_layout_test.cc checks the same from an independent
 * description of every member. */
#ifdef __cplusplus
#define TERSE_ABI_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define TERSE_ABI_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
#define TERSE_ABI_SIZE(T, bytes) TERSE_ABI_ASSERT(sizeof(T) == (bytes), "sizeof(" #T ") is " #bytes)
#define TERSE_ABI_AT(T, member, off) \
  TERSE_ABI_ASSERT(offsetof(T, member) == (off), #T "." #member " sits at byte " #off)
/* A table is the name then one function pointer per entry point: member k sits at slot k. */
#define TERSE_ABI_SLOT(T, member, k) \
  TERSE_ABI_ASSERT(offsetof(T, member) == (k) * sizeof(void*), #T "." #member " is slot " #k)

TERSE_ABI_ASSERT(sizeof(void*) == 8 && sizeof(size_t) == 8, "the ABI pins assume LP64");
TERSE_ABI_SIZE(ncclResult_t, 4);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_COMMON_H_
