#include "collnet_device.h"

#include "terse/kernels/device.h"

#if TERSE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <mutex>

namespace terse::plugin::collnet {

namespace {

struct Support {
  bool ok = false;
  std::string why;
};

Support probe() {
  Support s;
  if (!device::built()) {
    s.why = "this build of terse has no CUDA";
    return s;
  }
  if (!device::available()) {
    s.why = "no usable CUDA device";
    return s;
  }
#if TERSE_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    s.why = "cudaGetDeviceCount failed";
    return s;
  }
  if (count != 1) {
    s.why = std::to_string(count) +
            " CUDA devices are visible and terse runs collectives on device 0 only; set "
            "CUDA_VISIBLE_DEVICES so each rank sees its own GPU";
    return s;
  }
  s.ok = true;
#endif
  return s;
}

}  // namespace

bool deviceBuffersSupported(std::string* why) {
  static std::once_flag once;
  static Support support;
  std::call_once(once, [] { support = probe(); });
  if (why != nullptr) *why = support.why;
  return support.ok;
}

bool isDeviceBuffer(const void* p) { return p != nullptr && device::isDeviceMemory(p); }

#if TERSE_HAVE_CUDA

DeviceStream::~DeviceStream() {
  if (stream_ == nullptr) return;
  auto s = static_cast<cudaStream_t>(stream_);
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  cudaGetLastError();
}

Result<void*> DeviceStream::get() {
  if (stream_ != nullptr) return stream_;
  cudaStream_t s = nullptr;
  // Non-blocking: NCCL's own streams and the legacy default stream never wait on ours.
  cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return errorSystem("CollNet: cudaStreamCreateWithFlags failed: %s", cudaGetErrorString(err));
  }
  stream_ = s;
  return stream_;
}

#else

DeviceStream::~DeviceStream() = default;

Result<void*> DeviceStream::get() {
  return errorUnsupported("CollNet: device buffers need a CUDA build of terse");
}

#endif

}  // namespace terse::plugin::collnet
