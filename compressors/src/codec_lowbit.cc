// fp8, mxfp8, mxfp4, int4: the blockwise low-bit formats of kernels' LowbitFormat.
#include "codec_block_scaled.h"
#include "registry.h"

#include <cstdio>

namespace terse {
namespace {

// fp8, mxfp8, mxfp4, int4: blockwise low-bit formats (kernels' LowbitFormat); payload:
// wire::lowbitLayout.
class LowbitCodec final : public BlockScaledCodec<LowbitCodec, unsigned char, uint8_t> {
 public:
  static constexpr const char* kName = "low-bit";
  LowbitCodec(kernels::LowbitFormat format, uint32_t block, kernels::Rounding rounding,
              uint64_t seed);
  CodecId id() const override;
  std::string spec() const override;
  // The 4-bit formats lose too much per step to go without it (docs/codecs.md).
  bool wantsErrorFeedback() const override { return kernels::lowbitIsNibbles(format_); }
  double wireBytesPerElement() const override;

 protected:
  void describe(size_t n, wire::Header& h) const override;
  wire::Layout layout(const wire::Header& h) const override {
    return wire::lowbitLayout(format_, h.count, block_);
  }
  Status checkParams(const wire::Header& h) const override;

 private:
  friend BlockScaledCodec;
  template <typename T>
  void quantize(const T* src, size_t b, size_t len, const CodecCall& call, float* residual,
                unsigned char* scales, uint8_t* codes) const {
    // chunks are whole blocks (and even), so scales and codes of a chunk start on bytes
    k::lowbitQuantize(format_, src, len, block_, rounding_, roundingSeed(seed_, call.nonce), b,
                      residual, scales + b / block_ * kernels::lowbitScaleBytes(format_),
                      codes + kernels::lowbitCodeBytes(format_, b));
  }
  template <typename T>
  void dequantize(const unsigned char* scales, const uint8_t* codes, size_t n, T* dst) const {
    k::lowbitDequantize(format_, scales, codes, n, block_, dst);
  }
  void dequantizeAccumulate(const unsigned char* scales, const uint8_t* codes, size_t n,
                            float* acc) const {
    k::lowbitDequantizeAccumulate(format_, scales, codes, n, block_, acc);
  }
#if TERSE_HAVE_CUDA
  template <typename T>
  cudaError_t quantizeDevice(const T* src, size_t n, const CodecCall& call, float* residual,
                             unsigned char* scales, uint8_t* codes, cudaStream_t s) const {
    return cu::lowbitQuantize(format_, src, n, block_, rounding_, roundingSeed(seed_, call.nonce),
                              0, residual, scales, codes, s);
  }
  template <typename T>
  cudaError_t dequantizeDevice(const unsigned char* scales, const uint8_t* codes, size_t n, T* dst,
                               cudaStream_t s) const {
    return cu::lowbitDequantize(format_, scales, codes, n, block_, dst, s);
  }
  cudaError_t dequantizeAccumulateDevice(const unsigned char* scales, const uint8_t* codes,
                                         size_t n, float* acc, cudaStream_t s) const {
    return cu::lowbitDequantizeAccumulate(format_, scales, codes, n, block_, acc, s);
  }
#endif

  uint32_t param1() const;
  uint8_t flags() const;
  kernels::LowbitFormat format_;
  uint32_t block_;
  kernels::Rounding rounding_;
  uint64_t seed_;
};

}  // namespace

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

// fp8 (format 0 e4m3, 1 e5m2), mxfp8, mxfp4, int4.
std::shared_ptr<const Codec> makeLowbitCodec(CodecId id, const CodecOptions& o) {
  auto f = id == CodecId::kMxfp8   ? kernels::LowbitFormat::kMxfp8
           : id == CodecId::kMxfp4 ? kernels::LowbitFormat::kMxfp4
           : id == CodecId::kInt4  ? kernels::LowbitFormat::kInt4
           : o.format == 1         ? kernels::LowbitFormat::kFp8E5M2
                                   : kernels::LowbitFormat::kFp8E4M3;
  return std::make_shared<LowbitCodec>(f, o.block, o.rounding, o.seed);
}

}  // namespace terse
