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
  wire::Header h;
  h.codec = static_cast<uint8_t>(id());
  h.dtype = static_cast<uint8_t>(dt);
  h.count = n;
  auto* payload = static_cast<unsigned char*>(wire) + wire::kHeaderBytes;
  TERSE_ASSIGN_OR_RETURN(size_t payloadBytes, encodeDevice(in, dt, n, residual, payload, call, h));
  h.payloadBytes = payloadBytes;
  unsigned char header[wire::kHeaderBytes];
  wire::writeHeader(header, h);
  TERSE_RETURN_IF_ERROR(device::copyAsync(wire, header, sizeof(header), call.stream));
  TERSE_RETURN_IF_ERROR(device::synchronize(call.stream).withContext("compress on the device"));
  return wire::kHeaderBytes + payloadBytes;
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
Result<size_t> CodecBase::encodeDevice(const void*, DataType, size_t, float*, unsigned char*,
                                       const CodecCall&, wire::Header&) const {
  return errorUnsupported("compress on device buffers needs a CUDA build of terse");
}
Status CodecBase::decodeDevice(const unsigned char*, const wire::Header&, void*, DataType, size_t,
                               const CodecCall&) const {
  return errorUnsupported("decompress into device buffers needs a CUDA build of terse");
}
Status CodecBase::decodeAccumulateDevice(const unsigned char*, const wire::Header&, float*, size_t,
                                         const CodecCall&) const {
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

// Zero padding after a payload array, so device and host messages match byte for byte.
Status zeroPad(unsigned char* from, size_t bytes, const CodecCall& call) {
  static const unsigned char kZeros[8] = {};
  return device::copyAsync(from, kZeros, bytes, call.stream);
}

}  // namespace

// ---- none / fp16 / bf16 --------------------------------------------------------------------

Result<size_t> CastCodec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                                       unsigned char* payload, const CodecCall& call,
                                       wire::Header& h) const {
  DataType wt = wireType(dt);
  cudaStream_t s = streamOf(call);
  cudaError_t e = withType(dt, in, [&](auto* src) {
    return withType(wt, static_cast<void*>(payload),
                    [&](auto* dst) { return cu::convert(src, dst, n, call.scale, residual, s); });
  });
  TERSE_RETURN_IF_ERROR(cudaCheck(e, "cast compress"));
  size_t bytes = n * dataTypeSize(wt), padded = wire::align4(bytes);
  TERSE_RETURN_IF_ERROR(zeroPad(payload + bytes, padded - bytes, call));
  return padded;
}

Status CastCodec::decodeDevice(const unsigned char* payload, const wire::Header& h, void* out,
                               DataType dt, size_t n, const CodecCall& call) const {
  DataType wt = wireType(static_cast<DataType>(h.dtype));
  cudaError_t e = withType(wt, static_cast<const void*>(payload), [&](auto* src) {
    return withType(dt, out, [&](auto* dst) {
      return cu::convert(src, dst, n, 1.0f, nullptr, streamOf(call));
    });
  });
  return cudaCheck(e, "cast decompress");
}

Status CastCodec::decodeAccumulateDevice(const unsigned char* payload, const wire::Header& h,
                                         float* acc, size_t n, const CodecCall& call) const {
  DataType wt = wireType(static_cast<DataType>(h.dtype));
  cudaError_t e = withType(wt, static_cast<const void*>(payload),
                           [&](auto* src) { return cu::accumulate(src, acc, n, streamOf(call)); });
  return cudaCheck(e, "cast decompress-accumulate");
}

// ---- int8 ------------------------------------------------------------------------------------

Result<size_t> Int8Codec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                                       unsigned char* payload, const CodecCall& call,
                                       wire::Header& h) const {
  auto* scales = reinterpret_cast<float*>(payload);
  auto* q = reinterpret_cast<int8_t*>(payload + 4 * blocks(n));
  uint64_t seed = roundingSeed(seed_, call.nonce);
  cudaStream_t s = streamOf(call);
  StreamScratch tmp(s);
  cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
    return cu::int8Quantize(src, n, block_, rounding_, seed, 0, residual, scales, q, s);
  });
  TERSE_RETURN_IF_ERROR(cudaCheck(e, "int8 compress"));
  size_t end = 4 * blocks(n) + n, padded = 4 * blocks(n) + wire::align4(n);
  TERSE_RETURN_IF_ERROR(zeroPad(payload + end, padded - end, call));
  h.param0 = block_;
  h.flags = rounding_ == kernels::Rounding::kStochastic ? wire::kFlagStochastic : 0;
  return padded;
}

Status Int8Codec::decodeDevice(const unsigned char* payload, const wire::Header& h, void* out,
                               DataType dt, size_t n, const CodecCall& call) const {
  auto* scales = reinterpret_cast<const float*>(payload);
  auto* q = reinterpret_cast<const int8_t*>(payload + 4 * blocks(n));
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::int8Dequantize(scales, q, n, block_, dst, streamOf(call));
  });
  return cudaCheck(e, "int8 decompress");
}

Status Int8Codec::decodeAccumulateDevice(const unsigned char* payload, const wire::Header& h,
                                         float* acc, size_t n, const CodecCall& call) const {
  auto* scales = reinterpret_cast<const float*>(payload);
  auto* q = reinterpret_cast<const int8_t*>(payload + 4 * blocks(n));
  return cudaCheck(cu::int8DequantizeAccumulate(scales, q, n, block_, acc, streamOf(call)),
                   "int8 decompress-accumulate");
}

// ---- onebit ----------------------------------------------------------------------------------

