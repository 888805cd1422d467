/* NCCL net plugin ABI v8 (symbol ncclNetPlugin_v8), frozen: the oldest table terse exports.
 * From /work/shared/design/nccl-plugin-abi.md ("differences of older tables").
 * Field order and types are the ABI; the pins at the end hold every offset. Plain C. */
#ifndef TERSE_PLUGIN_ABI_NET_V8_H_
#define TERSE_PLUGIN_ABI_NET_V8_H_

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What connect/accept may hand back for device-side (unpack) offload; a host-only plugin
 * returns none. Unchanged up to v12. */
typedef struct {
  int netDeviceType; /* NCCL_NET_DEVICE_HOST or _UNPACK */
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed; /* Mbit/s */
  int port;
  float latency; /* us */
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

/* v8 sizes are int: one message is at most 2 GiB - 1. */
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

TERSE_ABI_AT(ncclNetDeviceHandle_v8_t, netDeviceVersion, 4);
TERSE_ABI_AT(ncclNetDeviceHandle_v8_t, handle, 8);
TERSE_ABI_AT(ncclNetDeviceHandle_v8_t, size, 16);
TERSE_ABI_AT(ncclNetDeviceHandle_v8_t, needsProxyProgress, 24);
TERSE_ABI_SIZE(ncclNetDeviceHandle_v8_t, 32);

TERSE_ABI_AT(ncclNetProperties_v8_t, pciPath, 8);
TERSE_ABI_AT(ncclNetProperties_v8_t, guid, 16);
TERSE_ABI_AT(ncclNetProperties_v8_t, ptrSupport, 24);
TERSE_ABI_AT(ncclNetProperties_v8_t, regIsGlobal, 28);
TERSE_ABI_AT(ncclNetProperties_v8_t, speed, 32);
TERSE_ABI_AT(ncclNetProperties_v8_t, port, 36);
TERSE_ABI_AT(ncclNetProperties_v8_t, latency, 40);
TERSE_ABI_AT(ncclNetProperties_v8_t, maxComms, 44);
TERSE_ABI_AT(ncclNetProperties_v8_t, maxRecvs, 48);
TERSE_ABI_AT(ncclNetProperties_v8_t, netDeviceType, 52);
TERSE_ABI_AT(ncclNetProperties_v8_t, netDeviceVersion, 56);
TERSE_ABI_SIZE(ncclNetProperties_v8_t, 64);

TERSE_ABI_SLOT(ncclNet_v8_t, init, 1);
TERSE_ABI_SLOT(ncclNet_v8_t, devices, 2);
TERSE_ABI_SLOT(ncclNet_v8_t, getProperties, 3);
TERSE_ABI_SLOT(ncclNet_v8_t, listen, 4);
TERSE_ABI_SLOT(ncclNet_v8_t, connect, 5);
TERSE_ABI_SLOT(ncclNet_v8_t, accept, 6);
TERSE_ABI_SLOT(ncclNet_v8_t, regMr, 7);
TERSE_ABI_SLOT(ncclNet_v8_t, regMrDmaBuf, 8);
TERSE_ABI_SLOT(ncclNet_v8_t, deregMr, 9);
TERSE_ABI_SLOT(ncclNet_v8_t, isend, 10);
TERSE_ABI_SLOT(ncclNet_v8_t, irecv, 11);
TERSE_ABI_SLOT(ncclNet_v8_t, iflush, 12);
TERSE_ABI_SLOT(ncclNet_v8_t, test, 13);
TERSE_ABI_SLOT(ncclNet_v8_t, closeSend, 14);
TERSE_ABI_SLOT(ncclNet_v8_t, closeRecv, 15);
TERSE_ABI_SLOT(ncclNet_v8_t, closeListen, 16);
TERSE_ABI_SLOT(ncclNet_v8_t, getDeviceMr, 17);
TERSE_ABI_SLOT(ncclNet_v8_t, irecvConsumed, 18);
TERSE_ABI_SIZE(ncclNet_v8_t, 8 * 19);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_NET_V8_H_
