// onebit: a float32 mean-magnitude scale per block, a sign bit per element.
#include "codecs.h"
#include "codecs_device.h"
#include "registry.h"

#include <string>

namespace terse {
namespace {

class OnebitCodec final : public CodecBase {
 public:
  explicit OnebitCodec(uint32_t block);
  CodecId id() const override { return CodecId::kOnebit; }
  std::string spec() const override;
  bool wantsErrorFeedback() const override { return true; }
  double wireBytesPerElement() const override;

 protected:
  void describe(size_t n, wire::Header& h) const override;
  Status checkParams(const wire::Header& h) const override;
  TERSE_CODEC_PAYLOAD_OVERRIDES

 private:
  uint32_t block_;
};

}  // namespace

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

#if TERSE_HAVE_CUDA

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

#endif

std::shared_ptr<const Codec> makeOnebitCodec(CodecId, const CodecOptions& o) {
  return std::make_shared<OnebitCodec>(o.block);
}

}  // namespace terse
