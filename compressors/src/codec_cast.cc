// none, fp16, bf16: elementwise casts to the wire type (none: the source type unchanged).
#include "codecs.h"
#include "codecs_device.h"
#include "registry.h"

#include <algorithm>

namespace terse {
namespace {

// none, fp16, bf16: elementwise casts. `none` sends the source type unchanged.
class CastCodec final : public CodecBase {
 public:
  explicit CastCodec(CodecId id);
  CodecId id() const override { return id_; }
  std::string spec() const override;
  bool wantsErrorFeedback() const override { return false; }
  double wireBytesPerElement() const override;

 protected:
  TERSE_CODEC_PAYLOAD_OVERRIDES

 private:
  DataType wireType(DataType source) const;
  CodecId id_;
};

}  // namespace

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

#if TERSE_HAVE_CUDA

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

#endif

std::shared_ptr<const Codec> makeCastCodec(CodecId id, const CodecOptions&) {
  return std::make_shared<CastCodec>(id);
}

}  // namespace terse
