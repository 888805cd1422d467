// CollNet on GPU buffers. In a CUDA build of terse with a usable device, CollNet reports
// NCCL_PTR_CUDA, registers device memory, and runs calls on device buffers through terse's
// device path (codecs on the GPU, only compressed bytes staged through pinned host memory) on a
// stream the plugin owns, one per CollComm. Without CUDA, or without a device, it stays
// host-only and NCCL stages CollNet data in host memory as before.
//
// terse's Communicator runs collectives on its worker thread, whose current CUDA device is the
// default one (0); a buffer on another device could not run there. So the device path is only
// offered when the process sees exactly one device (the usual one-GPU-per-process launch, or
// CUDA_VISIBLE_DEVICES set per rank); with several visible devices CollNet stays host-only and
// says so once at INFO.
#pragma once

#include "terse/common/status.h"

#include <cstddef>
#include <string>

namespace terse::plugin::collnet {

// Whether CollNet takes device buffers in this process (cached after the first call). *why,
// when given, receives the reason it does not (for the INFO line).
bool deviceBuffersSupported(std::string* why = nullptr);

// True for CUDA device or managed memory (always false without CUDA or a device).
bool isDeviceBuffer(const void* p);

// The plugin's CUDA stream of one CollComm: created on first use (on the calling thread's
// current device), synchronized and destroyed with the object. kUnsupported without CUDA.
class DeviceStream {
 public:
  DeviceStream() = default;
  ~DeviceStream();
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;

  Result<void*> get();

 private:
  void* stream_ = nullptr;
};

}  // namespace terse::plugin::collnet
