// The codecs' common part (private to compressors; callers go through makeCodec): CodecBase,
// which checks arguments and messages, writes headers and places payloads by each codec's
// layout, and the helpers the codecs share. Each codec is one file, codec_<name>.cc: its class,
// host and device paths and factory; its row in registry.cc makes it reachable. The codecs whose
// payload is per-block scales and codes (int8, onebit, the low-bit formats) take their payload
// methods from codec_block_scaled.h and give only their kernel calls.
#pragma once

#include "terse/compressors/codec.h"
#include "terse/kernels/element_type.h"
#include "terse/kernels/kernels.h"
#include "wire.h"
#include "wire_layout.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace terse {

namespace k = kernels::cpu;  // the codecs' host kernels

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
#define TERSE_CODEC_DEVICE_OVERRIDES                                                              \
  Status encodeDevice(const void* in, DataType dt, size_t n, float* residual,                     \
                      const wire::Payload& payload, const CodecCall& call, const wire::Header& h) \
      const override;                                                                             \
  Status decodeDevice(const wire::ConstPayload& payload, const wire::Header& h, void* out,        \
                      DataType dt, size_t n, const CodecCall& call) const override;               \
  Status decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header& h,         \
                                float* acc, size_t n, const CodecCall& call) const override;
#else
#define TERSE_CODEC_DEVICE_OVERRIDES
#endif
#define TERSE_CODEC_PAYLOAD_OVERRIDES                                                             \
  wire::Layout layout(const wire::Header& h) const override;                                      \
  Status encode(const void* in, DataType dt, size_t n, float* residual,                           \
                const wire::Payload& payload, const CodecCall& call, const wire::Header& h)       \
      const override;                                                                             \
  Status decode(const wire::ConstPayload& payload, const wire::Header& h, void* out, DataType dt, \
                size_t n) const override;                                                         \
  Status decodeAccumulate(const wire::ConstPayload& payload, const wire::Header& h, float* acc,   \
                          size_t n) const override;                                               \
  TERSE_CODEC_DEVICE_OVERRIDES

// Host-path helpers the codecs share (codecs.cc). Scratch reused by one thread across calls (the
// AVG pre-scale), so steady-state compression allocates nothing.
std::vector<float>& scaledScratch(size_t n);

// Runs fn(const float* values) over in*scale: the kernels other than the casts take no scale,
// so a scale other than 1 costs one extra pass through a per-thread float32 buffer (top-k
// selects over the whole tensor, so it needs all n values at once).
template <typename Fn>
auto withScaled(const void* in, DataType dt, size_t n, float scale, Fn&& fn) {
  if (scale == 1.0f) return withType(dt, in, fn);
  float* tmp = scaledScratch(n).data();
  withType(dt, in, [&](auto* p) { k::convert(p, tmp, n, scale, nullptr); });
  return fn(static_cast<const float*>(tmp));
}

// Blockwise codecs scale in chunks (a multiple of every block size, so block boundaries and
// bit words line up) to keep the per-thread buffer small: fn(values, begin, length).
constexpr size_t kScaleChunk = size_t{1} << 20;
template <typename Fn>
void withScaledChunks(const void* in, DataType dt, size_t n, float scale, Fn&& fn) {
  if (scale == 1.0f) return withType(dt, in, [&](auto* p) { fn(p, size_t{0}, n); });
  float* tmp = scaledScratch(std::min(n, kScaleChunk)).data();
  for (size_t b = 0; b < n; b += kScaleChunk) {
    size_t len = std::min(kScaleChunk, n - b);
    withType(dt, in, [&](auto* p) { k::convert(p + b, tmp, len, scale, nullptr); });
    fn(static_cast<const float*>(tmp), b, len);
  }
}

}  // namespace terse
