// Device-path helpers the codecs share (CUDA builds only): the stream of a call, CUDA errors as
// Status, stream-ordered scratch and the scaled input.
#pragma once

#include "codecs.h"

#if TERSE_HAVE_CUDA
#include "terse/kernels/cuda.h"

#include <cuda_runtime.h>

namespace terse {

namespace cu = kernels::cuda;  // the codecs' device kernels

inline cudaStream_t streamOf(const CodecCall& call) {
  return static_cast<cudaStream_t>(call.stream);
}

inline Status cudaCheck(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  cudaGetLastError();
  return errorSystem("%s on the device failed: %s (%s)", what, cudaGetErrorName(err),
                     cudaGetErrorString(err));
}

// Device memory for one call, stream-ordered: freed when the stream reaches the free, so it
// outlives every kernel queued before it without a host wait.
class StreamScratch {
 public:
  explicit StreamScratch(cudaStream_t s) : stream_(s) {}
  ~StreamScratch() {
    if (p_) cudaFreeAsync(p_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  cudaError_t allocate(size_t bytes) { return cudaMallocAsync(&p_, bytes ? bytes : 1, stream_); }
  void* get() const { return p_; }

 private:
  cudaStream_t stream_;
  void* p_ = nullptr;
};

// fn(const T* values) over in*scale, like the host path's withScaled: the kernels other than
// the casts take no scale, so another scale costs one float32 pass through stream scratch.
template <typename Fn>
cudaError_t withScaledDevice(const void* in, DataType dt, size_t n, float scale, StreamScratch& tmp,
                             cudaStream_t s, Fn&& fn) {
  if (scale == 1.0f) return withType(dt, in, fn);
  cudaError_t e = tmp.allocate(n * sizeof(float));
  if (e != cudaSuccess) return e;
  auto* scaled = static_cast<float*>(tmp.get());
  e = withType(dt, in, [&](auto* p) { return cu::convert(p, scaled, n, scale, nullptr, s); });
  if (e != cudaSuccess) return e;
  return fn(static_cast<const float*>(scaled));
}

}  // namespace terse
#endif
