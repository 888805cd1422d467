/* NCCL net plugin ABI v11 (symbol ncclNetPlugin_v11; NCCL 2.28), frozen. From v10: init runs per
 * communicator and returns a context (which listen/connect take) with the comm config, finalize
 * ends it, setNetAttr passes hints, and the properties end with maxMultiRequestSize.
 * From /work/shared/design/nccl-plugin-abi.md (checked against NCCL 2.28.9).
 * Plain C; the pins at the end hold every offset. */
#ifndef TERSE_PLUGIN_ABI_NET_V11_H_
#define TERSE_PLUGIN_ABI_NET_V11_H_

#include "net_v10.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ncclNetDeviceHandle_v10_t ncclNetDeviceHandle_v11_t;
typedef ncclNetVDeviceProps_v10_t ncclNetVDeviceProps_v11_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;

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

TERSE_ABI_SIZE(ncclNetCommAttr_v11_t, 16);
TERSE_ABI_AT(ncclNetAttr_v11_t, recvCommAttr, 16);
TERSE_ABI_AT(ncclNetAttr_v11_t, op, 32);
TERSE_ABI_AT(ncclNetAttr_v11_t, algo, 36);
TERSE_ABI_AT(ncclNetAttr_v11_t, proto, 40);
TERSE_ABI_SIZE(ncclNetAttr_v11_t, 44);

TERSE_ABI_AT(ncclNetProperties_v11_t, pciPath, 8);
TERSE_ABI_AT(ncclNetProperties_v11_t, guid, 16);
TERSE_ABI_AT(ncclNetProperties_v11_t, ptrSupport, 24);
TERSE_ABI_AT(ncclNetProperties_v11_t, regIsGlobal, 28);
TERSE_ABI_AT(ncclNetProperties_v11_t, forceFlush, 32);
TERSE_ABI_AT(ncclNetProperties_v11_t, speed, 36);
TERSE_ABI_AT(ncclNetProperties_v11_t, port, 40);
TERSE_ABI_AT(ncclNetProperties_v11_t, latency, 44);
TERSE_ABI_AT(ncclNetProperties_v11_t, maxComms, 48);
TERSE_ABI_AT(ncclNetProperties_v11_t, maxRecvs, 52);
TERSE_ABI_AT(ncclNetProperties_v11_t, netDeviceType, 56);
TERSE_ABI_AT(ncclNetProperties_v11_t, netDeviceVersion, 60);
TERSE_ABI_AT(ncclNetProperties_v11_t, vProps, 64);
TERSE_ABI_AT(ncclNetProperties_v11_t, maxP2pBytes, 88);
TERSE_ABI_AT(ncclNetProperties_v11_t, maxCollBytes, 96);
TERSE_ABI_AT(ncclNetProperties_v11_t, maxMultiRequestSize, 104);
TERSE_ABI_SIZE(ncclNetProperties_v11_t, 112);

TERSE_ABI_SLOT(ncclNet_v11_t, init, 1);
TERSE_ABI_SLOT(ncclNet_v11_t, devices, 2);
TERSE_ABI_SLOT(ncclNet_v11_t, getProperties, 3);
TERSE_ABI_SLOT(ncclNet_v11_t, listen, 4);
TERSE_ABI_SLOT(ncclNet_v11_t, connect, 5);
TERSE_ABI_SLOT(ncclNet_v11_t, accept, 6);
TERSE_ABI_SLOT(ncclNet_v11_t, regMr, 7);
TERSE_ABI_SLOT(ncclNet_v11_t, regMrDmaBuf, 8);
TERSE_ABI_SLOT(ncclNet_v11_t, deregMr, 9);
TERSE_ABI_SLOT(ncclNet_v11_t, isend, 10);
TERSE_ABI_SLOT(ncclNet_v11_t, irecv, 11);
TERSE_ABI_SLOT(ncclNet_v11_t, iflush, 12);
TERSE_ABI_SLOT(ncclNet_v11_t, test, 13);
TERSE_ABI_SLOT(ncclNet_v11_t, closeSend, 14);
TERSE_ABI_SLOT(ncclNet_v11_t, closeRecv, 15);
TERSE_ABI_SLOT(ncclNet_v11_t, closeListen, 16);
TERSE_ABI_SLOT(ncclNet_v11_t, getDeviceMr, 17);
TERSE_ABI_SLOT(ncclNet_v11_t, irecvConsumed, 18);
TERSE_ABI_SLOT(ncclNet_v11_t, makeVDevice, 19);
TERSE_ABI_SLOT(ncclNet_v11_t, finalize, 20);
TERSE_ABI_SLOT(ncclNet_v11_t, setNetAttr, 21);
TERSE_ABI_SIZE(ncclNet_v11_t, 8 * 22);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_NET_V11_H_
