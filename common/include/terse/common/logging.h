// Logging in NCCL's style. TERSE_DEBUG=NONE|WARN|INFO|TRACE picks the level (default WARN) and
// TERSE_DEBUG_SUBSYS=INIT,NET,COLL,CODEC,BOOT,ALL (a leading ^ excludes) picks subsystems.
// Inside NCCL the plugin installs NCCL's logger with setLogSink so lines go where NCCL's go.
#pragma once

#include <cstdint>

namespace terse {

enum class LogLevel : int { kNone = 0, kWarn = 2, kInfo = 3, kTrace = 5 };

enum LogSubsys : uint64_t {
  kSubsysInit = 1u << 0,
  kSubsysColl = 1u << 1,
  kSubsysNet = 1u << 2,  // transport
  kSubsysCodec = 1u << 3,
  kSubsysBoot = 1u << 4,  // rendezvous and launching
  kSubsysPlugin = 1u << 5,
  kSubsysAll = ~uint64_t{0},
};

// Where formatted lines go. The default sink writes "host:pid:tid [rank] terse LEVEL msg" to
// stderr. A sink receives the already formatted message without a trailing newline. It is called
// from whichever thread logs (callers, collective workers, progress threads) and must be
// thread-safe.
using LogSink = void (*)(LogLevel level, uint64_t subsys, const char* file, int line,
                         const char* message);
void setLogSink(LogSink sink);  // nullptr restores the default
void setLogRank(int rank);      // shown in the default sink's prefix; -1 hides it

bool logEnabled(LogLevel level, uint64_t subsys);
void logMessage(LogLevel level, uint64_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
// Re-reads TERSE_DEBUG / TERSE_DEBUG_SUBSYS (tests use it after setenv).
void reloadLogConfig();

}  // namespace terse

#define TERSE_LOG(level, subsys, ...)                                      \
  do {                                                                     \
    if (::terse::logEnabled(level, subsys))                                \
      ::terse::logMessage(level, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define TERSE_WARN(subsys, ...) TERSE_LOG(::terse::LogLevel::kWarn, subsys, __VA_ARGS__)
#define TERSE_INFO(subsys, ...) TERSE_LOG(::terse::LogLevel::kInfo, subsys, __VA_ARGS__)
#define TERSE_TRACE(subsys, ...) TERSE_LOG(::terse::LogLevel::kTrace, subsys, __VA_ARGS__)
