// terse::device: the CUDA runtime calls behind device.h, or their "no CUDA" answers.
#include "terse/kernels/device.h"

#include "terse/kernels/element_type.h"

#if TERSE_HAVE_CUDA
#include "terse/kernels/cuda.h"

#include <cuda_runtime.h>
#endif

#include <utility>

namespace terse::device {

#if TERSE_HAVE_CUDA

namespace {

cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

Status cudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  cudaGetLastError();  // clear non-sticky errors so the next call starts clean
  return errorSystem("%s failed: %s (%s)", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

}  // namespace

bool built() { return true; }

bool available() {
  static const bool present = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // clear the error so later calls start clean
      return false;
    }
    return count > 0;
  }();
  return present;
}

MemoryKind memoryKind(const void* p) {
  if (p == nullptr || !available()) return MemoryKind::kHost;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return MemoryKind::kHost;
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice: return MemoryKind::kDevice;
    case cudaMemoryTypeManaged: return MemoryKind::kManaged;
    case cudaMemoryTypeHost: return MemoryKind::kPinnedHost;
    default: return MemoryKind::kHost;
  }
}

Status copyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return Status::ok();
  return cudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, asStream(stream)),
                    "cudaMemcpyAsync");
}

Status zeroAsync(void* dst, size_t bytes, void* stream) {
  if (bytes == 0) return Status::ok();
  return cudaStatus(cudaMemsetAsync(dst, 0, bytes, asStream(stream)), "cudaMemsetAsync");
}

Status synchronize(void* stream) {
  return cudaStatus(cudaStreamSynchronize(asStream(stream)), "cudaStreamSynchronize");
}

Status convertAsync(const void* in, DataType inType, void* out, DataType outType, size_t n,
                    float scale, void* stream) {
  if (n == 0) return Status::ok();
  cudaError_t err = withElementType(inType, in, [&](auto* src) {
    return withElementType(outType, out, [&](auto* dst) {
      return kernels::cuda::convert(src, dst, n, scale, nullptr, asStream(stream));
    });
  });
  return cudaStatus(err, "device type conversion");
}

namespace {
Status allocate(Space space, size_t bytes, void** p) {
  if (space == Space::kDevice) return cudaStatus(cudaMalloc(p, bytes), "cudaMalloc");
  return cudaStatus(cudaHostAlloc(p, bytes, cudaHostAllocPortable | cudaHostAllocMapped),
                    "cudaHostAlloc");
}
void deallocate(Space space, void* p) {
  if (space == Space::kDevice)
    cudaFree(p);
  else
    cudaFreeHost(p);
}
}  // namespace

template <Space S>
Result<void*> Buffer<S>::reserve(size_t bytes) {
  if (bytes <= size_ && data_) return data_;
  release();
  void* p = nullptr;
  TERSE_RETURN_IF_ERROR(allocate(S, bytes == 0 ? 1 : bytes, &p));
  data_ = p;
  size_ = bytes;
  return data_;
}

template <Space S>
void Buffer<S>::release() {
  if (data_) deallocate(S, data_);
  data_ = nullptr;
  size_ = 0;
}

#else  // builds without CUDA

namespace {
Status noCuda(const char* what) {
  return errorUnsupported(
      "%s needs CUDA, and this terse was built without it (configure with nvcc on PATH and "
      "-DTERSE_ENABLE_CUDA=ON)",
      what);
}
}  // namespace

bool built() { return false; }
bool available() { return false; }
MemoryKind memoryKind(const void*) { return MemoryKind::kHost; }
Status copyAsync(void*, const void*, size_t bytes, void*) {
  return bytes == 0 ? Status::ok() : noCuda("a device copy");
}
Status zeroAsync(void*, size_t bytes, void*) {
  return bytes == 0 ? Status::ok() : noCuda("a device memset");
}
Status synchronize(void*) { return Status::ok(); }
Status convertAsync(const void*, DataType, void*, DataType, size_t n, float, void*) {
  return n == 0 ? Status::ok() : noCuda("a device type conversion");
}
template <Space S>
Result<void*> Buffer<S>::reserve(size_t) {
  return noCuda(S == Space::kDevice ? "device memory" : "pinned host memory");
}
template <Space S>
void Buffer<S>::release() {}

#endif

template <Space S>
Buffer<S>::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

template <Space S>
Buffer<S>& Buffer<S>::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

template class Buffer<Space::kDevice>;
template class Buffer<Space::kPinnedHost>;

}  // namespace terse::device
