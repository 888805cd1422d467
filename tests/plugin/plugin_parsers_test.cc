// The plugin's checks of bytes and sizes a peer chose, tested directly (the sources are compiled
// in: the plugin .so exports only NCCL's tables). The end-to-end cases, through dlopen and
// forked ranks, are in net_plugin_test.cc.
#include "net_handshake.h"
#include "net_lossless.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace terse::plugin {
namespace {

// A frame is at most the receive plus its header; anything larger is refused, by size alone.
TEST(LosslessFrameSize, RefusesFramesLargerThanTheReceivePlusHeader) {
  for (size_t cap : {size_t{0}, size_t{1}, size_t{4096}, size_t{1} << 30}) {
    EXPECT_TRUE(checkFrameSize(0, cap).isOk()) << cap;
    EXPECT_TRUE(checkFrameSize(kFrameHeaderBytes, cap).isOk()) << cap;
    EXPECT_TRUE(checkFrameSize(cap + kFrameHeaderBytes, cap).isOk()) << cap;
    Status st = checkFrameSize(cap + kFrameHeaderBytes + 1, cap);
    ASSERT_FALSE(st.isOk()) << cap;
    EXPECT_EQ(st.code(), StatusCode::kInvalidUsage);
    EXPECT_NE(st.message().find(std::to_string(cap + kFrameHeaderBytes + 1) + " bytes"),
              std::string::npos)
        << st.message();
  }
  // What a peer could announce at most: must not wrap around into "fits".
  EXPECT_FALSE(checkFrameSize(SIZE_MAX, 4096).isOk());
  EXPECT_FALSE(checkFrameSize(SIZE_MAX, SIZE_MAX - kFrameHeaderBytes - 1).isOk());
  EXPECT_TRUE(checkFrameSize(SIZE_MAX, SIZE_MAX - kFrameHeaderBytes).isOk());
}

// The check never refuses a frame compress() made for a receive as large as the message.
TEST(LosslessFrameSize, AcceptsEveryFrameCompressMakes) {
  LosslessCodec codec;
  for (size_t n : {size_t{18}, size_t{300}, size_t{70000}, size_t{1} << 20}) {
    std::vector<uint8_t> msg(n, 0);
    for (size_t i = 0; i < n; i += 29) msg[i] = static_cast<uint8_t>(i * 7);
    StagingBuffer frame;
    size_t f = codec.compress(msg.data(), n, &frame);
    if (f == 0) continue;
    EXPECT_TRUE(checkFrameSize(f, n).isOk()) << n;
    std::vector<uint8_t> out(n);
    auto got = codec.decompress(frame.data(), f, out.data(), n);
    ASSERT_TRUE(got.isOk()) << got.status().message();
    EXPECT_EQ(out, msg);
  }
}

WireHandle listenHandle(int family) {
  WireHandle h;
  std::memset(&h, 0, sizeof h);
  h.magic = kHandleMagic;
  h.version = kProtocolVersion;
  h.listenNonce = 0x1234;
  if (family == AF_INET6) {
    h.addr.v6.sin6_family = AF_INET6;
    h.addr.v6.sin6_port = htons(4000);
    h.addr.v6.sin6_addr = in6addr_loopback;
  } else {
    h.addr.v4.sin_family = static_cast<sa_family_t>(family);
    h.addr.v4.sin_port = htons(4000);
    h.addr.v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  return h;
}

TEST(ConnectHandle, AcceptsWhatListenMakes) {
  for (int family : {AF_INET, AF_INET6}) {
    ConnectTarget t{};
    ASSERT_TRUE(parseConnectHandle(listenHandle(family), &t).isOk());
    EXPECT_EQ(t.addr.ss_family, family);
    EXPECT_EQ(t.len, family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    EXPECT_EQ(t.listenNonce, 0x1234u);
  }
}

TEST(ConnectHandle, RefusesForeignHandlesAndAddressFamilies) {
  ConnectTarget t{};
  WireHandle h = listenHandle(AF_INET);
  h.magic ^= 1;
  EXPECT_EQ(parseConnectHandle(h, &t).code(), StatusCode::kInvalidArgument);
  h = listenHandle(AF_INET);
  h.version = 1;
  EXPECT_EQ(parseConnectHandle(h, &t).code(), StatusCode::kInvalidArgument);
  for (int family : {AF_UNSPEC, AF_UNIX, AF_PACKET, 0xffff}) {
    Status st = parseConnectHandle(listenHandle(family), &t);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << family;
    EXPECT_NE(st.message().find("address family is " + std::to_string(family)), std::string::npos)
        << st.message();
  }
}

TEST(Hello, VerdictFollowsMagicVersionNonceAndLossless) {
  const Hello good{kHandleMagic, kProtocolVersion, 77, 0, 0};
  EXPECT_EQ(checkHello(good, 77, false), HelloVerdict::kAccept);
  EXPECT_EQ(checkHello(good, 78, false), HelloVerdict::kForeign);
  EXPECT_EQ(checkHello(good, 77, true), HelloVerdict::kLosslessMismatch);
  Hello h = good;
  h.flags = kFlagLossless | 0xf0;  // unknown bits are ignored
  EXPECT_EQ(checkHello(h, 77, true), HelloVerdict::kAccept);
  h = good;
  h.version = kProtocolVersion + 1;
  EXPECT_EQ(checkHello(h, 77, true), HelloVerdict::kForeign);  // not a mismatch: not ours
  h = good;
  h.magic = 0;
  EXPECT_EQ(checkHello(h, 77, false), HelloVerdict::kForeign);
}

TEST(ReplyHeader, ChecksTheAddressLengthBeforeItSizesABuffer) {
  const std::string peer = "10.0.0.1<4000>";
  EXPECT_TRUE(checkReplyHeader(ReplyHeader{kHandleMagic, 5, 300, 0}, false, peer).isOk());
  EXPECT_TRUE(
      checkReplyHeader(ReplyHeader{kHandleMagic, 5, kMaxWorkerAddress, kFlagLossless}, true, peer)
          .isOk());
  for (uint32_t len : {0u, static_cast<uint32_t>(kMaxWorkerAddress) + 1, 0xffffffffu}) {
    Status st = checkReplyHeader(ReplyHeader{kHandleMagic, 5, len, 0}, false, peer);
    EXPECT_EQ(st.code(), StatusCode::kRemoteError) << len;
    EXPECT_NE(st.message().find(peer), std::string::npos) << st.message();
  }
  EXPECT_EQ(checkReplyHeader(ReplyHeader{kHandleMagic, 0, 300, 0}, false, peer).code(),
            StatusCode::kRemoteError);
  EXPECT_EQ(checkReplyHeader(ReplyHeader{0, 5, 300, 0}, false, peer).code(),
            StatusCode::kRemoteError);
  // TERSE_NET_LOSSLESS differing: refused by the peer, or seen here in an accepting reply.
  EXPECT_EQ(
      checkReplyHeader(ReplyHeader{kHandleMagic, 0, 0, kFlagLosslessMismatch}, true, peer).code(),
      StatusCode::kInvalidUsage);
  EXPECT_EQ(checkReplyHeader(ReplyHeader{kHandleMagic, 5, 300, kFlagLossless}, false, peer).code(),
            StatusCode::kInvalidUsage);
}

collnet::Handle collnetHandle() {
  collnet::Handle h;
  std::memset(&h, 0, sizeof h);
  h.magic = collnet::kHandleMagic;
  h.version = collnet::kHandleVersion;
  h.nonce = 99;
  h.port = 29500;
  std::strcpy(h.host, "10.1.2.3");
  return h;
}

TEST(CollNetHandle, AcceptsWhatListenMakes) {
  collnet::Handle in = collnetHandle(), out;
  ASSERT_TRUE(collnet::parseHandle(2, &in, &out).isOk());
  EXPECT_STREQ(out.host, "10.1.2.3");
  EXPECT_EQ(out.port, 29500);
  EXPECT_EQ(out.nonce, 99u);
}

TEST(CollNetHandle, RefusesForeignHandlesHostsAndPorts) {
  collnet::Handle out;
  collnet::Handle h = collnetHandle();
  h.version = 2;
  EXPECT_EQ(collnet::parseHandle(2, &h, &out).code(), StatusCode::kInvalidUsage);
  h = collnetHandle();
  std::memset(h.host, 'a', sizeof h.host);  // no NUL: strlen would run off the handle
  Status st = collnet::parseHandle(2, &h, &out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("handles[2] names an unterminated host"), std::string::npos)
      << st.message();
  h = collnetHandle();
  h.host[0] = '\0';
  EXPECT_EQ(collnet::parseHandle(2, &h, &out).code(), StatusCode::kInvalidArgument);
  for (int port : {0, -1, 65536}) {
    h = collnetHandle();
    h.port = port;
    EXPECT_EQ(collnet::parseHandle(2, &h, &out).code(), StatusCode::kInvalidArgument) << port;
  }
}

}  // namespace
}  // namespace terse::plugin
