// The codecs' sizing mode, for the simulation only: a Codec that writes no payload and reads
// none, returns the wire size the real codec writes for the same call, and charges the time the
// real codec would take to the simulated rank's host.
//
//  - Sizes: the real codec compresses a zero input of the same element count and type once per
//    (count, type), and that size is returned from then on. This is exact for every terse codec
//    because their wire size is a function of the count alone (headers, per-block scales, topk's
//    k = ceil(ratio n)): tests/sim checks that random and zero inputs give the same sizes.
//  - Time: compress and decompress-accumulate cost count x 4 bytes / GB/s of the throughput
//    model (float32 input bytes, as terse-bench codecs measures them); decompress is charged at
//    the decompress-accumulate figure (the benchmark does not measure it apart).
//  - decompress / decompressAccumulate check only that the message has the size the real codec
//    writes for that count (the payload is not there to check).
//
// `none` never reaches a codec in the engine (its ring and recursive doubling reduce in place),
// so its reduction is not charged: an engine hook is needed for that (docs/simulation.md).
#pragma once

#include "terse/compressors/codec.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace terse::sim {

struct CodecThroughput {
  double compressGBps = 0;
  double decompressAccumulateGBps = 0;
};

class ThroughputModel {
 public:
  // Reads terse-bench codecs --json output: a row per codec spec.
  static Result<ThroughputModel> fromBenchJson(const std::string& path);
  // Every codec at the same figures (the documented GPU assumption of docs/simulation.md, or 0
  // for "compute is free").
  static ThroughputModel uniform(double compressGBps, double decompressAccumulateGBps);

  // The figures for a codec's canonical spec; an error names the specs the model has.
  Result<CodecThroughput> lookup(const std::string& spec) const;
  std::string describe() const { return describe_; }

 private:
  std::map<std::string, CodecThroughput> bySpec_;
  bool uniform_ = false;
  CodecThroughput all_;
  std::string describe_;
};

// charge(seconds) adds compute time to the calling rank (runner.h's chargeCompute in the
// simulation; tests record it).
class SizingCodec final : public Codec {
 public:
  SizingCodec(std::shared_ptr<const Codec> real, CodecThroughput throughput,
              std::function<void(double)> charge);

  CodecId id() const override { return real_->id(); }
  std::string spec() const override { return real_->spec(); }
  bool wantsErrorFeedback() const override { return real_->wantsErrorFeedback(); }
  double wireBytesPerElement() const override { return real_->wireBytesPerElement(); }
  size_t maxWireBytes(size_t n) const override { return real_->maxWireBytes(n); }

  Result<size_t> compress(const void* in, DataType dt, size_t n, float* residual, void* wire,
                          size_t capacity, const CodecCall& call = {}) const override;
  Status decompress(const void* wire, size_t bytes, void* out, DataType dt, size_t n,
                    const CodecCall& call = {}) const override;
  Status decompressAccumulate(const void* wire, size_t bytes, float* acc, size_t n,
                              const CodecCall& call = {}) const override;

  // The size the real codec writes for n elements of dt (computed once, then cached).
  Result<size_t> wireBytes(DataType dt, size_t n) const;

 private:
  std::shared_ptr<const Codec> real_;
  CodecThroughput throughput_;
  std::function<void(double)> charge_;
  mutable std::mutex mu_;
  mutable std::map<std::pair<int, size_t>, size_t> sizes_;
};

}  // namespace terse::sim
