// The plugin's one device as both of its tables (net and CollNet) describe it to NCCL, and the
// conversions to the property layout of every table version.
#pragma once

#include "abi/nccl_plugin.h"
#include "net_device.h"

namespace terse::plugin {

// Properties of device `d` for a host-memory network device. What differs between the tables
// is passed in: the net plugin reports the pointer kinds it registers and its device limits,
// CollNet host memory and one receive per request.
ncclNetProperties_v11_t hostDeviceProperties(const DeviceInfo& d, int ptrSupport, int maxComms,
                                             int maxRecvs);

// The v11 properties in another version's layout, one overload per properties struct (v9 and
// v10 share theirs). v12 has room for 8 devices per virtual NIC and rail/plane ids, which
// terse's one host device does not have (NCCL_NET_ID_UNDEF); v10 is v11 without the trailing
// maxMultiRequestSize; v8 also lacks the virtual-device and size-limit fields. Name strings
// stay owned by the DeviceInfo. A new properties struct needs its overload here: until it has
// one, the table that returns it does not compile.
void convertProperties(const ncclNetProperties_v11_t& p, ncclNetProperties_v12_t* out);
void convertProperties(const ncclNetProperties_v11_t& p, ncclNetProperties_v11_t* out);
void convertProperties(const ncclNetProperties_v11_t& p, ncclNetProperties_v9_t* out);
void convertProperties(const ncclNetProperties_v11_t& p, ncclNetProperties_v8_t* out);

// getProperties of any table version (Props deduced from the table member it is assigned to)
// from the family's v11 entry point.
template <ncclResult_t (*getV11)(int, ncclNetProperties_v11_t*), typename Props>
ncclResult_t getPropertiesAs(int dev, Props* props) {
  if (props == nullptr) return ncclInvalidArgument;
  ncclNetProperties_v11_t p;
  ncclResult_t r = getV11(dev, &p);
  if (r == ncclSuccess) convertProperties(p, props);
  return r;
}

}  // namespace terse::plugin
