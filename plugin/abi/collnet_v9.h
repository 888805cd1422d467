/* NCCL CollNet plugin ABI v9 (symbol ncclCollNetPlugin_v9), frozen. From v8: 64-bit counts and
 * part sizes, v9 properties, makeVDevice. From /work/shared/design/nccl-plugin-abi.md.
 * Plain C; the pins at the end hold every offset. */
#ifndef TERSE_PLUGIN_ABI_COLLNET_V9_H_
#define TERSE_PLUGIN_ABI_COLLNET_V9_H_

#include "net_v9.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  void* mhandle;
  void* address;
  size_t size;
} ncclNetSGE_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* handles[], int nranks, int rank, void* listenComm, void** collComm);
  ncclResult_t (*reduceSupport)(int dataType, int redOp, int* supported);
  ncclResult_t (*regMr)(void* collComm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* collComm, void* mhandle);
  ncclResult_t (*iallreduce)(void* collComm, void* sendData, void* recvData, size_t count,
                             int dataType, int redOp, void* sendMhandle, void* recvMhandle,
                             void** request);
  ncclResult_t (*iallgather)(void* collComm, void* sendData, int nRecvParts,
                             ncclNetSGE_v9_t* recvParts, size_t bytesPerRank, size_t windowOffset,
                             size_t windowBytes, void* sendMhandle, void** request);
  ncclResult_t (*ireducescatter)(void* collComm, int nSendParts, ncclNetSGE_v9_t* sendParts,
                                 void* recvData, size_t bytesPerRank, size_t windowOffset,
                                 size_t windowBytes, int dataType, int redOp, void* recvMhandle,
                                 void** request);
  ncclResult_t (*iflush)(void* collComm, void* data, int size, void* mhandle, void** request);
  ncclResult_t (*test)(void* request, int* done, int* size);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclCollNet_v9_t;

TERSE_ABI_AT(ncclNetSGE_v9_t, address, 8);
TERSE_ABI_AT(ncclNetSGE_v9_t, size, 16);
TERSE_ABI_SIZE(ncclNetSGE_v9_t, 24);

TERSE_ABI_SLOT(ncclCollNet_v9_t, init, 1);
TERSE_ABI_SLOT(ncclCollNet_v9_t, devices, 2);
TERSE_ABI_SLOT(ncclCollNet_v9_t, getProperties, 3);
TERSE_ABI_SLOT(ncclCollNet_v9_t, listen, 4);
TERSE_ABI_SLOT(ncclCollNet_v9_t, connect, 5);
TERSE_ABI_SLOT(ncclCollNet_v9_t, reduceSupport, 6);
TERSE_ABI_SLOT(ncclCollNet_v9_t, regMr, 7);
TERSE_ABI_SLOT(ncclCollNet_v9_t, regMrDmaBuf, 8);
TERSE_ABI_SLOT(ncclCollNet_v9_t, deregMr, 9);
TERSE_ABI_SLOT(ncclCollNet_v9_t, iallreduce, 10);
TERSE_ABI_SLOT(ncclCollNet_v9_t, iallgather, 11);
TERSE_ABI_SLOT(ncclCollNet_v9_t, ireducescatter, 12);
TERSE_ABI_SLOT(ncclCollNet_v9_t, iflush, 13);
TERSE_ABI_SLOT(ncclCollNet_v9_t, test, 14);
TERSE_ABI_SLOT(ncclCollNet_v9_t, closeColl, 15);
TERSE_ABI_SLOT(ncclCollNet_v9_t, closeListen, 16);
TERSE_ABI_SLOT(ncclCollNet_v9_t, makeVDevice, 17);
TERSE_ABI_SIZE(ncclCollNet_v9_t, 8 * 18);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_COLLNET_V9_H_
