// fuzz_handshake: the NCCL plugin's connection handshakes (plugin/net_handshake.h), which read
// bytes another rank chose: the net listen handle that connect dials, the hello that accept
// answers, the reply header that sizes connect's next read, and the CollNet listen handle.
//
// Byte 0 picks the message, byte 1 this rank's side (TERSE_NET_LOSSLESS, the listen nonce's low
// byte); the rest is the peer's bytes, zero-padded to the message's size.
//
// Checked besides "no crash / UB": an accepted connect handle names IPv4 or IPv6 with the
// matching address length; the hello verdict is exactly what magic, version, nonce and the
// lossless flag say; an accepted reply has a comm id and an address length in 1..64 KiB and
// agrees on lossless, and a refused one's error names the peer; an accepted CollNet handle has a
// non-empty, terminated host and a port in 1..65535, and parses again to the same handle.
#include "fuzz_util.h"
#include "net_handshake.h"

#include <arpa/inet.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace terse::plugin;
using terse::Status;
using terse::fuzz::fail;

enum Message : uint8_t { kConnect = 0, kHello = 1, kReply = 2, kCollNet = 3, kMessages = 4 };

template <typename T>
T fromBytes(const uint8_t* p, size_t n) {
  T v;
  std::memset(&v, 0, sizeof v);
  std::memcpy(&v, p, n < sizeof v ? n : sizeof v);
  return v;
}

void fuzzConnect(const uint8_t* p, size_t n) {
  const auto h = fromBytes<WireHandle>(p, n);
  ConnectTarget t{};
  Status st = parseConnectHandle(h, &t);
  if (!st.isOk()) {
    if (st.code() != terse::StatusCode::kInvalidArgument)
      fail("a refused handle is not kInvalidArgument");
    return;
  }
  if (h.magic != kHandleMagic || h.version != kProtocolVersion)
    fail("accepted a handle of another magic or version");
  if (!((t.addr.ss_family == AF_INET && t.len == sizeof(sockaddr_in)) ||
        (t.addr.ss_family == AF_INET6 && t.len == sizeof(sockaddr_in6))))
    fail("accepted an address that is not IPv4 or IPv6 of its own length");
  if (t.listenNonce != h.listenNonce) fail("the target's nonce is not the handle's");
}

void fuzzHello(uint8_t side, const uint8_t* p, size_t n) {
  const auto h = fromBytes<Hello>(p, n);
  const bool lossless = (side & 1) != 0;
  // A nonce that sparse mutations of the seeds can match: the seeds carry it.
  const uint64_t nonce = 0x0123456789abcd00ull | (side & 0xfe);
  const HelloVerdict v = checkHello(h, nonce, lossless);
  const bool ours =
      h.magic == kHandleMagic && h.version == kProtocolVersion && h.listenNonce == nonce;
  const bool same = ((h.flags & kFlagLossless) != 0) == lossless;
  const HelloVerdict want = !ours  ? HelloVerdict::kForeign
                            : same ? HelloVerdict::kAccept
                                   : HelloVerdict::kLosslessMismatch;
  if (v != want) fail("the hello verdict is not what magic, version, nonce and flags say");
}

void fuzzReply(uint8_t side, const uint8_t* p, size_t n) {
  const auto h = fromBytes<ReplyHeader>(p, n);
  const bool lossless = (side & 1) != 0;
  const std::string peer = "192.0.2.7<4000>";
  Status st = checkReplyHeader(h, lossless, peer);
  if (!st.isOk()) {
    if (st.message().find(peer) == std::string::npos)
      fail("a refused reply does not name the peer");
    return;
  }
  if (h.magic != kHandleMagic || h.recvCommId == 0) fail("accepted a rejecting or foreign reply");
  if (h.addrLen == 0 || h.addrLen > kMaxWorkerAddress)
    fail("accepted a worker address length that sizes a buffer from nothing or too much");
  if ((h.flags & kFlagLosslessMismatch) != 0 || ((h.flags & kFlagLossless) != 0) != lossless)
    fail("accepted a reply that disagrees on TERSE_NET_LOSSLESS");
}

void fuzzCollNet(uint8_t side, const uint8_t* p, size_t n) {
  // The handle as NCCL's 128-byte buffer holds it; shorter inputs are zero-padded.
  uint8_t buffer[128] = {};
  std::memcpy(buffer, p, n < sizeof buffer ? n : sizeof buffer);
  collnet::Handle h;
  Status st = collnet::parseHandle(side, buffer, &h);
  if (!st.isOk()) {
    if (st.message().find("handles[" + std::to_string(side) + "]") == std::string::npos)
      fail("a refused CollNet handle's error does not name it");
    return;
  }
  const size_t hostLen = strnlen(h.host, sizeof h.host);
  if (hostLen == 0 || hostLen == sizeof h.host) fail("accepted an empty or unterminated host");
  if (h.port < 1 || h.port > 65535) fail("accepted a port outside 1..65535");
  collnet::Handle again;
  if (!collnet::parseHandle(side, &h, &again).isOk() || again.nonce != h.nonce ||
      again.port != h.port || std::strcmp(again.host, h.host) != 0)
    fail("an accepted CollNet handle does not parse again to itself");
}

std::vector<uint8_t> message(uint8_t kind, uint8_t side, const void* bytes, size_t n) {
  std::vector<uint8_t> out = {kind, side};
  const auto* b = static_cast<const uint8_t*>(bytes);
  out.insert(out.end(), b, b + n);
  return out;
}

void writeSeeds(const std::function<void(const std::vector<uint8_t>&)>& put) {
  for (int family : {AF_INET, AF_INET6}) {
    WireHandle h;
    std::memset(&h, 0, sizeof h);
    h.magic = kHandleMagic;
    h.version = kProtocolVersion;
    h.listenNonce = 0x0123456789abcd00ull;
    if (family == AF_INET) {
      h.addr.v4.sin_family = AF_INET;
      h.addr.v4.sin_port = htons(29500);
      h.addr.v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
      h.addr.v6.sin6_family = AF_INET6;
      h.addr.v6.sin6_port = htons(29500);
      h.addr.v6.sin6_addr = in6addr_loopback;
    }
    put(message(kConnect, 0, &h, sizeof h));
  }
  for (uint32_t flags : {0u, kFlagLossless}) {
    const Hello hello{kHandleMagic, kProtocolVersion, 0x0123456789abcd00ull, flags, 0};
    put(message(kHello, 0, &hello, sizeof hello));
    put(message(kHello, 1, &hello, sizeof hello));
    const ReplyHeader reply{kHandleMagic, 7, 320, flags};
    put(message(kReply, flags != 0 ? 1 : 0, &reply, sizeof reply));
  }
  const ReplyHeader refused{kHandleMagic, 0, 0, kFlagLosslessMismatch};
  put(message(kReply, 1, &refused, sizeof refused));
  collnet::Handle c;
  std::memset(&c, 0, sizeof c);
  c.magic = collnet::kHandleMagic;
  c.version = collnet::kHandleVersion;
  c.nonce = 42;
  c.port = 40123;
  std::strcpy(c.host, "fe80::1");
  put(message(kCollNet, 0, &c, sizeof c));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  terse::fuzz::maybeWriteSeeds(writeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t side = data[1];
  const uint8_t* p = data + 2;
  const size_t n = size - 2;
  switch (data[0] % kMessages) {
    case kConnect: fuzzConnect(p, n); break;
    case kHello: fuzzHello(side, p, n); break;
    case kReply: fuzzReply(side, p, n); break;
    case kCollNet: fuzzCollNet(side, p, n); break;
  }
  return 0;
}
