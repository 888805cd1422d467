// terse-run, run as a user would: output prefixes, the variables each rank sees, and what
// happens when a rank fails or dies. Every command runs under `timeout` so a launcher that fails
// to stop its ranks shows up as exit code 124 rather than a hung test.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
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

// --keep-going: a rank killed by a signal is named, the others run to their end, and the run
// succeeds when they all exit 0 (the survivors of a shrink, docs/reliability.md).
TEST(TerseRun, KeepGoingNamesTheDeadRankAndWaitsForTheOthers) {
  // The survivors outlive the kill by a while: without --keep-going they would be stopped and
  // never print "done".
  Outcome r = run(kRun +
                  " -n 3 --keep-going -- sh -c 'if [ $TERSE_RANK = 1 ]; then kill -9 $$; fi; "
                  "sleep 1; echo done'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0] done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[2] done"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[1] done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 died; the 2 others exited 0"), std::string::npos) << r.output;
}

TEST(TerseRun, KeepGoingStillFailsWhenASurvivorFails) {
  // Rank 0 dies; rank 2 then exits 5: that stops rank 1 (sleeping) and fails the run.
  Outcome r = run(kRun +
                  " -n 3 --keep-going -- sh -c 'case $TERSE_RANK in 0) kill -9 $$;; 2) sleep 1; "
                  "exit 5;; esac; sleep 100'");
  EXPECT_EQ(r.code, 5) << r.output;  // not 124: rank 1 was stopped
  EXPECT_NE(r.output.find("rank 0 was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("FAILED: rank 2 exited with code 5"), std::string::npos) << r.output;
}

TEST(TerseRun, KeepGoingFailsWhenEveryRankDies) {
  Outcome r = run(kRun + " -n 2 --keep-going -- sh -c 'kill -9 $$'");
  EXPECT_EQ(r.code, 128 + 9) << r.output;
  EXPECT_NE(r.output.find("every rank died"), std::string::npos) << r.output;
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

// terse-bench's accuracy figures: --input and --seed change the input every rank draws (and
// recomputes), the JSON rows say which input they were made with and carry the RMS error next to
// the maximum, and a malformed value is refused before any rank starts communicating.
double jsonNumber(const std::string& json, const std::string& key) {
  size_t at = json.find("\"" + key + "\": ");
  if (at == std::string::npos) return -1;
  return std::strtod(json.c_str() + at + key.size() + 4, nullptr);
}

std::string benchJson(const std::string& extra) {
  char path[] = "/tmp/terse-bench-json-XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) return "";
  ::close(fd);
  Outcome r = run("env UCX_TLS=tcp UCX_NET_DEVICES=lo " + kRun + " -n 2 " + TERSE_BENCH_PATH +
                  " allreduce -b 256K -e 256K -n 1 -w 0 --codec int8 -J " + path + " " + extra);
  std::string json;
  if (r.code == 0) {
    std::ifstream f(path);
    json.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  } else {
    ADD_FAILURE() << extra << ": " << r.output;
  }
  std::remove(path);
  return json;
}

TEST(TerseBench, InputShapeAndSeedPickTheInputAndRowsCarryTheRms) {
  std::string plain = benchJson("");
  std::string laplace = benchJson("--input laplace --seed 3");
  std::string again = benchJson("--seed 3 --input laplace");
  ASSERT_FALSE(plain.empty());
  ASSERT_FALSE(laplace.empty());
  EXPECT_NE(plain.find("\"input\": \"uniform\", \"seed\": 0"), std::string::npos) << plain;
  EXPECT_NE(laplace.find("\"input\": \"laplace\", \"seed\": 3"), std::string::npos) << laplace;
  for (const std::string* j : {&plain, &laplace}) {
    double maxErr = jsonNumber(*j, "maxrelerr"), rms = jsonNumber(*j, "rmsrelerr");
    EXPECT_GT(rms, 0) << *j;
    EXPECT_LT(rms, maxErr) << *j;  // a mean cannot exceed the maximum, and int8 is not exact
  }
  // Another input gives another error; the same input the same one, bit for bit.
  EXPECT_NE(jsonNumber(plain, "maxrelerr"), jsonNumber(laplace, "maxrelerr"));
  EXPECT_EQ(jsonNumber(laplace, "maxrelerr"), jsonNumber(again, "maxrelerr"));
  EXPECT_EQ(jsonNumber(laplace, "rmsrelerr"), jsonNumber(again, "rmsrelerr"));
  std::string otherSeed = benchJson("--input laplace --seed 4");
  EXPECT_NE(jsonNumber(laplace, "rmsrelerr"), jsonNumber(otherSeed, "rmsrelerr"));
  for (const char* bad : {"--input cauchy", "--seed -1", "--seed 12x", "--seed"}) {
    Outcome r = run(kRun + " -n 1 " + TERSE_BENCH_PATH + " allreduce " + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
  }
}

}  // namespace
