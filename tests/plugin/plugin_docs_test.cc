// docs/nccl-plugin.md must describe every TERSE_NET_* variable the registry holds (docs/env.md
// is checked by tests/common), so users of the plugin find all its knobs in one place.
#include "terse/common/env.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace terse {
namespace {

TEST(PluginDocs, NcclPluginDocListsEveryNetVariable) {
  std::ifstream in(std::string(TERSE_SOURCE_DIR) + "/docs/nccl-plugin.md");
  ASSERT_TRUE(in.good()) << "docs/nccl-plugin.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  int netVars = 0;
  for (const auto& v : envRegistry()) {
    std::string name = v.name;
    if (name.rfind("TERSE_NET_", 0) != 0) continue;
    ++netVars;
    EXPECT_NE(doc.find("`" + name + "`"), std::string::npos)
        << name << " is registered but not documented in docs/nccl-plugin.md";
  }
  EXPECT_GE(netVars, 3) << "the plugin's variables are missing from the registry";
  size_t pos = 0;
  while ((pos = doc.find("`TERSE_", pos)) != std::string::npos) {
    size_t end = doc.find('`', pos + 1);
    std::string name = doc.substr(pos + 1, end - pos - 1);
    bool known = false;
    for (const auto& v : envRegistry()) known |= name == v.name;
    EXPECT_TRUE(known) << name << " is in docs/nccl-plugin.md but not registered";
    pos = end + 1;
  }
}

}  // namespace
}  // namespace terse
