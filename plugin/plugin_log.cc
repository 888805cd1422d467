#include "plugin_log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace terse::plugin {
namespace {

std::atomic<ncclDebugLogger_t> gLogger{nullptr};

// terse's levels use NCCL's numbers (WARN 2, INFO 3, TRACE 5), so they pass through unchanged.
void sinkToNccl(LogLevel level, uint64_t, const char* file, int line, const char* message) {
  ncclDebugLogger_t logger = gLogger.load();
  if (logger != nullptr)
    logger(static_cast<ncclDebugLogLevel>(level), NCCL_NET, file, line, "NET/terse : %s", message);
}

}  // namespace

void setNcclLogger(ncclDebugLogger_t logger) {
  gLogger.store(logger);
  setLogSink(logger != nullptr ? sinkToNccl : nullptr);
}

void pluginLog(LogLevel level, unsigned long ncclFlags, const char* file, int line, const char* fmt,
               ...) {
  ncclDebugLogger_t logger = gLogger.load();
  if (logger == nullptr && !logEnabled(level, kSubsysPlugin)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (logger != nullptr)
    logger(static_cast<ncclDebugLogLevel>(level), ncclFlags, file, line, "NET/terse : %s", buf);
  else
    logMessage(level, kSubsysPlugin, file, line, "NET/terse : %s", buf);
}

}  // namespace terse::plugin
