#include "process_harness.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace terse::testing {

namespace {
std::string gReportPath;  // set in each child
}

void reportFromChild(const std::string& text) {
  if (gReportPath.empty()) return;
  std::ofstream out(gReportPath, std::ios::trunc);
  out << text;
}

int freeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string makeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/terse-test-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return std::string();
  return buf.data();
}

std::string describe(const RankOutcome& o) {
  std::string s = "rank " + std::to_string(o.rank) + ": ";
  if (o.killedByParent)
    s += "still running at the deadline (killed by the test)";
  else if (o.exited)
    s += "exited with code " + std::to_string(o.code);
  else if (o.signal)
    s += "killed by signal " + std::to_string(o.signal);
  else
    s += "never started";
  if (!o.report.empty()) s += "; reported: " + o.report;
  return s;
}

std::vector<RankOutcome> runProcesses(int worldSize, const std::vector<int>& ranks,
                                      const std::function<EnvMap(int rank)>& env,
                                      const std::function<int(int rank)>& body,
                                      std::chrono::seconds deadline) {
  std::string dir = makeTempDir();
  std::vector<RankOutcome> out(ranks.size());
  std::vector<pid_t> pids(ranks.size(), -1);
  std::fflush(nullptr);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int rank = ranks[i];
    out[i].rank = rank;
    pid_t pid = ::fork();
    if (pid == 0) {
      gReportPath = dir + "/rank" + std::to_string(rank);
      setenv("TERSE_RANK", std::to_string(rank).c_str(), 1);
      setenv("TERSE_WORLD_SIZE", std::to_string(worldSize).c_str(), 1);
      setenv("TERSE_LOCAL_RANK", std::to_string(rank).c_str(), 1);
      for (const auto& kv : env(rank)) setenv(kv.first.c_str(), kv.second.c_str(), 1);
      int code = body(rank);
      if (code == 0 && ::testing::Test::HasFailure()) code = 1;
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids[i] = pid;
    out[i].started = pid > 0;
  }
  auto until = std::chrono::steady_clock::now() + deadline;
  size_t running = 0;
  for (pid_t p : pids) running += p > 0;
  while (running > 0) {
    bool reaped = false;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      pid_t r = ::waitpid(pids[i], &status, WNOHANG);
      if (r != pids[i]) continue;
      reaped = true;
      pids[i] = -1;
      --running;
      if (WIFEXITED(status)) {
        out[i].exited = true;
        out[i].code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        out[i].signal = WTERMSIG(status);
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() >= until) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] <= 0) continue;
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        out[i].killedByParent = true;
        pids[i] = -1;
      }
      break;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& o : out) {
    std::ifstream in(dir + "/rank" + std::to_string(o.rank));
    std::stringstream ss;
    ss << in.rdbuf();
    o.report = ss.str();
    std::remove((dir + "/rank" + std::to_string(o.rank)).c_str());
  }
  ::rmdir(dir.c_str());
  return out;
}

uint64_t weightsHash(const std::vector<float>& w) {
  uint64_t h = 1469598103934665603ull;
  for (float v : w) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

void expectEveryRankPassed(const std::vector<RankOutcome>& outcomes, int n) {
  ASSERT_EQ(static_cast<int>(outcomes.size()), n);
  for (const RankOutcome& o : outcomes)
    EXPECT_TRUE(o.exited && o.code == 0) << describe(o) << ": " << o.report;
}

void expectVictimKilledOthersPassed(const std::vector<RankOutcome>& outcomes, int world,
                                    int victim) {
  ASSERT_EQ(static_cast<int>(outcomes.size()), world);
  EXPECT_EQ(outcomes[victim].signal, SIGKILL) << describe(outcomes[victim]);
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    EXPECT_TRUE(outcomes[r].exited && outcomes[r].code == 0)
        << describe(outcomes[r]) << ": " << outcomes[r].report;
    std::printf("rank %d: %s\n", r, outcomes[r].report.c_str());
  }
}

}  // namespace terse::testing
