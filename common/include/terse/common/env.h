// TERSE_* environment variables: their declarations and the one strict parser of their values.
//
// A setting is declared once, as an EnvSetting constant in the .cc that reads it, with its type,
// default, accepted range (integers) or choices (enums, lists) and one line of documentation
// (NCCL_PARAM and UCX's per-component config tables are the models). Constructing the constant
// registers it: the registry is whatever the program links, so checkEnvironment() checks exactly
// the settings of the code present, and the documentation test (tests/api/settings_test.cc)
// checks docs/env.md against every declaration of the library, plugin and tools.
//
// Who reads: a setting is read through its declaration's typed getters (readInt(), readText(),
// ...), never by its name, and only by the entry points: api/ when a communicator is made (one
// snapshot per communicator, api/src/settings.h, handed down to the engine, the transports and
// the rendezvous as typed values), the NCCL plugin, the tools, and the two process-wide services
// of common/ (logging, the CPU thread pool). Nothing in transport/, rendezvous/, collectives/,
// compressors/, kernels/ or optim/ reads the environment: a layer declares the settings it uses
// (the declaration is the registry's entry and the documentation) and takes their values as
// arguments. tests/api/settings_test.cc scans the sources for reads that bypass this.
//
// A setting that decides the messages ranks exchange or the arithmetic they must do alike
// (segment sizes, the algorithm, how ranks agree on a call) is declared EnvAgreement::kEveryRank.
// A communicator reads all such settings once when it is made (AgreedSettings), compares them
// across its ranks, fails creation naming the setting and the ranks that differ, and hands the
// values down to its engine and to the communicators split from it. Marking a new setting so
// is the whole of the work: the comparison covers every marked setting of the registry.
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
  // string: the parser of the value's own syntax (a fault spec, a store address, a codec spec),
  // which checkEnvironment() runs so that a malformed value fails at start-up like any other;
  // null where every text is acceptable (a node name, a path). Returns a kInvalidArgument
  // naming `name` and the value.
  Status (*check)(const char* name, const std::string& value) = nullptr;
  // Set by EnvSetting's constructor: whether every rank of a communicator must have the same
  // value (kEveryRank: compared when the communicator is made; see the top of this file).
  bool everyRank = false;
};

// Whether the ranks of a communicator may differ in a setting.
enum class EnvAgreement {
  kPerRank,    // each rank's own (log level, timeout, node, fault rules, threads)
  kEveryRank,  // changes the messages or the arithmetic: the same everywhere, checked at creation
};

// A declaration (see the top of this file): a namespace-scope constant of the .cc that reads the
// variable, e.g.
//   const EnvSetting kSegmentBytes{{"TERSE_SEGMENT_BYTES", /*type*/ "int", /*default*/ "1048576",
//                                   "Pipeline segment ...", int64_t{1} << 18, int64_t{1} << 30},
//                                  EnvAgreement::kEveryRank};
// The layer that declares a setting the entry points read exports the constant in its header
// (extern const EnvSetting k...Setting;).
class EnvSetting {
 public:
  explicit EnvSetting(const EnvVarInfo& info, EnvAgreement agreement = EnvAgreement::kPerRank);
  ~EnvSetting();
  EnvSetting(const EnvSetting&) = delete;
  EnvSetting& operator=(const EnvSetting&) = delete;
  const EnvVarInfo& info() const { return info_; }
  const char* name() const { return info_.name; }

  // The variable's value now, parsed as its type says: unset or empty is the default; a
  // malformed or out-of-range value is a kInvalidArgument naming the variable, its value and
  // what is accepted. Asking for another type than the declared one is a kInternal.
  Result<int64_t> readInt() const;
  Result<bool> readBool() const;
  // An enum's value in the spelling of its choices (e.g. "INFO" for "info").
  Result<std::string> readEnum() const;
  // A string's (or list's) text, unchecked: its own parser (info().check) is the reader's.
  Result<std::string> readText() const;
  // The raw value or the default, no validation (for logging's own bootstrap).
  std::string readRaw() const;
  // Whether the variable is set (to anything but the empty string).
  bool isSet() const;

 private:
  EnvVarInfo info_;
};

// Every setting declared by the code linked into this program, sorted by name.
std::vector<EnvVarInfo> envRegistry();

// Names declared twice with different declarations (a programming error; checkEnvironment()
// reports it). The same declaration linked twice (one .cc in two static libraries of one
// program) is not a conflict.
std::vector<std::string> envConflicts();

// What a registered variable accepts, for messages and docs: "1..8", "NONE, WARN, INFO, TRACE",
// "1/0, true/false, yes/no, on/off", or "" for free-form strings.
std::string envAccepted(const EnvVarInfo& info);

// The parser behind readInt(), for integers terse reads from other programs' variables (the
// launchers' OMPI_COMM_WORLD_SIZE, SLURM_PROCID, ...): base 10, optional sign, nothing else, in
// [min, max]. `name` only labels the message.
Result<int64_t> parseIntSetting(const char* name, const std::string& text, int64_t min,
                                int64_t max);

// The comma-separated items of a list setting (ours, or another program's such as UCX_TLS),
// empty items kept: "a,,b" is {"a", "", "b"}, "" is {""}.
std::vector<std::string> splitCommas(const std::string& list);

// The values of every registered kEveryRank setting, read once (when a communicator is made) and
// then handed down instead of read again: to the communicator's engine, and from a communicator
// to those split from it, so that what the ranks compared is what they run with.
class AgreedSettings {
 public:
  struct Value {
    std::string name;
    std::string text;    // canonical: an int's decimal, a bool's 1 or 0, an enum's choice
    int64_t number = 0;  // an int's value, a bool's 1 or 0, an enum's index among its choices
    bool set = false;    // false: the default
  };
  // Each parsed as its type says; a malformed value is a kInvalidArgument naming it.
  static Result<AgreedSettings> fromEnvironment();
  // Every setting at its default (for engines and worlds built over a malformed environment,
  // which a communicator's checkEnvironment() refuses before it gets here).
  static AgreedSettings defaults();

  // `setting`'s value; its default when it is not a kEveryRank setting of this snapshot.
  int64_t number(const EnvSetting& setting) const;
  std::string text(const EnvSetting& setting) const;
  const std::vector<Value>& values() const { return values_; }

  // What a rank publishes for the comparison: a line "NAME=TEXT" per setting, with " (default)"
  // after a value the rank did not set.
  std::string encode() const;
  // The comparison of every rank's encode() (by rank), which every rank runs alike over the
  // same texts: ok when all have the same values; else kInvalidArgument naming each setting
  // that differs, rank 0's value and the first rank whose value is another ("TERSE_X differs
  // between ranks: rank 0 has 1048576 (default), rank 2 has 262144").
  static Status compare(const std::vector<std::string>& encodedByRank);

 private:
  const Value* find(const char* name) const;
  std::vector<Value> values_;
};

// Every registered variable that is set, parsed as its type says: the first malformed one is a
// kInvalidArgument naming it. Free-form strings (TERSE_STORE, TERSE_FAULT, ...) are checked by
// their own parsers where they are read.
Status checkEnvironment();

}  // namespace terse
