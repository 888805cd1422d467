#include "collnet_config.h"

#include "net_device.h"
#include "net_handshake.h"
#include "plugin_log.h"

#include "terse/api/internal.h"
#include "terse/common/env.h"
#include "terse/common/socket.h"
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
    if (!parsed.isOk()) return parsed.status().withContext("TERSE_COLLNET_CODEC");
    bool feedback = false;
    for (const std::string& candidate : parsed->candidates) {
      TERSE_ASSIGN_OR_RETURN(std::shared_ptr<const Codec> codec, makeCodec(candidate));
      feedback |= codec->wantsErrorFeedback();
    }
    *spec = parsed->canonical;
    return feedback;
  }
  auto codec = makeCodec(*spec);
  if (!codec.isOk()) return codec.status().withContext("TERSE_COLLNET_CODEC");
  *spec = (*codec)->spec();
  return (*codec)->wantsErrorFeedback();
}

Status checkCodecSetting(const char* name, const std::string& value) {
  std::string spec = value;
  return validateSpec(&spec).status();
}

Status checkPeriodSetting(const char* name, const std::string& value) {
  return parsePeriodSetting(value).status().withContext(name);
}

// Settings read in this file (terse/common/env.h: declared next to their readers).
const EnvSetting kCodecSetting{
    {"TERSE_COLLNET_CODEC", "string", "none",
     "NCCL CollNet plugin: codec spec for iallreduce/ireducescatter (none, fp16, bf16, int8, "
     "fp8, mxfp8, mxfp4, int4, onebit, topk with options, see docs/codecs.md) or "
     "auto[:max=NAME]. An unknown spec fails "
     "the CollNet init (NCCL then runs without CollNet) with a message naming it.",
     0, 0, nullptr, checkCodecSetting}};
const EnvSetting kEfPeriodSetting{
    {"TERSE_COLLNET_EF_PERIOD", "string", "auto",
     "NCCL CollNet plugin: iallreduce + ireducescatter calls per training step; residuals of "
     "error-feedback codecs (onebit, topk) are kept per position in that sequence. auto (or "
     "auto:warmup=N) learns it from the calls; 0 turns error feedback off (such codecs fall "
     "back to none).",
     0, 0, nullptr, checkPeriodSetting}};

}  // namespace

Result<Config> loadConfig() {
  Config c;
  TERSE_ASSIGN_OR_RETURN(c.timeout, timeoutFromEnv());
  TERSE_ASSIGN_OR_RETURN(std::string periodValue, kEfPeriodSetting.readText());
  auto parsedPeriod = parsePeriodSetting(periodValue);
  if (!parsedPeriod.isOk()) return parsedPeriod.status().withContext(kEfPeriodSetting.name());
  const PeriodSetting period = parsedPeriod.value();
  TERSE_ASSIGN_OR_RETURN(std::string spec, kCodecSetting.readText());
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
  c.host = socketNumericHost(dev.bindAddr);
  if (c.host.empty() || c.host.size() >= sizeof(Handle{}.host))
    return errorSystem("cannot print the address of interface %s", dev.ifname.c_str());
  return c;
}

}  // namespace terse::plugin::collnet
