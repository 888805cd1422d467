// The net plugin's connection setup (net_ucx.h, "Connection setup"): listen, and connect and
// accept as state machines advanced on each of NCCL's calls, over common's socket helpers; the
// send side's UCX endpoint is made through the transport's UCX core once the receiver's worker
// address is in.
#include "net_connect.h"

#include "plugin_log.h"
#include "terse/common/socket.h"
#include "terse/transport/ucx_core.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace terse::plugin {
namespace {

// Receive comm ids stay below 2^31: the UCX tag's top bit marks compressed frames.
constexpr uint32_t kMaxRecvCommId = (1u << 31) - 1;
static_assert(sizeof(WireHandle) <= NCCL_NET_HANDLE_MAXSIZE, "handle must fit NCCL's buffer");

const char* onOff(bool on) { return on ? "1" : "0"; }

std::string errnoText() { return std::strerror(errno); }

// The setup exchange's partial I/O (common's socket helpers), its errors said to be setup's.
Result<bool> writeSome(int fd, const void* buf, size_t len, size_t* off) {
  auto r = socketSendSome(fd, buf, len, off);
  if (!r.isOk()) return r.status().withContext("connection setup");
  return r;
}

Result<bool> readSome(int fd, void* buf, size_t len, size_t* off) {
  auto r = socketRecvSome(fd, buf, len, off);
  if (!r.isOk()) return r.status().withContext("connection setup");
  return r;
}

void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<SendComm*>(arg)->fail(std::string("UCX endpoint to the receiver failed: ") +
                                    ucs_status_string(status));
}

}  // namespace

NetContext* contextOf(ListenComm* listen) { return listen->ctx; }

Status SendComm::createEndpoint(const std::string& workerAddress) {
  bool peerMode = ctx_->peerErrorMode();
  const bool askedPeerMode = peerMode;
  ucs_status_t st =
      ucxCreateEndpoint(ctx_->worker(), workerAddress, &peerMode, onEndpointError, this, &ep_);
  // UCX refused PEER mode (shared memory only, UCX 1.13): later endpoints go without it at once.
  // Without it a dead peer is still caught: its setup socket hangs up.
  if (askedPeerMode && !peerMode) ctx_->disablePeerErrorMode();
  if (st != UCS_OK)
    return errorRemote(
        "ucp_ep_create to the receiver failed: %s (check UCX_TLS/UCX_NET_DEVICES "
        "name a transport both hosts share)",
        ucs_status_string(st));
  return Status::ok();
}

Status NetContext::listen(int dev, void* handle, ListenComm** out) {
  *out = nullptr;
  if (dev != 0) return errorInvalidArgument("listen: device %d does not exist (terse has 1)", dev);
  auto l = std::make_unique<ListenComm>();
  l->ctx = this;
  l->nonce = (static_cast<uint64_t>(getpid()) << 32) ^ nextListenNonce_++;
  sockaddr_storage addr{};  // the interface's address with the port the kernel chose
  auto fd = socketListen(device_.bindAddr, device_.bindLen, SOCK_NONBLOCK, /*reuseAddr=*/false, 128,
                         &addr);
  if (!fd.isOk())
    return errorSystem("listen: %s (interface %s)", fd.status().message().c_str(),
                       device_.ifname.c_str());
  l->fd = fd.value();
  const size_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);

  auto* h = static_cast<WireHandle*>(handle);
  std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  h->magic = kHandleMagic;
  h->version = kProtocolVersion;
  h->listenNonce = l->nonce;
  std::memcpy(&h->addr, &addr, std::min<size_t>(len, sizeof(h->addr)));
  PLUGIN_TRACE("listening on %s", socketAddressText(addr).c_str());
  *out = l.get();
  listens_.push_back(std::move(l));
  return Status::ok();
}

