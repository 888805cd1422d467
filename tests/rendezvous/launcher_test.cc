// terse-run, run as a user would: output prefixes, the variables each rank sees, and what
// happens when a rank fails or dies. Every command runs under `timeout` so a launcher that fails
// to stop its ranks shows up as exit code 124 rather than a hung test.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace {

struct Outcome {
  int code = -1;
  std::string output;  // stdout and stderr together
};

Outcome run(const std::string& command) {
  Outcome r;
  std::string full = "timeout 120 " + command + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kRun = TERSE_RUN_PATH;

TEST(TerseRun, PrefixesLinesAndSetsTheVariables) {
  Outcome r = run(kRun +
              " -n 3 -- sh -c 'echo \"rank $TERSE_RANK of $TERSE_WORLD_SIZE local "
              "$TERSE_LOCAL_RANK store $TERSE_STORE\"; echo to-stderr >&2'");
  EXPECT_EQ(r.code, 0) << r.output;
  for (int k = 0; k < 3; ++k) {
    std::string want = "[" + std::to_string(k) + "] rank " + std::to_string(k) + " of 3 local " +
                       std::to_string(k) + " store 127.0.0.1:";
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
    EXPECT_NE(r.output.find("[" + std::to_string(k) + "] to-stderr"), std::string::npos);
  }
}

TEST(TerseRun, FailingRankStopsTheOthersAndIsNamed) {
  Outcome r = run(kRun + " -n 4 -- sh -c 'if [ $TERSE_RANK = 1 ]; then exit 7; fi; sleep 100'");
  EXPECT_EQ(r.code, 7) << r.output;  // not 124: the sleeping ranks were stopped
  EXPECT_NE(r.output.find("rank 1 exited with code 7"), std::string::npos) << r.output;
}

TEST(TerseRun, KilledRankIsNamedWithItsSignal) {
  Outcome r = run(kRun + " -n 3 -- sh -c 'if [ $TERSE_RANK = 2 ]; then kill -9 $$; fi; sleep 100'");
  EXPECT_EQ(r.code, 128 + 9) << r.output;
  EXPECT_NE(r.output.find("rank 2 was killed by signal 9"), std::string::npos) << r.output;
}

TEST(TerseRun, UsageErrors) {
  EXPECT_EQ(run(kRun + " echo hi").code, 2);
  EXPECT_EQ(run(kRun + " -n 0 echo hi").code, 2);
  EXPECT_EQ(run(kRun + " -n 2").code, 2);
  EXPECT_EQ(run(kRun + " --bogus -n 2 echo").code, 2);
  Outcome missing = run(kRun + " -n 2 /no/such/program");
  EXPECT_EQ(missing.code, 127) << missing.output;
  EXPECT_NE(missing.output.find("cannot run '/no/such/program'"), std::string::npos);
}

// The launcher and the bootstrap together: two UCX ranks meet through the TCP store terse-run
// set up and move checked data.
TEST(TerseRun, RunsACommunicatorEndToEnd) {
  Outcome r = run("env UCX_TLS=tcp UCX_NET_DEVICES=lo " + kRun + " -n 2 " + TERSE_BENCH_PATH +
              " p2p -b 1K -e 256K -f 16 -n 30 -c");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[1] # every received message matched its pattern"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[0]         262144"), std::string::npos) << r.output;
}

}  // namespace
