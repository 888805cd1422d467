// A stand-in for NCCL: loads the built libnccl-net-terse.so with dlopen, looks up one versioned
// table and drives it the way NCCL's proxy does (nonblocking connect/accept polled together,
// NULL requests retried, test() until done). Forked processes play the ranks; they swap listen
// handles through files in a per-test directory. Shared by the tests and the benchmark.
#pragma once

#include "abi/nccl_plugin.h"

#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// Present only in sanitizer builds (TERSE_SANITIZE=address): lets a forked rank run the leak
// check that _exit would skip.
extern "C" int __lsan_do_recoverable_leak_check() __attribute__((weak));

namespace terse::harness {

// Any failure inside a rank throws; the rank's main turns it into a nonzero exit code.
#define HARNESS_CHECK(cond, ...)                                                             \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      char harness_msg_[512];                                                                \
      std::snprintf(harness_msg_, sizeof(harness_msg_), __VA_ARGS__);                        \
      throw std::runtime_error(std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " + \
                               harness_msg_);                                                \
    }                                                                                        \
  } while (0)
#define NCCL_OK(call)                                                                   \
  do {                                                                                  \
    ncclResult_t harness_r_ = (call);                                                   \
    HARNESS_CHECK(harness_r_ == ncclSuccess, "%s returned %d", #call, (int)harness_r_); \
  } while (0)

// Every table version the plugin exports (abi/nccl_plugin.h), newest first: the tests that
// cover each version iterate over these.
constexpr int kAbiVersions[] = {TERSE_NCCL_ABI_VERSIONS};
constexpr int kNewestAbi = TERSE_NCCL_ABI_NEWEST;
static_assert(kAbiVersions[0] == kNewestAbi, "TERSE_NCCL_ABI_VERSIONS starts with the newest");

// The plugin as NCCL loads it: dlopen of the library, dlsym of the table `prefix`<version>
// (ncclNetPlugin_v11, ncclCollNetPlugin_v8, ...), dlclose when it goes. NetApi here and
// collnet_plugin_test's CollApi call the table through it; ctx_ is a v11+ table's context.
class LoadedTable {
 public:
  LoadedTable(const char* path, const char* prefix, int version) : version_(version) {
    dl_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    HARNESS_CHECK(dl_ != nullptr, "dlopen(%s): %s", path, dlerror());
    std::string sym = prefix + std::to_string(version);
    table_ = dlsym(dl_, sym.c_str());
    HARNESS_CHECK(table_ != nullptr, "dlsym(%s) failed", sym.c_str());
  }
  ~LoadedTable() {
    if (dl_ != nullptr) dlclose(dl_);
  }
  LoadedTable(const LoadedTable&) = delete;
  LoadedTable& operator=(const LoadedTable&) = delete;

  int version() const { return version_; }

 protected:
  int version_;
  void* dl_ = nullptr;
  const void* table_ = nullptr;
  void* ctx_ = nullptr;
};

// One loaded table of any version, seen through v11-shaped calls. v12 has v11's members and
// signatures except getProperties (v12 properties) and makeVDevice, so it runs the v11 calls;
// a version newer than the harness knows is called as the newest it knows.
class NetApi : public LoadedTable {
 public:
  NetApi(const char* path, int version) : LoadedTable(path, "ncclNetPlugin_v", version) {}

  const char* name() const { return *static_cast<const char* const*>(table_); }

  ncclResult_t init(ncclDebugLogger_t logger = nullptr) {
    if (version_ >= 11) return v11()->init(&ctx_, 0x1234, nullptr, logger, nullptr);
    if (version_ == 10) return v10()->init(logger, nullptr);
    if (version_ == 9) return v9()->init(logger);
    return v8()->init(logger);
  }
  // v11 on only; the older tables are torn down by dlclose.
  ncclResult_t finalize() {
    if (version_ < 11) return ncclSuccess;
    ncclResult_t r = v11()->finalize(ctx_);
    ctx_ = nullptr;
    return r;
  }
  ncclResult_t devices(int* n) { return v8()->devices(n); }  // same slot in every version
  // Returns the v11 fields; the other versions' fields are copied into it.
  ncclResult_t getProperties(int dev, ncclNetProperties_v11_t* p) {
    std::memset(p, 0, sizeof(*p));
    if (version_ == 11) return v11()->getProperties(dev, p);
    if (version_ >= 12) {
      ncclNetProperties_v12_t q;
      ncclResult_t r = v12()->getProperties(dev, &q);
      // Up to vProps.ndevs the layouts agree; from the wider vProps on, field by field.
      std::memcpy(p, &q, offsetof(ncclNetProperties_v12_t, vProps));
      p->vProps.ndevs = q.vProps.ndevs;
      for (int i = 0; i < NCCL_NET_MAX_DEVS_PER_NIC; ++i) p->vProps.devs[i] = q.vProps.devs[i];
      p->maxP2pBytes = q.maxP2pBytes;
      p->maxCollBytes = q.maxCollBytes;
      p->maxMultiRequestSize = q.maxMultiRequestSize;
      return r;
    }
    if (version_ == 10 || version_ == 9) {
      ncclNetProperties_v10_t q;
      ncclResult_t r = v10()->getProperties(dev, &q);
      std::memcpy(p, &q, sizeof(q));
      return r;
    }
    ncclNetProperties_v8_t q;
    ncclResult_t r = v8()->getProperties(dev, &q);
    p->name = q.name;
    p->pciPath = q.pciPath;
    p->guid = q.guid;
    p->ptrSupport = q.ptrSupport;
    p->speed = q.speed;
    p->latency = q.latency;
    p->maxComms = q.maxComms;
    p->maxRecvs = q.maxRecvs;
    p->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
    return r;
  }
  ncclResult_t listen(int dev, void* handle, void** lc) {
    if (version_ >= 11) return v11()->listen(ctx_, dev, handle, lc);
    return v8()->listen(dev, handle, lc);  // v8, v9 and v10 share the slot and signature
  }
  ncclResult_t connect(int dev, void* handle, void** sc) {
    ncclNetDeviceHandle_v11_t* dh = nullptr;
    if (version_ >= 11) return v11()->connect(ctx_, dev, handle, sc, &dh);
    if (version_ == 10) {
      ncclNetCommConfig_v10_t cfg{-1};
      return v10()->connect(dev, &cfg, handle, sc, &dh);
    }
    return v8()->connect(dev, handle, sc, &dh);
  }
  ncclResult_t accept(void* lc, void** rc) {
    ncclNetDeviceHandle_v11_t* dh = nullptr;
    return v8()->accept(lc, rc, &dh);
  }
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mh) {
    return v8()->regMr(comm, data, size, type, mh);
  }
  ncclResult_t deregMr(void* comm, void* mh) { return v8()->deregMr(comm, mh); }
  ncclResult_t isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
    if (version_ >= 10) return v10()->isend(sc, data, size, tag, mh, nullptr, req);
    if (version_ == 9) return v9()->isend(sc, data, size, tag, mh, req);
    return v8()->isend(sc, data, static_cast<int>(size), tag, mh, req);
  }
  ncclResult_t irecv(void* rc, int n, void** data, const size_t* sizes, int* tags, void** mhs,
                     void** req) {
    size_t s[8];
    int si[8];
    for (int i = 0; i < n && i < 8; ++i) {
      s[i] = sizes[i];
      si[i] = static_cast<int>(sizes[i]);
    }
    if (version_ >= 10) return v10()->irecv(rc, n, data, s, tags, mhs, nullptr, req);
    if (version_ == 9) return v9()->irecv(rc, n, data, s, tags, mhs, req);
    return v8()->irecv(rc, n, data, si, tags, mhs, req);
  }
  ncclResult_t iflush(void* rc, int n, void** data, int* sizes, void** mhs, void** req) {
    return v8()->iflush(rc, n, data, sizes, mhs, req);
  }
  ncclResult_t test(void* req, int* done, int* sizes) { return v8()->test(req, done, sizes); }
  ncclResult_t closeSend(void* c) { return v8()->closeSend(c); }
  ncclResult_t closeRecv(void* c) { return v8()->closeRecv(c); }
  ncclResult_t closeListen(void* c) { return v8()->closeListen(c); }

 private:
  // Every version lays out name..irecvConsumed with the same slots; only signatures differ.
  const ncclNet_v12_t* v12() const { return static_cast<const ncclNet_v12_t*>(table_); }
  const ncclNet_v11_t* v11() const { return static_cast<const ncclNet_v11_t*>(table_); }
  const ncclNet_v10_t* v10() const { return static_cast<const ncclNet_v10_t*>(table_); }
  const ncclNet_v9_t* v9() const { return static_cast<const ncclNet_v9_t*>(table_); }
  const ncclNet_v8_t* v8() const { return static_cast<const ncclNet_v8_t*>(table_); }
};

// Files in a directory as a tiny key-value store between forked ranks.
class Exchange {
 public:
  explicit Exchange(std::string dir) : dir_(std::move(dir)) {}
  void put(const std::string& key, const void* data, size_t size) const {
    std::string tmp = dir_ + "/." + key + ".tmp", path = dir_ + "/" + key;
    FILE* f = std::fopen(tmp.c_str(), "wb");
    HARNESS_CHECK(f != nullptr, "cannot write %s", tmp.c_str());
    HARNESS_CHECK(std::fwrite(data, 1, size, f) == size || size == 0, "short write");
    std::fclose(f);
    HARNESS_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "rename %s", path.c_str());
  }
  std::vector<char> get(const std::string& key, int timeoutSec = 60) const {
    std::string path = dir_ + "/" + key;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
    for (;;) {
      std::ifstream in(path, std::ios::binary);
      if (in.good())
        return std::vector<char>((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
      HARNESS_CHECK(std::chrono::steady_clock::now() < deadline, "timed out waiting for %s",
                    key.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  void barrier(const std::string& name, int rank, int nranks) const {
    char one = 1;
    put(name + ".b" + std::to_string(rank), &one, 1);
    for (int r = 0; r < nranks; ++r) get(name + ".b" + std::to_string(r));
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

struct Link {
  void* listenComm = nullptr;
  void* sendComm = nullptr;  // to `to`
  void* recvComm = nullptr;  // from `from`
};

// Listens, publishes the handle, and polls connect(to) and accept(from) together until both
// are up, as NCCL's service thread does. Passing to == rank connects to self.
inline Link connectPeers(NetApi& api, const Exchange& ex, const std::string& key, int rank, int to,
                         int from, int timeoutSec = 60) {
  Link link;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  NCCL_OK(api.listen(0, handle, &link.listenComm));
  HARNESS_CHECK(link.listenComm != nullptr, "listen gave no comm");
  ex.put(key + ".h" + std::to_string(rank), handle, sizeof(handle));
  std::vector<char> peer = ex.get(key + ".h" + std::to_string(to));
  HARNESS_CHECK(peer.size() == NCCL_NET_HANDLE_MAXSIZE, "bad handle size %zu", peer.size());
  (void)from;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  while (link.sendComm == nullptr || link.recvComm == nullptr) {
    if (link.sendComm == nullptr) NCCL_OK(api.connect(0, peer.data(), &link.sendComm));
    if (link.recvComm == nullptr) NCCL_OK(api.accept(link.listenComm, &link.recvComm));
    HARNESS_CHECK(std::chrono::steady_clock::now() < deadline, "connect/accept timed out");
  }
  return link;
}

inline void closeLink(NetApi& api, Link& link) {
  NCCL_OK(api.closeSend(link.sendComm));
  NCCL_OK(api.closeRecv(link.recvComm));
  NCCL_OK(api.closeListen(link.listenComm));
  link = Link{};
}

// Tests a request until done; returns the final result code (so error paths can be checked).
// Api is NetApi or collnet_plugin_test's CollApi (both have test(request, done, sizes)).
template <typename Api>
ncclResult_t waitRequest(Api& api, void* req, int* sizes, int timeoutSec = 120) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  int done = 0;
  while (!done) {
    ncclResult_t r = api.test(req, &done, sizes);
    if (r != ncclSuccess) return r;
    HARNESS_CHECK(std::chrono::steady_clock::now() < deadline, "request did not finish in %ds",
                  timeoutSec);
  }
  return ncclSuccess;
}

// Entries of a directory (not . or ..): /proc/self/task counts threads, /proc/self/fd files.
inline int countEntries(const char* dir) {
  DIR* d = opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

// The mapping (file and offset) that holds `addr` in this process, from /proc/self/maps.
inline std::string mappingOf(unsigned long addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0, off = 0;
    char path[512] = "";
    if (std::sscanf(line.c_str(), "%lx-%lx %*s %lx %*s %*s %511s", &lo, &hi, &off, path) < 3)
      continue;
    if (addr < lo || addr >= hi) continue;
    char out[640];
    std::snprintf(out, sizeof out, "%s+%#lx", path[0] ? path : "[anonymous]", addr - lo + off);
    return out;
  }
  return "an unmapped address";
}

// In sanitizer builds, LeakSanitizer's check of this rank (which _exit would skip); throws if it
// finds leaks. LeakSanitizer's stop-the-world tracer itself sometimes crashes ("Tracer caught
// signal 11", google/sanitizers#1353) and then kills the process it checks: on one CI host it did
// so in every single-threaded rank that had unloaded the plugin, on every attempt, and never
// here. So when the rank is down to one thread, the check runs in a forked copy (the same heap,
// globals and stack: the same roots) whose report comes through a pipe: a copy that reported
// leaks fails the rank; one whose tracer crashed is retried, and after the last attempt the
// rank says loudly that its leaks went unchecked, and where the tracer crashed, instead of
// failing a test whose own checks passed. A rank with threads left (the codecs' pool) is checked
// in place: a copy would lack those threads' stacks and report what only they hold as leaked.
inline void checkForLeaks() {
  if (__lsan_do_recoverable_leak_check == nullptr) return;
  if (countEntries("/proc/self/task") != 1) {
    HARNESS_CHECK(__lsan_do_recoverable_leak_check() == 0, "LeakSanitizer found leaks (see above)");
    return;
  }
  constexpr int kLeaks = 42, kAttempts = 3;
  std::string where;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    std::fflush(nullptr);
    int fds[2];
    HARNESS_CHECK(pipe(fds) == 0, "pipe for the leak check failed: %s", std::strerror(errno));
    pid_t pid = fork();
    HARNESS_CHECK(pid >= 0, "fork for the leak check failed: %s", std::strerror(errno));
    if (pid == 0) {
      close(fds[0]);
      dup2(fds[1], STDERR_FILENO);
      close(fds[1]);
      _exit(__lsan_do_recoverable_leak_check() != 0 ? kLeaks : 0);
    }
    close(fds[1]);
    std::string report;
    char buf[4096];
    for (;;) {
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n > 0) {
        report.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::fputs(report.c_str(), stderr);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    HARNESS_CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == kLeaks),
                  "LeakSanitizer found leaks (see above)");
    // "Tracer caught signal 11: addr=0x... pc=0x... sp=0x...": the copy's mappings are ours.
    size_t at = report.find(" pc=0x");
    if (at != std::string::npos)
      where = mappingOf(std::strtoul(report.c_str() + at + 4, nullptr, 16));
    std::fprintf(
        stderr, "LeakSanitizer's check itself failed (wait status %#x, attempt %d of %d%s%s)\n",
        status, attempt, kAttempts, where.empty() ? "" : "; its tracer crashed in ", where.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(500 * attempt));
  }
  std::fprintf(stderr,
               "LEAKS NOT CHECKED in this rank: LeakSanitizer's own tracer failed %d times%s%s "
               "(the rank's own checks passed)\n",
               kAttempts, where.empty() ? "" : " in ", where.c_str());
}

// Forks `nranks` processes running body(rank); returns each one's exit status (0 = passed,
// 124 = timed out, 128+signal = killed). A rank prints its failure to stderr.
inline std::vector<int> runRanks(int nranks, const std::function<void(int rank)>& body,
                                 int timeoutSec = 240) {
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(static_cast<unsigned>(timeoutSec + 5));  // a wedged rank dies on its own too
      int code = 0;
      try {
        body(r);
        checkForLeaks();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "[rank %d] FAILED: %s\n", r, e.what());
        if (std::getenv("TERSE_HARNESS_DUMP_FDS") != nullptr) {
          std::string cmd = "ls -l /proc/" + std::to_string(getpid()) + "/fd >&2";
          if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "ls failed\n");
        }
        code = 1;
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(nranks, -1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSec);
  int left = nranks;
  while (left > 0) {
    for (int r = 0; r < nranks; ++r) {
      if (codes[r] != -1) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r)
        if (codes[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          codes[r] = 124;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

inline std::string makeTempDir() {
  char tmpl[] = "/tmp/terse-plugin-XXXXXX";
  char* d = mkdtemp(tmpl);
  HARNESS_CHECK(d != nullptr, "mkdtemp failed");
  return d;
}

inline void removeTree(const std::string& dir) {
  std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
}

}  // namespace terse::harness
