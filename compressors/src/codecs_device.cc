// The codecs on CUDA device buffers: the same wire bytes as the host path (the kernels share
// numeric.h's formulas), with in/out/residual in device memory and the wire in device or pinned
// host memory. compress() returns once the message is complete, because callers send it at
// once; the decoders only queue work on the caller's stream.
#include "codecs.h"

#include "terse/kernels/device.h"

#if TERSE_HAVE_CUDA
#include "terse/kernels/cuda.h"

#include <cuda_runtime.h>
#endif

#include <cstring>

namespace terse {

namespace {

Status needKernelAccess(const void* p, const char* what, const char* name) {
  if (!p || device::isKernelAccessible(device::memoryKind(p))) return Status::ok();
  return errorInvalidArgument(
      "%s: CodecCall::device is set but the %s is pageable host memory, which kernels cannot "
      "touch: pass device memory, or pinned host memory (cudaHostAlloc / cudaHostRegister)",
      what, name);
}

}  // namespace

Result<size_t> CodecBase::compressDevice(const void* in, DataType dt, size_t n, float* residual,
                                         void* wire, const CodecCall& call) const {
  TERSE_RETURN_IF_ERROR(needKernelAccess(wire, "compress", "wire buffer"));
  if (n > 0) {
    TERSE_RETURN_IF_ERROR(needKernelAccess(in, "compress", "input"));
    TERSE_RETURN_IF_ERROR(needKernelAccess(residual, "compress", "residual"));
  }
  wire::Header h = headerFor(n, dt);
  wire::Payload payload{static_cast<unsigned char*>(wire) + wire::kHeaderBytes, layout(h)};
  // Zero padding after each section, queued before the kernels (which never write it), so
  // device and host messages match byte for byte.
  static const unsigned char kZeros[4] = {};
  for (int i = 0; i < payload.layout.sections; ++i)
    TERSE_RETURN_IF_ERROR(device::copyAsync(payload.base + payload.layout.end(i), kZeros,
                                            payload.layout.padding(i), call.stream));
  TERSE_RETURN_IF_ERROR(encodeDevice(in, dt, n, residual, payload, call, h));
  unsigned char header[wire::kHeaderBytes];
  wire::writeHeader(header, h);
  TERSE_RETURN_IF_ERROR(device::copyAsync(wire, header, sizeof(header), call.stream));
  TERSE_RETURN_IF_ERROR(device::synchronize(call.stream).withContext("compress on the device"));
  return wire::kHeaderBytes + h.payloadBytes;
}

Result<wire::Header> CodecBase::checkDeviceMessage(const void* wire, size_t bytes, size_t n,
                                                   const CodecCall& call) const {
  if (bytes < wire::kHeaderBytes) return checkMessage(wire, bytes, n);  // fails without reading
  device::MemoryKind kind = device::memoryKind(wire);
  if (!device::isKernelAccessible(kind)) return needKernelAccess(wire, "decompress", "wire buffer");
  unsigned char header[wire::kHeaderBytes];
  if (kind == device::MemoryKind::kPinnedHost) {
    // Written by the host (a receive): readable now, no need to stall the stream.
    std::memcpy(header, wire, sizeof(header));
  } else {
    TERSE_RETURN_IF_ERROR(device::copyAsync(header, wire, sizeof(header), call.stream));
    TERSE_RETURN_IF_ERROR(device::synchronize(call.stream));
  }
  // checkMessage reads the header's 40 bytes only and checks lengths against `bytes`.
  return checkMessage(header, bytes, n);
}

// Defaults for builds without CUDA, where every codec inherits them. Unreachable in practice
// (checkBuffers refuses device calls there); kept so the error is clear if a caller skips it.
Status CodecBase::encodeDevice(const void*, DataType, size_t, float*, const wire::Payload&,
                               const CodecCall&, const wire::Header&) const {
  return errorUnsupported("compress on device buffers needs a CUDA build of terse");
}
Status CodecBase::decodeDevice(const wire::ConstPayload&, const wire::Header&, void*, DataType,
                               size_t, const CodecCall&) const {
  return errorUnsupported("decompress into device buffers needs a CUDA build of terse");
}
Status CodecBase::decodeAccumulateDevice(const wire::ConstPayload&, const wire::Header&, float*,
                                         size_t, const CodecCall&) const {
  return errorUnsupported("decompressAccumulate on device buffers needs a CUDA build of terse");
}

#if TERSE_HAVE_CUDA

namespace {

namespace cu = kernels::cuda;

cudaStream_t streamOf(const CodecCall& call) { return static_cast<cudaStream_t>(call.stream); }

Status cudaCheck(cudaError_t err, const char* what) {
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

}  // namespace

// ---- none / fp16 / bf16 --------------------------------------------------------------------

Status CastCodec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                               const wire::Payload& payload, const CodecCall& call,
                               const wire::Header&) const {
  DataType wt = wireType(dt);
  cudaStream_t s = streamOf(call);
  cudaError_t e = withType(dt, in, [&](auto* src) {
    return withType(wt, payload.at<void>(0),
                    [&](auto* dst) { return cu::convert(src, dst, n, call.scale, residual, s); });
  });
  return cudaCheck(e, "cast compress");
}

Status CastCodec::decodeDevice(const wire::ConstPayload& payload, const wire::Header& h, void* out,
                               DataType dt, size_t n, const CodecCall& call) const {
  DataType wt = wireType(static_cast<DataType>(h.dtype));
  cudaError_t e = withType(wt, payload.at<const void>(0), [&](auto* src) {
    return withType(dt, out, [&](auto* dst) {
      return cu::convert(src, dst, n, 1.0f, nullptr, streamOf(call));
    });
  });
  return cudaCheck(e, "cast decompress");
}

Status CastCodec::decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header& h,
                                         float* acc, size_t n, const CodecCall& call) const {
  DataType wt = wireType(static_cast<DataType>(h.dtype));
  cudaError_t e = withType(wt, payload.at<const void>(0),
                           [&](auto* src) { return cu::accumulate(src, acc, n, streamOf(call)); });
  return cudaCheck(e, "cast decompress-accumulate");
}

