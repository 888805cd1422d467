// Entry points into a Communicator for terse's own code: unit tests, benchmarks, the C API.
// Not installed: they hand out internals (the transport, an in-process world) or take internal
// types (CollectiveOp), which users of include/terse/ never need.
#pragma once

#include "terse/common/status.h"

#include <terse/communicator.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace terse {

class Transport;
class CollectiveEngine;
struct CollectiveOp;
enum class CollectiveKind : uint8_t;  // terse/collectives/collective_op.h

// TERSE_TIMEOUT_MS, the one place it is read (communicators and the CollNet plugin use it).
Result<std::chrono::milliseconds> timeoutFromEnv();

// Wraps a transport built by the caller (the in-process backend in unit tests). One node.
std::unique_ptr<Communicator> communicatorFromTransport(std::unique_ptr<Transport> transport,
                                                        std::chrono::milliseconds timeout);
// The same laid out as nodes: rank r's node key is nodeKeys[r] (as TERSE_NODE would give it;
// every rank passes the same list), so the world runs two-level collectives like a cluster.
Result<std::unique_ptr<Communicator>> communicatorFromTransport(
    std::unique_ptr<Transport> transport, std::chrono::milliseconds timeout,
    const std::vector<std::string>& nodeKeys);

// A whole world of `size` ranks in this process over the in-process backend, one communicator
// per rank, each to be driven by its own thread (unit tests of the layers above). One node.
Result<std::vector<std::unique_ptr<Communicator>>> createInProcWorld(
    int size, std::chrono::milliseconds timeout);
// The same laid out as nodes: rank r's node key is nodeKeys[r] (as TERSE_NODE would give it),
// so the in-process world runs two-level collectives like a cluster.
Result<std::vector<std::unique_ptr<Communicator>>> createInProcWorld(
    const std::vector<std::string>& nodeKeys, std::chrono::milliseconds timeout);

// The byte transport `comm` drives (its group view for a split communicator): for tests and
// benchmarks of the transport underneath, and for naming it in their output. Same thread rule
// as the communicator's own calls.
Transport& transportOf(Communicator& comm);

// The engine `comm` runs its calls with, for tests and benchmarks that check what it was built
// with (pipelineDepth(), segmentElements(), defaultAlgorithm(): its settings, which it never
// changes). Not for running calls: those go through the communicator.
const CollectiveEngine& engineOf(Communicator& comm);

// A call whose arguments failed before it reached the engine (the C API's enum checks): joins
// the ranks' agreement as rejected, so the peers fail the same call, and completes with `why`.
Work submitRejected(Communicator& comm, const CollectiveOp& call, Status why);

// A collective call of `kind` (allgather ignores `op`), as the *Async forms submit it; with
// `blocking`, for a caller that waits on the Work at once, as the blocking forms do: it then
// runs on the caller's thread when nothing is queued or running (CollectiveWorker::Wake).
Work submitCall(Communicator& comm, CollectiveKind kind, const void* send, void* recv, size_t count,
                DataType type, ReduceOp op, const CollectiveOptions& options, bool blocking);

}  // namespace terse
