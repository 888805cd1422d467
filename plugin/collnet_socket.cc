#include "collnet_socket.h"

#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace terse::plugin::collnet {

std::string numericHost(const sockaddr_storage& addr) {
  char host[NI_MAXHOST] = {0};
  socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return "";
  return host;
}

Result<int> probeFreePort(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), "0", &hints, &res);
  if (rc != 0) return errorSystem("cannot resolve %s: %s", host.c_str(), gai_strerror(rc));
  int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0) {
    freeaddrinfo(res);
    return errorSystem("socket() failed: %s", std::strerror(errno));
  }
  int port = -1;
  if (::bind(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
      port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  int err = errno;
  ::close(fd);
  freeaddrinfo(res);
  if (port <= 0)
    return errorSystem("cannot bind a port on %s: %s", host.c_str(), std::strerror(err));
  return port;
}

}  // namespace terse::plugin::collnet
