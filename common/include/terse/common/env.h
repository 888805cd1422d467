// The one registry of TERSE_* environment variables. Every variable terse reads is declared in
// env.cc's table with its type, default and one line of documentation; docs/env.md lists the
// same table (tests/common/env_doc_test checks that the two agree). Values are read at each
// call so tests can setenv; callers on hot paths cache them.
#pragma once

#include "terse/common/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace terse {

struct EnvVarInfo {
  const char* name;
  const char* type;  // "int", "bool", "string", "enum"
  const char* defaultValue;
  const char* doc;
};

// The registry, in documentation order.
const std::vector<EnvVarInfo>& envRegistry();

// Typed getters. A variable that is set but malformed is an error naming the variable and the
// accepted form, never silently the default. Unregistered names are a programming error
// (kInternal), which keeps the registry complete.
Result<int64_t> envInt(const char* name);
Result<bool> envBool(const char* name);
Result<std::string> envString(const char* name);
// The raw value or the default, no validation (for logging's own bootstrap).
std::string envRaw(const char* name);

}  // namespace terse
