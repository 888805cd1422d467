#include "algorithm_choice.h"

#include <cmath>
#include <cstdio>

namespace terse::detail {

std::string algorithmChoiceKey(CollectiveKind kind, const std::string& codecSpec, DataType dtype,
                               size_t sizeClass) {
  return std::string(collectiveName(kind)) + " " + codecSpec + " " + dataTypeName(dtype) + " 2^" +
         std::to_string(sizeClass) + " B";
}

AlgorithmChoice chooseByTime(double flatSeconds, double twoLevelSeconds, size_t elements,
                             double wholeSeconds) {
  auto usable = [](double t) { return std::isfinite(t) && t > 0; };
  AlgorithmChoice c;
  char text[224];
  const bool triedWhole = !(wholeSeconds < 0);
  if (triedWhole)
    std::snprintf(text, sizeof text,
                  "measured at %zu elements, slowest rank: flat %.3f ms, twolevel %.3f ms "
                  "pipelined and %.3f ms in one segment",
                  elements, flatSeconds * 1e3, twoLevelSeconds * 1e3, wholeSeconds * 1e3);
  else
    std::snprintf(text, sizeof text,
                  "measured at %zu elements, slowest rank: flat %.3f ms, twolevel %.3f ms",
                  elements, flatSeconds * 1e3, twoLevelSeconds * 1e3);
  c.reason = text;
  if (triedWhole && usable(wholeSeconds) &&
      (!usable(twoLevelSeconds) || wholeSeconds < twoLevelSeconds)) {
    c.twoLevelWhole = true;
    twoLevelSeconds = wholeSeconds;
  }
  if (usable(flatSeconds) && usable(twoLevelSeconds)) {
    c.algorithm = twoLevelSeconds < flatSeconds ? Algorithm::kTwoLevel : Algorithm::kFlat;
  } else if (usable(twoLevelSeconds)) {
    c.algorithm = Algorithm::kTwoLevel;
    c.reason += " (flat's figure unusable)";
  } else {
    c.algorithm = Algorithm::kFlat;
    if (!usable(flatSeconds))
      c.reason += " (neither figure usable: flat, the simpler)";
    else
      c.reason += " (twolevel's figure unusable)";
  }
  if (c.algorithm != Algorithm::kTwoLevel) c.twoLevelWhole = false;
  return c;
}

}  // namespace terse::detail
