// terse-run: starts N ranks of a command on this machine with TERSE_RANK, TERSE_WORLD_SIZE,
// TERSE_LOCAL_RANK and TERSE_STORE set, prefixes every output line with "[rank] ", and when a
// rank fails (non-zero exit or a signal) stops the others and exits non-zero saying which rank
// failed and how. Rank 0 serves the TCP store on a free loopback port unless --store is given.
// With --keep-going a rank killed by a signal is reported and the others run on (for jobs that
// shrink their communicator and continue, docs/reliability.md).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t gInterrupted = 0;

void onSignal(int sig) { gInterrupted = sig; }

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: terse-run -n N [--nodes K [--node I]] [--store host:port|dir] [--keep-going]\n"
      "       [--] command [args...]\n\n"
      "Starts N ranks of command on this machine with TERSE_RANK, TERSE_WORLD_SIZE,\n"
      "TERSE_LOCAL_RANK and TERSE_STORE set (by default a TCP store served by rank 0 on\n"
      "a free 127.0.0.1 port). --nodes K emulates K nodes: the ranks are split into K\n"
      "blocks of consecutive ranks (the first N %% K one rank larger), each with its own\n"
      "TERSE_NODE, and TERSE_LOCAL_RANK / TERSE_LOCAL_SIZE within it. --node I starts\n"
      "only node I's ranks, for one terse-run per node (each in its own network\n"
      "namespace or on its own host; --store then names the store node 0's rank 0\n"
      "serves, the same for all). Output lines are prefixed with [rank]. If a rank\n"
      "exits non-zero or dies, the others are stopped (SIGTERM, then SIGKILL after\n"
      "3 s) and terse-run exits non-zero naming the rank.\n\n"
      "--keep-going: a rank killed by a signal (kill -9, a crash) does not stop the\n"
      "others: terse-run names it, waits for the rest, and exits 0 if every other rank\n"
      "exits 0 (a rank that exits non-zero still stops the others and fails the run).\n"
      "For jobs whose survivors shrink their communicator and continue (terse-train\n"
      "--shrink-on-failure); give --store <dir> too, since the default TCP store is\n"
      "served by rank 0 and ends with it.\n");
}

int freeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

