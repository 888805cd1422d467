/* NCCL net plugin ABI v9 (symbol ncclNetPlugin_v9), frozen. From v8: 64-bit message sizes,
 * virtual NICs (makeVDevice, vProps), forceFlush and the p2p/collective size limits.
 * From /work/shared/design/nccl-plugin-abi.md. Plain C; the pins at the end hold every offset. */
#ifndef TERSE_PLUGIN_ABI_NET_V9_H_
#define TERSE_PLUGIN_ABI_NET_V9_H_

#include "net_v8.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_NET_MAX_DEVS_PER_NIC 4 /* v9..v11: a virtual NIC merges up to 4 devices */

typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v9_t;

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;

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
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;

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

TERSE_ABI_AT(ncclNetVDeviceProps_v9_t, devs, 4);
TERSE_ABI_SIZE(ncclNetVDeviceProps_v9_t, 20);

TERSE_ABI_AT(ncclNetProperties_v9_t, pciPath, 8);
TERSE_ABI_AT(ncclNetProperties_v9_t, guid, 16);
TERSE_ABI_AT(ncclNetProperties_v9_t, ptrSupport, 24);
TERSE_ABI_AT(ncclNetProperties_v9_t, regIsGlobal, 28);
TERSE_ABI_AT(ncclNetProperties_v9_t, forceFlush, 32);
TERSE_ABI_AT(ncclNetProperties_v9_t, speed, 36);
TERSE_ABI_AT(ncclNetProperties_v9_t, port, 40);
TERSE_ABI_AT(ncclNetProperties_v9_t, latency, 44);
TERSE_ABI_AT(ncclNetProperties_v9_t, maxComms, 48);
TERSE_ABI_AT(ncclNetProperties_v9_t, maxRecvs, 52);
TERSE_ABI_AT(ncclNetProperties_v9_t, netDeviceType, 56);
TERSE_ABI_AT(ncclNetProperties_v9_t, netDeviceVersion, 60);
TERSE_ABI_AT(ncclNetProperties_v9_t, vProps, 64);
TERSE_ABI_AT(ncclNetProperties_v9_t, maxP2pBytes, 88);
TERSE_ABI_AT(ncclNetProperties_v9_t, maxCollBytes, 96);
TERSE_ABI_SIZE(ncclNetProperties_v9_t, 104);

TERSE_ABI_SLOT(ncclNet_v9_t, init, 1);
TERSE_ABI_SLOT(ncclNet_v9_t, devices, 2);
TERSE_ABI_SLOT(ncclNet_v9_t, getProperties, 3);
TERSE_ABI_SLOT(ncclNet_v9_t, listen, 4);
TERSE_ABI_SLOT(ncclNet_v9_t, connect, 5);
TERSE_ABI_SLOT(ncclNet_v9_t, accept, 6);
TERSE_ABI_SLOT(ncclNet_v9_t, regMr, 7);
TERSE_ABI_SLOT(ncclNet_v9_t, regMrDmaBuf, 8);
TERSE_ABI_SLOT(ncclNet_v9_t, deregMr, 9);
TERSE_ABI_SLOT(ncclNet_v9_t, isend, 10);
TERSE_ABI_SLOT(ncclNet_v9_t, irecv, 11);
TERSE_ABI_SLOT(ncclNet_v9_t, iflush, 12);
TERSE_ABI_SLOT(ncclNet_v9_t, test, 13);
TERSE_ABI_SLOT(ncclNet_v9_t, closeSend, 14);
TERSE_ABI_SLOT(ncclNet_v9_t, closeRecv, 15);
TERSE_ABI_SLOT(ncclNet_v9_t, closeListen, 16);
TERSE_ABI_SLOT(ncclNet_v9_t, getDeviceMr, 17);
TERSE_ABI_SLOT(ncclNet_v9_t, irecvConsumed, 18);
TERSE_ABI_SLOT(ncclNet_v9_t, makeVDevice, 19);
TERSE_ABI_SIZE(ncclNet_v9_t, 8 * 20);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_NET_V9_H_
