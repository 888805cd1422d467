// Host-side CUDA runtime helpers for the layers above the kernels: what kind of memory a pointer
// is, stream-ordered copies, and grow-only device and pinned buffers.
//
// Declared in every build so callers need no #if: without CUDA nothing is device memory,
// built() is false and every operation that needs a device returns kUnsupported saying so.
// Streams are passed as void* (a cudaStream_t; nullptr is the legacy default stream).
#pragma once

#include "terse/common/status.h"

#include <terse/types.h>

#include <cstddef>

namespace terse::device {

// True when this build compiled the CUDA paths (TERSE_HAVE_CUDA).
bool built();
// True when built() and at least one CUDA device is usable (cached).
bool available();

enum class MemoryKind {
  kHost,        // ordinary (pageable) host memory: kernels cannot touch it
  kPinnedHost,  // page-locked host memory: the host and (through UVA) kernels can touch it
  kDevice,      // device memory: only kernels and copies can touch it
  kManaged,     // managed memory: both, migrated by the driver
};
// kHost for every pointer in builds without CUDA or on machines without a device.
MemoryKind memoryKind(const void* p);
// Memory the collectives treat as a GPU tensor (device or managed).
inline bool isDeviceMemory(const void* p) {
  MemoryKind k = memoryKind(p);
  return k == MemoryKind::kDevice || k == MemoryKind::kManaged;
}
// Memory the host may read and write directly.
inline bool isHostAccessible(MemoryKind k) { return k != MemoryKind::kDevice; }
// Memory a kernel may read and write directly.
inline bool isKernelAccessible(MemoryKind k) { return k != MemoryKind::kHost; }

// Stream-ordered copy between any two kinds (cudaMemcpyDefault). A copy from pageable host
// memory returns once the source has been staged, so the source may be reused at once.
Status copyAsync(void* dst, const void* src, size_t bytes, void* stream);
// Stream-ordered memset to zero.
Status zeroAsync(void* dst, size_t bytes, void* stream);
// Blocks until everything queued on the stream finished; reports asynchronous faults.
Status synchronize(void* stream);
// Stream-ordered out[i] = OutType(float(in[i]) * scale) on kernel-accessible memory (the cast
// kernels of kernels/cuda.h, so the rounding is numeric.h's). in and out must not overlap.
Status convertAsync(const void* in, DataType inType, void* out, DataType outType, size_t n,
                    float scale, void* stream);

enum class Space { kDevice, kPinnedHost };

// Grow-only memory, freed on destruction: device memory (cudaMalloc), or page-locked host
// memory (cudaHostAlloc, portable and mapped), the staging area that both UCX (host memory) and
// kernels (through UVA) can use. reserve() keeps the contents only when it does not grow.
template <Space S>
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { release(); }
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Result<void*> reserve(size_t bytes);
  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t size_ = 0;
};
using DeviceBuffer = Buffer<Space::kDevice>;
using PinnedBuffer = Buffer<Space::kPinnedHost>;

}  // namespace terse::device
