// Programmatic platforms (platform.h): a star zone of nodes, each node a full zone of its ranks
// and a gateway router. Routes are O(N L^2), so 4096 ranks stay small.
#include "terse/sim/platform.h"

#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include <cmath>
#include <string>

namespace terse::sim {

namespace sg = simgrid::s4u;

Status validatePlatform(const PlatformSpec& s) {
  if (s.worldSize < 1 || s.worldSize > (1 << 20))
    return errorInvalidArgument("platform: world size %d is not in 1..2^20", s.worldSize);
  if (s.ranksPerNode < 1)
    return errorInvalidArgument("platform: ranks per node %d must be >= 1", s.ranksPerNode);
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  auto nonNegative = [](double v) { return std::isfinite(v) && v >= 0; };
  if (!positive(s.intraGBps) || !positive(s.nicGbps) || !nonNegative(s.switchGbps) ||
      !positive(s.hostSpeed))
    return errorInvalidArgument(
        "platform: bandwidths and host speed must be positive (intra %g GB/s, NIC %g Gbit/s, "
        "switch %g Gbit/s, host %g flop/s)",
        s.intraGBps, s.nicGbps, s.switchGbps, s.hostSpeed);
  if (!nonNegative(s.intraLatencyUs) || !nonNegative(s.nicLatencyUs) ||
      !nonNegative(s.switchLatencyUs))
    return errorInvalidArgument("platform: latencies must be >= 0");
  return Status::ok();
}

std::string describePlatform(const PlatformSpec& s) {
  const int nodes = (s.worldSize + s.ranksPerNode - 1) / s.ranksPerNode;
  std::string sw = s.switchGbps > 0 ? formatString("%g Gbit/s", s.switchGbps) : "non-blocking";
  return formatString(
      "%d nodes x %d ranks, intra %g GB/s %g us, NIC %g Gbit/s %g us per %s, switch %s %g us",
      nodes, s.ranksPerNode, s.intraGBps, s.intraLatencyUs, s.nicGbps, s.nicLatencyUs,
      s.nicPerRank ? "rank" : "node", sw.c_str(), s.switchLatencyUs);
}

Result<std::vector<sg::Host*>> buildPlatform(const PlatformSpec& s, std::vector<int>* nodeOfRank) {
  TERSE_RETURN_IF_ERROR(validatePlatform(s));
  const int nodes = (s.worldSize + s.ranksPerNode - 1) / s.ranksPerNode;
  const double nicBps = s.nicGbps * 1e9 / 8;
  const double intraBps = s.intraGBps * 1e9;
  const double nicLat = s.nicLatencyUs * 1e-6, intraLat = s.intraLatencyUs * 1e-6;

  sg::NetZone* world = sg::create_star_zone("world");
  // The switch. Non-blocking, it never limits a flow, so it is not a link at all (every link is
  // a constraint of SimGrid's max-min solver, which dominates the run time with n^2 flows): its
  // latency is split over the two NIC links every inter-node route crosses. A blocking switch
  // is one link shared by all inter-node traffic.
  sg::Link* sw = nullptr;
  double nicLatency = nicLat;
  if (s.switchGbps > 0) {
    sw = world->create_link("switch", s.switchGbps * 1e9 / 8);
    sw->set_latency(s.switchLatencyUs * 1e-6)->seal();
  } else {
    nicLatency += s.switchLatencyUs * 1e-6 / 2;
  }

  std::vector<sg::Host*> hosts(s.worldSize);
  if (nodeOfRank) nodeOfRank->assign(s.worldSize, 0);
  for (int n = 0; n < nodes; ++n) {
    const std::string node = "node" + std::to_string(n);
    sg::NetZone* zone = sg::create_full_zone(node);
    zone->set_parent(world);
    auto* gw = zone->create_router(node + "-gw");
    sg::SplitDuplexLink* nodeNic = nullptr;
    if (!s.nicPerRank) {
      nodeNic = zone->create_split_duplex_link(node + "-nic", nicBps);
      nodeNic->set_latency(nicLatency)->seal();
    }
    const int first = n * s.ranksPerNode;
    const int last = std::min(s.worldSize, first + s.ranksPerNode);
    std::vector<sg::SplitDuplexLink*> intra;
    std::vector<sg::SplitDuplexLink*> nic;
    for (int r = first; r < last; ++r) {
      hosts[r] = zone->create_host("rank" + std::to_string(r), s.hostSpeed);
      hosts[r]->seal();
      auto* in = zone->create_split_duplex_link("rank" + std::to_string(r) + "-intra", intraBps);
      in->set_latency(intraLat)->seal();
      intra.push_back(in);
      if (s.nicPerRank) {
        auto* ni = zone->create_split_duplex_link("rank" + std::to_string(r) + "-nic", nicBps);
        ni->set_latency(nicLatency)->seal();
        nic.push_back(ni);
      } else {
        nic.push_back(nodeNic);
      }
      if (nodeOfRank) (*nodeOfRank)[r] = n;
    }
    using Dir = sg::LinkInRoute::Direction;
    for (int a = first; a < last; ++a) {
      for (int b = first; b < last; ++b) {
        if (a == b) continue;  // self messages never reach the network (sim_transport.h)
        zone->add_route(hosts[a]->get_netpoint(), hosts[b]->get_netpoint(), nullptr, nullptr,
                        {{intra[a - first], Dir::UP}, {intra[b - first], Dir::DOWN}}, false);
      }
      // Off the node: through this rank's (or the node's) NIC to the gateway and back.
      zone->add_route(hosts[a]->get_netpoint(), gw, nullptr, nullptr, {{nic[a - first], Dir::UP}},
                      false);
      zone->add_route(gw, hosts[a]->get_netpoint(), nullptr, nullptr, {{nic[a - first], Dir::DOWN}},
                      false);
    }
    zone->seal();
    // The star's spokes of this node: a route between nodes is the source's spoke out and the
    // destination's spoke in, so the switch sits on the way out only (crossed once).
    std::vector<sg::LinkInRoute> out;
    if (sw) out.emplace_back(sw);
    world->add_route(zone->get_netpoint(), nullptr, gw, nullptr, out, false);
    world->add_route(nullptr, zone->get_netpoint(), nullptr, gw, {}, false);
  }
  world->seal();
  return hosts;
}

}  // namespace terse::sim
