// The TCP store: a small server thread in rank 0 holding a map, and a client per process.
// The frames are in tcp_store_protocol.h.
#include "tcp_store_protocol.h"
#include "terse/common/logging.h"
#include "terse/common/socket.h"
#include "terse/rendezvous/store.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <thread>

namespace terse {

namespace {

using store_protocol::kMaxField;
using store_protocol::kOpGet;
using store_protocol::kOpSet;
using store_protocol::kOpSetIfAbsent;

using Clock = std::chrono::steady_clock;

// The rendezvous store's addresses: the host as given in messages, IPv4 as always.
Status resolve(const std::string& host, int port, bool passive, sockaddr_storage* addr,
               socklen_t* len) {
  return socketResolve(host, port, passive, addr, len)
      .withContext("the rendezvous store's address");
}

class TcpStoreServer {
 public:
  ~TcpStoreServer() { stop(); }

  // Serves on host:port; port 0 lets the kernel pick a free one, which port() then reports.
  Status start(const std::string& host, int port) {
    sockaddr_storage addr{};
    socklen_t len = 0;
    TERSE_RETURN_IF_ERROR(resolve(host, port, true, &addr, &len));
    sockaddr_storage bound{};
    auto fd = socketListen(addr, len, 0, /*reuseAddr=*/true, 1024, &bound);
    if (!fd.isOk())
      return errorSystem(
          "rank 0 cannot serve the rendezvous store on %s:%d: %s; pick a free port "
          "in TERSE_STORE (or MASTER_PORT)",
          host.c_str(), port, fd.status().message().c_str());
    listenFd_ = fd.value();
    port_ = socketPort(bound);
    if (::pipe2(wake_, O_CLOEXEC) != 0) return errorSystem("pipe: %s", std::strerror(errno));
    acceptor_ = std::thread([this] { acceptLoop(); });
    TERSE_INFO(kSubsysBoot, "rendezvous store serving on %s:%d", host.c_str(), port_);
    return Status::ok();
  }

  int port() const { return port_; }

  void stop() {
    if (acceptor_.joinable()) {
      stopping_ = true;
      char c = 0;
      (void)!::write(wake_[1], &c, 1);
      acceptor_.join();
    }
    {
      // Only the read side: a handler that has just applied a request still sends its answer
      // (the client that set the last key rank 0 waited for must not see a reset), then finds
      // end-of-stream and returns.
      std::lock_guard<std::mutex> lock(clientsMu_);
      for (int fd : clientFds_) ::shutdown(fd, SHUT_RD);
    }
    for (auto& t : handlers_) t.join();
    handlers_.clear();
    for (int fd : clientFds_) ::close(fd);
    clientFds_.clear();
    if (listenFd_ >= 0) ::close(listenFd_);
    listenFd_ = -1;
    for (int& fd : wake_)
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
  }

 private:
  void acceptLoop() {
    while (!stopping_) {
      pollfd pfds[2] = {{listenFd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      int pr = ::poll(pfds, 2, -1);
      if (pr < 0 && errno == EINTR) continue;
      if (pr < 0 || (pfds[1].revents & POLLIN)) return;
      int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      socketSetNoDelay(fd);
      std::lock_guard<std::mutex> lock(clientsMu_);
      try {
        handlers_.emplace_back([this, fd] { serve(fd); });
      } catch (const std::exception& e) {  // no thread to be had: refuse this client, go on
        TERSE_WARN(kSubsysBoot, "rendezvous store: cannot serve a client: %s", e.what());
        ::close(fd);
        continue;
      }
      clientFds_.push_back(fd);
    }
  }

  // One thread per client: rendezvous has a handful of requests per rank.
  void serve(int fd) {
    // No exception may end the process from this thread (a value too large to allocate, say):
    // the client is dropped instead, and sees end-of-stream.
    try {
      serveRequests(fd);
    } catch (const std::exception& e) {
      TERSE_WARN(kSubsysBoot, "rendezvous store: dropping a client: %s", e.what());
    }
    // Hang up however serving ended (a malformed request, a client that left, stop()), so a
    // dropped client sees end-of-stream at once instead of waiting out its timeout. The fd itself
    // is closed in stop(), which owns clientFds_.
    ::shutdown(fd, SHUT_RDWR);
  }

  void serveRequests(int fd) {
    const auto forever = Clock::time_point::max();
    for (;;) {
      uint8_t head[store_protocol::kRequestHeadBytes];
      if (readBlocking(fd, head, sizeof head) != 0) return;
      store_protocol::RequestHead req;
      if (!store_protocol::parseRequestHead(head, &req)) {
        TERSE_WARN(kSubsysBoot,
                   "rendezvous store: dropping a client that sent a malformed request");
        return;
      }
      std::string key(req.keyLen, '\0'), value(req.valueLen, '\0');
      if (readBlocking(fd, key.data(), key.size()) != 0 ||
          readBlocking(fd, value.data(), value.size()) != 0)
        return;
      uint8_t found = 0;
      {
        std::lock_guard<std::mutex> lock(mapMu_);
        value =
            store_protocol::applyRequest(map_, req.op, std::move(key), std::move(value), &found);
      }
      uint8_t answer[store_protocol::kResponseHeadBytes];
      store_protocol::encodeResponseHead(found, static_cast<uint32_t>(value.size()), answer);
      if (socketIoAll(fd, answer, sizeof answer, true, forever) != 0 ||
          socketIoAll(fd, value.data(), value.size(), true, forever) != 0)
        return;
    }
  }

  int readBlocking(int fd, void* buf, size_t n) {
    return socketIoAll(fd, buf, n, false, Clock::time_point::max());
  }

  int listenFd_ = -1;
  int port_ = 0;  // the port served (the kernel's pick when asked for 0)
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex clientsMu_;
  std::vector<int> clientFds_;
  std::list<std::thread> handlers_;
  std::mutex mapMu_;
  std::map<std::string, std::string> map_;
};

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, std::chrono::milliseconds timeout)
      : host_(std::move(host)), port_(port), timeout_(timeout) {}

  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
    // The server (rank 0) goes last: other ranks may still be reading.
    server_.reset();
  }

