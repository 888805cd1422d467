// TCP socket helpers for terse's own setup connections: the rendezvous store
// (rendezvous/src/tcp_store.cc) and the NCCL plugin's connection setup (plugin/net_ucx.cc, and
// plugin/collnet_comm.cc through the store). One place for addresses as text, listening on a
// port the kernel picks, partial nonblocking I/O and whole-buffer I/O with a deadline. Internal
// to terse (layer headers are not installed).
#pragma once

#include "terse/common/status.h"

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace terse {

// "127.0.0.1:40123" (an IPv6 address without brackets); "?:0" for other families.
std::string socketAddressText(const sockaddr_storage& addr);
// The numeric host of an IPv4/IPv6 address ("10.0.0.2"); "" when it cannot be printed.
std::string socketNumericHost(const sockaddr_storage& addr);
// The port of an IPv4/IPv6 address; 0 for other families.
int socketPort(const sockaddr_storage& addr);
// "host:port" of the other end of a connected socket, "(unknown address)" when there is none.
std::string socketPeerText(int fd);

// Turns off Nagle's algorithm: setup exchanges are small request/answer pairs.
void socketSetNoDelay(int fd);

// Resolves `host` (a name or a numeric address; IPv4, as terse's TCP store serves) and `port`
// into `*addr`; `passive` for an address to bind. The error names the host.
Status socketResolve(const std::string& host, int port, bool passive, sockaddr_storage* addr,
                     socklen_t* len);

// A TCP socket bound to `addr` and listening, with `extraType` (SOCK_NONBLOCK or 0) and
// SOCK_CLOEXEC. `reuseAddr` sets SO_REUSEADDR (a server restarted on its port). A port of 0 lets
// the kernel choose one: `*bound` (when given) receives the address actually bound, port included,
// so there is never a probe-then-bind race. Errors name the address and errno's text.
Result<int> socketListen(const sockaddr_storage& addr, socklen_t len, int extraType, bool reuseAddr,
                         int backlog, sockaddr_storage* bound);

// Nonblocking partial I/O for setup state machines: moves what the socket takes or has, from
// byte *off of [buf, buf+len); true once all of it is done, false when the socket would block.
// A peer that closes early or a socket error is a kRemoteError ("send to the peer failed: ...",
// "the peer closed the socket after 3 of 16 bytes"); callers add their context.
Result<bool> socketSendSome(int fd, const void* buf, size_t len, size_t* off);
Result<bool> socketRecvSome(int fd, void* buf, size_t len, size_t* off);

// Blocking whole-buffer I/O before `deadline` (time_point::max(): no deadline): 0 when all `n`
// bytes moved, -ETIMEDOUT, -ECONNRESET when the other side closed, or another negative errno.
int socketIoAll(int fd, void* buf, size_t n, bool writing,
                std::chrono::steady_clock::time_point deadline);

}  // namespace terse
