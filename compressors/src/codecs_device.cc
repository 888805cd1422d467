// CodecBase on CUDA device buffers: the same wire bytes as the host path (the kernels share
// numeric.h's formulas), with in/out/residual in device memory and the wire in device or pinned
// host memory. compress() returns once the message is complete, because callers send it at
// once; the decoders only queue work on the caller's stream. The codecs' own device paths are
// in codec_<name>.cc.
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

}  // namespace terse
