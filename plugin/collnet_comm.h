// The CollNet side of libnccl-net-terse.so: NCCL hands the plugin whole collectives (count,
// datatype, op) and the plugin runs them as terse compressed collectives over a
// terse::Communicator (UCX). C tables live in collnet_tables.cc; this is the C++ inside.
//
// Threads: NCCL calls listen/connect from its service thread and iallreduce/test from its proxy
// progress thread; a CollComm serialises its own calls with a mutex, and the collectives run in
// posting order on the Communicator's worker thread.
#pragma once

#include "collnet_abi.h"
#include "ef_period.h"

#include "terse/common/logging.h"
#include "terse/common/status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace terse::plugin::collnet {

// What init reads from the environment (docs/nccl-plugin.md, "CollNet").
struct Config {
  std::string codec = "none";  // a valid makeCodec spec, after fallbacks
  bool errorFeedback = false;  // the codec wants residuals and the period is given or learned
  PeriodSetting efPeriod;      // TERSE_COLLNET_EF_PERIOD: reduce calls per step, or learn it
  // What reduce calls run while no residual applies (warm-up of a learned period, or a sequence
  // that never repeats): "none" for onebit/topk, the policy's candidates without residuals
  // ("auto:max=int8") for an auto policy that allows them.
  std::string warmupCodec = "none";
  std::chrono::milliseconds timeout{300000};
  std::string host;  // address (numeric) that other ranks use to reach our rendezvous store
};

// Reads TERSE_COLLNET_CODEC, TERSE_COLLNET_EF_PERIOD, TERSE_TIMEOUT_MS and the setup interface
// (TERSE_NET_IFNAME / UCX_NET_DEVICES). An unknown codec spec, or an error-feedback codec with
// TERSE_COLLNET_EF_PERIOD=0, is a WARN and falls back to "none"; a malformed period or timeout
// and a missing interface are errors.
Result<Config> loadConfig();

// Logging through the logger NCCL passes to the CollNet init ("CollNet/terse : " prefix);
// without one, through terse's own logging (TERSE_DEBUG, subsystem PLUGIN).
void setLogger(ncclDebugLogger_t logger);
void log(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

// True for the (NCCL datatype, NCCL op) pairs terse reduces: float32/float16/bfloat16 with sum
// and avg. Everything else is declined.
bool supported(int dataType, int redOp);

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

#define COLLNET_WARN(...) \
  ::terse::plugin::collnet::log(::terse::LogLevel::kWarn, __FILE__, __LINE__, __VA_ARGS__)
#define COLLNET_INFO(...) \
  ::terse::plugin::collnet::log(::terse::LogLevel::kInfo, __FILE__, __LINE__, __VA_ARGS__)
