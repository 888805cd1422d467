#include "terse/compressors/auto_spec.h"

#include "terse/compressors/codec.h"

namespace terse {

namespace {
constexpr const char* kAutoAccepted = "accepted: auto, auto:max=none|fp16|bf16|int8|onebit|topk";
struct Level {
  const char* name;
  int level;
};
constexpr Level kLevels[] = {{"none", 0}, {"fp16", 1}, {"bf16", 1},
                             {"int8", 2}, {"topk", 3}, {"onebit", 3}};
}  // namespace

bool isAutoSpec(const std::string& spec) {
  size_t start = spec.find_first_not_of(" \t");
  return start != std::string::npos && spec.compare(start, 4, "auto") == 0 &&
         (spec.size() == start + 4 || spec[start + 4] == ':' || spec[start + 4] == ' ');
}

Result<AutoSpec> parseAutoSpec(const std::string& spec) {
  // The caller's text in messages: control bytes escaped, long specs cut.
  const std::string shown = printableBytes(spec.data(), spec.size(), 120);
  if (!isAutoSpec(spec))
    return errorInvalidArgument("'%s' is not an auto spec; %s", shown.c_str(), kAutoAccepted);
  std::string max = "int8";
  size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    std::string param = spec.substr(colon + 1);
    param.erase(0, param.find_first_not_of(" \t"));
    param.erase(param.find_last_not_of(" \t") + 1);
    if (param.rfind("max=", 0) != 0)
      return errorInvalidArgument("codec spec '%s': auto takes only max=...; %s", shown.c_str(),
                                  kAutoAccepted);
    max = param.substr(4);
  }
  int limit = -1;
  for (const auto& l : kLevels)
    if (max == l.name) limit = l.level;
  if (limit < 0)
    return errorInvalidArgument("codec spec '%s': max=%s is not a codec; %s", shown.c_str(),
                                printableBytes(max.data(), max.size(), 40).c_str(), kAutoAccepted);
  AutoSpec out;
  out.canonical = "auto:max=" + max;
  for (const auto& l : kLevels) {
    if (l.level > limit) continue;
    auto codec = makeCodec(l.name);
    if (!codec.isOk()) return codec.status();
    out.candidates.push_back((*codec)->spec());
  }
  return out;
}

}  // namespace terse
