// terse::Communicator: a group of ranks that can exchange bytes, created once per process from
// the launcher's environment (terse-run, mpirun, srun, torchrun) or from explicit parts.
//
// Ownership: a Communicator owns its Transport (UCX or in-process); destroying it closes the
// connections gracefully (messages already completed are delivered) unless it was aborted.
// Collectives borrow transport() and timeout(); they never outlive the Communicator.
//
// Thread-safety: one thread at a time drives a Communicator (barrier, collectives, transport
// calls). abort() may be called from any thread, e.g. a watchdog: every pending and later
// operation of this rank then fails with the abort's reason, and the other ranks' operations
// with this rank fail with kRemoteError naming it.
//
// Tags: collectives own tags below kReservedTagBase; the communicator's own traffic (barrier)
// uses the tags from there to kMaxTransportTag.
#pragma once

#include "terse/common/status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace terse {

class Transport;
class Store;

class Communicator {
 public:
  static constexpr uint64_t kReservedTagBase = (uint64_t{1} << 40) - (uint64_t{1} << 16);

  // The usual entry point. Reads rank, world size and the store from TERSE_RANK /
  // TERSE_WORLD_SIZE / TERSE_STORE (or the launcher's variables, see docs/env.md), the timeout
  // from TERSE_TIMEOUT_MS and the backend from TERSE_TRANSPORT (ucx), then meets the other
  // ranks: a rank that never arrives is a kTimeout naming it; ranks that disagree on the world
  // size or terse version fail with kInvalidUsage.
  static Result<std::unique_ptr<Communicator>> createFromEnv();

  // The same over a store the caller opened (the NCCL plugin, the PyTorch package, tests with
  // ranks as threads over a memory store). `store` is only used during the call. `scope`
  // prefixes the keys: every rank of one communicator passes the same, and communicators that
  // share a store use different ones.
  static Result<std::unique_ptr<Communicator>> createUcx(int rank, int size, Store& store,
                                                         std::chrono::milliseconds timeout,
                                                         const std::string& scope = "comm");

  // A whole world of `size` ranks in this process over the in-process backend, one communicator
  // per rank, each to be driven by its own thread (unit tests of the layers above).
  static Result<std::vector<std::unique_ptr<Communicator>>> createInProcWorld(
      int size, std::chrono::milliseconds timeout);

  // Wraps a transport built by the caller (the in-process backend in unit tests).
  static std::unique_ptr<Communicator> fromTransport(std::unique_ptr<Transport> transport,
                                                     std::chrono::milliseconds timeout);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;

  // Returns once every rank has entered it; kTimeout / kRemoteError name the peer that did not
  // answer.
  Status barrier();

  // See the thread-safety note above. `why` becomes this rank's error for every operation.
  void abort(const Status& why);

  // The per-operation timeout (TERSE_TIMEOUT_MS unless given): every wait on the transport and
  // every collective step is bounded by it.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void setTimeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // The byte transport this communicator owns, for the collectives layer.
  Transport& transport() { return *transport_; }

 private:
  Communicator(std::unique_ptr<Transport> transport, std::chrono::milliseconds timeout);

  std::unique_ptr<Transport> transport_;
  std::chrono::milliseconds timeout_;
  uint64_t barrierCount_ = 0;
};

}  // namespace terse
