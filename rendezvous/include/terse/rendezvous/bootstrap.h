// Where a rank learns who it is: rank, world size, local rank and the store address, from
// terse's own variables or, when those are unset, from what mpirun (OpenMPI), srun (Slurm) and
// torchrun already export. MPI is never required. Reused by the NCCL plugin and the PyTorch
// package.
#pragma once

#include "terse/common/status.h"
#include "terse/rendezvous/store.h"

#include <terse/topology.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace terse {

class EnvSetting;  // terse/common/env.h

struct BootstrapInfo {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  // What the launcher said about this rank's node, for the check against the topology terse
  // derives itself; -1 where it said nothing.
  int launcherLocalRank = -1, launcherLocalSize = -1;
  std::string localSource;  // the variables they came from, for messages
  std::string store;        // "host:port" (TCP store served by rank 0) or a directory path
  std::string rankSource;   // the variable the rank came from, for messages
};

// The variables a rank learns who it is from, as the entry point read them (the rendezvous
// never reads the environment): the value of each name of bootstrapVariableNames() that is set
// to a non-empty text.
struct BootstrapVariables {
  std::map<std::string, std::string> values;
  // `name`'s value, or "" when it is not set.
  std::string get(const std::string& name) const;
};

// The names bootstrapInfoFrom consults: terse's TERSE_RANK, TERSE_WORLD_SIZE, TERSE_LOCAL_RANK,
// TERSE_LOCAL_SIZE and TERSE_STORE, and the launchers' variables it falls back on.
const std::vector<std::string>& bootstrapVariableNames();

// From TERSE_RANK / TERSE_WORLD_SIZE / TERSE_LOCAL_RANK / TERSE_STORE, falling back to
// OMPI_COMM_WORLD_*, PMI_*, SLURM_* and torchrun's RANK / WORLD_SIZE / LOCAL_RANK /
// MASTER_ADDR with MASTER_PORT+1 (PyTorch's store holds MASTER_PORT itself). Missing or malformed
// values are errors that say what to set.
Result<BootstrapInfo> bootstrapInfoFrom(const BootstrapVariables& vars);

// Parses "host:port" into its parts; false when `spec` is not of that form (then it is a path).
bool parseHostPort(const std::string& spec, std::string* host, int* port);

// Opens the store named by info.store: TCP (rank 0 serves) or a file store.
Result<std::unique_ptr<Store>> openStore(const BootstrapInfo& info,
                                         std::chrono::milliseconds timeout);

// Every rank publishes `mine` and receives all ranks' values in rank order. Each value carries a
// header with terse's version and the world size, so ranks that disagree on either fail here
// with a message naming the rank, and ranks that never arrive fail with kTimeout naming them.
// `prefix` scopes the keys so one store can host several exchanges.
Result<std::vector<std::string>> storeAllGather(Store& store, const std::string& prefix, int rank,
                                                int size, const std::string& mine,
                                                std::chrono::milliseconds timeout);

}  // namespace terse

namespace terse {

// TERSE_NODE's declaration (the communicator reads it and passes its value here).
extern const EnvSetting kNodeSetting;

// This process's node key: "TERSE_NODE=<node>" when `node` (TERSE_NODE's value) is not empty
// (hosts emulated on one machine, tests), else "<hostname>/<boot id>".
std::string nodeKey(const std::string& node);

// Every rank publishes its node key (nodeKey(node)) under <prefix>/node; all derive the same
// Topology.
Result<Topology> exchangeTopology(Store& store, const std::string& prefix, int rank, int size,
                                  std::chrono::milliseconds timeout, const std::string& node);

}  // namespace terse
