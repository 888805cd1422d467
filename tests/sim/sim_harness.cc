#include "sim_harness.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>

namespace terse::testing {

std::string inChild(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) {
    ADD_FAILURE() << "pipe failed";
    return {};
  }
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return {};
  }
  if (pid == 0) {
    ::close(fds[0]);
    int code = 0;
    try {
      std::string out = body();
      for (size_t at = 0; at < out.size();) {
        ssize_t w = ::write(fds[1], out.data() + at, out.size() - at);
        if (w <= 0) break;
        at += static_cast<size_t>(w);
      }
      code = ::testing::Test::HasFailure() ? 1 : 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "simulation threw: %s\n", e.what());
      code = 2;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  ::close(fds[1]);
  std::string out;
  char buf[65536];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, r);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the simulation's child failed (status " << status << "); its output is above";
  return out;
}

sim::PlatformSpec testPlatform(int n) {
  sim::PlatformSpec p;
  p.worldSize = n;
  p.ranksPerNode = 2;
  p.intraGBps = 50;
  p.intraLatencyUs = 1;
  p.nicGbps = 10;
  p.nicLatencyUs = 5;
  p.switchLatencyUs = 2;
  return p;
}

}  // namespace terse::testing