std::string howItEnded(int status) {
  char buf[128];
  if (WIFEXITED(status)) {
    std::snprintf(buf, sizeof buf, "exited with code %d", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    std::snprintf(buf, sizeof buf, "was killed by signal %d (%s)", WTERMSIG(status),
                  strsignal(WTERMSIG(status)));
  } else {
    std::snprintf(buf, sizeof buf, "ended with status 0x%x", status);
  }
  return buf;
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// One output stream of one rank: bytes are forwarded line by line with the rank prefix, so lines
// of different ranks never interleave mid-line.
struct Stream {
  int fd = -1;
  int rank = 0;
  FILE* out = nullptr;
  std::string pending;

  void forward(const char* data, size_t n) {
    pending.append(data, n);
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      std::fprintf(out, "[%d] %.*s\n", rank, static_cast<int>(nl - start), pending.data() + start);
      start = nl + 1;
    }
    pending.erase(0, start);
    std::fflush(out);
  }
  void finish() {
    if (!pending.empty()) std::fprintf(out, "[%d] %s\n", rank, pending.c_str());
    pending.clear();
    std::fflush(out);
  }
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int n = 0, nodes = 1, onlyNode = -1;
  std::string store;
  bool keepGoing = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if ((a == "-n" || a == "--np") && i + 1 < argc) {
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 1 || v > 4096) {
        std::fprintf(stderr, "terse-run: -n wants a rank count in 1..4096, got '%s'\n", argv[i]);
        return 2;
      }
      n = static_cast<int>(v);
    } else if (a == "--nodes" && i + 1 < argc) {
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 1 || v > 4096) {
        std::fprintf(stderr, "terse-run: --nodes wants a node count in 1..4096, got '%s'\n",
                     argv[i]);
        return 2;
      }
      nodes = static_cast<int>(v);
    } else if (a == "--node" && i + 1 < argc) {
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 0 || v >= 4096) {
        std::fprintf(stderr, "terse-run: --node wants a node index in 0..4095, got '%s'\n",
                     argv[i]);
        return 2;
      }
      onlyNode = static_cast<int>(v);
    } else if (a == "--keep-going") {
      keepGoing = true;
    } else if (a == "--store" && i + 1 < argc) {
      store = argv[++i];
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "terse-run: unknown option '%s'\n\n", a.c_str());
      usage(stderr);
      return 2;
    } else {
      break;
    }
  }
  if (n == 0 || i >= argc) {
    std::fprintf(stderr, "terse-run: %s\n\n", n == 0 ? "missing -n N" : "missing the command");
    usage(stderr);
    return 2;
  }
  if (nodes > n) {
    std::fprintf(stderr, "terse-run: --nodes %d is more than the %d ranks\n", nodes, n);
    return 2;
  }
  if (onlyNode >= nodes) {
    std::fprintf(stderr, "terse-run: --node %d is not one of the %d nodes (0..%d)\n", onlyNode,
                 nodes, nodes - 1);
    return 2;
  }
  if (onlyNode >= 0 && store.empty()) {
    std::fprintf(stderr,
                 "terse-run: --node needs --store: the other nodes' terse-run must reach the same "
                 "store (node 0's rank 0 serves a host:port store)\n");
    return 2;
  }
  char** command = argv + i;
  if (store.empty()) {
    int port = freeLoopbackPort();
    if (port == 0) {
      std::fprintf(stderr, "terse-run: cannot find a free port on 127.0.0.1: %s\n",
                   std::strerror(errno));
      return 1;
    }
    store = "127.0.0.1:" + std::to_string(port);
  }

  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Node k holds ranks [k*base + min(k, extra), ...): the first n % nodes nodes one more.
  auto nodeOf = [&](int r, int* first, int* localSize) {
    const int base = n / nodes, extra = n % nodes;
    int node = 0;
    *first = 0;
    while (*first + base + (node < extra ? 1 : 0) <= r) *first += base + (node++ < extra ? 1 : 0);
    *localSize = base + (node < extra ? 1 : 0);
    return node;
  };
  std::vector<Rank> ranks(n);
  std::vector<Stream> streams;
  std::fflush(nullptr);
  int started = 0;
  for (int r = 0; r < n; ++r) {
    int first = 0, localSize = 0;
    const int node = nodeOf(r, &first, &localSize);
    if (onlyNode >= 0 && node != onlyNode) continue;  // another terse-run starts it
    ++started;
    int outPipe[2], errPipe[2];
    if (::pipe(outPipe) != 0 || ::pipe(errPipe) != 0) {
      std::fprintf(stderr, "terse-run: pipe: %s\n", std::strerror(errno));
      return 1;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "terse-run: fork: %s\n", std::strerror(errno));
      return 1;
    }
    if (pid == 0) {
      ::setpgid(0, 0);  // its own group, so stopping a rank stops whatever it started
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      signal(SIGPIPE, SIG_DFL);
      ::dup2(outPipe[1], STDOUT_FILENO);
      ::dup2(errPipe[1], STDERR_FILENO);
      ::close(outPipe[0]);
      ::close(outPipe[1]);
      ::close(errPipe[0]);
      ::close(errPipe[1]);
      setenv("TERSE_RANK", std::to_string(r).c_str(), 1);
      setenv("TERSE_WORLD_SIZE", std::to_string(n).c_str(), 1);
      if (nodes > 1) {
        setenv("TERSE_NODE", ("node" + std::to_string(node)).c_str(), 1);
        setenv("TERSE_LOCAL_RANK", std::to_string(r - first).c_str(), 1);
        setenv("TERSE_LOCAL_SIZE", std::to_string(localSize).c_str(), 1);
      } else {
        setenv("TERSE_LOCAL_RANK", std::to_string(r).c_str(), 1);
      }
      setenv("TERSE_STORE", store.c_str(), 1);
      ::execvp(command[0], command);
      std::fprintf(stderr, "terse-run: cannot run '%s': %s\n", command[0], std::strerror(errno));
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, to win the race with the child's own call
    ::close(outPipe[1]);
    ::close(errPipe[1]);
    ranks[r].pid = pid;
    ranks[r].running = true;
    streams.push_back({outPipe[0], r, stdout, {}});
    streams.push_back({errPipe[0], r, stderr, {}});
  }

  int firstFailed = -1;
  std::vector<int> died;  // --keep-going: ranks ended by a signal, tolerated
  int running = started;
  bool stopping = false;
  auto killAt = std::chrono::steady_clock::time_point::max();
  auto stopOthers = [&](const char* why) {
    if (stopping) return;
    stopping = true;
    std::fprintf(stderr, "terse-run: %s; stopping the other ranks\n", why);
    for (const Rank& rk : ranks)
      if (rk.running) ::kill(-rk.pid, SIGTERM);
    killAt = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  };

  char buf[65536];
  while (running > 0 || !streams.empty()) {
    std::vector<pollfd> pfds;
    for (const Stream& s : streams) pfds.push_back({s.fd, POLLIN, 0});
    int pr = ::poll(pfds.data(), pfds.size(), 50);
    if (pr > 0) {
      for (size_t k = 0; k < pfds.size(); ++k) {
        if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t got = ::read(streams[k].fd, buf, sizeof buf);
        if (got > 0) {
          streams[k].forward(buf, static_cast<size_t>(got));
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
          streams[k].finish();
          ::close(streams[k].fd);
          streams[k].fd = -1;
        }
      }
      streams.erase(
          std::remove_if(streams.begin(), streams.end(), [](const Stream& s) { return s.fd < 0; }),
          streams.end());
    }
    for (int r = 0; r < n; ++r) {
      if (!ranks[r].running) continue;
      int status = 0;
      if (::waitpid(ranks[r].pid, &status, WNOHANG) != ranks[r].pid) continue;
      ranks[r].running = false;
      ranks[r].status = status;
      --running;
      if (keepGoing && WIFSIGNALED(status) && !stopping) {
        died.push_back(r);
        std::fprintf(stderr, "terse-run: rank %d %s; the others keep going (--keep-going)\n", r,
                     howItEnded(status).c_str());
      } else if (failed(status) && firstFailed < 0 && !stopping) {
        firstFailed = r;
        std::string why = "rank " + std::to_string(r) + " " + howItEnded(status);
        stopOthers(why.c_str());
      }
      // A rank that ends, even cleanly, may leave children holding its pipes; they go with it.
      ::kill(-ranks[r].pid, SIGKILL);
    }
    if (gInterrupted && !stopping) {
      std::string why = std::string("interrupted by ") + strsignal(gInterrupted);
      stopOthers(why.c_str());
    }
    if (stopping && running > 0 && std::chrono::steady_clock::now() >= killAt) {
      for (const Rank& rk : ranks)
        if (rk.running) ::kill(-rk.pid, SIGKILL);
      killAt = std::chrono::steady_clock::time_point::max();
    }
  }

  if (firstFailed >= 0) {
    const int status = ranks[firstFailed].status;
    std::fprintf(stderr, "terse-run: FAILED: rank %d %s\n", firstFailed,
                 howItEnded(status).c_str());
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
  }
  if (gInterrupted) return 128 + gInterrupted;
  if (!died.empty()) {
    std::string names;
    for (int r : died) names += (names.empty() ? "" : ", ") + std::to_string(r);
    if (static_cast<int>(died.size()) == started) {
      // Nobody survived: nothing finished the job.
      const int status = ranks[died.front()].status;
      std::fprintf(stderr, "terse-run: FAILED: every rank died (ranks %s)\n", names.c_str());
      return 128 + WTERMSIG(status);
    }
    std::fprintf(stderr, "terse-run: rank%s %s died; the %d other%s exited 0 (--keep-going)\n",
                 died.size() > 1 ? "s" : "", names.c_str(), started - static_cast<int>(died.size()),
                 started - static_cast<int>(died.size()) > 1 ? "s" : "");
  }
  return 0;
}
