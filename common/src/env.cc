#include "terse/common/env.h"
#include "terse/common/env_by_name.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <strings.h>

namespace terse {

namespace {

bool sameText(const char* a, const char* b) {
  return (a == nullptr || b == nullptr) ? a == b : std::strcmp(a, b) == 0;
}

bool sameDeclaration(const EnvVarInfo& a, const EnvVarInfo& b) {
  return sameText(a.name, b.name) && sameText(a.type, b.type) &&
         sameText(a.defaultValue, b.defaultValue) && sameText(a.doc, b.doc) && a.min == b.min &&
         a.max == b.max && sameText(a.choices, b.choices) && a.check == b.check &&
         a.everyRank == b.everyRank;
}

// The declarations linked into this program. Never destroyed: EnvSetting constants of other
// translation units unregister from it during exit in no particular order.
struct Registry {
  std::mutex mu;
  std::vector<const EnvSetting*> settings;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

EnvSetting::EnvSetting(const EnvVarInfo& info, EnvAgreement agreement) : info_(info) {
  info_.everyRank = agreement == EnvAgreement::kEveryRank;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.settings.push_back(this);
}

EnvSetting::~EnvSetting() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.settings.erase(std::remove(r.settings.begin(), r.settings.end(), this), r.settings.end());
}

std::vector<EnvVarInfo> envRegistry() {
  Registry& r = registry();
  std::vector<EnvVarInfo> out;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const EnvSetting* s : r.settings) {
      bool seen = false;
      for (const EnvVarInfo& o : out) seen |= std::strcmp(o.name, s->name()) == 0;
      if (!seen) out.push_back(s->info());
    }
  }
  std::sort(out.begin(), out.end(), [](const EnvVarInfo& a, const EnvVarInfo& b) {
    return std::strcmp(a.name, b.name) < 0;
  });
  return out;
}

std::vector<std::string> envConflicts() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (size_t i = 0; i < r.settings.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (std::strcmp(r.settings[i]->name(), r.settings[j]->name()) == 0 &&
          !sameDeclaration(r.settings[i]->info(), r.settings[j]->info()) &&
          std::find(out.begin(), out.end(), r.settings[i]->name()) == out.end())
        out.push_back(r.settings[i]->name());
  return out;
}

// The declaration of `name`, or null. The pointer stays valid while the declaring module is
// loaded, which is as long as its code can ask.
static const EnvVarInfo* findVar(const char* name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const EnvSetting* s : r.settings)
    if (std::strcmp(s->name(), name) == 0) return &s->info();
  return nullptr;
}

