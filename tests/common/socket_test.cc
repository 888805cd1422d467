// The socket helpers of terse's setup connections (common/socket.h), over loopback: a listener
// on a port the kernel picks, addresses as text, partial nonblocking I/O with the errors its
// callers report, and whole-buffer I/O with a deadline.
#include "terse/common/socket.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace terse {
namespace {

using Clock = std::chrono::steady_clock;

// A connected pair over loopback: the listener's side (nonblocking) and the dialer's.
struct Pair {
  int listenFd = -1, server = -1, client = -1;
  int port = 0;
  ~Pair() {
    for (int fd : {listenFd, server, client})
      if (fd >= 0) ::close(fd);
  }
};

void connectPair(Pair* p) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  ASSERT_TRUE(socketResolve("127.0.0.1", 0, true, &addr, &len).isOk());
  sockaddr_storage bound{};
  auto fd = socketListen(addr, len, SOCK_NONBLOCK, false, 4, &bound);
  ASSERT_TRUE(fd.isOk()) << fd.status().toString();
  p->listenFd = fd.value();
  p->port = socketPort(bound);
  ASSERT_GT(p->port, 0) << "the kernel's pick is reported";
  EXPECT_EQ(socketAddressText(bound), "127.0.0.1:" + std::to_string(p->port));
  EXPECT_EQ(socketNumericHost(bound), "127.0.0.1");
  p->client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(p->client, reinterpret_cast<sockaddr*>(&bound), sizeof(sockaddr_in)), 0)
      << std::strerror(errno);
  socketSetNoDelay(p->client);
  for (int i = 0; i < 1000 && p->server < 0; ++i) {
    p->server = ::accept4(p->listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (p->server < 0) usleep(1000);
  }
  ASSERT_GE(p->server, 0);
  EXPECT_EQ(socketPeerText(p->client), "127.0.0.1:" + std::to_string(p->port));
}

TEST(Socket, AddressText) {
  sockaddr_storage other{};
  other.ss_family = AF_UNIX;
  EXPECT_EQ(socketAddressText(other), "?:0");
  EXPECT_EQ(socketNumericHost(other), "");
  EXPECT_EQ(socketPort(other), 0);
  EXPECT_EQ(socketPeerText(-1), "(unknown address)");
  sockaddr_storage addr{};
  socklen_t len = 0;
  Status bad = socketResolve("no-such-host.invalid", 1, false, &addr, &len);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("no-such-host.invalid"), std::string::npos) << bad.message();
}

TEST(Socket, ListenOnATakenPortNamesIt) {
  Pair p;
  connectPair(&p);
  sockaddr_storage addr{};
  socklen_t len = 0;
  ASSERT_TRUE(socketResolve("127.0.0.1", p.port, true, &addr, &len).isOk());
  auto second = socketListen(addr, len, 0, false, 4, nullptr);
  ASSERT_FALSE(second.isOk());
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(p.port)),
            std::string::npos)
      << second.status().message();
}

TEST(Socket, PartialIoAndAnEarlyClose) {
  Pair p;
  connectPair(&p);
  // Nothing sent yet: the nonblocking read would block.
  char in[8] = {};
  size_t off = 0;
  auto got = socketRecvSome(p.server, in, sizeof in, &off);
  ASSERT_TRUE(got.isOk());
  EXPECT_FALSE(got.value());
  // Half of it, then the rest: the offset carries over between calls.
  ASSERT_EQ(::send(p.client, "abcd", 4, 0), 4);
  for (int i = 0; i < 1000 && off < 4; ++i) {
    ASSERT_TRUE(socketRecvSome(p.server, in, sizeof in, &off).isOk());
    if (off < 4) usleep(1000);
  }
  EXPECT_EQ(off, 4u);
  size_t sent = 0;
  auto out = socketSendSome(p.server, "xyz", 3, &sent);
  ASSERT_TRUE(out.isOk());
  EXPECT_TRUE(out.value());
  char back[3] = {};
  ASSERT_EQ(socketIoAll(p.client, back, 3, false, Clock::now() + std::chrono::seconds(5)), 0);
  EXPECT_EQ(std::string(back, 3), "xyz");
  // The peer leaves after 4 of 8 bytes: a remote error that says how far it got.
  ::close(p.client);
  p.client = -1;
  Result<bool> last = true;
  for (int i = 0; i < 1000; ++i) {
    last = socketRecvSome(p.server, in, sizeof in, &off);
    if (!last.isOk()) break;
    usleep(1000);
  }
  ASSERT_FALSE(last.isOk());
  EXPECT_EQ(last.status().code(), StatusCode::kRemoteError);
  EXPECT_NE(last.status().message().find("after 4 of 8 bytes"), std::string::npos)
      << last.status().message();
}

TEST(Socket, WholeBufferIoHonoursItsDeadline) {
  Pair p;
  connectPair(&p);
  char buf[16];
  // Nobody writes: a timeout, not a hang.
  EXPECT_EQ(
      socketIoAll(p.client, buf, sizeof buf, false, Clock::now() + std::chrono::milliseconds(50)),
      -ETIMEDOUT);
  // A large write in full, read back in full, then the writer's close is a reset to the reader.
  std::vector<char> big(1 << 20, 'q'), back(big.size());
  std::thread writer([&] {
    EXPECT_EQ(socketIoAll(p.server, big.data(), big.size(), true, Clock::time_point::max()), 0);
  });
  EXPECT_EQ(socketIoAll(p.client, back.data(), back.size(), false,
                        Clock::now() + std::chrono::seconds(10)),
            0);
  writer.join();
  EXPECT_EQ(back, big);
  ::close(p.server);
  p.server = -1;
  EXPECT_EQ(socketIoAll(p.client, buf, 1, false, Clock::now() + std::chrono::seconds(5)),
            -ECONNRESET);
}

}  // namespace
}  // namespace terse
