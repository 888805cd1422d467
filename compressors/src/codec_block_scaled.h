// The block-scaled codecs (int8, onebit, fp8/mxfp8/mxfp4/int4): a payload of per-block scales
// (wire::kScales) and codes (wire::kCodes), whose six payload methods (encode, decode and
// decode-accumulate, on the host and on the device) differ only in the kernels they call. They
// are written once here; a codec derives from BlockScaledCodec<Itself, Scale, Code> and gives its
// kernel calls (T is the source or destination element type):
//   static constexpr const char* kName;  // in device error messages: "<kName> compress"
//   template <typename T> void quantize(const T* src, size_t b, size_t len, const CodecCall& call,
//                                       float* residual, Scale* scales, Code* codes) const;
//     // elements [b, b + len) of the input at src (residual already offset by b; scales and
//     // codes are the sections' starts, the codec offsets them by b)
//   template <typename T> void dequantize(const Scale*, const Code*, size_t n, T* dst) const;
//   void dequantizeAccumulate(const Scale*, const Code*, size_t n, float* acc) const;
// and in CUDA builds quantizeDevice(src, n, call, residual, scales, codes, stream),
// dequantizeDevice(scales, codes, n, dst, stream), dequantizeAccumulateDevice(scales, codes, n,
// acc, stream), each returning the kernel's cudaError_t.
#pragma once

#include "codecs.h"
#include "codecs_device.h"

#include <string>

namespace terse {

template <typename Derived, typename Scale, typename Code>
class BlockScaledCodec : public CodecBase {
 protected:
  Status encode(const void* in, DataType dt, size_t n, float* residual,
                const wire::Payload& payload, const CodecCall& call,
                const wire::Header&) const override {
    auto* scales = payload.at<Scale>(wire::kScales);
    auto* codes = payload.at<Code>(wire::kCodes);
    withScaledChunks(in, dt, n, call.scale, [&](auto* src, size_t b, size_t len) {
      self().quantize(src, b, len, call, residual ? residual + b : nullptr, scales, codes);
    });
    return Status::ok();
  }

  Status decode(const wire::ConstPayload& payload, const wire::Header&, void* out, DataType dt,
                size_t n) const override {
    auto* scales = payload.at<const Scale>(wire::kScales);
    auto* codes = payload.at<const Code>(wire::kCodes);
    withType(dt, out, [&](auto* dst) { self().dequantize(scales, codes, n, dst); });
    return Status::ok();
  }

  Status decodeAccumulate(const wire::ConstPayload& payload, const wire::Header&, float* acc,
                          size_t n) const override {
    self().dequantizeAccumulate(payload.at<const Scale>(wire::kScales),
                                payload.at<const Code>(wire::kCodes), n, acc);
    return Status::ok();
  }

#if TERSE_HAVE_CUDA
  Status encodeDevice(const void* in, DataType dt, size_t n, float* residual,
                      const wire::Payload& payload, const CodecCall& call,
                      const wire::Header&) const override {
    auto* scales = payload.at<Scale>(wire::kScales);
    auto* codes = payload.at<Code>(wire::kCodes);
    cudaStream_t s = streamOf(call);
    StreamScratch tmp(s);
    cudaError_t e = withScaledDevice(in, dt, n, call.scale, tmp, s, [&](auto* src) {
      return self().quantizeDevice(src, n, call, residual, scales, codes, s);
    });
    return check(e, "compress");
  }

  Status decodeDevice(const wire::ConstPayload& payload, const wire::Header&, void* out,
                      DataType dt, size_t n, const CodecCall& call) const override {
    auto* scales = payload.at<const Scale>(wire::kScales);
    auto* codes = payload.at<const Code>(wire::kCodes);
    cudaError_t e = withType(dt, out, [&](auto* dst) {
      return self().dequantizeDevice(scales, codes, n, dst, streamOf(call));
    });
    return check(e, "decompress");
  }

  Status decodeAccumulateDevice(const wire::ConstPayload& payload, const wire::Header&, float* acc,
                                size_t n, const CodecCall& call) const override {
    return check(self().dequantizeAccumulateDevice(payload.at<const Scale>(wire::kScales),
                                                   payload.at<const Code>(wire::kCodes), n, acc,
                                                   streamOf(call)),
                 "decompress-accumulate");
  }
#endif

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
#if TERSE_HAVE_CUDA
  // "<kName> <what> on the device failed: ..."; the name is only put together on a failure.
  static Status check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    return cudaCheck(e, (std::string(Derived::kName) + " " + what).c_str());
  }
#endif
};

}  // namespace terse