namespace {

// A peer's or user's text inside our messages: control bytes escaped, long values cut.
std::string quoted(const std::string& text) { return printableBytes(text.data(), text.size(), 80); }

std::vector<std::string> splitChoices(const char* choices) {
  return splitCommas(choices ? choices : "");
}

// The choice `word` names (case-insensitively), or "" if none.
std::string matchChoice(const EnvVarInfo& info, const std::string& word) {
  for (const std::string& c : splitChoices(info.choices))
    if (strcasecmp(c.c_str(), word.c_str()) == 0) return c;
  return std::string();
}

// The variable's text, or its default when unset or empty.
std::string valueOf(const EnvVarInfo& info) {
  const char* value = std::getenv(info.name);
  return std::string(value != nullptr && *value != '\0' ? value : info.defaultValue);
}

Result<int64_t> intOf(const EnvVarInfo& info) {
  const std::string text = valueOf(info);
  if (text.empty()) return errorInvalidArgument("%s is not set and has no default", info.name);
  return parseIntSetting(info.name, text, info.min, info.max);
}

Result<bool> boolOf(const EnvVarInfo& info) {
  const std::string text = valueOf(info);
  const char* t = text.c_str();
  if (!strcasecmp(t, "1") || !strcasecmp(t, "true") || !strcasecmp(t, "yes") ||
      !strcasecmp(t, "on"))
    return true;
  if (!strcasecmp(t, "0") || !strcasecmp(t, "false") || !strcasecmp(t, "no") ||
      !strcasecmp(t, "off") || text.empty())
    return false;
  return errorInvalidArgument("%s='%s' is not a boolean (accepted: %s)", info.name,
                              quoted(text).c_str(), envAccepted(info).c_str());
}

Result<std::string> enumOf(const EnvVarInfo& info) {
  const std::string text = valueOf(info);
  std::string choice = matchChoice(info, text);
  if (choice.empty())
    return errorInvalidArgument("%s='%s' is not one of %s", info.name, quoted(text).c_str(),
                                envAccepted(info).c_str());
  return choice;
}

// A getter asked of a setting of another type: a programming error.
Status typeIs(const EnvVarInfo& info, const char* want, const char* alsoOk = nullptr) {
  if (std::strcmp(info.type, want) == 0 || (alsoOk && std::strcmp(info.type, alsoOk) == 0))
    return Status::ok();
  return errorInternal("%s is declared as %s, not read as %s", info.name, info.type, want);
}

Status checkOne(const EnvVarInfo& v) {
  const std::string type = v.type;
  if (valueOf(v).empty()) return Status::ok();  // unset, and no default to check
  if (type == "int") return intOf(v).status();
  if (type == "bool") return boolOf(v).status();
  if (type == "enum") return enumOf(v).status();
  if (type == "string" && v.check != nullptr) return v.check(v.name, valueOf(v));
  if (type == "list") {
    const std::string text = valueOf(v);
    size_t pos = !text.empty() && text[0] == '^' ? 1 : 0;
    while (pos <= text.size()) {
      size_t comma = text.find(',', pos);
      if (comma == std::string::npos) comma = text.size();
      std::string word = text.substr(pos, comma - pos);
      if (matchChoice(v, word).empty())
        return errorInvalidArgument(
            "%s='%s': '%s' is not one of %s (a comma-separated list, optionally after ^)", v.name,
            quoted(text).c_str(), quoted(word).c_str(), envAccepted(v).c_str());
      pos = comma + 1;
    }
  }
  return Status::ok();
}

}  // namespace

std::string envAccepted(const EnvVarInfo& info) {
  const std::string type = info.type;
  if (type == "int") {
    auto bound = [](int64_t x) {
      if (x == std::numeric_limits<int64_t>::max()) return std::string("2^63-1");
      // Powers of two read better as such (2^30 rather than 1073741824).
      if (x >= 65536 && (x & (x - 1)) == 0) {
        int e = 0;
        while ((int64_t{1} << e) != x) ++e;
        return "2^" + std::to_string(e);
      }
      return std::to_string(x);
    };
    return bound(info.min) + ".." + bound(info.max);
  }
  if (type == "bool") return "1/0, true/false, yes/no, on/off";
  if (type == "enum" || type == "list") {
    std::string out;
    for (const std::string& c : splitChoices(info.choices)) out += (out.empty() ? "" : ", ") + c;
    return out;
  }
  return std::string();
}

Result<int64_t> parseIntSetting(const char* name, const std::string& text, int64_t min,
                                int64_t max) {
  // strtoll alone would skip leading blanks and read 0x.. or 010 in other bases with base 0;
  // base 10 and a first character that is a digit or a sign keep the form plain.
  const char first = text.empty() ? '\0' : text[0];
  const bool plain = std::isdigit(static_cast<unsigned char>(first)) ||
                     ((first == '-' || first == '+') && text.size() > 1 &&
                      std::isdigit(static_cast<unsigned char>(text[1])));
  errno = 0;
  char* end = nullptr;
  long long value = plain ? std::strtoll(text.c_str(), &end, 10) : 0;
  if (!plain || *end != '\0')
    return errorInvalidArgument("%s='%s' is not an integer (accepted: %lld..%lld)", name,
                                quoted(text).c_str(), static_cast<long long>(min),
                                static_cast<long long>(max));
  if (errno == ERANGE || value < min || value > max)
    return errorInvalidArgument("%s=%s is out of range (accepted: %lld..%lld)", name,
                                quoted(text).c_str(), static_cast<long long>(min),
                                static_cast<long long>(max));
  return static_cast<int64_t>(value);
}

Result<int64_t> EnvSetting::readInt() const {
  TERSE_RETURN_IF_ERROR(typeIs(info_, "int"));
  return intOf(info_);
}

