#include "terse/common/logging.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace terse {
namespace {

std::vector<std::string> captured;
void capture(LogLevel, uint64_t, const char*, int, const char* msg) { captured.push_back(msg); }

TEST(Logging, LevelAndSubsystemFilter) {
  setenv("TERSE_DEBUG", "INFO", 1);
  setenv("TERSE_DEBUG_SUBSYS", "NET,COLL", 1);
  reloadLogConfig();
  setLogSink(capture);
  captured.clear();
  TERSE_INFO(kSubsysNet, "net %d", 1);
  TERSE_INFO(kSubsysCodec, "codec filtered");
  TERSE_TRACE(kSubsysNet, "trace filtered");
  TERSE_WARN(kSubsysColl, "coll %s", "warn");
  setenv("TERSE_DEBUG_SUBSYS", "^NET", 1);
  reloadLogConfig();
  TERSE_INFO(kSubsysNet, "net excluded");
  TERSE_INFO(kSubsysCodec, "codec now");
  setLogSink(nullptr);
  unsetenv("TERSE_DEBUG");
  unsetenv("TERSE_DEBUG_SUBSYS");
  reloadLogConfig();
  EXPECT_EQ(captured, (std::vector<std::string>{"net 1", "coll warn", "codec now"}));
}

}  // namespace
}  // namespace terse
