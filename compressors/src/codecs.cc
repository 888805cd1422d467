// The codecs: argument checks, wire header, payload placement and dispatch to the kernels.
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

namespace k = kernels::cpu;

bool validType(DataType dt) {
  return static_cast<uint8_t>(dt) <= static_cast<uint8_t>(DataType::kBFloat16);
}

// Scratch reused by one thread across calls (the AVG pre-scale and top-k's select state), so
// steady-state compression allocates nothing.
std::vector<float>& scaledScratch(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf;
}
void* topkScratch(size_t bytes) {
  thread_local std::vector<unsigned char> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

}  // namespace

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

// Runs fn(const float* values) over in*scale: the kernels other than the casts take no scale,
// so a scale other than 1 costs one extra pass through a per-thread float32 buffer (top-k
// selects over the whole tensor, so it needs all n values at once).
template <typename Fn>
static auto withScaled(const void* in, DataType dt, size_t n, float scale, Fn&& fn) {
  if (scale == 1.0f) return withType(dt, in, fn);
  float* tmp = scaledScratch(n).data();
  withType(dt, in, [&](auto* p) { k::convert(p, tmp, n, scale, nullptr); });
  return fn(static_cast<const float*>(tmp));
}

// Blockwise codecs scale in chunks (a multiple of every block size, so block boundaries and
// bit words line up) to keep the per-thread buffer small: fn(values, begin, length).
constexpr size_t kScaleChunk = size_t{1} << 20;
template <typename Fn>
static void withScaledChunks(const void* in, DataType dt, size_t n, float scale, Fn&& fn) {
  if (scale == 1.0f) return withType(dt, in, [&](auto* p) { fn(p, size_t{0}, n); });
  float* tmp = scaledScratch(std::min(n, kScaleChunk)).data();
  for (size_t b = 0; b < n; b += kScaleChunk) {
    size_t len = std::min(kScaleChunk, n - b);
    withType(dt, in, [&](auto* p) { k::convert(p + b, tmp, len, scale, nullptr); });
    fn(static_cast<const float*>(tmp), b, len);
  }
}

// ---- none / fp16 / bf16 ----------------------------------------------------------------------

CastCodec::CastCodec(CodecId id) : id_(id) {}

std::string CastCodec::spec() const { return codecName(id_); }

double CastCodec::wireBytesPerElement() const { return id_ == CodecId::kNone ? 4.0 : 2.0; }

DataType CastCodec::wireType(DataType source) const {
  switch (id_) {
    case CodecId::kFp16: return DataType::kFloat16;
    case CodecId::kBf16: return DataType::kBFloat16;
    default: return source;
  }
}

wire::Layout CastCodec::layout(const wire::Header& h) const {
  return wire::castLayout(h.count, dataTypeSize(wireType(static_cast<DataType>(h.dtype))));
}

Status CastCodec::encode(const void* in, DataType dt, size_t n, float* residual,
                         const wire::Payload& payload, const CodecCall& call,
                         const wire::Header&) const {
  DataType wt = wireType(dt);
  withType(dt, in, [&](auto* src) {
    withType(wt, payload.at<void>(0),
             [&](auto* dst) { k::convert(src, dst, n, call.scale, residual); });
  });
  return Status::ok();
}

Status CastCodec::decode(const wire::ConstPayload& payload, const wire::Header& h, void* out,
                         DataType dt, size_t n) const {
  DataType wt = wireType(static_cast<DataType>(h.dtype));
  withType(wt, payload.at<const void>(0), [&](auto* src) {
    withType(dt, out, [&](auto* dst) { k::convert(src, dst, n, 1.0f, nullptr); });
  });
  return Status::ok();
}

Status CastCodec::decodeAccumulate(const wire::ConstPayload& payload, const wire::Header& h,
                                   float* acc, size_t n) const {
  DataType wt = wireType(static_cast<DataType>(h.dtype));
  withType(wt, payload.at<const void>(0), [&](auto* src) { k::accumulate(src, acc, n); });
  return Status::ok();
}

// ---- int8 ------------------------------------------------------------------------------------

Int8Codec::Int8Codec(uint32_t block, kernels::Rounding rounding, uint64_t seed)
    : block_(block), rounding_(rounding), seed_(seed) {}

std::string Int8Codec::spec() const {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "int8:block=%u,round=%s,seed=%llu", block_,
                rounding_ == kernels::Rounding::kNearest ? "nearest" : "stochastic",
                static_cast<unsigned long long>(seed_));
  return buf;
}

double Int8Codec::wireBytesPerElement() const { return 1.0 + 4.0 / block_; }

