/* NCCL CollNet plugin ABI v12 (symbol ncclCollNetPlugin_v12; NCCL 2.30+), frozen. From v11: the
 * v12 property and virtual-device structs; every other member and signature is v11's. Written
 * from NCCL's published src/include/plugin/net/net_v12.h.
 * Plain C; the pins at the end hold every offset. */
#ifndef TERSE_PLUGIN_ABI_COLLNET_V12_H_
#define TERSE_PLUGIN_ABI_COLLNET_V12_H_

#include "collnet_v11.h"
#include "net_v12.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ncclNetSGE_v11_t ncclNetSGE_v12_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
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
                             ncclNetSGE_v12_t* recvParts, size_t bytesPerRank, size_t windowOffset,
                             size_t windowBytes, void* sendMhandle, void** request);
  ncclResult_t (*ireducescatter)(void* collComm, int nSendParts, ncclNetSGE_v12_t* sendParts,
                                 void* recvData, size_t bytesPerRank, size_t windowOffset,
                                 size_t windowBytes, int dataType, int redOp, void* recvMhandle,
                                 void** request);
  ncclResult_t (*iflush)(void* collComm, void* data, int size, void* mhandle, void** request);
  ncclResult_t (*test)(void* request, int* done, int* size);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v12_t* props);
  ncclResult_t (*finalize)(void* ctx);
} ncclCollNet_v12_t;

TERSE_ABI_SLOT(ncclCollNet_v12_t, init, 1);
TERSE_ABI_SLOT(ncclCollNet_v12_t, devices, 2);
TERSE_ABI_SLOT(ncclCollNet_v12_t, getProperties, 3);
TERSE_ABI_SLOT(ncclCollNet_v12_t, listen, 4);
TERSE_ABI_SLOT(ncclCollNet_v12_t, connect, 5);
TERSE_ABI_SLOT(ncclCollNet_v12_t, reduceSupport, 6);
TERSE_ABI_SLOT(ncclCollNet_v12_t, regMr, 7);
TERSE_ABI_SLOT(ncclCollNet_v12_t, regMrDmaBuf, 8);
TERSE_ABI_SLOT(ncclCollNet_v12_t, deregMr, 9);
TERSE_ABI_SLOT(ncclCollNet_v12_t, iallreduce, 10);
TERSE_ABI_SLOT(ncclCollNet_v12_t, iallgather, 11);
TERSE_ABI_SLOT(ncclCollNet_v12_t, ireducescatter, 12);
TERSE_ABI_SLOT(ncclCollNet_v12_t, iflush, 13);
TERSE_ABI_SLOT(ncclCollNet_v12_t, test, 14);
TERSE_ABI_SLOT(ncclCollNet_v12_t, closeColl, 15);
TERSE_ABI_SLOT(ncclCollNet_v12_t, closeListen, 16);
TERSE_ABI_SLOT(ncclCollNet_v12_t, makeVDevice, 17);
TERSE_ABI_SLOT(ncclCollNet_v12_t, finalize, 18);
TERSE_ABI_SIZE(ncclCollNet_v12_t, 8 * 19);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_COLLNET_V12_H_
