// Reading a registered setting by its name, for tests only: they set variables by name and check
// what the parsers make of them. Code reads a setting through its declaration
// (EnvSetting::readInt(), ... in terse/common/env.h), and only where terse/common/env.h says;
// tests/api/settings_test.cc fails where a source outside tests/ includes this header.
#pragma once

#include "terse/common/env.h"

namespace terse {

// The declaration registered under `name`, or null.
const EnvSetting* findEnvSetting(const char* name);

// The getters of the setting registered under `name`; an unregistered name is a kInternal.
Result<int64_t> envInt(const char* name);
Result<bool> envBool(const char* name);
Result<std::string> envEnum(const char* name);
Result<std::string> envString(const char* name);

}  // namespace terse
