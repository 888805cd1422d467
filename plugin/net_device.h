// What the plugin tells NCCL about its one device, and which interface carries connection setup.
// Discovered once per init from TERSE_NET_* and UCX_NET_DEVICES so getProperties describes the
// link UCX will actually use.
#pragma once

#include "terse/common/status.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace terse::plugin {

// Upper bound of a grouped receive (NCCL's own limit for net plugins is 8).
constexpr int kMaxGroupedRecvs = 8;
// Speed reported when the link speed cannot be read (loopback, virtual NICs).
constexpr int kUnknownSpeedMbps = 10000;

struct DeviceInfo {
  std::string ifname;   // interface for the setup socket: "lo", "eth0", ...
  std::string name;     // shown by NCCL: the interface, or UCX_NET_DEVICES when it names IB ports
  std::string pciPath;  // sysfs PCI path of the NIC; empty for virtual interfaces
  uint64_t guid = 0;
  int speedMbps = kUnknownSpeedMbps;
  bool speedKnown = false;
  int maxComms = 0;
  int maxRecvs = kMaxGroupedRecvs;
  sockaddr_storage bindAddr{};  // the interface's address with port 0
  socklen_t bindLen = 0;
};

// Reads TERSE_NET_IFNAME, TERSE_NET_SPEED_MBPS, TERSE_NET_MAX_RECVS and UCX_NET_DEVICES, finds
// the interface's address, speed and PCI path. Fails with a message naming the variable to fix.
Result<DeviceInfo> discoverDevice();

}  // namespace terse::plugin