void Int8Codec::describe(size_t, wire::Header& h) const {
  h.param0 = block_;
  h.flags = rounding_ == kernels::Rounding::kStochastic ? wire::kFlagStochastic : 0;
}

wire::Layout Int8Codec::layout(const wire::Header& h) const {
  return wire::int8Layout(h.count, block_);
}

Status Int8Codec::checkParams(const wire::Header& h) const {
  bool stochastic = h.flags & wire::kFlagStochastic;
  if (h.param0 != block_ || stochastic != (rounding_ == kernels::Rounding::kStochastic) ||
      h.param1 != 0)
    return errorInvalidUsage(
        "message was written by int8:block=%u,round=%s but is decoded with "
        "%s: every rank must use the same codec spec",
        h.param0, stochastic ? "stochastic" : "nearest", spec().c_str());
  return Status::ok();
}

Status Int8Codec::encode(const void* in, DataType dt, size_t n, float* residual,
                         const wire::Payload& payload, const CodecCall& call,
                         const wire::Header&) const {
  auto* scales = payload.at<float>(wire::kScales);
  auto* q = payload.at<int8_t>(wire::kCodes);
  uint64_t seed = roundingSeed(seed_, call.nonce);
  withScaledChunks(in, dt, n, call.scale, [&](auto* src, size_t b, size_t len) {
    // offset b keeps element i's random draw uniform01(seed, i) whatever the chunking
    k::int8Quantize(src, len, block_, rounding_, seed, b, residual ? residual + b : nullptr,
                    scales + b / block_, q + b);
  });
  return Status::ok();
}

Status Int8Codec::decode(const wire::ConstPayload& payload, const wire::Header&, void* out,
                         DataType dt, size_t n) const {
  auto* scales = payload.at<const float>(wire::kScales);
  auto* q = payload.at<const int8_t>(wire::kCodes);
  withType(dt, out, [&](auto* dst) { k::int8Dequantize(scales, q, n, block_, dst); });
  return Status::ok();
}

Status Int8Codec::decodeAccumulate(const wire::ConstPayload& payload, const wire::Header&,
                                   float* acc, size_t n) const {
  auto* scales = payload.at<const float>(wire::kScales);
  auto* q = payload.at<const int8_t>(wire::kCodes);
  k::int8DequantizeAccumulate(scales, q, n, block_, acc);
  return Status::ok();
}

// ---- onebit ----------------------------------------------------------------------------------

OnebitCodec::OnebitCodec(uint32_t block) : block_(block) {}

std::string OnebitCodec::spec() const { return "onebit:block=" + std::to_string(block_); }

double OnebitCodec::wireBytesPerElement() const { return 1.0 / 8.0 + 4.0 / block_; }

void OnebitCodec::describe(size_t, wire::Header& h) const { h.param0 = block_; }

wire::Layout OnebitCodec::layout(const wire::Header& h) const {
  return wire::onebitLayout(h.count, block_);
}

Status OnebitCodec::checkParams(const wire::Header& h) const {
  if (h.param0 != block_ || h.param1 != 0 || h.flags != 0)
    return errorInvalidUsage(
        "message was written by onebit:block=%u but is decoded with %s: every "
        "rank must use the same codec spec",
        h.param0, spec().c_str());
  return Status::ok();
}

Status OnebitCodec::encode(const void* in, DataType dt, size_t n, float* residual,
                           const wire::Payload& payload, const CodecCall& call,
                           const wire::Header&) const {
  auto* scales = payload.at<float>(wire::kScales);
  auto* bits = payload.at<uint32_t>(wire::kCodes);
  withScaledChunks(in, dt, n, call.scale, [&](auto* src, size_t b, size_t len) {
    k::onebitCompress(src, len, block_, residual ? residual + b : nullptr, scales + b / block_,
                      bits + b / 32);
  });
  return Status::ok();
}

Status OnebitCodec::decode(const wire::ConstPayload& payload, const wire::Header&, void* out,
                           DataType dt, size_t n) const {
  auto* scales = payload.at<const float>(wire::kScales);
  auto* bits = payload.at<const uint32_t>(wire::kCodes);
  withType(dt, out, [&](auto* dst) { k::onebitDecompress(scales, bits, n, block_, dst); });
  return Status::ok();
}

Status OnebitCodec::decodeAccumulate(const wire::ConstPayload& payload, const wire::Header&,
                                     float* acc, size_t n) const {
  auto* scales = payload.at<const float>(wire::kScales);
  auto* bits = payload.at<const uint32_t>(wire::kCodes);
  k::onebitDecompressAccumulate(scales, bits, n, block_, acc);
  return Status::ok();
}

// ---- fp8 / mxfp8 / mxfp4 / int4 --------------------------------------------------------------

