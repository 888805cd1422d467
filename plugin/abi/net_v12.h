/* NCCL net plugin ABI v12 (symbol ncclNetPlugin_v12; NCCL 2.30+), frozen. From v11: a virtual
 * NIC merges up to 8 devices, and the properties end with rail and plane ids; every member and
 * signature of the table is otherwise v11's. Written from NCCL's published
 * src/include/plugin/net/net_v12.h. Plain C; the pins at the end hold every offset. */
#ifndef TERSE_PLUGIN_ABI_NET_V12_H_
#define TERSE_PLUGIN_ABI_NET_V12_H_

#include "net_v11.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8
#define NCCL_NET_ID_UNDEF (-1) /* railId / planeId: none, NCCL ignores it */

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

TERSE_ABI_AT(ncclNetVDeviceProps_v12_t, devs, 4);
TERSE_ABI_SIZE(ncclNetVDeviceProps_v12_t, 36);

TERSE_ABI_AT(ncclNetProperties_v12_t, pciPath, 8);
TERSE_ABI_AT(ncclNetProperties_v12_t, guid, 16);
TERSE_ABI_AT(ncclNetProperties_v12_t, ptrSupport, 24);
TERSE_ABI_AT(ncclNetProperties_v12_t, regIsGlobal, 28);
TERSE_ABI_AT(ncclNetProperties_v12_t, forceFlush, 32);
TERSE_ABI_AT(ncclNetProperties_v12_t, speed, 36);
TERSE_ABI_AT(ncclNetProperties_v12_t, port, 40);
TERSE_ABI_AT(ncclNetProperties_v12_t, latency, 44);
TERSE_ABI_AT(ncclNetProperties_v12_t, maxComms, 48);
TERSE_ABI_AT(ncclNetProperties_v12_t, maxRecvs, 52);
TERSE_ABI_AT(ncclNetProperties_v12_t, netDeviceType, 56);
TERSE_ABI_AT(ncclNetProperties_v12_t, netDeviceVersion, 60);
TERSE_ABI_AT(ncclNetProperties_v12_t, vProps, 64);
TERSE_ABI_AT(ncclNetProperties_v12_t, maxP2pBytes, 104);
TERSE_ABI_AT(ncclNetProperties_v12_t, maxCollBytes, 112);
TERSE_ABI_AT(ncclNetProperties_v12_t, maxMultiRequestSize, 120);
TERSE_ABI_AT(ncclNetProperties_v12_t, railId, 124);
TERSE_ABI_AT(ncclNetProperties_v12_t, planeId, 126);
TERSE_ABI_SIZE(ncclNetProperties_v12_t, 128);

TERSE_ABI_SLOT(ncclNet_v12_t, init, 1);
TERSE_ABI_SLOT(ncclNet_v12_t, devices, 2);
TERSE_ABI_SLOT(ncclNet_v12_t, getProperties, 3);
TERSE_ABI_SLOT(ncclNet_v12_t, listen, 4);
TERSE_ABI_SLOT(ncclNet_v12_t, connect, 5);
TERSE_ABI_SLOT(ncclNet_v12_t, accept, 6);
TERSE_ABI_SLOT(ncclNet_v12_t, regMr, 7);
TERSE_ABI_SLOT(ncclNet_v12_t, regMrDmaBuf, 8);
TERSE_ABI_SLOT(ncclNet_v12_t, deregMr, 9);
TERSE_ABI_SLOT(ncclNet_v12_t, isend, 10);
TERSE_ABI_SLOT(ncclNet_v12_t, irecv, 11);
TERSE_ABI_SLOT(ncclNet_v12_t, iflush, 12);
TERSE_ABI_SLOT(ncclNet_v12_t, test, 13);
TERSE_ABI_SLOT(ncclNet_v12_t, closeSend, 14);
TERSE_ABI_SLOT(ncclNet_v12_t, closeRecv, 15);
TERSE_ABI_SLOT(ncclNet_v12_t, closeListen, 16);
TERSE_ABI_SLOT(ncclNet_v12_t, getDeviceMr, 17);
TERSE_ABI_SLOT(ncclNet_v12_t, irecvConsumed, 18);
TERSE_ABI_SLOT(ncclNet_v12_t, makeVDevice, 19);
TERSE_ABI_SLOT(ncclNet_v12_t, finalize, 20);
TERSE_ABI_SLOT(ncclNet_v12_t, setNetAttr, 21);
TERSE_ABI_SIZE(ncclNet_v12_t, 8 * 22);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_NET_V12_H_
