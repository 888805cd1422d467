// CollNet's settings: what init reads from the environment (docs/nccl-plugin.md, "CollNet")
// and the fallbacks it applies.
#pragma once

#include "ef_period.h"

#include "terse/common/status.h"

#include <chrono>
#include <string>

namespace terse::plugin::collnet {

struct Config {
  std::string codec = "none";  // a valid makeCodec spec, after fallbacks
  bool errorFeedback = false;  // the codec wants residuals and the period is given or learned
  PeriodSetting efPeriod;      // TERSE_COLLNET_EF_PERIOD: reduce calls per step, or learn it
  // What reduce calls run while no residual applies (warm-up of a learned period, or a sequence
  // that never repeats): "none" for onebit/topk, the policy's candidates without residuals
  // ("auto:max=int8") for an auto policy that allows them.
  std::string warmupCodec = "none";
  std::chrono::milliseconds timeout{300000};
  std::string host;  // address (numeric) that other ranks use to reach our rendezvous store
};

// Reads TERSE_COLLNET_CODEC, TERSE_COLLNET_EF_PERIOD, TERSE_TIMEOUT_MS and the setup interface
// (TERSE_NET_IFNAME / UCX_NET_DEVICES). An unknown codec spec, or an error-feedback codec with
// TERSE_COLLNET_EF_PERIOD=0, is a WARN and falls back to "none"; a malformed period or timeout
// and a missing interface are errors.
Result<Config> loadConfig();

}  // namespace terse::plugin::collnet
