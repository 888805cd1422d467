// The sizing mode of the codecs (sizing_codec.h).
#include "terse/sim/sizing_codec.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace terse::sim {

namespace {

// The number after `"key":` at or after `from` in `text`, within the same JSON object.
bool numberAfter(const std::string& text, size_t from, size_t end, const std::string& key,
                 double* out) {
  size_t at = text.find("\"" + key + "\"", from);
  if (at == std::string::npos || at >= end) return false;
  at = text.find(':', at);
  if (at == std::string::npos || at >= end) return false;
  char* stop = nullptr;
  *out = std::strtod(text.c_str() + at + 1, &stop);
  return stop != text.c_str() + at + 1 && std::isfinite(*out);
}

}  // namespace

Result<ThroughputModel> ThroughputModel::fromBenchJson(const std::string& path) {
  std::ifstream f(path);
  if (!f) return errorInvalidArgument("throughput model: cannot read %s", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.find("\"benchmark\": \"codecs\"") == std::string::npos)
    return errorInvalidArgument("throughput model: %s is not terse-bench codecs --json output",
                                path.c_str());
  ThroughputModel m;
  // Each row is one flat object: {"codec": "...", ..., "compress_gbps": x, ...}.
  for (size_t at = text.find("{\"codec\""); at != std::string::npos;
       at = text.find("{\"codec\"", at + 1)) {
    const size_t end = text.find('}', at);
    if (end == std::string::npos) break;
    const size_t q1 = text.find('"', text.find(':', at) + 1);
    const size_t q2 = text.find('"', q1 + 1);
    if (q1 == std::string::npos || q2 == std::string::npos || q2 > end) break;
    CodecThroughput t;
    if (!numberAfter(text, at, end, "compress_gbps", &t.compressGBps) ||
        !numberAfter(text, at, end, "decompress_accumulate_gbps", &t.decompressAccumulateGBps))
      return errorInvalidArgument(
          "throughput model: %s: a row lacks compress_gbps or "
          "decompress_accumulate_gbps",
          path.c_str());
    m.bySpec_[text.substr(q1 + 1, q2 - q1 - 1)] = t;
  }
  if (m.bySpec_.empty())
    return errorInvalidArgument("throughput model: %s has no codec rows", path.c_str());
  m.describe_ = "measured (" + path + ")";
  return m;
}

ThroughputModel ThroughputModel::uniform(double compressGBps, double decompressAccumulateGBps) {
  ThroughputModel m;
  m.uniform_ = true;
  m.all_ = {compressGBps, decompressAccumulateGBps};
  m.describe_ = formatString("assumed: every codec %g GB/s compress, %g GB/s decompress+acc",
                             compressGBps, decompressAccumulateGBps);
  return m;
}

Result<CodecThroughput> ThroughputModel::lookup(const std::string& spec) const {
  if (uniform_) return all_;
  auto it = bySpec_.find(spec);
  if (it != bySpec_.end()) return it->second;
  std::string have;
  for (const auto& kv : bySpec_) have += (have.empty() ? "" : ", ") + kv.first;
  return errorInvalidArgument(
      "throughput model: no figures for codec %s (measure it with terse-bench codecs --codecs "
      "'%s' --json FILE); the model has: %s",
      spec.c_str(), spec.c_str(), have.c_str());
}

SizingCodec::SizingCodec(std::shared_ptr<const Codec> real, CodecThroughput throughput,
                         std::function<void(double)> charge)
    : real_(std::move(real)), throughput_(throughput), charge_(std::move(charge)) {}

Result<size_t> SizingCodec::wireBytes(DataType dt, size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(static_cast<int>(dt), n);
  auto it = sizes_.find(key);
  if (it != sizes_.end()) return it->second;
  std::vector<uint8_t> in(n * dataTypeSize(dt), 0);
  std::vector<uint8_t> wire(real_->maxWireBytes(n));
  TERSE_ASSIGN_OR_RETURN(size_t bytes,
                         real_->compress(in.data(), dt, n, nullptr, wire.data(), wire.size()));
  sizes_[key] = bytes;
  return bytes;
}

Result<size_t> SizingCodec::compress(const void* in, DataType dt, size_t n, float* residual,
                                     void* wire, size_t capacity, const CodecCall& call) const {
  if (call.device) return errorUnsupported("sizing codec: device buffers are not simulated");
  const size_t need = real_->maxWireBytes(n);
  if (capacity < need)
    return errorInvalidArgument(
        "compress: wire capacity %zu bytes is below maxWireBytes(%zu) = %zu", capacity, n, need);
  TERSE_ASSIGN_OR_RETURN(size_t bytes, wireBytes(dt, n));
  if (charge_ && throughput_.compressGBps > 0) charge_(n * 4.0 / (throughput_.compressGBps * 1e9));
  return bytes;
}

Status SizingCodec::decompress(const void* wire, size_t bytes, void* out, DataType dt, size_t n,
                               const CodecCall& call) const {
  if (call.device) return errorUnsupported("sizing codec: device buffers are not simulated");
  // The sender compressed from its caller's type or from float32 (the reduced result): accept
  // either size.
  TERSE_ASSIGN_OR_RETURN(size_t asFloat, wireBytes(DataType::kFloat32, n));
  TERSE_ASSIGN_OR_RETURN(size_t asType, wireBytes(dt, n));
  if (bytes != asFloat && bytes != asType)
    return errorCorrupt("sizing codec %s: a %zu-byte message for %zu elements (expected %zu)",
                        real_->spec().c_str(), bytes, n, asFloat);
  if (charge_ && throughput_.decompressAccumulateGBps > 0)
    charge_(n * 4.0 / (throughput_.decompressAccumulateGBps * 1e9));
  return Status::ok();
}

Status SizingCodec::decompressAccumulate(const void* wire, size_t bytes, float* acc, size_t n,
                                         const CodecCall& call) const {
  return decompress(wire, bytes, acc, DataType::kFloat32, n, call);
}

}  // namespace terse::sim
