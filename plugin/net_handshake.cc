#include "net_handshake.h"

#include <cstring>

namespace terse::plugin {
namespace {

const char* onOff(bool on) { return on ? "1" : "0"; }

}  // namespace

Status parseConnectHandle(const WireHandle& h, ConnectTarget* out) {
  if (h.magic != kHandleMagic || h.version != kProtocolVersion)
    return errorInvalidArgument(
        "connect: the handle was not made by this version of terse's listen (magic %#x, version "
        "%u): all ranks must load the same plugin",
        h.magic, h.version);
  sockaddr_storage addr{};
  std::memcpy(&addr, &h.addr, sizeof(h.addr));
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)
    return errorInvalidArgument(
        "connect: the handle's address family is %u, neither IPv4 nor IPv6: it was not made by "
        "terse's listen",
        static_cast<unsigned>(addr.ss_family));
  out->addr = addr;
  out->len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  out->listenNonce = h.listenNonce;
  return Status::ok();
}

HelloVerdict checkHello(const Hello& h, uint64_t listenNonce, bool losslessHere) {
  if (h.magic != kHandleMagic || h.version != kProtocolVersion || h.listenNonce != listenNonce)
    return HelloVerdict::kForeign;
  const bool peerLossless = (h.flags & kFlagLossless) != 0;
  return peerLossless == losslessHere ? HelloVerdict::kAccept : HelloVerdict::kLosslessMismatch;
}

Status checkReplyHeader(const ReplyHeader& h, bool losslessHere, const std::string& peer) {
  if (h.magic == kHandleMagic &&
      ((h.flags & kFlagLosslessMismatch) != 0 ||
       (h.recvCommId != 0 && ((h.flags & kFlagLossless) != 0) != losslessHere)))
    return errorInvalidUsage(
        "connect: TERSE_NET_LOSSLESS differs between ranks: it is %s on this (sending) rank and "
        "%s on the receiving rank at %s; set it to the same value on every rank",
        onOff(losslessHere), onOff((h.flags & kFlagLossless) != 0), peer.c_str());
  if (h.magic != kHandleMagic || h.recvCommId == 0)
    return errorRemote("connect: the peer at %s rejected the connection (stale handle?)",
                       peer.c_str());
  if (h.addrLen == 0 || h.addrLen > kMaxWorkerAddress)
    return errorRemote("connect: the peer at %s sent a worker address of %u bytes", peer.c_str(),
                       h.addrLen);
  return Status::ok();
}

namespace collnet {

Status parseHandle(int rank, const void* bytes, Handle* out) {
  Handle h;
  std::memcpy(&h, bytes, sizeof(h));
  if (h.magic != kHandleMagic || h.version != kHandleVersion)
    return errorInvalidUsage(
        "connect: handles[%d] is not a terse CollNet listen handle (magic %#x version %u); "
        "every rank must load the same libnccl-net-terse.so",
        rank, h.magic, h.version);
  const void* nul = std::memchr(h.host, '\0', sizeof(h.host));
  if (nul == nullptr || h.host[0] == '\0')
    return errorInvalidArgument(
        "connect: handles[%d] names %s host: it was not made by terse's CollNet listen", rank,
        nul == nullptr ? "an unterminated" : "an empty");
  if (h.port < 1 || h.port > 65535)
    return errorInvalidArgument(
        "connect: handles[%d] names port %d, outside 1..65535: it was not made by terse's CollNet "
        "listen",
        rank, static_cast<int>(h.port));
  *out = h;
  return Status::ok();
}

}  // namespace collnet
}  // namespace terse::plugin
