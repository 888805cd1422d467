// Codec implementations (private to compressors; callers go through makeCodec).
#pragma once

#include "terse/compressors/codec.h"
#include "terse/kernels/element_type.h"
#include "terse/kernels/kernels.h"
#include "wire.h"

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

// Common argument checks and header handling; subclasses place their payload.
class CodecBase : public Codec {
 public:
  Result<size_t> compress(const void* in, DataType dt, size_t n, float* residual, void* wire,
                          size_t capacity, const CodecCall& call) const override;
  Status decompress(const void* wire, size_t bytes, void* out, DataType dt, size_t n,
                    const CodecCall& call) const override;
  Status decompressAccumulate(const void* wire, size_t bytes, float* acc, size_t n,
                              const CodecCall& call) const override;

 protected:
  // Payload size a message with this (already parameter-checked) header must have.
  virtual size_t payloadBytes(const wire::Header& h) const = 0;
  // Header parameters against this codec's; the error names both specs.
  virtual Status checkParams(const wire::Header& h) const;
  // Writes the payload and the codec's header fields; returns the payload bytes.
  virtual Result<size_t> encode(const void* in, DataType dt, size_t n, float* residual,
                                unsigned char* payload, const CodecCall& call,
                                wire::Header& h) const = 0;
  virtual Status decode(const unsigned char* payload, const wire::Header& h, void* out, DataType dt,
                        size_t n) const = 0;
  virtual Status decodeAccumulate(const unsigned char* payload, const wire::Header& h, float* acc,
                                  size_t n) const = 0;
  // The same on the GPU (codecs_device.cc): in/out/acc/residual and the payload are device
  // (or, for the payload, pinned host) memory; work is queued on call.stream. The defaults say
  // the build has no CUDA; CUDA builds override them in every codec.
  virtual Result<size_t> encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                                      unsigned char* payload, const CodecCall& call,
                                      wire::Header& h) const;
  virtual Status decodeDevice(const unsigned char* payload, const wire::Header& h, void* out,
                              DataType dt, size_t n, const CodecCall& call) const;
  virtual Status decodeAccumulateDevice(const unsigned char* payload, const wire::Header& h,
                                        float* acc, size_t n, const CodecCall& call) const;

 private:
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
#define TERSE_CODEC_DEVICE_OVERRIDES                                                               \
  Result<size_t> encodeDevice(const void* in, DataType dt, size_t n, float* residual,              \
                              unsigned char* payload, const CodecCall& call, wire::Header& h)      \
      const override;                                                                              \
  Status decodeDevice(const unsigned char* payload, const wire::Header& h, void* out, DataType dt, \
                      size_t n, const CodecCall& call) const override;                             \
  Status decodeAccumulateDevice(const unsigned char* payload, const wire::Header& h, float* acc,   \
                                size_t n, const CodecCall& call) const override;
#else
#define TERSE_CODEC_DEVICE_OVERRIDES
#endif
#define TERSE_CODEC_PAYLOAD_OVERRIDES                                                        \
  Result<size_t> encode(const void* in, DataType dt, size_t n, float* residual,              \
                        unsigned char* payload, const CodecCall& call, wire::Header& h)      \
      const override;                                                                        \
  Status decode(const unsigned char* payload, const wire::Header& h, void* out, DataType dt, \
                size_t n) const override;                                                    \
  Status decodeAccumulate(const unsigned char* payload, const wire::Header& h, float* acc,   \
                          size_t n) const override;                                          \
  TERSE_CODEC_DEVICE_OVERRIDES

// none, fp16, bf16: elementwise casts. `none` sends the source type unchanged.
class CastCodec final : public CodecBase {
 public:
  explicit CastCodec(CodecId id);
  CodecId id() const override { return id_; }
  std::string spec() const override;
  bool wantsErrorFeedback() const override { return false; }
  double wireBytesPerElement() const override;
  size_t maxWireBytes(size_t n) const override;

 protected:
  size_t payloadBytes(const wire::Header& h) const override;
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
  size_t maxWireBytes(size_t n) const override;

 protected:
  size_t payloadBytes(const wire::Header& h) const override;
  Status checkParams(const wire::Header& h) const override;
  TERSE_CODEC_PAYLOAD_OVERRIDES

 private:
  size_t blocks(size_t n) const;
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
  size_t maxWireBytes(size_t n) const override;

 protected:
  size_t payloadBytes(const wire::Header& h) const override;
  Status checkParams(const wire::Header& h) const override;
  TERSE_CODEC_PAYLOAD_OVERRIDES

 private:
  size_t blocks(size_t n) const;
  uint32_t block_;
};

// fp8, mxfp8, mxfp4, int4: blockwise low-bit formats (kernels' LowbitFormat). Payload:
// scales (float32, or one E8M0 byte each for mx) padded to 4 bytes, then the codes (a byte, or
// a nibble, per element) padded to 4 bytes.
class LowbitCodec final : public CodecBase {
 public:
  LowbitCodec(kernels::LowbitFormat format, uint32_t block, kernels::Rounding rounding,
              uint64_t seed);
  CodecId id() const override;
  std::string spec() const override;
  // The 4-bit formats lose too much per step to go without it (docs/codecs.md).
  bool wantsErrorFeedback() const override { return kernels::lowbitIsNibbles(format_); }
  double wireBytesPerElement() const override;
  size_t maxWireBytes(size_t n) const override;

 protected:
  size_t payloadBytes(const wire::Header& h) const override;
  Status checkParams(const wire::Header& h) const override;
  TERSE_CODEC_PAYLOAD_OVERRIDES

 private:
  size_t blocks(size_t n) const;
  size_t scaleArea(size_t n) const;  // scale bytes, padded to 4
  size_t payloadFor(size_t n) const;
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
  size_t payloadBytes(const wire::Header& h) const override;
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
