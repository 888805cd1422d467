// CodecBase on host buffers: argument checks, wire header, payload placement (codec_<name>.cc
// hold the codecs themselves).
#include "codecs.h"

#include "terse/kernels/device.h"
#include "terse/kernels/kernels.h"
#include "wire.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

namespace terse {
namespace {

bool validType(DataType dt) {
  return static_cast<uint8_t>(dt) <= static_cast<uint8_t>(DataType::kBFloat16);
}

}  // namespace

std::vector<float>& scaledScratch(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf;
}

// ---- CodecBase -----------------------------------------------------------------------------

Status CodecBase::checkBuffers(const void* data, DataType dt, size_t n, const void* wire,
                               const CodecCall& call, const char* what) const {
  if (call.device && !device::available())
    return errorUnsupported("%s: CodecCall::device is set but %s", what,
                            device::built()
                                ? "no CUDA device is usable on this machine"
                                : "this terse was built without CUDA; pass host buffers or "
                                  "rebuild with nvcc on PATH");
  if (!validType(dt))
    return errorInvalidArgument("%s: unknown data type %d", what, static_cast<int>(dt));
  if (n > 0 && !data)
    return errorInvalidArgument("%s: null data pointer for %zu elements", what, n);
  if (!wire) return errorInvalidArgument("%s: null wire buffer", what);
  if (reinterpret_cast<uintptr_t>(wire) % 4 != 0)
    return errorInvalidArgument("%s: wire buffer must be 4-byte aligned (got %p)", what, wire);
  return Status::ok();
}

Result<size_t> CodecBase::compress(const void* in, DataType dt, size_t n, float* residual,
                                   void* wire, size_t capacity, const CodecCall& call) const {
  TERSE_RETURN_IF_ERROR(checkBuffers(in, dt, n, wire, call, "compress"));
  size_t need = maxWireBytes(n);
  if (capacity < need)
    return errorInvalidArgument(
        "compress: wire capacity %zu bytes is below %s's maxWireBytes(%zu) "
        "= %zu; size the buffer with maxWireBytes()",
        capacity, codecName(id()), n, need);
  if (!std::isfinite(call.scale))
    return errorInvalidArgument("compress: CodecCall::scale must be finite");
  if (call.device) return compressDevice(in, dt, n, residual, wire, call);
  wire::Header h = headerFor(n, dt);
  wire::Payload payload{static_cast<unsigned char*>(wire) + wire::kHeaderBytes, layout(h)};
  // The padding first: the kernels write the sections' arrays, never the gaps after them.
  for (int i = 0; i < payload.layout.sections; ++i)
    std::fill_n(payload.base + payload.layout.end(i), payload.layout.padding(i), 0);
  TERSE_RETURN_IF_ERROR(encode(in, dt, n, residual, payload, call, h));
  wire::writeHeader(wire, h);
  return wire::kHeaderBytes + h.payloadBytes;
}

wire::Header CodecBase::headerFor(size_t n, DataType dt) const {
  wire::Header h;
  h.codec = static_cast<uint8_t>(id());
  h.dtype = static_cast<uint8_t>(dt);
  h.count = n;
  describe(n, h);
  h.payloadBytes = layout(h).total;
  return h;
}

size_t CodecBase::maxWireBytes(size_t n) const {
  return wire::kHeaderBytes + headerFor(n, DataType::kFloat32).payloadBytes;
}

void CodecBase::describe(size_t, wire::Header&) const {}

Result<wire::Header> CodecBase::checkMessage(const void* wire, size_t bytes, size_t n) const {
  TERSE_ASSIGN_OR_RETURN(wire::Header h, wire::readHeader(wire, bytes));
  if (h.codec != static_cast<uint8_t>(id()))
    return errorInvalidUsage(
        "message was written by codec '%s' but is decoded with '%s': every "
        "rank must use the same codec spec",
        codecName(static_cast<CodecId>(h.codec)), spec().c_str());
  TERSE_RETURN_IF_ERROR(checkParams(h));
  if (h.count != n)
    return errorInvalidUsage("message holds %llu elements but the caller expects %zu",
                             static_cast<unsigned long long>(h.count), n);
  size_t expected = layout(h).total;
  if (h.payloadBytes != expected)
    return errorCorrupt(
        "%s message payload is %llu bytes; %zu elements with these parameters "
        "need exactly %zu",
        codecName(id()), static_cast<unsigned long long>(h.payloadBytes), n, expected);
  return h;
}

Status CodecBase::decompress(const void* wire, size_t bytes, void* out, DataType dt, size_t n,
                             const CodecCall& call) const {
  TERSE_RETURN_IF_ERROR(checkBuffers(out, dt, n, wire, call, "decompress"));
  if (call.device) {
    TERSE_ASSIGN_OR_RETURN(wire::Header h, checkDeviceMessage(wire, bytes, n, call));
    return decodeDevice(payloadOf(wire, h), h, out, dt, n, call);
  }
  TERSE_ASSIGN_OR_RETURN(wire::Header h, checkMessage(wire, bytes, n));
  return decode(payloadOf(wire, h), h, out, dt, n);
}

Status CodecBase::decompressAccumulate(const void* wire, size_t bytes, float* acc, size_t n,
                                       const CodecCall& call) const {
  TERSE_RETURN_IF_ERROR(
      checkBuffers(acc, DataType::kFloat32, n, wire, call, "decompressAccumulate"));
  if (call.device) {
    TERSE_ASSIGN_OR_RETURN(wire::Header h, checkDeviceMessage(wire, bytes, n, call));
    return decodeAccumulateDevice(payloadOf(wire, h), h, acc, n, call);
  }
  TERSE_ASSIGN_OR_RETURN(wire::Header h, checkMessage(wire, bytes, n));
  return decodeAccumulate(payloadOf(wire, h), h, acc, n);
}

Status CodecBase::checkParams(const wire::Header& h) const {
  if (h.param0 != 0 || h.param1 != 0 || h.flags != 0)
    return errorCorrupt(
        "%s message carries parameters (0x%x, 0x%x, flags 0x%x) this codec "
        "does not have",
        codecName(id()), h.param0, h.param1, h.flags);
  return Status::ok();
}

}  // namespace terse
