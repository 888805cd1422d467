/* Every NCCL plugin ABI version terse implements: one frozen header per table family and
 * version (net_vN.h, collnet_vN.h, as NCCL keeps its own), the shared values in common.h.
 *
 * A new version N: add net_vN.h and collnet_vN.h (copy the previous pair's structs only where
 * NCCL changed them; typedef the rest to the previous version's types), include them here, put
 * N at the front of TERSE_NCCL_ABI_VERSIONS, and define the two tables (one line each) at the
 * end of net_tables.cc and collnet_tables.cc. docs/nccl-plugin.md, "Adding an ABI version",
 * lists what else a version may need. Plain C. */
#ifndef TERSE_PLUGIN_ABI_NCCL_PLUGIN_H_
#define TERSE_PLUGIN_ABI_NCCL_PLUGIN_H_

#include "common.h"
#include "net_v8.h"
#include "net_v9.h"
#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"
#include "collnet_v8.h"
#include "collnet_v9.h"
#include "collnet_v10.h"
#include "collnet_v11.h"
#include "collnet_v12.h"

/* The versions exported, newest first, as ncclNetPlugin_vN and ncclCollNetPlugin_vN. The tests
 * drive each of them and tests/plugin/check_exports.sh expects exactly these symbols. */
#define TERSE_NCCL_ABI_VERSIONS 12, 11, 10, 9, 8
#define TERSE_NCCL_ABI_NEWEST 12

#endif  // TERSE_PLUGIN_ABI_NCCL_PLUGIN_H_
