// Plugin logging, one logger for both sides of the library (net and CollNet). Inside NCCL, lines
// go to the logger NCCL passes to init (NCCL_DEBUG filters them), prefixed "NET/terse : " or
// "CollNet/terse : " by side; terse's own layers are routed there too through common's
// setLogSink. Without a logger (tests, tools) lines go through terse's TERSE_DEBUG logging under
// the PLUGIN subsystem.
#pragma once

#include "terse/common/logging.h"

#include "abi/nccl_plugin.h"

namespace terse::plugin {

// The two halves of the library, each with its own init/finalize and its own log prefix.
enum class LogSide { kNet, kCollNet };

// Installs NCCL's logger on behalf of `side` (a nullptr logger changes nothing). NCCL passes the
// same logger to both inits; the last one given wins.
void holdNcclLogger(LogSide side, ncclDebugLogger_t logger);
// `side` no longer needs the logger (its last context is gone, or the library is unloading).
// When neither side holds it, it is uninstalled and terse's default sink restored: nothing may
// call back into NCCL once NCCL may dlclose us.
void releaseNcclLogger(LogSide side);

void pluginLog(LogSide side, LogLevel level, unsigned long ncclFlags, const char* file, int line,
               const char* fmt, ...) __attribute__((format(printf, 6, 7)));

}  // namespace terse::plugin

#define PLUGIN_WARN(...)                                                                         \
  ::terse::plugin::pluginLog(::terse::plugin::LogSide::kNet, ::terse::LogLevel::kWarn, NCCL_NET, \
                             __FILE__, __LINE__, __VA_ARGS__)
#define PLUGIN_INFO(...)                                                               \
  ::terse::plugin::pluginLog(::terse::plugin::LogSide::kNet, ::terse::LogLevel::kInfo, \
                             NCCL_INIT | NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)
#define PLUGIN_TRACE(...)                                                                         \
  ::terse::plugin::pluginLog(::terse::plugin::LogSide::kNet, ::terse::LogLevel::kTrace, NCCL_NET, \
                             __FILE__, __LINE__, __VA_ARGS__)
// CollNet lines carry NCCL's COLL flag as well, at every level.
#define COLLNET_WARN(...)                                                                  \
  ::terse::plugin::pluginLog(::terse::plugin::LogSide::kCollNet, ::terse::LogLevel::kWarn, \
                             NCCL_INIT | NCCL_COLL | NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)
#define COLLNET_INFO(...)                                                                  \
  ::terse::plugin::pluginLog(::terse::plugin::LogSide::kCollNet, ::terse::LogLevel::kInfo, \
                             NCCL_INIT | NCCL_COLL | NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)
