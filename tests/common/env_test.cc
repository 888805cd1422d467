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

// docs/env.md's row of each variable gives its type and exactly the range or choices the
// parser accepts (envAccepted), so the doc cannot promise a range the code does not enforce.
TEST(Env, DocumentationGivesEachVariablesTypeAndAcceptedValues) {
  std::ifstream in(std::string(TERSE_SOURCE_DIR) + "/docs/env.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const auto& v : envRegistry()) {
    const std::string head = std::string("| `") + v.name + "` | ";
    size_t row = doc.find(head);
    ASSERT_NE(row, std::string::npos) << v.name;
    std::string line = doc.substr(row, doc.find('\n', row) - row);
    std::string want = head + v.type + " | " + v.defaultValue + " | " + envAccepted(v) + " |";
    // An empty cell is written "| |".
    for (std::string twice = "|  |"; want.find(twice) != std::string::npos;)
      want.replace(want.find(twice), twice.size(), "| |");
    EXPECT_EQ(line.substr(0, want.size()), want) << v.name;
  }
}

// Ranges are enforced by the one parser: values at the bounds pass, one past them fails with
// the variable's name, and only plain base-10 text is a number.
TEST(Env, IntegersAreCheckedAgainstTheirRange) {
  setenv("TERSE_PIPELINE_DEPTH", "8", 1);
  EXPECT_EQ(envInt("TERSE_PIPELINE_DEPTH").value(), 8);
  for (const char* bad : {"9", "0", "-1", "0x4", " 4", "4 ", "4.0", "+", "99999999999999999999"}) {
    setenv("TERSE_PIPELINE_DEPTH", bad, 1);
    auto r = envInt("TERSE_PIPELINE_DEPTH");
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_NE(r.status().message().find("TERSE_PIPELINE_DEPTH"), std::string::npos) << bad;
    EXPECT_NE(r.status().message().find("1..8"), std::string::npos) << r.status().message();
  }
  unsetenv("TERSE_PIPELINE_DEPTH");
  EXPECT_EQ(parseIntSetting("WORLD_SIZE", "2147483648", 1, 1 << 24).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(parseIntSetting("X", "+7", 0, 10).value(), 7);
}

// The plugin's users find all its knobs in docs/nccl-plugin.md.
TEST(Env, NcclPluginDocListsEveryNetVariable) {
  EXPECT_GE(expectDocumented("docs/nccl-plugin.md", "TERSE_NET_"), 3)
      << "the plugin's variables are missing from the registry";
}

}  // namespace
}  // namespace terse
