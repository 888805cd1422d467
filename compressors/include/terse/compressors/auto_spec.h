// The `auto` codec policy's spec: "auto[:max=NAME]". It is not a codec (it encodes nothing
// itself); the collectives pick, per call, one of the codecs it allows (see
// collectives/auto_select.h). The loss budget orders the codecs:
//   none < fp16, bf16 < int8 < fp8, mxfp8 < mxfp4, int4 < onebit, topk
// and max=NAME allows every codec up to NAME's level: max=int8 allows none, fp16, bf16 and
// int8; max=mxfp8 adds fp8 and mxfp8, max=int4 (or mxfp4) also mxfp4 and int4; max=onebit (or
// topk) allows all ten. The default is max=int8. Each candidate is the codec's default spec.
#pragma once

#include "terse/common/status.h"

#include <string>
#include <vector>

namespace terse {

struct AutoSpec {
  std::string canonical;                // "auto:max=int8"
  std::vector<std::string> candidates;  // canonical specs of the allowed codecs, least lossy first
};

bool isAutoSpec(const std::string& spec);
Result<AutoSpec> parseAutoSpec(const std::string& spec);

}  // namespace terse
