#include "net_properties.h"

namespace terse::plugin {

ncclNetProperties_v11_t hostDeviceProperties(const DeviceInfo& d, int ptrSupport, int maxComms,
                                             int maxRecvs) {
  ncclNetProperties_v11_t p{};
  p.name = const_cast<char*>(d.name.c_str());
  p.pciPath = d.pciPath.empty() ? nullptr : const_cast<char*>(d.pciPath.c_str());
  p.guid = d.guid;
  p.ptrSupport = ptrSupport;
  p.regIsGlobal = 0;
  p.forceFlush = 0;
  p.speed = d.speedMbps;
  p.port = 0;
  p.latency = 0;  // not measured; NCCL then uses its own default
  p.maxComms = maxComms;
  p.maxRecvs = maxRecvs;
  p.netDeviceType = NCCL_NET_DEVICE_HOST;
  p.netDeviceVersion = 0;
  p.vProps.ndevs = 1;
  p.vProps.devs[0] = 0;
  p.maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  p.maxCollBytes = NCCL_MAX_COLLNET_SIZE_BYTES;
  p.maxMultiRequestSize = 1;
  return p;
}

void convertProperties(const ncclNetProperties_v11_t& p, ncclNetProperties_v12_t* out) {
  ncclNetProperties_v12_t q{};
  q.name = p.name;
  q.pciPath = p.pciPath;
  q.guid = p.guid;
  q.ptrSupport = p.ptrSupport;
  q.regIsGlobal = p.regIsGlobal;
  q.forceFlush = p.forceFlush;
  q.speed = p.speed;
  q.port = p.port;
  q.latency = p.latency;
  q.maxComms = p.maxComms;
  q.maxRecvs = p.maxRecvs;
  q.netDeviceType = p.netDeviceType;
  q.netDeviceVersion = p.netDeviceVersion;
  q.vProps.ndevs = p.vProps.ndevs;
  for (int i = 0; i < p.vProps.ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC; ++i)
    q.vProps.devs[i] = p.vProps.devs[i];
  q.maxP2pBytes = p.maxP2pBytes;
  q.maxCollBytes = p.maxCollBytes;
  q.maxMultiRequestSize = p.maxMultiRequestSize;
  q.railId = NCCL_NET_ID_UNDEF;
  q.planeId = NCCL_NET_ID_UNDEF;
  *out = q;
}

void convertProperties(const ncclNetProperties_v11_t& p, ncclNetProperties_v11_t* out) { *out = p; }

void convertProperties(const ncclNetProperties_v11_t& p, ncclNetProperties_v9_t* out) {
  *out = ncclNetProperties_v9_t{p.name,
                                p.pciPath,
                                p.guid,
                                p.ptrSupport,
                                p.regIsGlobal,
                                p.forceFlush,
                                p.speed,
                                p.port,
                                p.latency,
                                p.maxComms,
                                p.maxRecvs,
                                p.netDeviceType,
                                p.netDeviceVersion,
                                p.vProps,
                                p.maxP2pBytes,
                                p.maxCollBytes};
}

void convertProperties(const ncclNetProperties_v11_t& p, ncclNetProperties_v8_t* out) {
  *out = ncclNetProperties_v8_t{p.name,        p.pciPath,  p.guid,          p.ptrSupport,
                                p.regIsGlobal, p.speed,    p.port,          p.latency,
                                p.maxComms,    p.maxRecvs, p.netDeviceType, p.netDeviceVersion};
}

}  // namespace terse::plugin
