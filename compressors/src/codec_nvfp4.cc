// nvfp4: NVIDIA's NVFP4 (E2M1 elements, an E4M3 scale per 16, a float32 scale per message; the
// formulas are numeric.h's). The message is the unit of the float32 scale: a whole tensor, or
// the chunk a collective sends.
#include "codecs.h"
#include "codecs_device.h"
#include "registry.h"

#include <cstdio>

namespace terse {
namespace {

class Nvfp4Codec final : public CodecBase {
 public:
  Nvfp4Codec(kernels::Rounding rounding, uint64_t seed) : rounding_(rounding), seed_(seed) {}
  CodecId id() const override { return CodecId::kNvfp4; }
  std::string spec() const override;
  // A 4-bit format: it loses too much per step to go without (as mxfp4, int4).
  bool wantsErrorFeedback() const override { return true; }
  double wireBytesPerElement() const override { return 0.5 + 1.0 / num::kNvfp4Block; }

 protected:
  void describe(size_t n, wire::Header& h) const override;
  Status checkParams(const wire::Header& h) const override;
  TERSE_CODEC_PAYLOAD_OVERRIDES

 private:
  uint8_t flags() const {
    return rounding_ == kernels::Rounding::kStochastic ? wire::kFlagStochastic : 0;
  }
  kernels::Rounding rounding_;
  uint64_t seed_;
};

}  // namespace

std::string Nvfp4Codec::spec() const {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "nvfp4:round=%s,seed=%llu",
                rounding_ == kernels::Rounding::kNearest ? "nearest" : "stochastic",
                static_cast<unsigned long long>(seed_));
  return buf;
}

void Nvfp4Codec::describe(size_t, wire::Header& h) const {
  h.param0 = static_cast<uint32_t>(num::kNvfp4Block);
  h.flags = flags();
}

wire::Layout Nvfp4Codec::layout(const wire::Header& h) const { return wire::nvfp4Layout(h.count); }

Status Nvfp4Codec::checkParams(const wire::Header& h) const {
  if (h.param0 != num::kNvfp4Block || h.param1 != 0 || h.flags != flags())
    return errorInvalidUsage(
        "message was written by nvfp4 with block=%u,round=%s but is decoded with %s: every "
        "rank must use the same codec spec",
        h.param0, (h.flags & wire::kFlagStochastic) ? "stochastic" : "nearest", spec().c_str());
  return Status::ok();
}

// The float32 scale spans the message, so a scaled input is scaled whole (withScaled), not in
// chunks.
Status Nvfp4Codec::encode(const void* in, DataType dt, size_t n, float* residual,
                          const wire::Payload& payload, const CodecCall& call,
                          const wire::Header&) const {
  uint64_t seed = roundingSeed(seed_, call.nonce);
  withScaled(in, dt, n, call.scale, [&](auto* src) {
    k::nvfp4Quantize(src, n, rounding_, seed, residual, payload.at<float>(wire::kTensorScale),
                     payload.at<uint8_t>(wire::kBlockScales), payload.at<uint8_t>(wire::kNibbles));
  });
  return Status::ok();
}

Status Nvfp4Codec::decode(const wire::ConstPayload& payload, const wire::Header&, void* out,
                          DataType dt, size_t n) const {
  withType(dt, out, [&](auto* dst) {
    k::nvfp4Dequantize(payload.at<const float>(wire::kTensorScale),
                       payload.at<const uint8_t>(wire::kBlockScales),
                       payload.at<const uint8_t>(wire::kNibbles), n, dst);
  });
  return Status::ok();
}

Status Nvfp4Codec::decodeAccumulate(const wire::ConstPayload& payload, const wire::Header&,
                                    float* acc, size_t n) const {
  k::nvfp4DequantizeAccumulate(payload.at<const float>(wire::kTensorScale),
                               payload.at<const uint8_t>(wire::kBlockScales),
                               payload.at<const uint8_t>(wire::kNibbles), n, acc);
  return Status::ok();
}

#if TERSE_HAVE_CUDA

Status Nvfp4Codec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                                const wire::Payload& payload, const CodecCall& call,
                                const wire::Header&) const {
  uint64_t seed = roundingSeed(seed_, call.nonce);
  cudaStream_t s = streamOf(call);
  StreamScratch tmp(s), amax(s);
  TERSE_RETURN_IF_ERROR(cudaCheck(amax.allocate(sizeof(uint32_t)), "nvfp4 scratch allocation"));
  cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
    return cu::nvfp4Quantize(src, n, rounding_, seed, residual, static_cast<uint32_t*>(amax.get()),
                             payload.at<float>(wire::kTensorScale),
                             payload.at<uint8_t>(wire::kBlockScales),
                             payload.at<uint8_t>(wire::kNibbles), s);
  });
  return cudaCheck(e, "nvfp4 compress");
}

Status Nvfp4Codec::decodeDevice(const wire::ConstPayload& payload, const wire::Header&, void* out,
                                DataType dt, size_t n, const CodecCall& call) const {
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::nvfp4Dequantize(payload.at<const float>(wire::kTensorScale),
                               payload.at<const uint8_t>(wire::kBlockScales),
                               payload.at<const uint8_t>(wire::kNibbles), n, dst, streamOf(call));
  });
  return cudaCheck(e, "nvfp4 decompress");
}

Status Nvfp4Codec::decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header&,
                                          float* acc, size_t n, const CodecCall& call) const {
  return cudaCheck(cu::nvfp4DequantizeAccumulate(payload.at<const float>(wire::kTensorScale),
                                                 payload.at<const uint8_t>(wire::kBlockScales),
                                                 payload.at<const uint8_t>(wire::kNibbles), n, acc,
                                                 streamOf(call)),
                   "nvfp4 decompress-accumulate");
}

#endif

std::shared_ptr<const Codec> makeNvfp4Codec(CodecId, const CodecOptions& o) {
  return std::make_shared<Nvfp4Codec>(o.rounding, o.seed);
}

}  // namespace terse
