// terse::device: the CUDA runtime calls behind device.h, or their "no CUDA" answers.
#include "terse/kernels/device.h"

#if TERSE_HAVE_CUDA
#include "terse/kernels/cuda.h"

#include <cuda_runtime.h>
#endif

#include <type_traits>
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
bool available() { return kernels::cuda::deviceAvailable(); }

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

namespace {
// Calls fn(T*) for the element type dt names (float32, float16, bfloat16).
template <typename Ptr, typename Fn>
cudaError_t typed(DataType dt, Ptr* p, Fn&& fn) {
  constexpr bool kConst = std::is_const_v<Ptr>;
  switch (dt) {
    case DataType::kFloat16:
      return fn(static_cast<std::conditional_t<kConst, const Half*, Half*>>(p));
    case DataType::kBFloat16:
      return fn(static_cast<std::conditional_t<kConst, const BFloat16*, BFloat16*>>(p));
    case DataType::kFloat32:
      return fn(static_cast<std::conditional_t<kConst, const float*, float*>>(p));
  }
  return cudaErrorInvalidValue;
}
}  // namespace

Status convertAsync(const void* in, DataType inType, void* out, DataType outType, size_t n,
                    float scale, void* stream) {
  if (n == 0) return Status::ok();
  cudaError_t err = typed(inType, in, [&](auto* src) {
    return typed(outType, out, [&](auto* dst) {
      return kernels::cuda::convert(src, dst, n, scale, nullptr, asStream(stream));
    });
  });
  return cudaStatus(err, "device type conversion");
}

Result<void*> DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= size_ && data_) return data_;
  release();
  void* p = nullptr;
  TERSE_RETURN_IF_ERROR(cudaStatus(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc"));
  data_ = p;
  size_ = bytes;
  return data_;
}

void DeviceBuffer::release() {
  if (data_) cudaFree(data_);
  data_ = nullptr;
  size_ = 0;
}

Result<void*> PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= size_ && data_) return data_;
  release();
  void* p = nullptr;
  TERSE_RETURN_IF_ERROR(cudaStatus(
      cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable | cudaHostAllocMapped),
      "cudaHostAlloc"));
  data_ = p;
  size_ = bytes;
  return data_;
}

void PinnedBuffer::release() {
  if (data_) cudaFreeHost(data_);
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
Result<void*> DeviceBuffer::reserve(size_t) { return noCuda("device memory"); }
void DeviceBuffer::release() {}
Result<void*> PinnedBuffer::reserve(size_t) { return noCuda("pinned host memory"); }
void PinnedBuffer::release() {}

#endif

DeviceBuffer::~DeviceBuffer() { release(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { release(); }
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

}  // namespace terse::device
