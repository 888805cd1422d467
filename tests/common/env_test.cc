#include "terse/common/env.h"
#include "terse/common/env_by_name.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace terse {
namespace {

// Declarations of this test's own, so the parser is tested without the layers above common
// (docs/env.md's variables are checked in tests/api/settings_test.cc, which links them all).
const EnvSetting kTestDepth{{"TERSE_ENVTEST_DEPTH", "int", "1", "a 1..8 knob", 1, 8}};
const EnvSetting kTestTimeout{
    {"TERSE_ENVTEST_TIMEOUT_MS", "int", "300000", "a default", 1, 400000}};

TEST(Env, TypedGettersValidate) {
  setenv("TERSE_CPU_THREADS", "3", 1);
  EXPECT_EQ(envInt("TERSE_CPU_THREADS").value(), 3);
  setenv("TERSE_CPU_THREADS", "3x", 1);
  auto bad = envInt("TERSE_CPU_THREADS");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("TERSE_CPU_THREADS='3x'"), std::string::npos);
  unsetenv("TERSE_CPU_THREADS");
  EXPECT_EQ(envInt("TERSE_CPU_THREADS").value(), 0) << "falls back to the registered default";
  EXPECT_EQ(envInt("TERSE_ENVTEST_TIMEOUT_MS").value(), 300000)
      << "the default is not range-checked";
}

// A name declared twice with different declarations is a programming error that
// checkEnvironment() reports; the same declaration twice (one .cc linked into two libraries of a
// program) is not. A declaration leaves the registry with its module (here, its scope).
TEST(Env, ConflictingDeclarationsAreAnInternalError) {
  ASSERT_TRUE(envConflicts().empty());
  ASSERT_TRUE(checkEnvironment().isOk());
  {
    const EnvSetting same{kTestDepth.info()};
    EXPECT_TRUE(envConflicts().empty());
    EXPECT_TRUE(checkEnvironment().isOk());
    const EnvSetting other{{"TERSE_ENVTEST_DEPTH", "int", "1", "a 1..8 knob", 1, 9}};
    ASSERT_EQ(envConflicts().size(), 1u);
    EXPECT_EQ(envConflicts()[0], "TERSE_ENVTEST_DEPTH");
    auto s = checkEnvironment();
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find("TERSE_ENVTEST_DEPTH"), std::string::npos) << s.message();
  }
  EXPECT_TRUE(envConflicts().empty());
  EXPECT_TRUE(checkEnvironment().isOk());
  int count = 0;
  for (const EnvVarInfo& v : envRegistry()) count += std::string(v.name) == "TERSE_ENVTEST_DEPTH";
  EXPECT_EQ(count, 1) << "the registry lists a name once";
}

// A free-form string setting with a parser of its own is checked by checkEnvironment().
Status checkNoSpaces(const char* name, const std::string& value) {
  if (value.find(' ') == std::string::npos) return Status::ok();
  return errorInvalidArgument("%s='%s' has a space", name, value.c_str());
}

TEST(Env, StringSettingsRunTheirOwnParser) {
  const EnvSetting spec{
      {"TERSE_ENVTEST_SPEC", "string", "", "no spaces", 0, 0, nullptr, checkNoSpaces}};
  setenv("TERSE_ENVTEST_SPEC", "a b", 1);
  auto s = checkEnvironment();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("TERSE_ENVTEST_SPEC"), std::string::npos) << s.message();
  setenv("TERSE_ENVTEST_SPEC", "ab", 1);
  EXPECT_TRUE(checkEnvironment().isOk());
  unsetenv("TERSE_ENVTEST_SPEC");
}

TEST(Env, UnregisteredNameIsInternalError) {
  auto r = envString("TERSE_NO_SUCH_VARIABLE");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

// Ranges are enforced by the one parser: values at the bounds pass, one past them fails with
// the variable's name, and only plain base-10 text is a number.
TEST(Env, IntegersAreCheckedAgainstTheirRange) {
  setenv("TERSE_ENVTEST_DEPTH", "8", 1);
  EXPECT_EQ(envInt("TERSE_ENVTEST_DEPTH").value(), 8);
  for (const char* bad : {"9", "0", "-1", "0x4", " 4", "4 ", "4.0", "+", "99999999999999999999"}) {
    setenv("TERSE_ENVTEST_DEPTH", bad, 1);
    auto r = envInt("TERSE_ENVTEST_DEPTH");
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_NE(r.status().message().find("TERSE_ENVTEST_DEPTH"), std::string::npos) << bad;
    EXPECT_NE(r.status().message().find("1..8"), std::string::npos) << r.status().message();
  }
  unsetenv("TERSE_ENVTEST_DEPTH");
  EXPECT_EQ(parseIntSetting("WORLD_SIZE", "2147483648", 1, 1 << 24).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(parseIntSetting("X", "+7", 0, 10).value(), 7);
}

}  // namespace
}  // namespace terse
