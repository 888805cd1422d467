// The one registry of TERSE_* environment variables and the one strict parser of their values.
// Every variable terse reads is declared in env.cc's table with its type, default, accepted
// range (integers) or choices (enums, lists) and one line of documentation; docs/env.md lists
// the same table (tests/common/env_test.cc checks that the two agree). Values are read at each
// call so tests can setenv; callers on hot paths cache them.
//
// A variable that is set (to anything but the empty string, which counts as unset) and
// malformed or out of range is an error naming the variable, its value and what is accepted,
// never silently the default. checkEnvironment() applies that rule to every registered variable
// at once: communicators call it when they are created, so a typo fails at start-up on every
// path, including variables read later or only by some code paths.
#pragma once

#include "terse/common/status.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace terse {

// Largest world terse accepts (call tags and fault-injection filters hold ranks in 24 bits).
constexpr int64_t kMaxRanks = int64_t{1} << 24;
// Longest TERSE_TIMEOUT_MS: a year. Deadlines are steady_clock time points in nanoseconds, and
// a timeout of centuries would overflow them into the past.
constexpr int64_t kMaxTimeoutMs = int64_t{365} * 24 * 3600 * 1000;

struct EnvVarInfo {
  const char* name;
  const char* type;  // "int", "bool", "string", "enum", "list"
  const char* defaultValue;
  const char* doc;
  // int: the accepted closed range.
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();
  // enum: the accepted values, comma-separated (matched case-insensitively); list: the accepted
  // items of a comma-separated list that may start with '^'.
  const char* choices = nullptr;
};

// The registry, in documentation order.
const std::vector<EnvVarInfo>& envRegistry();

// What a registered variable accepts, for messages and docs: "1..8", "NONE, WARN, INFO, TRACE",
// "1/0, true/false, yes/no, on/off", or "" for free-form strings.
std::string envAccepted(const EnvVarInfo& info);

// Typed getters. Unregistered names are a programming error (kInternal), which keeps the
// registry complete.
Result<int64_t> envInt(const char* name);
Result<bool> envBool(const char* name);
// An enum's value in the spelling of its choices (e.g. "INFO" for "info").
Result<std::string> envEnum(const char* name);
Result<std::string> envString(const char* name);
// The raw value or the default, no validation (for logging's own bootstrap).
std::string envRaw(const char* name);

// The parser behind envInt, for integers terse reads from other programs' variables (the
// launchers' OMPI_COMM_WORLD_SIZE, SLURM_PROCID, ...): base 10, optional sign, nothing else, in
// [min, max]. `name` only labels the message.
Result<int64_t> parseIntSetting(const char* name, const std::string& text, int64_t min,
                                int64_t max);

// Every registered variable that is set, parsed as its type says: the first malformed one is a
// kInvalidArgument naming it. Free-form strings (TERSE_STORE, TERSE_FAULT, ...) are checked by
// their own parsers where they are read.
Status checkEnvironment();

}  // namespace terse
