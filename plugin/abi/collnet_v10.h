/* NCCL CollNet plugin ABI v10 (symbol ncclCollNetPlugin_v10), frozen: the v9 table unchanged
 * (its property and virtual-device structs are the same types in v10). Plain C. */
#ifndef TERSE_PLUGIN_ABI_COLLNET_V10_H_
#define TERSE_PLUGIN_ABI_COLLNET_V10_H_

#include "collnet_v9.h"
#include "net_v10.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef ncclNetSGE_v9_t ncclNetSGE_v10_t;
typedef ncclCollNet_v9_t ncclCollNet_v10_t;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TERSE_PLUGIN_ABI_COLLNET_V10_H_
