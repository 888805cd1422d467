#include "plugin_log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>

namespace terse::plugin {
namespace {

std::atomic<ncclDebugLogger_t> gLogger{nullptr};
std::mutex gHoldMu;     // orders hold/release from the two sides' inits and finalizes
unsigned gHolders = 0;  // bit per LogSide, guarded by gHoldMu

unsigned bit(LogSide side) { return 1u << static_cast<unsigned>(side); }

const char* prefix(LogSide side) { return side == LogSide::kNet ? "NET/terse" : "CollNet/terse"; }

// terse's levels use NCCL's numbers (WARN 2, INFO 3, TRACE 5), so they pass through unchanged.
// Lines of terse's own layers (transport, collectives) carry the net prefix.
void sinkToNccl(LogLevel level, uint64_t, const char* file, int line, const char* message) {
  ncclDebugLogger_t logger = gLogger.load();
  if (logger != nullptr)
    logger(static_cast<ncclDebugLogLevel>(level), NCCL_NET, file, line, "NET/terse : %s", message);
}

}  // namespace

void holdNcclLogger(LogSide side, ncclDebugLogger_t logger) {
  if (logger == nullptr) return;
  std::lock_guard<std::mutex> lock(gHoldMu);
  gHolders |= bit(side);
  gLogger.store(logger);
  setLogSink(sinkToNccl);
}

void releaseNcclLogger(LogSide side) {
  std::lock_guard<std::mutex> lock(gHoldMu);
  gHolders &= ~bit(side);
  if (gHolders != 0) return;
  gLogger.store(nullptr);
  setLogSink(nullptr);
}

void pluginLog(LogSide side, LogLevel level, unsigned long ncclFlags, const char* file, int line,
               const char* fmt, ...) {
  ncclDebugLogger_t logger = gLogger.load();
  if (logger == nullptr && !logEnabled(level, kSubsysPlugin)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (logger != nullptr)
    logger(static_cast<ncclDebugLogLevel>(level), ncclFlags, file, line, "%s : %s", prefix(side),
           buf);
  else
    logMessage(level, kSubsysPlugin, file, line, "%s : %s", prefix(side), buf);
}

}  // namespace terse::plugin
