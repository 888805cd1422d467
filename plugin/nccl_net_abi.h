/* The NCCL net plugin ABI (tables v8..v12), written from docs in
 * /work/shared/design/nccl-plugin-abi.md (v8..v11) and from NCCL's published
 * src/include/plugin/net/net_v12.h (v12, NCCL 2.30+) because no NCCL package installs its plugin
 * headers.
 * Field order and types are the ABI: the static asserts at the end pin sizes and offsets so a
 * slip fails the build instead of corrupting NCCL's view of the tables.
 *
 * Plain C so the C dlopen test can include it too. Only what terse implements is declared; the
 * CollNet tables go in a sibling header when they are added. */
#ifndef TERSE_PLUGIN_NCCL_NET_ABI_H_
#define TERSE_PLUGIN_NCCL_NET_ABI_H_

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
#define NCCL_NET_MAX_DEVS_PER_NIC 4
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8 /* v12 merges up to 8 NICs into one virtual NIC */
#define NCCL_NET_ID_UNDEF (-1)          /* v12 railId / planeId: none, NCCL ignores it */
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
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);

/* ---- helper structs (identical in v8..v11 unless a version suffix says otherwise) ---------- */

typedef struct {
  int netDeviceType; /* NCCL_NET_DEVICE_HOST or _UNPACK */
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v8_t;

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v11_t;
typedef ncclNetVDeviceProps_v11_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v11_t ncclNetVDeviceProps_v9_t;

typedef struct {
  int trafficClass; /* -1 = undefined */
} ncclNetCommConfig_v11_t;
typedef ncclNetCommConfig_v11_t ncclNetCommConfig_v10_t;

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed; /* Mbit/s */
  int port;
  float latency; /* us */
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

/* v10 and v9: v11 without maxMultiRequestSize. */
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v10_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v10_t;
typedef ncclNetProperties_v10_t ncclNetProperties_v9_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

/* v12 (NCCL 2.30+): virtual NICs of up to 8 devices, and rail/plane ids after the v11 fields.
 * The device handle, comm config and attributes are the v11 ones unchanged. */
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v12_t;
typedef ncclNetCommConfig_v11_t ncclNetCommConfig_v12_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed; /* Mbit/s */
  int port;
  float latency; /* us */
  int maxComms;
  int maxRecvs;
  int netDeviceType; /* an int-sized enum in NCCL's header */
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;  /* NCCL_NET_ID_UNDEF when the NIC has no rail */
  int16_t planeId; /* NCCL_NET_ID_UNDEF when the NIC has no plane */
} ncclNetProperties_v12_t;

/* ---- the tables --------------------------------------------------------------------------- */

/* v12: v11's members and signatures with the v12 property and virtual-device structs. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v12_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v12_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v12_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v12_t* netAttr);
} ncclNet_v12_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v11_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptrMhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

/* ---- layout checks (LP64; values worked out by hand from the field lists above) ------------ */

#ifdef __cplusplus
#define TERSE_ABI_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define TERSE_ABI_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

TERSE_ABI_ASSERT(sizeof(void*) == 8 && sizeof(size_t) == 8, "the ABI checks assume LP64");
TERSE_ABI_ASSERT(sizeof(ncclResult_t) == 4, "ncclResult_t is an int-sized enum");
TERSE_ABI_ASSERT(sizeof(ncclNetDeviceHandle_v11_t) == 32, "device handle layout");
TERSE_ABI_ASSERT(offsetof(ncclNetDeviceHandle_v11_t, handle) == 8, "device handle layout");
TERSE_ABI_ASSERT(offsetof(ncclNetDeviceHandle_v11_t, needsProxyProgress) == 24, "device handle");
TERSE_ABI_ASSERT(sizeof(ncclNetVDeviceProps_v11_t) == 20, "vDeviceProps layout");
TERSE_ABI_ASSERT(sizeof(ncclNetCommConfig_v11_t) == 4, "commConfig layout");
TERSE_ABI_ASSERT(sizeof(ncclNetAttr_v11_t) == 44, "netAttr layout");
TERSE_ABI_ASSERT(offsetof(ncclNetAttr_v11_t, op) == 32, "netAttr layout");

TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, guid) == 16, "props v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, forceFlush) == 32, "props v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, latency) == 44, "props v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, maxRecvs) == 52, "props v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, netDeviceVersion) == 60, "props v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, vProps) == 64, "props v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, maxP2pBytes) == 88, "props v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, maxCollBytes) == 96, "props v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104, "props v11");
TERSE_ABI_ASSERT(sizeof(ncclNetProperties_v11_t) == 112, "props v11 layout");
TERSE_ABI_ASSERT(sizeof(ncclNetVDeviceProps_v12_t) == 36, "vDeviceProps v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, netDeviceVersion) == 60, "props v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, vProps) == 64, "props v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104, "props v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, maxCollBytes) == 112, "props v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize) == 120, "props v12");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, railId) == 124, "props v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, planeId) == 126, "props v12 layout");
TERSE_ABI_ASSERT(sizeof(ncclNetProperties_v12_t) == 128, "props v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v10_t, maxCollBytes) == 96, "props v10 layout");
TERSE_ABI_ASSERT(sizeof(ncclNetProperties_v10_t) == 104, "props v10/v9 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v8_t, speed) == 32, "props v8 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v8_t, latency) == 40, "props v8 layout");
TERSE_ABI_ASSERT(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56, "props v8 layout");
TERSE_ABI_ASSERT(sizeof(ncclNetProperties_v8_t) == 64, "props v8 layout");

/* Tables: one pointer per member, so member k sits at 8*k. */
TERSE_ABI_ASSERT(offsetof(ncclNet_v12_t, accept) == 8 * 6, "ncclNet_v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v12_t, isend) == 8 * 10, "ncclNet_v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v12_t, makeVDevice) == 8 * 19, "ncclNet_v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v12_t, finalize) == 8 * 20, "ncclNet_v12 layout");
TERSE_ABI_ASSERT(sizeof(ncclNet_v12_t) == 8 * 22, "ncclNet_v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v11_t, accept) == 8 * 6, "ncclNet_v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v11_t, isend) == 8 * 10, "ncclNet_v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v11_t, test) == 8 * 13, "ncclNet_v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v11_t, getDeviceMr) == 8 * 17, "ncclNet_v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v11_t, finalize) == 8 * 20, "ncclNet_v11 layout");
TERSE_ABI_ASSERT(sizeof(ncclNet_v11_t) == 8 * 22, "ncclNet_v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v10_t, makeVDevice) == 8 * 19, "ncclNet_v10 layout");
TERSE_ABI_ASSERT(sizeof(ncclNet_v10_t) == 8 * 20, "ncclNet_v10 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v9_t, makeVDevice) == 8 * 19, "ncclNet_v9 layout");
TERSE_ABI_ASSERT(sizeof(ncclNet_v9_t) == 8 * 20, "ncclNet_v9 layout");
TERSE_ABI_ASSERT(offsetof(ncclNet_v8_t, irecvConsumed) == 8 * 18, "ncclNet_v8 layout");
TERSE_ABI_ASSERT(sizeof(ncclNet_v8_t) == 8 * 19, "ncclNet_v8 layout");

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_NCCL_NET_ABI_H_
