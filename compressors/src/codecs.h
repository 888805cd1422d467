// Codec implementations (private to compressors; callers go through makeCodec).
#pragma once

#include "terse/compressors/codec.h"
#include "terse/kernels/element_type.h"
#include "terse/kernels/kernels.h"
#include "wire.h"
#include "wire_layout.h"

#include <utility>

namespace terse {

// Typed dispatch of a void pointer (the kernels' element types).
template <typename Ptr, typename Fn>
inline auto withType(DataType dt, Ptr* p, Fn&& fn) {
  return withElementType(dt, p, std::forward<Fn>(fn));
}

// The int8 stochastic-rounding seed of one call (host and device paths alike).
inline uint64_t roundingSeed(uint64_t seed, uint64_t nonce) {
  // Mix the nonce so nearby nonces (0, 1, 2, ...) give unrelated streams.
  return seed ^ num::mix64(nonce + 0x632be59bd9b4e019ull);
}

// Common argument checks, header handling and payload placement; a codec describes its header
// fields and its payload's sections (wire_layout.h) and fills or reads those sections.
class CodecBase : public Codec {
 public:
  Result<size_t> compress(const void* in, DataType dt, size_t n, float* residual, void* wire,
                          size_t capacity, const CodecCall& call) const override;
  Status decompress(const void* wire, size_t bytes, void* out, DataType dt, size_t n,
                    const CodecCall& call) const override;
  Status decompressAccumulate(const void* wire, size_t bytes, float* acc, size_t n,
                              const CodecCall& call) const override;
  // Header plus the payload of n float32 elements (the largest source type) by layout().
  size_t maxWireBytes(size_t n) const override;

 protected:
  // The codec's header fields (param0, param1, flags) for a message of n elements.
  virtual void describe(size_t n, wire::Header& h) const;
  // The payload's sections for a header whose parameters are this codec's (checkParams passed,
  // or written by describe): the one place a codec's wire layout is stated.
  virtual wire::Layout layout(const wire::Header& h) const = 0;
  // Header parameters against this codec's; the error names both specs.
  virtual Status checkParams(const wire::Header& h) const;
  // Fills the payload's sections (their padding is already zero) from n elements of `in`; h is
  // the message's header as describe() and layout() made it.
  virtual Status encode(const void* in, DataType dt, size_t n, float* residual,
                        const wire::Payload& payload, const CodecCall& call,
                        const wire::Header& h) const = 0;
  virtual Status decode(const wire::ConstPayload& payload, const wire::Header& h, void* out,
                        DataType dt, size_t n) const = 0;
  virtual Status decodeAccumulate(const wire::ConstPayload& payload, const wire::Header& h,
                                  float* acc, size_t n) const = 0;
  // The same on the GPU (codecs_device.cc): in/out/acc/residual and the payload are device
  // (or, for the payload, pinned host) memory; work is queued on call.stream. The defaults say
  // the build has no CUDA; CUDA builds override them in every codec.
  virtual Status encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                              const wire::Payload& payload, const CodecCall& call,
                              const wire::Header& h) const;
  virtual Status decodeDevice(const wire::ConstPayload& payload, const wire::Header& h, void* out,
                              DataType dt, size_t n, const CodecCall& call) const;
  virtual Status decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header& h,
                                        float* acc, size_t n, const CodecCall& call) const;

 private:
  // The header of a message of n elements of dt from this codec (payload bytes included).
  wire::Header headerFor(size_t n, DataType dt) const;
  // The payload of a checked message (wire in any memory: only the address is computed).
  wire::ConstPayload payloadOf(const void* wire, const wire::Header& h) const {
    return {static_cast<const unsigned char*>(wire) + wire::kHeaderBytes, layout(h)};
  }
  Result<size_t> compressDevice(const void* in, DataType dt, size_t n, float* residual, void* wire,
                                const CodecCall& call) const;
  // The header of a message whose bytes may be in device memory (copied to the host first).
  Result<wire::Header> checkDeviceMessage(const void* wire, size_t bytes, size_t n,
                                          const CodecCall& call) const;
  Status checkBuffers(const void* data, DataType dt, size_t n, const void* wire,
                      const CodecCall& call, const char* what) const;
  Result<wire::Header> checkMessage(const void* wire, size_t bytes, size_t n) const;
};

// The payload overrides every codec declares (host path, and the device path in CUDA builds).
#if TERSE_HAVE_CUDA
#define TERSE_CODEC_DEVICE_OVERRIDES                                                           \
  Status encodeDevice(const void* in, DataType dt, size_t n, float* residual,                  \
                      const wire::Payload& payload, const CodecCall& call,                     \
                      const wire::Header& h) const override;                                   \
  Status decodeDevice(const wire::ConstPayload& payload, const wire::Header& h, void* out,     \
                      DataType dt, size_t n, const CodecCall& call) const override;            \
  Status decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header& h,      \
                                float* acc, size_t n, const CodecCall& call) const override;
#else
#define TERSE_CODEC_DEVICE_OVERRIDES
#endif
#define TERSE_CODEC_PAYLOAD_OVERRIDES                                                          \
  wire::Layout layout(const wire::Header& h) const override;                                   \
  Status encode(const void* in, DataType dt, size_t n, float* residual,                        \
                const wire::Payload& payload, const CodecCall& call, const wire::Header& h)    \
      const override;                                                                          \
  Status decode(const wire::ConstPayload& payload, const wire::Header& h, void* out,           \
                DataType dt, size_t n) const override;                                         \
  Status decodeAccumulate(const wire::ConstPayload& payload, const wire::Header& h, float* acc, \
                          size_t n) const override;                                            \
  TERSE_CODEC_DEVICE_OVERRIDES

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

// fp8, mxfp8, mxfp4, int4: blockwise low-bit formats (kernels' LowbitFormat); payload:
// wire::lowbitLayout.
class LowbitCodec final : public CodecBase {
 public:
  LowbitCodec(kernels::LowbitFormat format, uint32_t block, kernels::Rounding rounding,
              uint64_t seed);
  CodecId id() const override;
  std::string spec() const override;
  // The 4-bit formats lose too much per step to go without it (docs/codecs.md).
  bool wantsErrorFeedback() const override { return kernels::lowbitIsNibbles(format_); }
  double wireBytesPerElement() const override;

 protected:
  void describe(size_t n, wire::Header& h) const override;
  Status checkParams(const wire::Header& h) const override;
  TERSE_CODEC_PAYLOAD_OVERRIDES

 private:
  uint32_t param1() const;
  uint8_t flags() const;
  kernels::LowbitFormat format_;
  uint32_t block_;
  kernels::Rounding rounding_;
  uint64_t seed_;
};

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

}  // namespace terse
