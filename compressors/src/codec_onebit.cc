// onebit: a float32 mean-magnitude scale per block, a sign bit per element.
#include "codec_block_scaled.h"
#include "registry.h"

#include <string>

namespace terse {
namespace {

class OnebitCodec final : public BlockScaledCodec<OnebitCodec, float, uint32_t> {
 public:
  static constexpr const char* kName = "onebit";
  explicit OnebitCodec(uint32_t block);
  CodecId id() const override { return CodecId::kOnebit; }
  std::string spec() const override { return "onebit:block=" + std::to_string(block_); }
  bool wantsErrorFeedback() const override { return true; }
  double wireBytesPerElement() const override { return 1.0 / 8.0 + 4.0 / block_; }

 protected:
  void describe(size_t, wire::Header& h) const override { h.param0 = block_; }
  wire::Layout layout(const wire::Header& h) const override {
    return wire::onebitLayout(h.count, block_);
  }
  Status checkParams(const wire::Header& h) const override;

 private:
  friend BlockScaledCodec;
  template <typename T>
  void quantize(const T* src, size_t b, size_t len, const CodecCall&, float* residual,
                float* scales, uint32_t* bits) const {
    k::onebitCompress(src, len, block_, residual, scales + b / block_, bits + b / 32);
  }
  template <typename T>
  void dequantize(const float* scales, const uint32_t* bits, size_t n, T* dst) const {
    k::onebitDecompress(scales, bits, n, block_, dst);
  }
  void dequantizeAccumulate(const float* scales, const uint32_t* bits, size_t n, float* acc) const {
    k::onebitDecompressAccumulate(scales, bits, n, block_, acc);
  }
#if TERSE_HAVE_CUDA
  template <typename T>
  cudaError_t quantizeDevice(const T* src, size_t n, const CodecCall&, float* residual,
                             float* scales, uint32_t* bits, cudaStream_t s) const {
    return cu::onebitCompress(src, n, block_, residual, scales, bits, s);
  }
  template <typename T>
  cudaError_t dequantizeDevice(const float* scales, const uint32_t* bits, size_t n, T* dst,
                               cudaStream_t s) const {
    return cu::onebitDecompress(scales, bits, n, block_, dst, s);
  }
  cudaError_t dequantizeAccumulateDevice(const float* scales, const uint32_t* bits, size_t n,
                                         float* acc, cudaStream_t s) const {
    return cu::onebitDecompressAccumulate(scales, bits, n, block_, acc, s);
  }
#endif

  uint32_t block_;
};

}  // namespace

OnebitCodec::OnebitCodec(uint32_t block) : block_(block) {}

Status OnebitCodec::checkParams(const wire::Header& h) const {
  if (h.param0 != block_ || h.param1 != 0 || h.flags != 0)
    return errorInvalidUsage(
        "message was written by onebit:block=%u but is decoded with %s: every "
        "rank must use the same codec spec",
        h.param0, spec().c_str());
  return Status::ok();
}

std::shared_ptr<const Codec> makeOnebitCodec(CodecId, const CodecOptions& o) {
  return std::make_shared<OnebitCodec>(o.block);
}

}  // namespace terse
