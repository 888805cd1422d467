// Simulated clusters built in code: N nodes x L ranks, one host per rank (a GPU and its share of
// the host), an intra-node fabric and NICs to a switch.
//
//   rank a -> rank b, same node:   intra(a) up, intra(b) down
//   rank a -> rank b, other node:  nic(a) up, switch, nic(b) down
//
// intra(r) is a full-duplex link per rank at intraGBps (NVLink- or shared-memory-class: each
// rank's own port on the node's crossbar). nic(a) is rank a's own NIC when nicPerRank, or the
// node's NIC, shared by its L ranks, otherwise. The switch is one link shared by all inter-node
// traffic at switchGbps (0: a non-blocking switch, which is no link at all: only the NICs
// limit, and the switch's latency is split over the two NIC links a route crosses). Latencies
// are per link, so a message off the node pays two NIC latencies and the switch's. SimGrid's CM02
// model is used without correction factors, so the times are the links' figures exactly as stated;
// anything else (protocol overheads, stack latency) must be in those figures.
#pragma once

#include "terse/common/status.h"

#include <string>
#include <vector>

namespace simgrid::s4u {
class Host;
}

namespace terse::sim {

struct PlatformSpec {
  int worldSize = 8;
  int ranksPerNode = 8;
  double intraGBps = 100;     // per rank and direction, GB/s (1e9 bytes)
  double intraLatencyUs = 1;  // per intra link
  double nicGbps = 100;       // per NIC and direction, Gbit/s
  bool nicPerRank = false;    // one NIC per rank (rail-style) or one per node
  double nicLatencyUs = 2.5;  // per NIC link
  double switchGbps = 0;      // 0: non-blocking
  double switchLatencyUs = 1;
  double hostSpeed = 1e9;  // flop/s of each host; compute is charged in these units
};

// Checks the figures (positive, world a multiple of ranksPerNode is not required: the last
// node may be partial).
Status validatePlatform(const PlatformSpec& spec);

// Builds the platform in the current SimGrid engine (once, before run()); returns rank r's
// host at [r] and fills nodeOfRank.
Result<std::vector<simgrid::s4u::Host*>> buildPlatform(const PlatformSpec& spec,
                                                       std::vector<int>* nodeOfRank);

// One line for logs and tables: "2x4 ranks, intra 100 GB/s 1 us, NIC 100 Gbit/s per node ...".
std::string describePlatform(const PlatformSpec& spec);

}  // namespace terse::sim
