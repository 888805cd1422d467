// The plugin's one device as both of its tables (net and CollNet) describe it to NCCL, and the
// conversions to the other property layouts the v8-v10 and v12 tables return.
#pragma once

#include "nccl_net_abi.h"
#include "net_device.h"

namespace terse::plugin {

// Properties of device `d` for a host-memory network device. What differs between the tables
// is passed in: the net plugin reports the pointer kinds it registers and its device limits,
// CollNet host memory and one receive per request.
ncclNetProperties_v11_t hostDeviceProperties(const DeviceInfo& d, int ptrSupport, int maxComms,
                                             int maxRecvs);

// v12 is v11 with room for 8 devices per virtual NIC and rail/plane ids, which terse's one
// host device does not have (NCCL_NET_ID_UNDEF).
ncclNetProperties_v12_t propertiesV12(const ncclNetProperties_v11_t& p);
// v10 is v11 without the trailing maxMultiRequestSize; v8 also lacks the virtual-device and
// size-limit fields. Name strings stay owned by the DeviceInfo.
ncclNetProperties_v10_t propertiesV10(const ncclNetProperties_v11_t& p);
ncclNetProperties_v8_t propertiesV8(const ncclNetProperties_v11_t& p);

// getProperties of another table version from the table's v11 entry point.
template <typename Old, Old (*convert)(const ncclNetProperties_v11_t&),
          ncclResult_t (*getV11)(int, ncclNetProperties_v11_t*)>
ncclResult_t getOlderProperties(int dev, Old* props) {
  if (props == nullptr) return ncclInvalidArgument;
  ncclNetProperties_v11_t p;
  ncclResult_t r = getV11(dev, &p);
  if (r == ncclSuccess) *props = convert(p);
  return r;
}

}  // namespace terse::plugin