Result<bool> EnvSetting::readBool() const {
  TERSE_RETURN_IF_ERROR(typeIs(info_, "bool"));
  return boolOf(info_);
}

Result<std::string> EnvSetting::readEnum() const {
  TERSE_RETURN_IF_ERROR(typeIs(info_, "enum"));
  return enumOf(info_);
}

Result<std::string> EnvSetting::readText() const {
  TERSE_RETURN_IF_ERROR(typeIs(info_, "string", "list"));
  return valueOf(info_);
}

std::string EnvSetting::readRaw() const { return valueOf(info_); }

bool EnvSetting::isSet() const {
  const char* value = std::getenv(info_.name);
  return value != nullptr && *value != '\0';
}

// The by-name getters of terse/common/env_by_name.h (tests only): the same parsers, found
// through the registry.
const EnvSetting* findEnvSetting(const char* name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const EnvSetting* s : r.settings)
    if (std::strcmp(s->name(), name) == 0) return s;
  return nullptr;
}

namespace {
Result<const EnvVarInfo*> registered(const char* name) {
  const EnvVarInfo* info = findVar(name);
  if (info == nullptr)
    return errorInternal("environment variable %s is not in terse's registry", name);
  return info;
}
}  // namespace

Result<int64_t> envInt(const char* name) {
  TERSE_ASSIGN_OR_RETURN(const EnvVarInfo* info, registered(name));
  return intOf(*info);
}

Result<bool> envBool(const char* name) {
  TERSE_ASSIGN_OR_RETURN(const EnvVarInfo* info, registered(name));
  return boolOf(*info);
}

Result<std::string> envEnum(const char* name) {
  TERSE_ASSIGN_OR_RETURN(const EnvVarInfo* info, registered(name));
  return enumOf(*info);
}

Result<std::string> envString(const char* name) {
  TERSE_ASSIGN_OR_RETURN(const EnvVarInfo* info, registered(name));
  return valueOf(*info);
}

Status checkEnvironment() {
  for (const std::string& name : envConflicts())
    return errorInternal("%s is declared twice with different types, defaults or ranges",
                         name.c_str());
  for (const EnvVarInfo& v : envRegistry()) TERSE_RETURN_IF_ERROR(checkOne(v));
  return Status::ok();
}

namespace {

// `info`'s value as AgreedSettings keeps it, from `text` (the variable's value, or its default).
Result<AgreedSettings::Value> agreedValue(const EnvVarInfo& info, bool set) {
  AgreedSettings::Value v;
  v.name = info.name;
  v.set = set;
  const std::string type = info.type;
  if (type == "int") {
    TERSE_ASSIGN_OR_RETURN(v.number, intOf(info));
    v.text = std::to_string(v.number);
  } else if (type == "bool") {
    TERSE_ASSIGN_OR_RETURN(bool b, boolOf(info));
    v.number = b ? 1 : 0;
    v.text = b ? "1" : "0";
  } else if (type == "enum") {
    TERSE_ASSIGN_OR_RETURN(v.text, enumOf(info));
    const std::vector<std::string> choices = splitChoices(info.choices);
    v.number = std::find(choices.begin(), choices.end(), v.text) - choices.begin();
  } else {
    // Strings and lists have no canonical form to compare; none is marked so far.
    return errorInternal("%s: a %s setting cannot be EnvAgreement::kEveryRank", info.name,
                         info.type);
  }
  return v;
}

// The value `info` has when nothing is set.
AgreedSettings::Value defaultValue(const EnvVarInfo& info) {
  AgreedSettings::Value v;
  v.name = info.name;
  v.text = info.defaultValue;
  const std::string type = info.type;
  if (type == "int") v.number = std::strtoll(info.defaultValue, nullptr, 10);
  if (type == "bool") v.number = strcasecmp(info.defaultValue, "1") == 0 ? 1 : 0;
  if (type == "enum") {
    const std::vector<std::string> choices = splitChoices(info.choices);
    v.number = std::find(choices.begin(), choices.end(), v.text) - choices.begin();
  }
  return v;
}

// One rank's published values: name -> (value, what to show). Empty on text that is not lines
// of NAME=VALUE (a peer's bytes are parsed as untrusted).
struct Published {
  std::string value, shown;
};
bool parsePublished(const std::string& text, std::vector<std::pair<std::string, Published>>* out) {
  static const std::string kDefault = " (default)";
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) return false;
    Published p;
    p.shown = line.substr(eq + 1);
    p.value = p.shown;
    if (p.value.size() >= kDefault.size() &&
        p.value.compare(p.value.size() - kDefault.size(), kDefault.size(), kDefault) == 0)
      p.value.resize(p.value.size() - kDefault.size());
    out->emplace_back(line.substr(0, eq), std::move(p));
  }
  return true;
}

}  // namespace