Result<size_t> OnebitCodec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                                         unsigned char* payload, const CodecCall& call,
                                         wire::Header& h) const {
  auto* scales = reinterpret_cast<float*>(payload);
  auto* bits = reinterpret_cast<uint32_t*>(payload + 4 * blocks(n));
  cudaStream_t s = streamOf(call);
  StreamScratch tmp(s);
  cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
    return cu::onebitCompress(src, n, block_, residual, scales, bits, s);
  });
  TERSE_RETURN_IF_ERROR(cudaCheck(e, "onebit compress"));
  h.param0 = block_;
  return 4 * blocks(n) + 4 * ((n + 31) / 32);
}

Status OnebitCodec::decodeDevice(const unsigned char* payload, const wire::Header& h, void* out,
                                 DataType dt, size_t n, const CodecCall& call) const {
  auto* scales = reinterpret_cast<const float*>(payload);
  auto* bits = reinterpret_cast<const uint32_t*>(payload + 4 * blocks(n));
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::onebitDecompress(scales, bits, n, block_, dst, streamOf(call));
  });
  return cudaCheck(e, "onebit decompress");
}

Status OnebitCodec::decodeAccumulateDevice(const unsigned char* payload, const wire::Header& h,
                                           float* acc, size_t n, const CodecCall& call) const {
  auto* scales = reinterpret_cast<const float*>(payload);
  auto* bits = reinterpret_cast<const uint32_t*>(payload + 4 * blocks(n));
  return cudaCheck(cu::onebitDecompressAccumulate(scales, bits, n, block_, acc, streamOf(call)),
                   "onebit decompress-accumulate");
}

// ---- fp8 / mxfp8 / mxfp4 / int4 --------------------------------------------------------------

Result<size_t> LowbitCodec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                                         unsigned char* payload, const CodecCall& call,
                                         wire::Header& h) const {
  unsigned char* scales = payload;
  auto* codes = reinterpret_cast<uint8_t*>(payload + scaleArea(n));
  uint64_t seed = roundingSeed(seed_, call.nonce);
  cudaStream_t s = streamOf(call);
  StreamScratch tmp(s);
  cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
    return cu::lowbitQuantize(format_, src, n, block_, rounding_, seed, 0, residual, scales, codes,
                              s);
  });
  TERSE_RETURN_IF_ERROR(cudaCheck(e, "low-bit compress"));
  size_t scaleEnd = blocks(n) * kernels::lowbitScaleBytes(format_);
  TERSE_RETURN_IF_ERROR(zeroPad(scales + scaleEnd, scaleArea(n) - scaleEnd, call));
  size_t codeEnd = kernels::lowbitCodeBytes(format_, n);
  TERSE_RETURN_IF_ERROR(zeroPad(codes + codeEnd, wire::align4(codeEnd) - codeEnd, call));
  h.param0 = block_;
  h.param1 = param1();
  h.flags = flags();
  return payloadFor(n);
}

Status LowbitCodec::decodeDevice(const unsigned char* payload, const wire::Header& h, void* out,
                                 DataType dt, size_t n, const CodecCall& call) const {
  auto* codes = reinterpret_cast<const uint8_t*>(payload + scaleArea(n));
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::lowbitDequantize(format_, payload, codes, n, block_, dst, streamOf(call));
  });
  return cudaCheck(e, "low-bit decompress");
}

Status LowbitCodec::decodeAccumulateDevice(const unsigned char* payload, const wire::Header& h,
                                           float* acc, size_t n, const CodecCall& call) const {
  auto* codes = reinterpret_cast<const uint8_t*>(payload + scaleArea(n));
  return cudaCheck(
      cu::lowbitDequantizeAccumulate(format_, payload, codes, n, block_, acc, streamOf(call)),
      "low-bit decompress-accumulate");
}

// ---- topk ------------------------------------------------------------------------------------

Result<size_t> TopkCodec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                                       unsigned char* payload, const CodecCall& call,
                                       wire::Header& h) const {
  TERSE_RETURN_IF_ERROR(checkIndexable(n));
  size_t want = kFor(n);
  auto* indices = reinterpret_cast<uint32_t*>(payload);
  auto* values = reinterpret_cast<float*>(payload + 4 * want);
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
  h.param0 = static_cast<uint32_t>(got);
  h.param1 = ratioBits_;
  return 8 * got;
}

Status TopkCodec::decodeDevice(const unsigned char* payload, const wire::Header& h, void* out,
                               DataType dt, size_t n, const CodecCall& call) const {
  size_t kk = h.param0;
  auto* indices = reinterpret_cast<const uint32_t*>(payload);
  auto* values = reinterpret_cast<const float*>(payload + 4 * kk);
  bool valid = false;
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::topkDecompress(indices, values, kk, n, dst, &valid, streamOf(call));
  });
  TERSE_RETURN_IF_ERROR(cudaCheck(e, "topk decompress"));
  return valid ? Status::ok() : badIndices(kk, n);
}

Status TopkCodec::decodeAccumulateDevice(const unsigned char* payload, const wire::Header& h,
                                         float* acc, size_t n, const CodecCall& call) const {
  size_t kk = h.param0;
  auto* indices = reinterpret_cast<const uint32_t*>(payload);
  auto* values = reinterpret_cast<const float*>(payload + 4 * kk);
  bool valid = false;
  TERSE_RETURN_IF_ERROR(
      cudaCheck(cu::topkDecompressAccumulate(indices, values, kk, n, acc, &valid, streamOf(call)),
                "topk decompress-accumulate"));
  return valid ? Status::ok() : badIndices(kk, n);
}

#endif

}  // namespace terse
