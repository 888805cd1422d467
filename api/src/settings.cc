#include "settings.h"

#include <cstdlib>

namespace terse {

Result<std::vector<FaultRule>> readFaultRules() {
  TERSE_ASSIGN_OR_RETURN(std::string text, kFaultSetting.readText());
  return parseFaultRules(text);
}

Result<CommSettings> readCommSettings() {
  CommSettings out;
  TERSE_ASSIGN_OR_RETURN(out.agreed, AgreedSettings::fromEnvironment());
  TERSE_ASSIGN_OR_RETURN(int64_t depth, kPipelineDepthSetting.readInt());
  out.engine = EngineSettings::from(out.agreed, static_cast<size_t>(depth));
  TERSE_ASSIGN_OR_RETURN(out.transport.faults, readFaultRules());
  TERSE_ASSIGN_OR_RETURN(int64_t eager, kUcxTcpEagerSetting.readInt());
  out.transport.ucxTcpEager = eager != 0;
  TERSE_ASSIGN_OR_RETURN(out.node, kNodeSetting.readText());
  return out;
}

CommSettings readInProcessSettings() {
  CommSettings out;
  auto agreed = AgreedSettings::fromEnvironment();
  if (agreed.isOk()) out.agreed = std::move(agreed).value();
  auto depth = kPipelineDepthSetting.readInt();
  out.engine = EngineSettings::from(
      out.agreed, depth.isOk()
                      ? static_cast<size_t>(depth.value())
                      : std::strtoull(kPipelineDepthSetting.info().defaultValue, nullptr, 10));
  return out;
}

BootstrapVariables readBootstrapVariables() {
  BootstrapVariables vars;
  for (const std::string& name : bootstrapVariableNames()) {
    const char* value = std::getenv(name.c_str());
    if (value != nullptr && *value != '\0') vars.values[name] = value;
  }
  return vars;
}

}  // namespace terse
