#include "net_device.h"

#include "terse/common/env.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace terse::plugin {

// Settings read in this file (terse/common/env.h: declared next to their readers).
const EnvSetting kNetIfnameSetting{
    {"TERSE_NET_IFNAME", "string", "",
     "NCCL net plugin: interface whose address carries connection setup. When unset, the first "
     "interface named in UCX_NET_DEVICES, else the first non-loopback interface that is up."}};
const EnvSetting kNetSpeedMbpsSetting{
    {"TERSE_NET_SPEED_MBPS", "int", "0",
     "NCCL net plugin: link speed in Mbit/s reported to NCCL; 0 reads it from sysfs (10000 when "
     "the link has none, e.g. loopback).",
     0, 100000000}};
const EnvSetting kNetMaxRecvsSetting{
    {"TERSE_NET_MAX_RECVS", "int", "8",
     "NCCL net plugin: most buffers in one grouped receive (maxRecvs), 1..8.", 1, 8}};

namespace {

// The first address of `ifname` (IPv4 preferred), port 0.
bool interfaceAddress(const std::string& ifname, sockaddr_storage* out, socklen_t* len) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (int family : {AF_INET, AF_INET6}) {
    for (ifaddrs* a = list; a != nullptr && !found; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != family) continue;
      if (ifname != a->ifa_name) continue;
      *len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memset(out, 0, sizeof(*out));
      std::memcpy(out, a->ifa_addr, *len);
      if (family == AF_INET)
        reinterpret_cast<sockaddr_in*>(out)->sin_port = 0;
      else
        reinterpret_cast<sockaddr_in6*>(out)->sin6_port = 0;
      found = true;
    }
    if (found) break;
  }
  freeifaddrs(list);
  return found;
}

// First interface that is up, not loopback, and has an IPv4 address.
std::string firstRoutableInterface() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* a = list; a != nullptr && name.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    name = a->ifa_name;
  }
  freeifaddrs(list);
  return name;
}

bool readFirstLine(const std::string& path, std::string* line) {
  std::ifstream in(path);
  return in.good() && static_cast<bool>(std::getline(in, *line));
}

std::string realPath(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

bool isDirectory(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

Result<DeviceInfo> discoverDevice() {
  DeviceInfo dev;
  TERSE_ASSIGN_OR_RETURN(std::string ifname, kNetIfnameSetting.readText());
  TERSE_ASSIGN_OR_RETURN(int64_t speed, kNetSpeedMbpsSetting.readInt());
  TERSE_ASSIGN_OR_RETURN(int64_t maxRecvs, kNetMaxRecvsSetting.readInt());
  if (maxRecvs < 1 || maxRecvs > kMaxGroupedRecvs)
    return errorInvalidArgument("TERSE_NET_MAX_RECVS=%lld is out of range: use 1..%d",
                                static_cast<long long>(maxRecvs), kMaxGroupedRecvs);
  if (speed < 0 || speed > INT_MAX)
    return errorInvalidArgument(
        "TERSE_NET_SPEED_MBPS=%lld is out of range: use 0 (detect) or a "
        "link speed in Mbit/s",
        static_cast<long long>(speed));
  dev.maxRecvs = static_cast<int>(maxRecvs);

  // UCX_NET_DEVICES names what UCX will use: "lo", "eth0", "mlx5_0:1", "all".
  std::string ibDevice, ibPort = "1";
  const char* ucxDevices = std::getenv("UCX_NET_DEVICES");
  for (const std::string& entry : splitList(ucxDevices ? ucxDevices : "")) {
    std::string base = entry.substr(0, entry.find(':'));
    if (base == "all") continue;
    if (ibDevice.empty() && isDirectory("/sys/class/infiniband/" + base)) {
      ibDevice = base;
      if (entry.find(':') != std::string::npos) ibPort = entry.substr(entry.find(':') + 1);
    }
    sockaddr_storage tmp;
    socklen_t len;
    if (ifname.empty() && interfaceAddress(base, &tmp, &len)) ifname = base;
  }
  if (ifname.empty()) ifname = firstRoutableInterface();
  if (ifname.empty()) ifname = "lo";
  if (!interfaceAddress(ifname, &dev.bindAddr, &dev.bindLen))
    return errorInvalidArgument(
        "network interface '%s' has no IP address for connection setup: set TERSE_NET_IFNAME to an "
        "interface that has one",
        ifname.c_str());
  dev.ifname = ifname;
  dev.name = ibDevice.empty() ? ifname : ibDevice + ":" + ibPort;
  dev.guid = if_nametoindex(ifname.c_str());

  std::string line;
  if (speed > 0) {
    dev.speedMbps = static_cast<int>(speed);
    dev.speedKnown = true;
  } else if (!ibDevice.empty() &&
             readFirstLine("/sys/class/infiniband/" + ibDevice + "/ports/" + ibPort + "/rate",
                           &line)) {
    // "100 Gb/sec (4X EDR)"
    double gbps = std::atof(line.c_str());
    if (gbps > 0) {
      dev.speedMbps = static_cast<int>(gbps * 1000);
      dev.speedKnown = true;
    }
  } else if (readFirstLine("/sys/class/net/" + ifname + "/speed", &line)) {
    int mbps = std::atoi(line.c_str());  // -1 or unreadable for loopback and some virtual NICs
    if (mbps > 0) {
      dev.speedMbps = mbps;
      dev.speedKnown = true;
    }
  }
  dev.pciPath = ibDevice.empty() ? realPath("/sys/class/net/" + ifname + "/device")
                                 : realPath("/sys/class/infiniband/" + ibDevice + "/device");

  // Each comm holds its setup socket and, over TCP, UCX's own socket(s): budget three fds.
  rlimit nofile{};
  rlim_t fds = 1024;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    fds = nofile.rlim_cur;
  else if (nofile.rlim_cur == RLIM_INFINITY)
    fds = 1 << 20;
  dev.maxComms = static_cast<int>(std::clamp<rlim_t>(fds / 3, 1, 65536));
  return dev;
}

}  // namespace terse::plugin
