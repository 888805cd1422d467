// makeCodec: the spec parser. Specs are "name[:key=value[,key=value...]]".
#include "codecs.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

namespace terse {
namespace {

constexpr const char* kAccepted =
    "accepted specs: none | fp16 | bf16 | int8[:block=N][,round=nearest|stochastic][,seed=N] | "
    "onebit[:block=N] | topk[:ratio=R]";

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

Result<uint32_t> parseBlock(const std::string& spec, const std::string& value) {
  auto v = parseUnsigned(spec, "block", value);
  if (!v.isOk() || *v < 32 || *v > 65536 || (*v & (*v - 1)) != 0)
    return bad(spec, "block=" + value +
                         " is out of range: block must be a power of two between 32 and 65536");
  return static_cast<uint32_t>(*v);
}

}  // namespace

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
        return bad(specIn, "parameter '" + item + "' is not of the form key=value; " + kAccepted);
      std::string key = trim(item.substr(0, eq));
      if (!params.emplace(key, trim(item.substr(eq + 1))).second)
        return bad(specIn, "parameter '" + key + "' is given twice");
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  auto allowOnly = [&](std::initializer_list<const char*> keys, const char* list) -> Status {
    for (const auto& kv : params) {
      bool known = false;
      for (const char* k : keys) known |= kv.first == k;
      if (!known)
        return bad(specIn,
                   "codec '" + name + "' has no parameter '" + kv.first + "'; it accepts " + list);
    }
    return Status::ok();
  };

  if (name == "none" || name == "fp16" || name == "bf16") {
    TERSE_RETURN_IF_ERROR(allowOnly({}, "no parameters"));
    CodecId id = name == "none" ? CodecId::kNone : name == "fp16" ? CodecId::kFp16 : CodecId::kBf16;
    return std::shared_ptr<const Codec>(std::make_shared<CastCodec>(id));
  }
  if (name == "int8") {
    TERSE_RETURN_IF_ERROR(
        allowOnly({"block", "round", "seed"},
                  "block=N (power of two, 32..65536), round=nearest|stochastic, seed=N"));
    uint32_t block = 256;
    auto rounding = kernels::Rounding::kNearest;
    uint64_t seed = 0;
    if (params.count("block")) {
      TERSE_ASSIGN_OR_RETURN(block, parseBlock(specIn, params["block"]));
    }
    if (params.count("round")) {
      const std::string& r = params["round"];
      if (r == "stochastic")
        rounding = kernels::Rounding::kStochastic;
      else if (r != "nearest")
        return bad(specIn,
                   "round=" + r + " is not accepted: use round=nearest or round=stochastic");
    }
    if (params.count("seed")) {
      TERSE_ASSIGN_OR_RETURN(seed, parseUnsigned(specIn, "seed", params["seed"]));
    }
    return std::shared_ptr<const Codec>(std::make_shared<Int8Codec>(block, rounding, seed));
  }
  if (name == "onebit") {
    TERSE_RETURN_IF_ERROR(allowOnly({"block"}, "block=N (power of two, 32..65536)"));
    uint32_t block = 2048;
    if (params.count("block")) {
      TERSE_ASSIGN_OR_RETURN(block, parseBlock(specIn, params["block"]));
    }
    return std::shared_ptr<const Codec>(std::make_shared<OnebitCodec>(block));
  }
  if (name == "topk") {
    TERSE_RETURN_IF_ERROR(allowOnly({"ratio"}, "ratio=R with 0 < R <= 1"));
    double ratio = 0.01;
    if (params.count("ratio")) {
      const std::string& v = params["ratio"];
      errno = 0;
      char* end = nullptr;
      ratio = std::strtod(v.c_str(), &end);
      if (errno || *end || v.empty() || !std::isfinite(ratio))
        return bad(specIn, "ratio=" + v + " is not a number; use 0 < ratio <= 1, e.g. ratio=0.01");
      if (!(ratio > 0.0 && ratio <= 1.0))
        return bad(specIn, "ratio=" + v + " is out of range: ratio must be in (0, 1]");
    }
    return std::shared_ptr<const Codec>(std::make_shared<TopkCodec>(ratio));
  }
  return bad(specIn, std::string("unknown codec '") + name + "'; " + kAccepted);
}

}  // namespace terse