  // Serves on the store's host and port; a port of 0 becomes the one the kernel chose, which
  // this process and describe() then use.
  Status serve() {
    server_ = std::make_unique<TcpStoreServer>();
    TERSE_RETURN_IF_ERROR(server_->start(host_, port_));
    port_ = server_->port();
    return Status::ok();
  }

  int port() const { return port_; }

  Status connect() {
    auto deadline = Clock::now() + timeout_;
    auto delay = std::chrono::milliseconds(10);
    std::string last = "no attempt";
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = 0;
      TERSE_RETURN_IF_ERROR(resolve(host_, port_, false, &addr, &len));
      int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len);
      int e = errno;
      if (rc == 0) {
        socketSetNoDelay(fd);
        fd_ = fd;
        return Status::ok();
      }
      ::close(fd);
      last = std::strerror(e);
      if (Clock::now() >= deadline)
        return errorTimeout(
            "could not reach the rendezvous store at %s:%d (served by rank 0) "
            "within %lld ms: %s; is rank 0 running, and do all ranks use the same "
            "TERSE_STORE?",
            host_.c_str(), port_, static_cast<long long>(timeout_.count()), last.c_str());
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, std::chrono::milliseconds(200));
    }
  }

  Status set(const std::string& key, const std::string& value) override {
    std::string unused;
    bool found;
    return request(kOpSet, key, value, &found, &unused);
  }

  Result<std::optional<std::string>> tryGet(const std::string& key) override {
    std::string value;
    bool found = false;
    TERSE_RETURN_IF_ERROR(request(kOpGet, key, std::string(), &found, &value));
    if (!found) return std::optional<std::string>();
    return std::optional<std::string>(std::move(value));
  }

  Result<std::optional<std::string>> setIfAbsent(const std::string& key,
                                                 const std::string& value) override {
    std::string existing;
    bool found = false;
    TERSE_RETURN_IF_ERROR(request(kOpSetIfAbsent, key, value, &found, &existing));
    if (!found) return std::optional<std::string>();
    return std::optional<std::string>(std::move(existing));
  }

  std::string describe() const override {
    return "tcp(" + host_ + ":" + std::to_string(port_) + ")";
  }

 private:
  Status request(uint8_t op, const std::string& key, const std::string& value, bool* found,
                 std::string* out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ < 0) return broken_;
    if (key.size() > kMaxField || value.size() > kMaxField)
      return errorInvalidArgument("store key or value over 64 MiB");
    auto deadline = Clock::now() + timeout_;
    uint32_t lens[2] = {static_cast<uint32_t>(key.size()), static_cast<uint32_t>(value.size())};
    int rc = socketIoAll(fd_, &op, 1, true, deadline);
    if (!rc) rc = socketIoAll(fd_, lens, sizeof lens, true, deadline);
    if (!rc) rc = socketIoAll(fd_, const_cast<char*>(key.data()), key.size(), true, deadline);
    if (!rc) rc = socketIoAll(fd_, const_cast<char*>(value.data()), value.size(), true, deadline);
    uint8_t f = 0;
    uint32_t vlen = 0;
    uint8_t answer[store_protocol::kResponseHeadBytes];
    if (!rc) rc = socketIoAll(fd_, answer, sizeof answer, false, deadline);
    if (!rc && !store_protocol::parseResponseHead(answer, &f, &vlen)) rc = -EPROTO;
    if (!rc) {
      out->assign(vlen, '\0');
      rc = socketIoAll(fd_, out->data(), vlen, false, deadline);
    }
    if (rc == 0) {
      *found = f != 0;
      return Status::ok();
    }
    // A half-done exchange leaves the stream unusable; later calls report the same failure.
    ::close(fd_);
    fd_ = -1;
    if (rc == -ETIMEDOUT)
      broken_ = errorTimeout("the rendezvous store at %s:%d (rank 0) did not answer within %lld ms",
                             host_.c_str(), port_, static_cast<long long>(timeout_.count()));
    else
      broken_ = errorRemote(
          "the connection to the rendezvous store at %s:%d broke (%s); rank 0, "
          "which serves it, probably exited or crashed",
          host_.c_str(), port_, std::strerror(-rc));
    return broken_;
  }

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  int fd_ = -1;
  Status broken_;
  std::unique_ptr<TcpStoreServer> server_;
};

}  // namespace

Result<std::unique_ptr<Store>> createTcpStore(const std::string& host, int port, bool serve,
                                              std::chrono::milliseconds timeout, int* servedPort) {
  if (port < 0 || port > 65535 || (port == 0 && !serve))
    return errorInvalidArgument(
        "store port %d is outside 1..65535 (0, for a port the kernel picks, only when serving)",
        port);
  auto store = std::make_unique<TcpStore>(host, port, timeout);
  if (serve) TERSE_RETURN_IF_ERROR(store->serve());
  TERSE_RETURN_IF_ERROR(store->connect());
  if (servedPort != nullptr) *servedPort = store->port();
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace terse