// ---- int8 ------------------------------------------------------------------------------------

Status Int8Codec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                               const wire::Payload& payload, const CodecCall& call,
                               const wire::Header&) const {
  auto* scales = payload.at<float>(wire::kScales);
  auto* q = payload.at<int8_t>(wire::kCodes);
  uint64_t seed = roundingSeed(seed_, call.nonce);
  cudaStream_t s = streamOf(call);
  StreamScratch tmp(s);
  cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
    return cu::int8Quantize(src, n, block_, rounding_, seed, 0, residual, scales, q, s);
  });
  return cudaCheck(e, "int8 compress");
}

Status Int8Codec::decodeDevice(const wire::ConstPayload& payload, const wire::Header&, void* out,
                               DataType dt, size_t n, const CodecCall& call) const {
  auto* scales = payload.at<const float>(wire::kScales);
  auto* q = payload.at<const int8_t>(wire::kCodes);
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::int8Dequantize(scales, q, n, block_, dst, streamOf(call));
  });
  return cudaCheck(e, "int8 decompress");
}

Status Int8Codec::decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header&,
                                         float* acc, size_t n, const CodecCall& call) const {
  auto* scales = payload.at<const float>(wire::kScales);
  auto* q = payload.at<const int8_t>(wire::kCodes);
  return cudaCheck(cu::int8DequantizeAccumulate(scales, q, n, block_, acc, streamOf(call)),
                   "int8 decompress-accumulate");
}

// ---- onebit ----------------------------------------------------------------------------------

Status OnebitCodec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                                 const wire::Payload& payload, const CodecCall& call,
                                 const wire::Header&) const {
  auto* scales = payload.at<float>(wire::kScales);
  auto* bits = payload.at<uint32_t>(wire::kCodes);
  cudaStream_t s = streamOf(call);
  StreamScratch tmp(s);
  cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
    return cu::onebitCompress(src, n, block_, residual, scales, bits, s);
  });
  return cudaCheck(e, "onebit compress");
}

Status OnebitCodec::decodeDevice(const wire::ConstPayload& payload, const wire::Header&, void* out,
                                 DataType dt, size_t n, const CodecCall& call) const {
  auto* scales = payload.at<const float>(wire::kScales);
  auto* bits = payload.at<const uint32_t>(wire::kCodes);
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::onebitDecompress(scales, bits, n, block_, dst, streamOf(call));
  });
  return cudaCheck(e, "onebit decompress");
}

