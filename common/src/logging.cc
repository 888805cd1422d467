#include "terse/common/logging.h"

#include "terse/common/env.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace terse {

// Settings read in this file (terse/common/env.h: declared next to their readers).
const EnvSetting kDebugSetting{
    {"TERSE_DEBUG", "enum", "WARN",
     "Log level: NONE, WARN, INFO or TRACE. Lines go to stderr (or to NCCL's logger inside the "
     "plugin).",
     0, 0, "NONE,WARN,INFO,TRACE"}};
const EnvSetting kDebugSubsysSetting{
    {"TERSE_DEBUG_SUBSYS", "list", "ALL",
     "Comma-separated subsystems to log: INIT, COLL, NET, CODEC, BOOT, PLUGIN, ALL. A leading ^ "
     "inverts the list.",
     0, 0, "INIT,COLL,NET,CODEC,BOOT,PLUGIN,ALL"}};

namespace {

struct LogConfig {
  std::atomic<int> level{static_cast<int>(LogLevel::kWarn)};
  std::atomic<uint64_t> subsys{kSubsysAll};
  std::atomic<LogSink> sink{nullptr};
  std::atomic<int> rank{-1};
};

LogConfig& rawConfig() {
  static LogConfig cfg;
  return cfg;
}

LogConfig& config() {
  static std::once_flag once;
  std::call_once(once, [] { reloadLogConfig(); });
  return rawConfig();
}

uint64_t parseSubsys(const std::string& text) {
  static const struct {
    const char* name;
    uint64_t bit;
  } kNames[] = {{"INIT", kSubsysInit},   {"COLL", kSubsysColl}, {"NET", kSubsysNet},
                {"CODEC", kSubsysCodec}, {"BOOT", kSubsysBoot}, {"PLUGIN", kSubsysPlugin},
                {"ALL", kSubsysAll}};
  bool invert = !text.empty() && text[0] == '^';
  uint64_t mask = 0;
  size_t pos = invert ? 1 : 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string word = text.substr(pos, comma - pos);
    for (const auto& n : kNames)
      if (strcasecmp(word.c_str(), n.name) == 0) mask |= n.bit;
    pos = comma + 1;
  }
  if (text.empty()) mask = kSubsysAll;
  return invert ? ~mask : mask;
}

void defaultSink(LogLevel level, uint64_t, const char* file, int line, const char* message) {
  static const char* kNames[] = {"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  int rank = config().rank.load(std::memory_order_relaxed);
  char prefix[160];
  if (rank >= 0)
    std::snprintf(prefix, sizeof(prefix), "%s:%d:%ld [%d] terse %s", host, getpid(),
                  static_cast<long>(syscall(SYS_gettid)), rank, kNames[static_cast<int>(level)]);
  else
    std::snprintf(prefix, sizeof(prefix), "%s:%d:%ld terse %s", host, getpid(),
                  static_cast<long>(syscall(SYS_gettid)), kNames[static_cast<int>(level)]);
  if (level == LogLevel::kTrace) {
    const char* base = std::strrchr(file, '/');
    std::fprintf(stderr, "%s %s:%d %s\n", prefix, base ? base + 1 : file, line, message);
  } else {
    std::fprintf(stderr, "%s %s\n", prefix, message);
  }
}

}  // namespace

void reloadLogConfig() {
  LogConfig& cfg = rawConfig();
  std::string level = kDebugSetting.readRaw();
  LogLevel l = LogLevel::kWarn;
  if (!strcasecmp(level.c_str(), "NONE"))
    l = LogLevel::kNone;
  else if (!strcasecmp(level.c_str(), "INFO"))
    l = LogLevel::kInfo;
  else if (!strcasecmp(level.c_str(), "TRACE"))
    l = LogLevel::kTrace;
  cfg.level.store(static_cast<int>(l));
  cfg.subsys.store(parseSubsys(kDebugSubsysSetting.readRaw()));
}

void setLogSink(LogSink sink) { config().sink.store(sink); }
void setLogRank(int rank) { config().rank.store(rank); }

bool logEnabled(LogLevel level, uint64_t subsys) {
  LogConfig& cfg = config();
  return static_cast<int>(level) <= cfg.level.load(std::memory_order_relaxed) &&
         (subsys & cfg.subsys.load(std::memory_order_relaxed)) != 0;
}

void logMessage(LogLevel level, uint64_t subsys, const char* file, int line, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  LogSink sink = config().sink.load();
  (sink ? sink : defaultSink)(level, subsys, file, line, buf);
}

}  // namespace terse
