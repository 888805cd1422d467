// The CollNet side of libnccl-net-terse.so: NCCL hands the plugin whole collectives (count,
// datatype, op) and the plugin runs them as terse compressed collectives over a
// terse::Communicator (UCX). C tables live in collnet_tables.cc; this is the C++ inside: the
// communicators and requests. Settings are collnet_config, NCCL's types collnet_types, the
// error-feedback residuals collnet_residuals, windows and staging collnet_window, logging
// plugin_log (shared with the net side); sockets are common's (terse/common/socket.h).
//
// Threads: NCCL calls listen/connect from its service thread and iallreduce/test from its proxy
// progress thread; a CollComm serialises its own calls with a mutex, and the collectives run in
// posting order on the Communicator's worker thread.
#pragma once

#include "abi/nccl_plugin.h"
#include "collnet_config.h"

#include "terse/common/status.h"

#include <cstddef>

namespace terse::plugin::collnet {

// Opaque objects behind NCCL's void* handles.
class ListenComm;
class CollComm;
class Request;

Result<ListenComm*> listen(const Config& config, void* handle);
Status closeListen(ListenComm* listen);
// Blocks until every rank has joined (bounded by the timeout): NCCL calls it once.
Result<CollComm*> connect(void* const* handles, int nranks, int rank, ListenComm* listen);
Status closeColl(CollComm* comm);

Result<Request*> iallreduce(CollComm* comm, const void* send, void* recv, size_t count,
                            int dataType, int redOp);
Result<Request*> ireducescatter(CollComm* comm, int nParts, const ncclNetSGE_v11_t* parts,
                                void* recv, size_t bytesPerRank, size_t windowOffset,
                                size_t windowBytes, int dataType, int redOp);
Result<Request*> iallgather(CollComm* comm, const void* send, int nParts,
                            const ncclNetSGE_v11_t* parts, size_t bytesPerRank, size_t windowOffset,
                            size_t windowBytes);
// A call the tables answered with an error before terse ran it (any of the three above, or a
// check of the tables' own): counted for the statistics closeColl logs (collnet_stats.h), since
// the collectives' own counters never see it. comm may be NULL (then nothing is counted).
void noteDeclined(CollComm* comm);
// done = false leaves the request alive; once done (success or error) it is freed.
Status test(Request* request, bool* done, size_t* bytes);

}  // namespace terse::plugin::collnet
