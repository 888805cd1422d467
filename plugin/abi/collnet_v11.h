/* NCCL CollNet plugin ABI v11 (symbol ncclCollNetPlugin_v11; NCCL 2.28), frozen. From v10: init
 * runs per communicator and returns a context (which listen takes), finalize ends it, and the
 * properties are v11's. From /work/shared/design/nccl-plugin-abi.md.
 * Plain C; the pins at the end hold every offset. */
#ifndef TERSE_PLUGIN_ABI_COLLNET_V11_H_
#define TERSE_PLUGIN_ABI_COLLNET_V11_H_

#include "collnet_v10.h"
#include "net_v11.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ncclNetSGE_v10_t ncclNetSGE_v11_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
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
                             ncclNetSGE_v11_t* recvParts, size_t bytesPerRank, size_t windowOffset,
                             size_t windowBytes, void* sendMhandle, void** request);
  ncclResult_t (*ireducescatter)(void* collComm, int nSendParts, ncclNetSGE_v11_t* sendParts,
                                 void* recvData, size_t bytesPerRank, size_t windowOffset,
                                 size_t windowBytes, int dataType, int redOp, void* recvMhandle,
                                 void** request);
  ncclResult_t (*iflush)(void* collComm, void* data, int size, void* mhandle, void** request);
  ncclResult_t (*test)(void* request, int* done, int* size);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
} ncclCollNet_v11_t;

TERSE_ABI_SLOT(ncclCollNet_v11_t, init, 1);
TERSE_ABI_SLOT(ncclCollNet_v11_t, devices, 2);
TERSE_ABI_SLOT(ncclCollNet_v11_t, getProperties, 3);
TERSE_ABI_SLOT(ncclCollNet_v11_t, listen, 4);
TERSE_ABI_SLOT(ncclCollNet_v11_t, connect, 5);
TERSE_ABI_SLOT(ncclCollNet_v11_t, reduceSupport, 6);
TERSE_ABI_SLOT(ncclCollNet_v11_t, regMr, 7);
TERSE_ABI_SLOT(ncclCollNet_v11_t, regMrDmaBuf, 8);
TERSE_ABI_SLOT(ncclCollNet_v11_t, deregMr, 9);
TERSE_ABI_SLOT(ncclCollNet_v11_t, iallreduce, 10);
TERSE_ABI_SLOT(ncclCollNet_v11_t, iallgather, 11);
TERSE_ABI_SLOT(ncclCollNet_v11_t, ireducescatter, 12);
TERSE_ABI_SLOT(ncclCollNet_v11_t, iflush, 13);
TERSE_ABI_SLOT(ncclCollNet_v11_t, test, 14);
TERSE_ABI_SLOT(ncclCollNet_v11_t, closeColl, 15);
TERSE_ABI_SLOT(ncclCollNet_v11_t, closeListen, 16);
TERSE_ABI_SLOT(ncclCollNet_v11_t, makeVDevice, 17);
TERSE_ABI_SLOT(ncclCollNet_v11_t, finalize, 18);
TERSE_ABI_SIZE(ncclCollNet_v11_t, 8 * 19);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_COLLNET_V11_H_
