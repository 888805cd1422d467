// int8: a float32 absmax scale per block, an int8 per element.
#include "codecs.h"
#include "codecs_device.h"
#include "registry.h"

#include <cstdio>

namespace terse {
namespace {

class Int8Codec final : public CodecBase {
 public:
  Int8Codec(uint32_t block, kernels::Rounding rounding, uint64_t seed);
  CodecId id() const override { return CodecId::kInt8; }
  std::string spec() const override;
  bool wantsErrorFeedback() const override { return false; }
  double wireBytesPerElement() const override;

 protected:
  void describe(size_t n, wire::Header& h) const override;
  Status checkParams(const wire::Header& h) const override;
  TERSE_CODEC_PAYLOAD_OVERRIDES

 private:
  uint32_t block_;
  kernels::Rounding rounding_;
  uint64_t seed_;
};

}  // namespace

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

#if TERSE_HAVE_CUDA

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

#endif

std::shared_ptr<const Codec> makeInt8Codec(CodecId, const CodecOptions& o) {
  return std::make_shared<Int8Codec>(o.block, o.rounding, o.seed);
}

}  // namespace terse