Result<AgreedSettings> AgreedSettings::fromEnvironment() {
  AgreedSettings out;
  for (const EnvVarInfo& info : envRegistry()) {
    if (!info.everyRank) continue;
    const char* raw = std::getenv(info.name);
    TERSE_ASSIGN_OR_RETURN(Value v, agreedValue(info, raw != nullptr && *raw != '\0'));
    out.values_.push_back(std::move(v));
  }
  return out;
}

AgreedSettings AgreedSettings::defaults() {
  AgreedSettings out;
  for (const EnvVarInfo& info : envRegistry())
    if (info.everyRank) out.values_.push_back(defaultValue(info));
  return out;
}

const AgreedSettings::Value* AgreedSettings::find(const char* name) const {
  for (const Value& v : values_)
    if (v.name == name) return &v;
  return nullptr;
}

int64_t AgreedSettings::number(const EnvSetting& setting) const {
  const Value* v = find(setting.name());
  return v ? v->number : defaultValue(setting.info()).number;
}

std::string AgreedSettings::text(const EnvSetting& setting) const {
  const Value* v = find(setting.name());
  return v ? v->text : defaultValue(setting.info()).text;
}

std::string AgreedSettings::encode() const {
  std::string out;
  for (const Value& v : values_) out += v.name + "=" + v.text + (v.set ? "" : " (default)") + "\n";
  return out;
}

Status AgreedSettings::compare(const std::vector<std::string>& encodedByRank) {
  const int n = static_cast<int>(encodedByRank.size());
  std::vector<std::vector<std::pair<std::string, Published>>> ranks(n);
  for (int r = 0; r < n; ++r)
    if (!parsePublished(encodedByRank[r], &ranks[r]))
      return errorInvalidArgument(
          "rank %d published settings that are not lines of NAME=VALUE: '%s'", r,
          quoted(encodedByRank[r]).c_str());
  if (n == 0) return Status::ok();
  // Every rank runs the same build (the rendezvous checks the version), so the names match;
  // a rank whose list differs still gets a message rather than a misread.
  for (int r = 1; r < n; ++r) {
    bool sameNames = ranks[r].size() == ranks[0].size();
    for (size_t i = 0; sameNames && i < ranks[0].size(); ++i)
      sameNames = ranks[r][i].first == ranks[0][i].first;
    if (!sameNames)
      return errorInvalidArgument(
          "rank %d's settings that every rank must share are not rank 0's (rank 0: '%s', rank "
          "%d: '%s'): do all ranks run the same build of terse?",
          r, quoted(encodedByRank[0]).c_str(), r, quoted(encodedByRank[r]).c_str());
  }
  std::string message;
  for (size_t i = 0; i < ranks[0].size(); ++i) {
    const Published& first = ranks[0][i].second;
    int other = -1, count = 0;
    for (int r = 1; r < n; ++r) {
      if (ranks[r][i].second.value == first.value) continue;
      if (other < 0) other = r;
      ++count;
    }
    if (other < 0) continue;
    std::string more;
    if (count > 1) more = formatString(" (%d ranks in all differ from rank 0)", count);
    message += formatString("%s%s differs between ranks: rank 0 has %s, rank %d has %s%s",
                            message.empty() ? "" : "; ", ranks[0][i].first.c_str(),
                            quoted(first.shown).c_str(), other,
                            quoted(ranks[other][i].second.shown).c_str(), more.c_str());
  }
  if (message.empty()) return Status::ok();
  return errorInvalidArgument(
      "%s. Every rank of a communicator must set the same value (docs/env.md, column \"every "
      "rank\")",
      message.c_str());
}

std::vector<std::string> splitCommas(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace terse
