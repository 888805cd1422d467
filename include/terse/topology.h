// Which ranks share a node: the two levels of a cluster (fast links inside a node, a slower
// network between nodes). Every rank publishes a node key when its communicator is created
// (TERSE_NODE when set, e.g. for hosts emulated on one machine; otherwise the host's name and
// boot id), and all ranks derive the same picture from the keys.
#pragma once

#include <string>
#include <vector>

namespace terse {

struct Topology {
  // Nodes are numbered by their lowest rank: node 0 holds rank 0.
  std::vector<int> nodeOfRank;
  int node = 0;  // this rank's node
  int nodeCount = 1;
  int localRank = 0;  // this rank's index among its node's ranks, in rank order
  int localSize = 1;  // ranks on this rank's node

  // Ranks of `node`, in rank order.
  std::vector<int> ranksOn(int node) const;
  // The same for every node: one rank per node, or the same count on every node.
  bool uniform() const;
  // "2 nodes x 4 ranks" or "3 nodes (3+2+2 ranks)", for logs and tables.
  std::string describe() const;

  // From every rank's node key, in rank order, as seen by `rank`.
  static Topology fromNodeKeys(const std::vector<std::string>& keys, int rank);
  // All `size` ranks on one node.
  static Topology singleNode(int size, int rank);
};

}  // namespace terse
