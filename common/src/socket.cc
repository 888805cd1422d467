#include "terse/common/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace terse {

std::string socketAddressText(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, host, sizeof host);
  else if (addr.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, host,
              sizeof host);
  return std::string(host) + ":" + std::to_string(socketPort(addr));
}

std::string socketNumericHost(const sockaddr_storage& addr) {
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return "";
  char host[NI_MAXHOST] = {0};
  const socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return "";
  return host;
}

int socketPort(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

std::string socketPeerText(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (fd < 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return "(unknown address)";
  return socketAddressText(addr);
}

void socketSetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Status socketResolve(const std::string& host, int port, bool passive, sockaddr_storage* addr,
                     socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    return errorInvalidArgument("cannot resolve host '%s': %s", host.c_str(), gai_strerror(rc));
  *addr = sockaddr_storage{};
  std::memcpy(addr, res->ai_addr, std::min<size_t>(res->ai_addrlen, sizeof *addr));
  *len = static_cast<socklen_t>(std::min<size_t>(res->ai_addrlen, sizeof *addr));
  ::freeaddrinfo(res);
  return Status::ok();
}

Result<int> socketListen(const sockaddr_storage& addr, socklen_t len, int extraType, bool reuseAddr,
                         int backlog, sockaddr_storage* bound) {
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | extraType, 0);
  if (fd < 0) return errorSystem("socket() failed: %s", std::strerror(errno));
  if (reuseAddr) {
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    const int e = errno;
    ::close(fd);
    return errorSystem("bind to %s failed: %s", socketAddressText(addr).c_str(), std::strerror(e));
  }
  if (::listen(fd, backlog) != 0) {
    const int e = errno;
    ::close(fd);
    return errorSystem("listen on %s failed: %s", socketAddressText(addr).c_str(),
                       std::strerror(e));
  }
  if (bound != nullptr) {
    *bound = sockaddr_storage{};
    socklen_t boundLen = sizeof *bound;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(bound), &boundLen) != 0) {
      const int e = errno;
      ::close(fd);
      return errorSystem("getsockname on %s failed: %s", socketAddressText(addr).c_str(),
                         std::strerror(e));
    }
  }
  return fd;
}

Result<bool> socketSendSome(int fd, const void* buf, size_t len, size_t* off) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (*off < len) {
    const ssize_t n = ::send(fd, p + *off, len - *off, MSG_NOSIGNAL);
    if (n > 0) {
      *off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return false;
    } else {
      return errorRemote("send to the peer failed: %s", std::strerror(errno));
    }
  }
  return true;
}

Result<bool> socketRecvSome(int fd, void* buf, size_t len, size_t* off) {
  auto* p = static_cast<uint8_t*>(buf);
  while (*off < len) {
    const ssize_t n = ::recv(fd, p + *off, len - *off, 0);
    if (n > 0) {
      *off += static_cast<size_t>(n);
    } else if (n == 0) {
      return errorRemote("the peer closed the socket after %zu of %zu bytes", *off, len);
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return false;
    } else {
      return errorRemote("receive from the peer failed: %s", std::strerror(errno));
    }
  }
  return true;
}

int socketIoAll(int fd, void* buf, size_t n, bool writing,
                std::chrono::steady_clock::time_point deadline) {
  using Clock = std::chrono::steady_clock;
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    // Waits in slices of at most a second, so a far deadline needs no special case.
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return -ETIMEDOUT;
    pollfd pfd{fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return -errno;
    if (pr == 0) continue;
    const ssize_t k = writing ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k < 0) return -errno;
    if (k == 0) return -ECONNRESET;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return 0;
}

}  // namespace terse
