// int8: a float32 absmax scale per block, an int8 per element.
#include "codec_block_scaled.h"
#include "registry.h"

#include <cstdio>

namespace terse {
namespace {

class Int8Codec final : public BlockScaledCodec<Int8Codec, float, int8_t> {
 public:
  static constexpr const char* kName = "int8";
  Int8Codec(uint32_t block, kernels::Rounding rounding, uint64_t seed);
  CodecId id() const override { return CodecId::kInt8; }
  std::string spec() const override;
  bool wantsErrorFeedback() const override { return false; }
  double wireBytesPerElement() const override { return 1.0 + 4.0 / block_; }

 protected:
  void describe(size_t, wire::Header& h) const override {
    h.param0 = block_;
    h.flags = rounding_ == kernels::Rounding::kStochastic ? wire::kFlagStochastic : 0;
  }
  wire::Layout layout(const wire::Header& h) const override {
    return wire::int8Layout(h.count, block_);
  }
  Status checkParams(const wire::Header& h) const override;

 private:
  friend BlockScaledCodec;
  template <typename T>
  void quantize(const T* src, size_t b, size_t len, const CodecCall& call, float* residual,
                float* scales, int8_t* q) const {
    // offset b keeps element i's random draw uniform01(seed, i) whatever the chunking
    k::int8Quantize(src, len, block_, rounding_, roundingSeed(seed_, call.nonce), b, residual,
                    scales + b / block_, q + b);
  }
  template <typename T>
  void dequantize(const float* scales, const int8_t* q, size_t n, T* dst) const {
    k::int8Dequantize(scales, q, n, block_, dst);
  }
  void dequantizeAccumulate(const float* scales, const int8_t* q, size_t n, float* acc) const {
    k::int8DequantizeAccumulate(scales, q, n, block_, acc);
  }
#if TERSE_HAVE_CUDA
  template <typename T>
  cudaError_t quantizeDevice(const T* src, size_t n, const CodecCall& call, float* residual,
                             float* scales, int8_t* q, cudaStream_t s) const {
    return cu::int8Quantize(src, n, block_, rounding_, roundingSeed(seed_, call.nonce), 0, residual,
                            scales, q, s);
  }
  template <typename T>
  cudaError_t dequantizeDevice(const float* scales, const int8_t* q, size_t n, T* dst,
                               cudaStream_t s) const {
    return cu::int8Dequantize(scales, q, n, block_, dst, s);
  }
  cudaError_t dequantizeAccumulateDevice(const float* scales, const int8_t* q, size_t n, float* acc,
                                         cudaStream_t s) const {
    return cu::int8DequantizeAccumulate(scales, q, n, block_, acc, s);
  }
#endif

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

std::shared_ptr<const Codec> makeInt8Codec(CodecId, const CodecOptions& o) {
  return std::make_shared<Int8Codec>(o.block, o.rounding, o.seed);
}

}  // namespace terse
