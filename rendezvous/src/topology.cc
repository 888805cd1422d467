#include <terse/topology.h>

#include "terse/common/env.h"
#include "terse/rendezvous/bootstrap.h"

#include <fstream>
#include <map>
#include <unistd.h>

namespace terse {

// TERSE_NODE's declaration (bootstrap.h: the communicator reads it and passes its value).
const EnvSetting kNodeSetting{
    {"TERSE_NODE", "string", "",
     "This rank's node: ranks with the same value share a node (shared memory, uncompressed "
     "steps of two-level collectives). When unset, the host's name and boot id. Set it to "
     "emulate several hosts on one machine (terse-run --nodes, network namespaces)."}};

std::vector<int> Topology::ranksOn(int which) const {
  std::vector<int> ranks;
  for (size_t r = 0; r < nodeOfRank.size(); ++r)
    if (nodeOfRank[r] == which) ranks.push_back(static_cast<int>(r));
  return ranks;
}

bool Topology::uniform() const {
  const size_t first = ranksOn(0).size();
  for (int k = 1; k < nodeCount; ++k)
    if (ranksOn(k).size() != first) return false;
  return true;
}

std::string Topology::describe() const {
  if (uniform())
    return std::to_string(nodeCount) + (nodeCount == 1 ? " node x " : " nodes x ") +
           std::to_string(ranksOn(0).size()) + (ranksOn(0).size() == 1 ? " rank" : " ranks");
  std::string sizes;
  for (int k = 0; k < nodeCount; ++k) sizes += (k ? "+" : "") + std::to_string(ranksOn(k).size());
  return std::to_string(nodeCount) + " nodes (" + sizes + " ranks)";
}

Topology Topology::fromNodeKeys(const std::vector<std::string>& keys, int rank) {
  Topology t;
  std::map<std::string, int> nodeOfKey;
  t.nodeOfRank.resize(keys.size());
  for (size_t r = 0; r < keys.size(); ++r) {
    auto placed = nodeOfKey.emplace(keys[r], static_cast<int>(nodeOfKey.size()));
    t.nodeOfRank[r] = placed.first->second;
  }
  t.nodeCount = static_cast<int>(nodeOfKey.size());
  t.node = t.nodeOfRank[rank];
  t.localRank = 0;
  t.localSize = 0;
  for (size_t r = 0; r < keys.size(); ++r) {
    if (t.nodeOfRank[r] != t.node) continue;
    if (static_cast<int>(r) < rank) ++t.localRank;
    ++t.localSize;
  }
  return t;
}

Topology Topology::singleNode(int size, int rank) {
  Topology t;
  t.nodeOfRank.assign(size, 0);
  t.localRank = rank;
  t.localSize = size;
  return t;
}

std::string nodeKey(const std::string& node) {
  if (!node.empty()) return "TERSE_NODE=" + node;
  // The host's name alone can repeat across machines (containers named alike); its boot id
  // cannot, and ranks in one container see the same one.
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(host) + "/" + boot;
}

Result<Topology> exchangeTopology(Store& store, const std::string& prefix, int rank, int size,
                                  std::chrono::milliseconds timeout, const std::string& node) {
  TERSE_ASSIGN_OR_RETURN(
      std::vector<std::string> keys,
      storeAllGather(store, prefix + "/node", rank, size, nodeKey(node), timeout));
  return Topology::fromNodeKeys(keys, rank);
}

}  // namespace terse
