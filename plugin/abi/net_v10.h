/* NCCL net plugin ABI v10 (symbol ncclNetPlugin_v10), frozen. From v9: init takes the profiler
 * callback, connect a comm config (traffic class), isend/irecv profiler handles. Properties,
 * virtual NICs and device handles are v9's. From /work/shared/design/nccl-plugin-abi.md.
 * Plain C; the pins at the end hold every offset. */
#ifndef TERSE_PLUGIN_ABI_NET_V10_H_
#define TERSE_PLUGIN_ABI_NET_V10_H_

#include "net_v9.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ncclNetDeviceHandle_v9_t ncclNetDeviceHandle_v10_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
  int trafficClass; /* -1 = undefined */
} ncclNetCommConfig_v10_t;

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

TERSE_ABI_SIZE(ncclNetCommConfig_v10_t, 4);

TERSE_ABI_SLOT(ncclNet_v10_t, init, 1);
TERSE_ABI_SLOT(ncclNet_v10_t, devices, 2);
TERSE_ABI_SLOT(ncclNet_v10_t, getProperties, 3);
TERSE_ABI_SLOT(ncclNet_v10_t, listen, 4);
TERSE_ABI_SLOT(ncclNet_v10_t, connect, 5);
TERSE_ABI_SLOT(ncclNet_v10_t, accept, 6);
TERSE_ABI_SLOT(ncclNet_v10_t, regMr, 7);
TERSE_ABI_SLOT(ncclNet_v10_t, regMrDmaBuf, 8);
TERSE_ABI_SLOT(ncclNet_v10_t, deregMr, 9);
TERSE_ABI_SLOT(ncclNet_v10_t, isend, 10);
TERSE_ABI_SLOT(ncclNet_v10_t, irecv, 11);
TERSE_ABI_SLOT(ncclNet_v10_t, iflush, 12);
TERSE_ABI_SLOT(ncclNet_v10_t, test, 13);
TERSE_ABI_SLOT(ncclNet_v10_t, closeSend, 14);
TERSE_ABI_SLOT(ncclNet_v10_t, closeRecv, 15);
TERSE_ABI_SLOT(ncclNet_v10_t, closeListen, 16);
TERSE_ABI_SLOT(ncclNet_v10_t, getDeviceMr, 17);
TERSE_ABI_SLOT(ncclNet_v10_t, irecvConsumed, 18);
TERSE_ABI_SLOT(ncclNet_v10_t, makeVDevice, 19);
TERSE_ABI_SIZE(ncclNet_v10_t, 8 * 20);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_NET_V10_H_
