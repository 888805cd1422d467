// makeCodec: the spec parser, and the codec table it reads. Specs are
// "name[:key=value[,key=value...]]". A codec is one row of kCodecs: its name, its options (each
// parsed and range-checked by one shared parser), their defaults and its factory; the accepted-
// specs help, codecName() and the wire header's codec-id check all come from the table.
#include "registry.h"

#include "terse/compressors/codec.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

namespace terse {

// The codecs' factories, each in its codec's file (codec_<name>.cc).
std::shared_ptr<const Codec> makeCastCodec(CodecId id, const CodecOptions& o);
std::shared_ptr<const Codec> makeInt8Codec(CodecId id, const CodecOptions& o);
std::shared_ptr<const Codec> makeOnebitCodec(CodecId id, const CodecOptions& o);
std::shared_ptr<const Codec> makeTopkCodec(CodecId id, const CodecOptions& o);
std::shared_ptr<const Codec> makeLowbitCodec(CodecId id, const CodecOptions& o);
std::shared_ptr<const Codec> makeNvfp4Codec(CodecId id, const CodecOptions& o);

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The spec is the caller's text, echoed in the message: control bytes come out escaped (a NUL
// or an escape sequence must not cut or colour the message) and a long one is cut.
Status bad(const std::string& spec, const std::string& why) {
  return Status(StatusCode::kInvalidArgument,
                "codec spec '" + printableBytes(spec.data(), spec.size(), 120) +
                    "': " + printableBytes(why.data(), why.size(), 1024));
}

Result<uint64_t> parseUnsigned(const std::string& spec, const std::string& key,
                               const std::string& value) {
  if (value.empty() || value[0] == '-' || value[0] == '+')
    return bad(spec, key + "=" + value + " is not an unsigned decimal integer");
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (errno || *end) return bad(spec, key + "=" + value + " is not an unsigned decimal integer");
  return static_cast<uint64_t>(v);
}

// ---- options: one parser per kind, shared by every codec that has it ------------------------

struct Option {
  const char* key;
  const char* help;  // in "it accepts ..." lists
  Status (*parse)(const std::string& spec, const std::string& value, CodecOptions& out);
};

Status parseBlock(const std::string& spec, const std::string& value, CodecOptions& out) {
  auto v = parseUnsigned(spec, "block", value);
  if (!v.isOk() || *v < 32 || *v > 65536 || (*v & (*v - 1)) != 0)
    return bad(spec, "block=" + value +
                         " is out of range: block must be a power of two between 32 and 65536");
  out.block = static_cast<uint32_t>(*v);
  return Status::ok();
}

Status parseRound(const std::string& spec, const std::string& value, CodecOptions& out) {
  if (value == "stochastic")
    out.rounding = kernels::Rounding::kStochastic;
  else if (value != "nearest")
    return bad(spec, "round=" + value + " is not accepted: use round=nearest or round=stochastic");
  return Status::ok();
}

Status parseSeed(const std::string& spec, const std::string& value, CodecOptions& out) {
  TERSE_ASSIGN_OR_RETURN(out.seed, parseUnsigned(spec, "seed", value));
  return Status::ok();
}

Status parseFp8Format(const std::string& spec, const std::string& value, CodecOptions& out) {
  if (value == "e5m2")
    out.format = 1;
  else if (value != "e4m3")
    return bad(spec, "format=" + value + " is not accepted: use format=e4m3 or format=e5m2");
  return Status::ok();
}

Status parseRatio(const std::string& spec, const std::string& v, CodecOptions& out) {
  errno = 0;
  char* end = nullptr;
  double ratio = std::strtod(v.c_str(), &end);
  if (errno || *end || v.empty() || !std::isfinite(ratio))
    return bad(spec, "ratio=" + v + " is not a number; use 0 < ratio <= 1, e.g. ratio=0.01");
  if (!(ratio > 0.0 && ratio <= 1.0))
    return bad(spec, "ratio=" + v + " is out of range: ratio must be in (0, 1]");
  out.ratio = ratio;
  return Status::ok();
}

constexpr Option kBlock{"block", "block=N (power of two, 32..65536)", parseBlock};
constexpr Option kRound{"round", "round=nearest|stochastic", parseRound};
constexpr Option kSeed{"seed", "seed=N", parseSeed};
constexpr Option kFp8Format{"format", "format=e4m3|e5m2", parseFp8Format};
constexpr Option kRatio{"ratio", "ratio=R with 0 < R <= 1", parseRatio};

// ---- the codec table ------------------------------------------------------------------------

using Factory = std::shared_ptr<const Codec> (*)(CodecId id, const CodecOptions& o);

struct CodecRow {
  CodecId id;
  const char* name;
  const char* usage;                     // in the accepted-specs list
  std::array<const Option*, 4> options;  // in the order they are parsed; unused slots null
  const char* note;                      // after the option list in "it accepts ..."
  CodecOptions defaults;
  Factory make;
};

constexpr CodecOptions withBlock(uint32_t block) {
  CodecOptions o;
  o.block = block;
  return o;
}
constexpr CodecOptions withRatio(double ratio) {
  CodecOptions o;
  o.ratio = ratio;
  return o;
}

// Indexed by CodecId (the wire's codec byte): a new codec is a new id and a new row, last.
constexpr CodecRow kCodecs[] = {
    {CodecId::kNone, "none", "none", {}, "", {}, makeCastCodec},
    {CodecId::kFp16, "fp16", "fp16", {}, "", {}, makeCastCodec},
    {CodecId::kBf16, "bf16", "bf16", {}, "", {}, makeCastCodec},
    {CodecId::kInt8,
     "int8",
     "int8[:block=N][,round=nearest|stochastic][,seed=N]",
     {&kBlock, &kRound, &kSeed},
     "",
     withBlock(256),
     makeInt8Codec},
    {CodecId::kOnebit,
     "onebit",
     "onebit[:block=N]",
     {&kBlock},
     "",
     withBlock(2048),
     makeOnebitCodec},
    {CodecId::kTopk, "topk", "topk[:ratio=R]", {&kRatio}, "", withRatio(0.01), makeTopkCodec},
    {CodecId::kFp8,
     "fp8",
     "fp8[:format=e4m3|e5m2][,block=N][,round=...][,seed=N]",
     {&kFp8Format, &kBlock, &kRound, &kSeed},
     "",
     withBlock(256),
     makeLowbitCodec},
    {CodecId::kMxfp8,
     "mxfp8",
     "mxfp8[:round=...][,seed=N]",
     {&kRound, &kSeed},
     " (the OCP MX block is always 32 elements)",
     withBlock(kernels::kMxBlock),
     makeLowbitCodec},
    {CodecId::kMxfp4,
     "mxfp4",
     "mxfp4[:round=...][,seed=N]",
     {&kRound, &kSeed},
     " (the OCP MX block is always 32 elements)",
     withBlock(kernels::kMxBlock),
     makeLowbitCodec},
    {CodecId::kInt4,
     "int4",
     "int4[:block=N][,round=...][,seed=N]",
     {&kBlock, &kRound, &kSeed},
     "",
     withBlock(64),
     makeLowbitCodec},
    {CodecId::kNvfp4,
     "nvfp4",
     "nvfp4[:round=...][,seed=N]",
     {&kRound, &kSeed},
     " (the NVFP4 block is always 16 elements)",
     withBlock(16),
     makeNvfp4Codec},
};
constexpr size_t kCodecCount = sizeof(kCodecs) / sizeof(kCodecs[0]);

constexpr bool rowsInIdOrder() {
  for (size_t i = 0; i < kCodecCount; ++i)
    if (static_cast<size_t>(kCodecs[i].id) != i) return false;
  return true;
}
static_assert(rowsInIdOrder(), "kCodecs is indexed by CodecId: one row per id, in order");

const std::string& acceptedSpecs() {
  static const std::string text = [] {
    std::string t = "accepted specs: ";
    for (size_t i = 0; i < kCodecCount; ++i) t += std::string(i ? " | " : "") + kCodecs[i].usage;
    return t;
  }();
  return text;
}

std::string acceptedOptions(const CodecRow& row) {
  std::string t;
  for (const Option* o : row.options)
    if (o) t += std::string(t.empty() ? "" : ", ") + o->help;
  return t.empty() ? "no parameters" : t + row.note;
}

const Option* findOption(const CodecRow& row, const std::string& key) {
  for (const Option* o : row.options)
    if (o && key == o->key) return o;
  return nullptr;
}

}  // namespace