Status NetContext::connect(int dev, void* handle, SendComm** out) {
  *out = nullptr;
  if (dev != 0) return errorInvalidArgument("connect: device %d does not exist (terse has 1)", dev);
  auto* h = static_cast<WireHandle*>(handle);
  // The listener's bytes, carried by NCCL: checked before a socket is opened for them.
  ConnectTarget target{};
  TERSE_RETURN_IF_ERROR(parseConnectHandle(*h, &target));
  ConnectAttempt* attempt = nullptr;
  for (auto& a : attempts_)
    if (reinterpret_cast<uint64_t>(a.get()) == h->attempt) attempt = a.get();
  if (attempt == nullptr) {
    auto a = std::make_unique<ConnectAttempt>();
    sockaddr_storage peer = target.addr;
    const socklen_t len = target.len;
    a->peer = socketAddressText(peer);
    a->fd = ::socket(peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a->fd < 0) return errorSystem("connect: socket() failed: %s", errnoText().c_str());
    socketSetNoDelay(a->fd);
    if (::connect(a->fd, reinterpret_cast<sockaddr*>(&peer), len) != 0 && errno != EINPROGRESS)
      return errorRemote("connect: cannot reach the listening peer at %s: %s", a->peer.c_str(),
                         errnoText().c_str());
    a->hello = Hello{kHandleMagic, kProtocolVersion, target.listenNonce,
                     lossless_.enabled ? kFlagLossless : 0u, 0u};
    attempt = a.get();
    attempts_.push_back(std::move(a));
    h->attempt = reinterpret_cast<uint64_t>(attempt);
  }
  Status st = advanceConnect(attempt, out);
  if (!st.isOk() || *out != nullptr) {
    h->attempt = 0;
    attempts_.erase(std::find_if(attempts_.begin(), attempts_.end(),
                                 [&](const auto& a) { return a.get() == attempt; }));
  }
  return st;
}

Status NetContext::advanceConnect(ConnectAttempt* a, SendComm** out) {
  using Stage = ConnectAttempt::Stage;
  if (a->stage == Stage::kConnecting) {
    pollfd p{a->fd, POLLOUT, 0};
    if (::poll(&p, 1, 0) <= 0) return Status::ok();
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(a->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0)
      return errorRemote("connect: cannot reach the listening peer at %s: %s", a->peer.c_str(),
                         std::strerror(err));
    a->stage = Stage::kSendHello;
    a->off = 0;
  }
  if (a->stage == Stage::kSendHello) {
    TERSE_ASSIGN_OR_RETURN(bool sent, writeSome(a->fd, &a->hello, sizeof(a->hello), &a->off));
    if (!sent) return Status::ok();
    a->stage = Stage::kReadHeader;
    a->off = 0;
  }
  if (a->stage == Stage::kReadHeader) {
    TERSE_ASSIGN_OR_RETURN(bool got, readSome(a->fd, &a->header, sizeof(a->header), &a->off));
    if (!got) return Status::ok();
    // The peer's bytes: addrLen sizes the buffer read next, so it is checked first.
    TERSE_RETURN_IF_ERROR(checkReplyHeader(a->header, lossless_.enabled, a->peer));
    a->address.resize(a->header.addrLen);
    a->stage = Stage::kReadAddress;
    a->off = 0;
  }
  TERSE_ASSIGN_OR_RETURN(bool got, readSome(a->fd, a->address.data(), a->address.size(), &a->off));
  if (!got) return Status::ok();
  auto comm = std::make_unique<SendComm>(
      this, a->fd, a->header.recvCommId,
      static_cast<size_t>(NCCL_NET_MAX_REQUESTS) * static_cast<size_t>(device_.maxRecvs),
      lossless_.enabled);
  int fd = a->fd;
  a->fd = -1;  // the comm owns the socket now
  TERSE_RETURN_IF_ERROR(comm->createEndpoint(a->address));
  PLUGIN_TRACE("connected to %s as comm %u (fd %d)", a->peer.c_str(), comm->id(), fd);
  *out = comm.get();
  comms_.push_back(std::move(comm));
  return Status::ok();
}

