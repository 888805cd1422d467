#include "terse/common/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace terse {
namespace {

TEST(Env, TypedGettersValidate) {
  setenv("TERSE_CPU_THREADS", "3", 1);
  EXPECT_EQ(envInt("TERSE_CPU_THREADS").value(), 3);
  setenv("TERSE_CPU_THREADS", "3x", 1);
  auto bad = envInt("TERSE_CPU_THREADS");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("TERSE_CPU_THREADS='3x'"), std::string::npos);
  unsetenv("TERSE_CPU_THREADS");
  EXPECT_EQ(envInt("TERSE_CPU_THREADS").value(), 0) << "falls back to the registered default";
  EXPECT_EQ(envInt("TERSE_TIMEOUT_MS").value(), 300000);
}

TEST(Env, UnregisteredNameIsInternalError) {
  auto r = envString("TERSE_NO_SUCH_VARIABLE");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

// A doc must name (in backquotes) every registered variable starting with `prefix`, and every
// `TERSE_*` name it mentions must be registered. Returns how many registered names matched.
int expectDocumented(const std::string& relPath, const std::string& prefix) {
  std::ifstream in(std::string(TERSE_SOURCE_DIR) + "/" + relPath);
  EXPECT_TRUE(in.good()) << relPath << " is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  int matched = 0;
  for (const auto& v : envRegistry()) {
    std::string name = v.name;
    if (name.rfind(prefix, 0) != 0) continue;
    ++matched;
    EXPECT_NE(doc.find("`" + name + "`"), std::string::npos)
        << name << " is registered but not documented in " << relPath;
  }
  size_t pos = 0;
  while ((pos = doc.find("`TERSE_", pos)) != std::string::npos) {
    size_t end = doc.find('`', pos + 1);
    std::string name = doc.substr(pos + 1, end - pos - 1);
    bool known = false;
    for (const auto& v : envRegistry()) known |= name == v.name;
    EXPECT_TRUE(known) << name << " is in " << relPath << " but not registered";
    pos = end + 1;
  }
  return matched;
}

TEST(Env, DocumentationListsEveryVariable) { expectDocumented("docs/env.md", "TERSE_"); }

// The plugin's users find all its knobs in docs/nccl-plugin.md.
TEST(Env, NcclPluginDocListsEveryNetVariable) {
  EXPECT_GE(expectDocumented("docs/nccl-plugin.md", "TERSE_NET_"), 3)
      << "the plugin's variables are missing from the registry";
}

}  // namespace
}  // namespace terse
