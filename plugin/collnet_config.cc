#include "collnet_config.h"

#include "collnet_socket.h"
#include "net_device.h"
#include "net_handshake.h"
#include "plugin_log.h"

#include "terse/common/env.h"
#include "terse/compressors/auto_spec.h"
#include "terse/compressors/codec.h"

#include <memory>

namespace terse::plugin::collnet {
namespace {

// Canonicalises *spec (a codec or an `auto[:max=NAME]` policy) and says whether it may need
// error feedback (onebit, topk, or an auto policy that allows them). A spec terse does not know
// is a WARN and becomes "none".
Result<bool> validateSpec(std::string* spec) {
  if (isAutoSpec(*spec)) {
    auto parsed = parseAutoSpec(*spec);
    if (parsed.isOk()) {
      bool feedback = false;
      for (const std::string& candidate : parsed->candidates) {
        TERSE_ASSIGN_OR_RETURN(std::shared_ptr<const Codec> codec, makeCodec(candidate));
        feedback |= codec->wantsErrorFeedback();
      }
      *spec = parsed->canonical;
      return feedback;
    }
    COLLNET_WARN(
        "TERSE_COLLNET_CODEC='%s' is not a codec terse knows (%s); CollNet runs "
        "uncompressed (codec none)",
        spec->c_str(), parsed.status().message().c_str());
    *spec = "none";
    return false;
  }
  auto codec = makeCodec(*spec);
  if (!codec.isOk()) {
    COLLNET_WARN(
        "TERSE_COLLNET_CODEC='%s' is not a codec terse knows (%s); CollNet runs "
        "uncompressed (codec none)",
        spec->c_str(), codec.status().message().c_str());
    *spec = "none";
    return false;
  }
  *spec = (*codec)->spec();
  return (*codec)->wantsErrorFeedback();
}

}  // namespace

Result<Config> loadConfig() {
  Config c;
  TERSE_ASSIGN_OR_RETURN(int64_t timeoutMs, envInt("TERSE_TIMEOUT_MS"));
  if (timeoutMs <= 0)
    return errorInvalidArgument("TERSE_TIMEOUT_MS=%lld must be > 0", (long long)timeoutMs);
  c.timeout = std::chrono::milliseconds(timeoutMs);
  TERSE_ASSIGN_OR_RETURN(std::string periodValue, envString("TERSE_COLLNET_EF_PERIOD"));
  TERSE_ASSIGN_OR_RETURN(PeriodSetting period, parsePeriodSetting(periodValue));
  TERSE_ASSIGN_OR_RETURN(std::string spec, envString("TERSE_COLLNET_CODEC"));
  if (spec.empty()) spec = "none";
  TERSE_ASSIGN_OR_RETURN(bool needsFeedback, validateSpec(&spec));
  const bool off = !period.learn && period.period == 0;
  if (needsFeedback && off) {
    COLLNET_WARN(
        "TERSE_COLLNET_CODEC='%s' needs error feedback, which TERSE_COLLNET_EF_PERIOD=0 turns "
        "off, so CollNet runs uncompressed (codec none)",
        spec.c_str());
    spec = "none";
    needsFeedback = false;
  }
  c.errorFeedback = needsFeedback;
  c.efPeriod = period;
  c.codec = spec;
  c.warmupCodec = "none";
  if (needsFeedback && isAutoSpec(spec)) {
    // The policy's candidates that keep no residuals: everything up to int8.
    TERSE_ASSIGN_OR_RETURN(AutoSpec noResidual, parseAutoSpec("auto:max=int8"));
    c.warmupCodec = noResidual.canonical;
  }
  TERSE_ASSIGN_OR_RETURN(DeviceInfo dev, discoverDevice());
  c.host = numericHost(dev.bindAddr);
  if (c.host.empty() || c.host.size() >= sizeof(Handle{}.host))
    return errorSystem("cannot print the address of interface %s", dev.ifname.c_str());
  return c;
}

}  // namespace terse::plugin::collnet