bool isRegisteredCodec(uint8_t id) { return id < kCodecCount; }

const char* codecName(CodecId id) {
  return isRegisteredCodec(static_cast<uint8_t>(id)) ? kCodecs[static_cast<size_t>(id)].name
                                                     : "unknown";
}

Result<std::shared_ptr<const Codec>> makeCodec(const std::string& specIn) {
  std::string spec = trim(specIn);
  size_t colon = spec.find(':');
  std::string name = trim(spec.substr(0, colon));
  std::map<std::string, std::string> params;
  if (colon != std::string::npos) {
    std::string rest = spec.substr(colon + 1);
    size_t pos = 0;
    for (;;) {
      size_t comma = rest.find(',', pos);
      std::string item =
          trim(rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
      size_t eq = item.find('=');
      if (eq == std::string::npos || trim(item.substr(0, eq)).empty() ||
          trim(item.substr(eq + 1)).empty())
        return bad(specIn,
                   "parameter '" + item + "' is not of the form key=value; " + acceptedSpecs());
      std::string key = trim(item.substr(0, eq));
      if (!params.emplace(key, trim(item.substr(eq + 1))).second)
        return bad(specIn, "parameter '" + key + "' is given twice");
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  const CodecRow* row = nullptr;
  for (const CodecRow& r : kCodecs)
    if (name == r.name) row = &r;
  if (!row) return bad(specIn, "unknown codec '" + name + "'; " + acceptedSpecs());
  for (const auto& kv : params)
    if (!findOption(*row, kv.first))
      return bad(specIn, "codec '" + name + "' has no parameter '" + kv.first + "'; it accepts " +
                             acceptedOptions(*row));
  CodecOptions options = row->defaults;
  for (const Option* o : row->options) {
    if (!o) continue;
    auto given = params.find(o->key);
    if (given != params.end()) TERSE_RETURN_IF_ERROR(o->parse(specIn, given->second, options));
  }
  return row->make(row->id, options);
}

}  // namespace terse
