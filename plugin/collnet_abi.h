/* The NCCL CollNet plugin ABI (tables v8..v12), from /work/shared/design/nccl-plugin-abi.md and
 * (v12) NCCL's published src/include/plugin/net/net_v12.h.
 * Field order and types are the ABI; the static asserts at the end pin the layout.
 * Plain C so the C dlopen test may include it. */
#ifndef TERSE_PLUGIN_COLLNET_ABI_H_
#define TERSE_PLUGIN_COLLNET_ABI_H_

#include "nccl_net_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL's datatype and reduction numbering as the CollNet calls pass them. */
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

/* One piece of a scattered buffer (v9..v11); v8 has a 32-bit size. */
typedef struct {
  void* mhandle;
  void* address;
  size_t size;
} ncclNetSGE_v11_t;
typedef struct {
  void* mhandle;
  void* address;
  uint32_t size;
} ncclNetSGE_v8_t;
typedef ncclNetSGE_v11_t ncclNetSGE_v12_t;

/* v12 (NCCL 2.30+): v11's members and signatures with the v12 property and virtual-device
 * structs. */
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

/* v10 and v9: init(logger), listen without ctx, v10/v9 properties, no finalize. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
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
} ncclCollNet_v10_t;
typedef ncclCollNet_v10_t ncclCollNet_v9_t;

/* v8: v8 properties, int count in iallreduce, 32-bit sge sizes, no makeVDevice. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* handles[], int nranks, int rank, void* listenComm, void** collComm);
  ncclResult_t (*reduceSupport)(int dataType, int redOp, int* supported);
  ncclResult_t (*regMr)(void* collComm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* collComm, void* mhandle);
  ncclResult_t (*iallreduce)(void* collComm, void* sendData, void* recvData, int count,
                             int dataType, int redOp, void* sendMhandle, void* recvMhandle,
                             void** request);
  ncclResult_t (*iallgather)(void* collComm, void* sendData, int nRecvParts,
                             ncclNetSGE_v8_t* recvParts, size_t bytesPerRank, size_t windowOffset,
                             size_t windowBytes, void* sendMhandle, void** request);
  ncclResult_t (*ireducescatter)(void* collComm, int nSendParts, ncclNetSGE_v8_t* sendParts,
                                 void* recvData, size_t bytesPerRank, size_t windowOffset,
                                 size_t windowBytes, int dataType, int redOp, void* recvMhandle,
                                 void** request);
  ncclResult_t (*iflush)(void* collComm, void* data, int size, void* mhandle, void** request);
  ncclResult_t (*test)(void* request, int* done, int* size);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
} ncclCollNet_v8_t;

TERSE_ABI_ASSERT(sizeof(ncclNetSGE_v11_t) == 24, "sge v11 layout");
TERSE_ABI_ASSERT(sizeof(ncclNetSGE_v8_t) == 24 && offsetof(ncclNetSGE_v8_t, size) == 16,
                 "sge v8 layout");
TERSE_ABI_ASSERT(offsetof(ncclCollNet_v12_t, connect) == 8 * 5, "ncclCollNet_v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclCollNet_v12_t, iallreduce) == 8 * 10, "ncclCollNet_v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclCollNet_v12_t, makeVDevice) == 8 * 17, "ncclCollNet_v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclCollNet_v12_t, finalize) == 8 * 18, "ncclCollNet_v12 layout");
TERSE_ABI_ASSERT(sizeof(ncclCollNet_v12_t) == 8 * 19, "ncclCollNet_v12 layout");
TERSE_ABI_ASSERT(offsetof(ncclCollNet_v11_t, connect) == 8 * 5, "ncclCollNet_v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclCollNet_v11_t, iallreduce) == 8 * 10, "ncclCollNet_v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclCollNet_v11_t, test) == 8 * 14, "ncclCollNet_v11 layout");
TERSE_ABI_ASSERT(offsetof(ncclCollNet_v11_t, finalize) == 8 * 18, "ncclCollNet_v11 layout");
TERSE_ABI_ASSERT(sizeof(ncclCollNet_v11_t) == 8 * 19, "ncclCollNet_v11 layout");
TERSE_ABI_ASSERT(sizeof(ncclCollNet_v10_t) == 8 * 18, "ncclCollNet_v10 layout");
TERSE_ABI_ASSERT(sizeof(ncclCollNet_v8_t) == 8 * 17, "ncclCollNet_v8 layout");

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_COLLNET_ABI_H_