LowbitCodec::LowbitCodec(kernels::LowbitFormat format, uint32_t block, kernels::Rounding rounding,
                         uint64_t seed)
    : format_(format), block_(block), rounding_(rounding), seed_(seed) {}

CodecId LowbitCodec::id() const {
  switch (format_) {
    case kernels::LowbitFormat::kMxfp8: return CodecId::kMxfp8;
    case kernels::LowbitFormat::kMxfp4: return CodecId::kMxfp4;
    case kernels::LowbitFormat::kInt4: return CodecId::kInt4;
    default: return CodecId::kFp8;
  }
}

std::string LowbitCodec::spec() const {
  const char* round = rounding_ == kernels::Rounding::kNearest ? "nearest" : "stochastic";
  unsigned long long seed = seed_;
  char buf[128];
  switch (format_) {
    case kernels::LowbitFormat::kFp8E4M3:
    case kernels::LowbitFormat::kFp8E5M2:
      std::snprintf(buf, sizeof(buf), "fp8:format=%s,block=%u,round=%s,seed=%llu",
                    format_ == kernels::LowbitFormat::kFp8E4M3 ? "e4m3" : "e5m2", block_, round,
                    seed);
      break;
    case kernels::LowbitFormat::kInt4:
      std::snprintf(buf, sizeof(buf), "int4:block=%u,round=%s,seed=%llu", block_, round, seed);
      break;
    default: std::snprintf(buf, sizeof(buf), "%s:round=%s,seed=%llu", codecName(id()), round, seed);
  }
  return buf;
}

double LowbitCodec::wireBytesPerElement() const {
  double code = kernels::lowbitIsNibbles(format_) ? 0.5 : 1.0;
  return code + static_cast<double>(kernels::lowbitScaleBytes(format_)) / block_;
}

wire::Layout LowbitCodec::layout(const wire::Header& h) const {
  return wire::lowbitLayout(format_, h.count, block_);
}

void LowbitCodec::describe(size_t, wire::Header& h) const {
  h.param0 = block_;
  h.param1 = param1();
  h.flags = flags();
}

// fp8 names its element format in param1 (0 E4M3, 1 E5M2); the others carry 0.
uint32_t LowbitCodec::param1() const { return format_ == kernels::LowbitFormat::kFp8E5M2 ? 1 : 0; }

uint8_t LowbitCodec::flags() const {
  return rounding_ == kernels::Rounding::kStochastic ? wire::kFlagStochastic : 0;
}

Status LowbitCodec::checkParams(const wire::Header& h) const {
  if (h.param0 != block_ || h.param1 != param1() || h.flags != flags()) {
    bool fp8 = h.codec == static_cast<uint8_t>(CodecId::kFp8);
    return errorInvalidUsage(
        "message was written by %s with block=%u%s%s,round=%s but is decoded with %s: every "
        "rank must use the same codec spec",
        codecName(id()), h.param0, fp8 ? ",format=" : "",
        fp8 ? (h.param1 == 0   ? "e4m3"
               : h.param1 == 1 ? "e5m2"
                               : "unknown")
            : "",
        (h.flags & wire::kFlagStochastic) ? "stochastic" : "nearest", spec().c_str());
  }
  return Status::ok();
}

Status LowbitCodec::encode(const void* in, DataType dt, size_t n, float* residual,
                           const wire::Payload& payload, const CodecCall& call,
                           const wire::Header&) const {
  auto* scales = payload.at<unsigned char>(wire::kScales);
  auto* codes = payload.at<uint8_t>(wire::kCodes);
  size_t scaleBytes = kernels::lowbitScaleBytes(format_);
  uint64_t seed = roundingSeed(seed_, call.nonce);
  withScaledChunks(in, dt, n, call.scale, [&](auto* src, size_t b, size_t len) {
    // chunks are whole blocks (and even), so scales and codes of a chunk start on bytes
    k::lowbitQuantize(format_, src, len, block_, rounding_, seed, b,
                      residual ? residual + b : nullptr, scales + b / block_ * scaleBytes,
                      codes + kernels::lowbitCodeBytes(format_, b));
  });
  return Status::ok();
}

Status LowbitCodec::decode(const wire::ConstPayload& payload, const wire::Header&, void* out,
                           DataType dt, size_t n) const {
  auto* scales = payload.at<const unsigned char>(wire::kScales);
  auto* codes = payload.at<const uint8_t>(wire::kCodes);
  withType(dt, out,
           [&](auto* dst) { k::lowbitDequantize(format_, scales, codes, n, block_, dst); });
  return Status::ok();
}