Status OnebitCodec::decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header&,
                                           float* acc, size_t n, const CodecCall& call) const {
  auto* scales = payload.at<const float>(wire::kScales);
  auto* bits = payload.at<const uint32_t>(wire::kCodes);
  return cudaCheck(cu::onebitDecompressAccumulate(scales, bits, n, block_, acc, streamOf(call)),
                   "onebit decompress-accumulate");
}

// ---- fp8 / mxfp8 / mxfp4 / int4 --------------------------------------------------------------

Status LowbitCodec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                                 const wire::Payload& payload, const CodecCall& call,
                                 const wire::Header&) const {
  auto* scales = payload.at<unsigned char>(wire::kScales);
  auto* codes = payload.at<uint8_t>(wire::kCodes);
  uint64_t seed = roundingSeed(seed_, call.nonce);
  cudaStream_t s = streamOf(call);
  StreamScratch tmp(s);
  cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
    return cu::lowbitQuantize(format_, src, n, block_, rounding_, seed, 0, residual, scales, codes,
                              s);
  });
  return cudaCheck(e, "low-bit compress");
}

Status LowbitCodec::decodeDevice(const wire::ConstPayload& payload, const wire::Header&, void* out,
                                 DataType dt, size_t n, const CodecCall& call) const {
  auto* scales = payload.at<const unsigned char>(wire::kScales);
  auto* codes = payload.at<const uint8_t>(wire::kCodes);
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::lowbitDequantize(format_, scales, codes, n, block_, dst, streamOf(call));
  });
  return cudaCheck(e, "low-bit decompress");
}

Status LowbitCodec::decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header&,
                                           float* acc, size_t n, const CodecCall& call) const {
  auto* scales = payload.at<const unsigned char>(wire::kScales);
  auto* codes = payload.at<const uint8_t>(wire::kCodes);
  return cudaCheck(
      cu::lowbitDequantizeAccumulate(format_, scales, codes, n, block_, acc, streamOf(call)),
      "low-bit decompress-accumulate");
}

// ---- topk ------------------------------------------------------------------------------------

Status TopkCodec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                               const wire::Payload& payload, const CodecCall& call,
                               const wire::Header& h) const {
  TERSE_RETURN_IF_ERROR(checkIndexable(n));
  size_t want = h.param0;
  auto* indices = payload.at<uint32_t>(wire::kIndices);
  auto* values = payload.at<float>(wire::kValues);
  cudaStream_t s = streamOf(call);
  StreamScratch tmp(s), scratch(s);
  size_t scratchBytes = cu::topkScratchBytes(n);
  TERSE_RETURN_IF_ERROR(cudaCheck(scratch.allocate(scratchBytes), "topk scratch allocation"));
  size_t got = 0;
  cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
    return cu::topkCompress(src, n, want, residual, scratch.get(), scratchBytes, indices, values,
                            &got, s);
  });
  TERSE_RETURN_IF_ERROR(cudaCheck(e, "topk compress"));
  if (got != want) return errorInternal("topk selected %zu of %zu values on the device", got, want);
  return Status::ok();
}

Status TopkCodec::decodeDevice(const wire::ConstPayload& payload, const wire::Header& h, void* out,
                               DataType dt, size_t n, const CodecCall& call) const {
  size_t kk = h.param0;
  auto* indices = payload.at<const uint32_t>(wire::kIndices);
  auto* values = payload.at<const float>(wire::kValues);
  bool valid = false;
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::topkDecompress(indices, values, kk, n, dst, &valid, streamOf(call));
  });
  TERSE_RETURN_IF_ERROR(cudaCheck(e, "topk decompress"));
  return valid ? Status::ok() : badIndices(kk, n);
}

Status TopkCodec::decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header& h,
                                         float* acc, size_t n, const CodecCall& call) const {
  size_t kk = h.param0;
  auto* indices = payload.at<const uint32_t>(wire::kIndices);
  auto* values = payload.at<const float>(wire::kValues);
  bool valid = false;
  TERSE_RETURN_IF_ERROR(
      cudaCheck(cu::topkDecompressAccumulate(indices, values, kk, n, acc, &valid, streamOf(call)),
                "topk decompress-accumulate"));
  return valid ? Status::ok() : badIndices(kk, n);
}

#endif

}  // namespace terse
