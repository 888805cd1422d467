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

// docs/env.md must list every registered variable, and nothing the registry lacks.
TEST(Env, DocumentationListsEveryVariable) {
  std::ifstream in(std::string(TERSE_SOURCE_DIR) + "/docs/env.md");
  ASSERT_TRUE(in.good()) << "docs/env.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  for (const auto& v : envRegistry())
    EXPECT_NE(doc.find(std::string("`") + v.name + "`"), std::string::npos)
        << v.name << " is registered but not documented in docs/env.md";
  size_t pos = 0;
  while ((pos = doc.find("`TERSE_", pos)) != std::string::npos) {
    size_t end = doc.find('`', pos + 1);
    std::string name = doc.substr(pos + 1, end - pos - 1);
    bool known = false;
    for (const auto& v : envRegistry()) known |= name == v.name;
    EXPECT_TRUE(known) << name << " is documented but not registered";
    pos = end + 1;
  }
}

}  // namespace
}  // namespace terse