Status LowbitCodec::decodeAccumulate(const wire::ConstPayload& payload, const wire::Header&,
                                     float* acc, size_t n) const {
  auto* scales = payload.at<const unsigned char>(wire::kScales);
  auto* codes = payload.at<const uint8_t>(wire::kCodes);
  k::lowbitDequantizeAccumulate(format_, scales, codes, n, block_, acc);
  return Status::ok();
}

// ---- topk ------------------------------------------------------------------------------------

TopkCodec::TopkCodec(double ratio)
    : ratio_(ratio), ratioBits_(num::floatBits(static_cast<float>(ratio))) {}

std::string TopkCodec::spec() const { return "topk:ratio=" + formatRatio(ratio_); }

std::string TopkCodec::formatRatio(double r) {
  // Shortest decimal that reads back as the same double, so makeCodec(spec()) is identical.
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, r);
    if (std::strtod(buf, nullptr) == r) break;
  }
  return buf;
}

std::string TopkCodec::formatRatioFloat(float r) {
  // The header carries the ratio as float32: print the shortest decimal of that float.
  char buf[40];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, static_cast<double>(r));
    if (std::strtof(buf, nullptr) == r) break;
  }
  return buf;
}

double TopkCodec::wireBytesPerElement() const { return 8.0 * ratio_; }

size_t TopkCodec::kFor(size_t n) const {
  if (n == 0) return 0;
  double k = std::round(ratio_ * static_cast<double>(n));
  return std::min(n, std::max<size_t>(1, static_cast<size_t>(k)));
}

size_t TopkCodec::maxWireBytes(size_t n) const { return wire::kHeaderBytes + 8 * kFor(n); }

// param0 is k: what the encoder sends (kFor(n)), and on decoding what the sender sent.
void TopkCodec::describe(size_t n, wire::Header& h) const {
  h.param0 = static_cast<uint32_t>(kFor(n));
  h.param1 = ratioBits_;
}

wire::Layout TopkCodec::layout(const wire::Header& h) const { return wire::topkLayout(h.param0); }

Status TopkCodec::checkParams(const wire::Header& h) const {
  if (h.param1 != ratioBits_ || h.flags != 0)
    return errorInvalidUsage(
        "message was written by topk:ratio=%s but is decoded with %s: every "
        "rank must use the same codec spec",
        formatRatioFloat(num::bitsFloat(h.param1)).c_str(), spec().c_str());
  if (h.param0 > h.count)
    return errorCorrupt("topk message claims k=%u values for only %llu elements", h.param0,
                        static_cast<unsigned long long>(h.count));
  return Status::ok();
}

Status TopkCodec::encode(const void* in, DataType dt, size_t n, float* residual,
                         const wire::Payload& payload, const CodecCall& call,
                         const wire::Header& h) const {
  TERSE_RETURN_IF_ERROR(checkIndexable(n));
  size_t want = h.param0;
  auto* indices = payload.at<uint32_t>(wire::kIndices);
  auto* values = payload.at<float>(wire::kValues);
  void* scratch = topkScratch(k::topkScratchBytes(n));
  size_t got = withScaled(in, dt, n, call.scale, [&](auto* src) {
    return k::topkCompress(src, n, want, residual, scratch, indices, values);
  });
  if (got != want) return errorInternal("topk selected %zu of %zu values", got, want);
  return Status::ok();
}

Status TopkCodec::decode(const wire::ConstPayload& payload, const wire::Header& h, void* out,
                         DataType dt, size_t n) const {
  size_t kk = h.param0;
  auto* indices = payload.at<const uint32_t>(wire::kIndices);
  auto* values = payload.at<const float>(wire::kValues);
  bool ok =
      withType(dt, out, [&](auto* dst) { return k::topkDecompress(indices, values, kk, n, dst); });
  if (!ok) return badIndices(kk, n);
  return Status::ok();
}

Status TopkCodec::decodeAccumulate(const wire::ConstPayload& payload, const wire::Header& h,
                                   float* acc, size_t n) const {
  size_t kk = h.param0;
  auto* indices = payload.at<const uint32_t>(wire::kIndices);
  auto* values = payload.at<const float>(wire::kValues);
  if (!k::topkDecompressAccumulate(indices, values, kk, n, acc)) return badIndices(kk, n);
  return Status::ok();
}

Status TopkCodec::checkIndexable(size_t n) {
  if (n <= UINT32_MAX) return Status::ok();
  return errorInvalidArgument(
      "topk: %zu elements exceed the 2^32-1 that 32-bit indices address; compress the tensor "
      "in smaller chunks",
      n);
}

Status TopkCodec::badIndices(size_t kk, size_t n) {
  return errorCorrupt(
      "topk message is corrupt: its %zu indices are not strictly ascending "
      "values below %zu; nothing was written",
      kk, n);
}

}  // namespace terse
