// topk: the k largest magnitudes, as ascending uint32 indices and float32 values.
#include "codecs.h"
#include "codecs_device.h"
#include "registry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace terse {
namespace {

// top-k's select state, reused by one thread across calls.
void* topkScratch(size_t bytes) {
  thread_local std::vector<unsigned char> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

class TopkCodec final : public CodecBase {
 public:
  explicit TopkCodec(double ratio);
  CodecId id() const override { return CodecId::kTopk; }
  std::string spec() const override;
  bool wantsErrorFeedback() const override { return true; }
  double wireBytesPerElement() const override;
  size_t maxWireBytes(size_t n) const override;
  // Values sent for n elements: max(1, round(ratio * n)), at most n (0 for n = 0).
  size_t kFor(size_t n) const;
  static std::string formatRatio(double r);
  static std::string formatRatioFloat(float r);

 protected:
  void describe(size_t n, wire::Header& h) const override;
  Status checkParams(const wire::Header& h) const override;
  TERSE_CODEC_PAYLOAD_OVERRIDES

 private:
  static Status badIndices(size_t k, size_t n);
  // 32-bit indices address at most 2^32-1 elements.
  static Status checkIndexable(size_t n);
  double ratio_;
  uint32_t ratioBits_;
};

}  // namespace

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

namespace {

// A message's k indices (ascending, 32-bit) and their values, k from the header.
template <typename Index, typename Value>
struct Sections {
  Index* indices;
  Value* values;
  size_t k;
};
Sections<uint32_t, float> sections(const wire::Payload& p, const wire::Header& h) {
  return {p.at<uint32_t>(wire::kIndices), p.at<float>(wire::kValues), h.param0};
}
Sections<const uint32_t, const float> sections(const wire::ConstPayload& p, const wire::Header& h) {
  return {p.at<const uint32_t>(wire::kIndices), p.at<const float>(wire::kValues), h.param0};
}

}  // namespace

Status TopkCodec::encode(const void* in, DataType dt, size_t n, float* residual,
                         const wire::Payload& payload, const CodecCall& call,
                         const wire::Header& h) const {
  TERSE_RETURN_IF_ERROR(checkIndexable(n));
  const auto sp = sections(payload, h);
  void* scratch = topkScratch(k::topkScratchBytes(n));
  size_t got = withScaled(in, dt, n, call.scale, [&](auto* src) {
    return k::topkCompress(src, n, sp.k, residual, scratch, sp.indices, sp.values);
  });
  if (got != sp.k) return errorInternal("topk selected %zu of %zu values", got, sp.k);
  return Status::ok();
}

Status TopkCodec::decode(const wire::ConstPayload& payload, const wire::Header& h, void* out,
                         DataType dt, size_t n) const {
  const auto sp = sections(payload, h);
  bool ok = withType(
      dt, out, [&](auto* dst) { return k::topkDecompress(sp.indices, sp.values, sp.k, n, dst); });
  if (!ok) return badIndices(sp.k, n);
  return Status::ok();
}

Status TopkCodec::decodeAccumulate(const wire::ConstPayload& payload, const wire::Header& h,
                                   float* acc, size_t n) const {
  const auto sp = sections(payload, h);
  if (!k::topkDecompressAccumulate(sp.indices, sp.values, sp.k, n, acc)) return badIndices(sp.k, n);
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

#if TERSE_HAVE_CUDA

Status TopkCodec::encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                               const wire::Payload& payload, const CodecCall& call,
                               const wire::Header& h) const {
  TERSE_RETURN_IF_ERROR(checkIndexable(n));
  const auto sp = sections(payload, h);
  cudaStream_t s = streamOf(call);
  StreamScratch tmp(s), scratch(s);
  size_t scratchBytes = cu::topkScratchBytes(n);
  TERSE_RETURN_IF_ERROR(cudaCheck(scratch.allocate(scratchBytes), "topk scratch allocation"));
  size_t got = 0;
  cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
    return cu::topkCompress(src, n, sp.k, residual, scratch.get(), scratchBytes, sp.indices,
                            sp.values, &got, s);
  });
  TERSE_RETURN_IF_ERROR(cudaCheck(e, "topk compress"));
  if (got != sp.k) return errorInternal("topk selected %zu of %zu values on the device", got, sp.k);
  return Status::ok();
}

Status TopkCodec::decodeDevice(const wire::ConstPayload& payload, const wire::Header& h, void* out,
                               DataType dt, size_t n, const CodecCall& call) const {
  const auto sp = sections(payload, h);
  bool valid = false;
  cudaError_t e = withType(dt, out, [&](auto* dst) {
    return cu::topkDecompress(sp.indices, sp.values, sp.k, n, dst, &valid, streamOf(call));
  });
  TERSE_RETURN_IF_ERROR(cudaCheck(e, "topk decompress"));
  return valid ? Status::ok() : badIndices(sp.k, n);
}

Status TopkCodec::decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header& h,
                                         float* acc, size_t n, const CodecCall& call) const {
  const auto sp = sections(payload, h);
  bool valid = false;
  TERSE_RETURN_IF_ERROR(cudaCheck(
      cu::topkDecompressAccumulate(sp.indices, sp.values, sp.k, n, acc, &valid, streamOf(call)),
      "topk decompress-accumulate"));
  return valid ? Status::ok() : badIndices(sp.k, n);
}

#endif

std::shared_ptr<const Codec> makeTopkCodec(CodecId, const CodecOptions& o) {
  return std::make_shared<TopkCodec>(o.ratio);
}

}  // namespace terse