Status NetContext::accept(ListenComm* l, RecvComm** out) {
  *out = nullptr;
  for (;;) {
    int fd = ::accept4(l->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return errorSystem("accept: accept() failed: %s", errnoText().c_str());
    }
    socketSetNoDelay(fd);
    auto p = std::make_unique<PendingAccept>();
    p->fd = fd;
    l->pending.push_back(std::move(p));
  }
  for (size_t i = 0; i < l->pending.size(); ++i) {
    PendingAccept* p = l->pending[i].get();
    Status st;
    bool finished = false;
    if (p->stage == PendingAccept::Stage::kReadHello) {
      auto got = readSome(p->fd, &p->hello, sizeof(p->hello), &p->off);
      if (!got.isOk()) {
        st = got.status();
      } else if (got.value()) {
        ReplyHeader header{kHandleMagic, 0, 0, lossless_.enabled ? kFlagLossless : 0u};
        const HelloVerdict verdict = checkHello(p->hello, l->nonce, lossless_.enabled);
        const bool valid = verdict == HelloVerdict::kAccept;
        const bool peerLossless = !lossless_.enabled;  // what a mismatch means
        if (verdict == HelloVerdict::kLosslessMismatch) {
          // Refuse with a reason the sender can report, then fail here too: a job with the
          // variable set on some ranks only is misconfigured, and must not half-work.
          header.flags |= kFlagLosslessMismatch;
          size_t off = 0;
          (void)writeSome(p->fd, &header, sizeof(header), &off);
          l->pending.erase(l->pending.begin() + static_cast<long>(i));
          return errorInvalidUsage(
              "accept: TERSE_NET_LOSSLESS differs between ranks: it is %s on this (receiving) "
              "rank and %s on the connecting rank; set it to the same value on every rank",
              onOff(lossless_.enabled), onOff(peerLossless));
        }
        if (valid) {
          p->recvCommId = nextRecvCommId_++;
          if (nextRecvCommId_ > kMaxRecvCommId) nextRecvCommId_ = 1;
          header.recvCommId = p->recvCommId;
          header.addrLen = static_cast<uint32_t>(ucx_.address.size());
        } else {
          PLUGIN_WARN("accept: dropping a connection with a foreign or stale hello");
        }
        p->reply.resize(sizeof(header) + header.addrLen);
        std::memcpy(p->reply.data(), &header, sizeof(header));
        if (valid)
          std::memcpy(p->reply.data() + sizeof(header), ucx_.address.data(), ucx_.address.size());
        p->stage = PendingAccept::Stage::kSendReply;
        p->off = 0;
      }
    }
    if (st.isOk() && p->stage == PendingAccept::Stage::kSendReply) {
      auto sent = writeSome(p->fd, p->reply.data(), p->reply.size(), &p->off);
      if (!sent.isOk())
        st = sent.status();
      else
        finished = sent.value();
    }
    if (!st.isOk() || (finished && p->recvCommId == 0)) {
      // A broken or foreign connection must not take the listening comm down with it.
      if (!st.isOk()) PLUGIN_WARN("accept: dropping a connection: %s", st.message().c_str());
      l->pending.erase(l->pending.begin() + static_cast<long>(i));
      --i;
      continue;
    }
    if (finished) {
      auto comm =
          std::make_unique<RecvComm>(this, p->fd, p->recvCommId,
                                     static_cast<size_t>(NCCL_NET_MAX_REQUESTS), lossless_.enabled);
      if (comm->lossless()) losslessRecvs_.push_back(comm.get());
      p->fd = -1;
      l->pending.erase(l->pending.begin() + static_cast<long>(i));
      PLUGIN_TRACE("accepted comm %u (fd %d)", comm->id(), comm->fd());
      *out = comm.get();
      comms_.push_back(std::move(comm));
      return Status::ok();
    }
  }
  return Status::ok();
}

Status NetContext::closeListen(ListenComm* l) {
  auto it =
      std::find_if(listens_.begin(), listens_.end(), [&](const auto& p) { return p.get() == l; });
  if (it == listens_.end()) return errorInvalidArgument("closeListen: unknown listen comm %p", l);
  listens_.erase(it);
  return Status::ok();
}

}  // namespace terse::plugin
