// Plugin logging. Inside NCCL, lines go to the logger NCCL passes to init (NCCL_DEBUG filters
// them) with the prefix "NET/terse : "; terse's own layers are routed there too through
// common's setLogSink. Without a logger (tests, tools) lines go through terse's TERSE_DEBUG
// logging under the PLUGIN subsystem.
#pragma once

#include "terse/common/logging.h"

#include "nccl_net_abi.h"

namespace terse::plugin {

// Installs NCCL's logger (nullptr uninstalls it and restores terse's default sink).
void setNcclLogger(ncclDebugLogger_t logger);

void pluginLog(LogLevel level, unsigned long ncclFlags, const char* file, int line, const char* fmt,
               ...) __attribute__((format(printf, 5, 6)));

}  // namespace terse::plugin

#define PLUGIN_WARN(...) \
  ::terse::plugin::pluginLog(::terse::LogLevel::kWarn, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)
#define PLUGIN_INFO(...)                                                                         \
  ::terse::plugin::pluginLog(::terse::LogLevel::kInfo, NCCL_INIT | NCCL_NET, __FILE__, __LINE__, \
                             __VA_ARGS__)
#define PLUGIN_TRACE(...) \
  ::terse::plugin::pluginLog(::terse::LogLevel::kTrace, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__)
