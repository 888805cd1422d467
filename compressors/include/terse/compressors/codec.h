// The Codec interface: what a compressed collective needs from a compression scheme.
// A codec is immutable after construction (parameters come from its spec string) and therefore
// safe to share between threads; per-tensor state (error-feedback residuals) belongs to the
// caller's ErrorFeedback object and is passed in.
//
// Every wire message a codec writes starts with the versioned header of docs/wire-format.md, so
// a peer that decodes with different parameters, a different codec or a different element count
// gets an error, never garbage. Decoders validate every length and index before touching memory.
#pragma once

#include "terse/common/status.h"

#include <terse/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace terse {

// Values are part of the wire format.
enum class CodecId : uint8_t {
  kNone = 0,
  kFp16 = 1,
  kBf16 = 2,
  kInt8 = 3,
  kOnebit = 4,
  kTopk = 5,
  kFp8 = 6,     // fp8:format=e4m3|e5m2 (param1 says which), float32 scale per block
  kMxfp8 = 7,   // OCP MXFP8: E4M3 elements, E8M0 scale per 32
  kMxfp4 = 8,   // OCP MXFP4: E2M1 elements, E8M0 scale per 32
  kInt4 = 9,    // 4-bit signed integers, float32 scale per block
  kNvfp4 = 10,  // NVFP4: E2M1 elements, E4M3 scale per 16, float32 scale per message
};
const char* codecName(CodecId id);  // "none", "fp16", ...

// Per-call arguments that are not part of the codec's identity.
struct CodecCall {
  float scale = 1.0f;      // the input is multiplied by this (in float32) before compression
  uint64_t nonce = 0;      // mixed into the stochastic-rounding seed: use a new one per step
  bool device = false;     // in/out/residual/wire are CUDA device pointers (CUDA builds only)
  void* stream = nullptr;  // the cudaStream_t to run on when device is true
};

// What a wire header says, for callers that route or check messages before decoding them.
struct WireInfo {
  CodecId codec;
  DataType sourceType;  // element type the sender compressed from
  uint64_t count;       // elements encoded
  uint64_t totalBytes;  // header + payload, as written by compress()
};
// Parses and validates the header only (magic, version, known codec, lengths within `bytes`).
Result<WireInfo> parseWireHeader(const void* wire, size_t bytes);

class Codec {
 public:
  virtual ~Codec() = default;

  virtual CodecId id() const = 0;
  // Canonical spec with every parameter spelled out, e.g. "int8:block=256,round=nearest,seed=0".
  // makeCodec(spec()) builds an identical codec.
  virtual std::string spec() const = 0;
  // True for codecs that need error feedback to converge (onebit, topk). Any codec accepts a
  // residual; these are the ones that should get one.
  virtual bool wantsErrorFeedback() const = 0;
  // Bytes of wire value per input element on average for large n (for cost models and tables).
  virtual double wireBytesPerElement() const = 0;

  // Upper bound on compress()'s output for n elements, header included.
  virtual size_t maxWireBytes(size_t n) const = 0;

  // Compresses n elements of `in` (type dt) into `wire` (capacity bytes, >= maxWireBytes(n)).
  // residual: nullptr, or n float32 values; compresses v = in*scale + residual and stores the
  // new residual v - decode(encode(v)). Returns the bytes written.
  virtual Result<size_t> compress(const void* in, DataType dt, size_t n, float* residual,
                                  void* wire, size_t capacity,
                                  const CodecCall& call = {}) const = 0;

  // Decodes a message of `bytes` bytes into n elements of type dt. Fails (writing nothing) if
  // the message is corrupt, was written by another codec or parameters, or holds != n elements.
  virtual Status decompress(const void* wire, size_t bytes, void* out, DataType dt, size_t n,
                            const CodecCall& call = {}) const = 0;

  // acc[i] += decoded[i] for n float32 accumulators; same validation as decompress().
  virtual Status decompressAccumulate(const void* wire, size_t bytes, float* acc, size_t n,
                                      const CodecCall& call = {}) const = 0;
};

// Builds a codec from a spec: "name[:key=value[,key=value...]]". Accepted:
//   none | fp16 | bf16
//   int8[:block=N][,round=nearest|stochastic][,seed=N]      (block default 256)
//   onebit[:block=N]                                        (block default 2048)
//   topk[:ratio=R]                                          (0 < R <= 1, default 0.01)
//   fp8[:format=e4m3|e5m2][,block=N][,round=...][,seed=N]   (e4m3, block 256)
//   mxfp8[:round=nearest|stochastic][,seed=N]               (OCP MX, 32 per E8M0 scale)
//   mxfp4[:round=nearest|stochastic][,seed=N]
//   int4[:block=N][,round=nearest|stochastic][,seed=N]      (block default 64)
//   nvfp4[:round=nearest|stochastic][,seed=N]               (16 per E4M3 scale)
// Unknown names or keys, and out-of-range values, are kInvalidArgument errors whose message
// names what is accepted.
Result<std::shared_ptr<const Codec>> makeCodec(const std::string& spec);

}  // namespace terse
