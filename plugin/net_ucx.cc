#include "net_ucx.h"

#include "net_handshake.h"

#include "plugin_log.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace terse::plugin {
namespace {

// How often a pending request looks at its setup socket for a hang-up.
constexpr int64_t kHangupCheckIntervalMs = 100;
// Bound on waiting for UCX to finish an endpoint close or cancelled receives.
constexpr auto kCloseDeadline = std::chrono::seconds(10);
constexpr auto kDeadPeerCloseDeadline = std::chrono::milliseconds(500);
// Receive comm ids stay below 2^31: the UCX tag's top bit marks compressed frames.
constexpr uint32_t kMaxRecvCommId = (1u << 31) - 1;
// Receives of a lossless comm match comm id and NCCL tag, whatever the compressed bit says.
constexpr uint64_t kProbeTagMask = ~kCompressedTagBit;
// A staging buffer grown past this by one large message is freed when the request ends.
constexpr size_t kKeepStagingBytes = 16u << 20;

static_assert(sizeof(WireHandle) <= NCCL_NET_HANDLE_MAXSIZE, "handle must fit NCCL's buffer");

const char* onOff(bool on) { return on ? "1" : "0"; }

uint64_t ucxTag(uint32_t recvCommId, int tag) {
  return (static_cast<uint64_t>(recvCommId) << 32) | static_cast<uint32_t>(tag);
}

std::string errnoText() { return std::strerror(errno); }

// Writes what the socket takes; true once all of [buf, buf+len) is out.
Result<bool> writeSome(int fd, const void* buf, size_t len, size_t* off) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (*off < len) {
    ssize_t n = ::send(fd, p + *off, len - *off, MSG_NOSIGNAL);
    if (n > 0) {
      *off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return false;
    } else {
      return errorRemote("connection setup: send to the peer failed: %s", errnoText().c_str());
    }
  }
  return true;
}

// Reads what has arrived; true once all `len` bytes are in.
Result<bool> readSome(int fd, void* buf, size_t len, size_t* off) {
  auto* p = static_cast<uint8_t*>(buf);
  while (*off < len) {
    ssize_t n = ::recv(fd, p + *off, len - *off, 0);
    if (n > 0) {
      *off += static_cast<size_t>(n);
    } else if (n == 0) {
      return errorRemote("connection setup: the peer closed the socket after %zu of %zu bytes",
                         *off, len);
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return false;
    } else {
      return errorRemote("connection setup: receive from the peer failed: %s", errnoText().c_str());
    }
  }
  return true;
}

// "host:port" of the other end of a setup socket, for messages that must name the peer.
std::string peerOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return "(unknown address)";
  return sockaddrToString(addr);
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void onSendDone(void* request, ucs_status_t status, void* userData) {
  auto* op = static_cast<SubOp*>(userData);
  op->status = status;
  op->done = true;
  op->ucpRequest = nullptr;
  ucp_request_free(request);
}

void onRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                void* userData) {
  auto* op = static_cast<SubOp*>(userData);
  op->status = status;
  op->bytes = status == UCS_OK && info != nullptr ? info->length : 0;
  op->done = true;
  op->ucpRequest = nullptr;
  ucp_request_free(request);
}

void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<SendComm*>(arg)->fail(std::string("UCX endpoint to the receiver failed: ") +
                                    ucs_status_string(status));
}

Status checkRange(const MemRegion* mh, const void* data, size_t size, const char* what) {
  if (size > 0 && data == nullptr)
    return errorInvalidArgument("%s: buffer is NULL but size is %zu", what, size);
  if (mh == nullptr) return Status::ok();
  auto begin = reinterpret_cast<uintptr_t>(data);
  if (size > 0 && (begin < mh->begin || begin + size > mh->begin + mh->size))
    return errorInvalidArgument(
        "%s: buffer [%p, +%zu) lies outside its registration [%p, +%zu): register the buffer "
        "that is passed",
        what, data, size, reinterpret_cast<void*>(mh->begin), mh->size);
  return Status::ok();
}

ucs_memory_type_t ucxMemoryType(const MemRegion* mh) {
  return mh != nullptr && mh->type == NCCL_PTR_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

// True when UCX_TLS names only intra-host transports, none of which can report a dead peer in
// UCX 1.13: asking for peer error mode would only make UCX print an error and refuse.
bool sharedMemoryOnly() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || *tls == '\0' || *tls == '^') return false;
  static const char* kLocal[] = {"sm",  "shm",  "posix", "sysv", "xpmem",
                                 "cma", "knem", "self",  "mm"};
  std::string list = tls;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = std::min(list.find(',', pos), list.size());
    std::string t = list.substr(pos, comma - pos);
    if (!t.empty() &&
        std::none_of(std::begin(kLocal), std::end(kLocal), [&](const char* k) { return t == k; }))
      return false;
    pos = comma + 1;
  }
  return true;
}

}  // namespace

// ---- connection setup state ----------------------------------------------------------------

struct ConnectAttempt {
  enum class Stage { kConnecting, kSendHello, kReadHeader, kReadAddress };
  ~ConnectAttempt() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
  Stage stage = Stage::kConnecting;
  Hello hello{};
  size_t off = 0;
  ReplyHeader header{};
  std::vector<uint8_t> address;
  std::string peer;
};

struct PendingAccept {
  enum class Stage { kReadHello, kSendReply };
  ~PendingAccept() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
  Stage stage = Stage::kReadHello;
  Hello hello{};
  size_t off = 0;
  std::vector<uint8_t> reply;
  uint32_t recvCommId = 0;
};

class ListenComm {
 public:
  ~ListenComm() {
    if (fd >= 0) ::close(fd);
  }
  NetContext* ctx = nullptr;
  int fd = -1;
  uint64_t nonce = 0;
  std::vector<std::unique_ptr<PendingAccept>> pending;
};

NetContext* contextOf(ListenComm* listen) { return listen->ctx; }

// ---- Comm ----------------------------------------------------------------------------------

Comm::Comm(NetContext* ctx, int fd, size_t poolSize, uint32_t recvCommId, bool lossless)
    : ctx_(ctx), fd_(fd), recvCommId_(recvCommId), lossless_(lossless), pool_(poolSize) {
  for (auto& r : pool_) r.comm = this;
}

Comm::~Comm() {
  if (fd_ >= 0) ::close(fd_);
}

void Comm::fail(const std::string& why) {
  if (!failure_.empty()) return;
  failure_ = why;
  PLUGIN_WARN("comm %u: %s", recvCommId_, why.c_str());
}

NetRequest* Comm::allocRequest() {
  for (auto& r : pool_) {
    if (r.inUse && r.abandoned) {
      bool live = false;
      for (int i = 0; i < r.n; ++i) live |= r.ops[i].ucpRequest != nullptr;
      if (!live) r.inUse = false;
    }
    if (!r.inUse) {
      r.inUse = true;
      r.abandoned = false;
      r.n = 0;
      return &r;
    }
  }
  return nullptr;
}

void Comm::freeRequest(NetRequest* r) {
  forgetProbes(r);
  for (int i = 0; i < r->n; ++i)
    if (r->ops[i].staging.capacity() > kKeepStagingBytes) r->ops[i].staging.release();
  r->inUse = false;
  r->abandoned = false;
  r->n = 0;
}

void Comm::abandon(NetRequest* r) {
  forgetProbes(r);
  for (int i = 0; i < r->n; ++i) r->ops[i].probing = false;
  r->abandoned = true;
}

void RecvComm::forgetProbes(NetRequest* r) {
  probes_.erase(std::remove_if(probes_.begin(), probes_.end(),
                               [&](const PendingProbe& p) { return p.request == r; }),
                probes_.end());
}

bool Comm::hasLiveUcxOps() const {
  for (const auto& r : pool_)
    for (int i = 0; i < r.n; ++i)
      if (r.ops[i].ucpRequest != nullptr) return true;
  return false;
}

bool Comm::peerHungUp(bool force) {
  // test() runs this on every call that finds its request unfinished, NCCL's proxy spins on
  // test(), and a precise clock read (about 50 ns here) made up a third of that spin: the coarse
  // clock (tick resolution, a few ms) is plenty for a 100 ms interval and several times cheaper.
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  int64_t nowMs = static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
  if (!force && nowMs - lastCheckMs_ < kHangupCheckIntervalMs) return false;
  lastCheckMs_ = nowMs;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  bool gone = (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) != 0;
  ssize_t n = 1;
  int err = 0;
  if (!gone && (p.revents & POLLIN)) {
    char c;
    n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    err = errno;
    gone = n == 0 || (n < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR);
  }
  if (gone) {
    char link[256] = {0};
    std::string path = "/proc/self/fd/" + std::to_string(fd_);
    ssize_t l = readlink(path.c_str(), link, sizeof(link) - 1);
    (void)l;
    PLUGIN_TRACE("comm %u: setup socket fd %d (%s) hung up: revents %#x%s", recvCommId_, fd_, link,
                 p.revents, n <= 0 ? (n == 0 ? ", EOF" : ", read error") : "");
  }
  return gone;
}

SendComm::~SendComm() = default;

Status SendComm::createEndpoint(const std::vector<uint8_t>& workerAddress) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(workerAddress.data());
  params.err_mode = ctx_->peerErrorMode() ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = onEndpointError;
  params.err_handler.arg = this;
  ucs_status_t st = ucp_ep_create(ctx_->worker(), &params, &ep_);
  if (st == UCS_ERR_UNREACHABLE && params.err_mode == UCP_ERR_HANDLING_MODE_PEER) {
    // UCX 1.13's shared-memory transports cannot report peer failure, so UCX refuses them in
    // peer mode. Without it a dead peer is still caught: its setup socket hangs up.
    ctx_->disablePeerErrorMode();
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    st = ucp_ep_create(ctx_->worker(), &params, &ep_);
  }
  if (st != UCS_OK)
    return errorRemote(
        "ucp_ep_create to the receiver failed: %s (check UCX_TLS/UCX_NET_DEVICES "
        "name a transport both hosts share)",
        ucs_status_string(st));
  return Status::ok();
}

// ---- NetContext ------------------------------------------------------------------------------

Result<std::unique_ptr<NetContext>> NetContext::create(const DeviceInfo& device) {
  std::unique_ptr<NetContext> ctx(new NetContext());
  TERSE_RETURN_IF_ERROR(ctx->init(device));
  return ctx;
}

Status NetContext::init(const DeviceInfo& device) {
  device_ = device;
  TERSE_ASSIGN_OR_RETURN(lossless_, readLosslessConfig());
  if (lossless_.enabled) codec_ = std::make_unique<LosslessCodec>();
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK)
    return errorSystem("ucp_config_read failed: %s (check the UCX_* variables)",
                       ucs_status_string(st));
  // With UCX's default get-based rendezvous the sender's request completes only after the
  // receiver sends an ack, which UCX may queue until the receiver's next progress call. NCCL
  // stops calling test() on a receiver that has nothing pending, so the sender could wait
  // indefinitely. Put-based rendezvous completes the sender on its own progress. A user's
  // UCX_RNDV_SCHEME wins.
  if (std::getenv("UCX_RNDV_SCHEME") == nullptr) {
    st = ucp_config_modify(config, "RNDV_SCHEME", "put_zcopy");
    if (st != UCS_OK)
      PLUGIN_TRACE("could not select put-based rendezvous: %s", ucs_status_string(st));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK) return errorSystem("ucp_init failed: %s", ucs_status_string(st));

  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context_, &attr) == UCS_OK &&
      (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0)
    ptrSupport_ |= NCCL_PTR_CUDA;
  // Compression and decompression run on the CPU over NCCL's buffers: with lossless compression
  // on, only host buffers are offered, and NCCL stages GPU data through host memory.
  if (lossless_.enabled) ptrSupport_ = NCCL_PTR_HOST;

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // our mutex serializes NCCL's threads
  st = ucp_worker_create(context_, &wparams, &worker_);
  if (st != UCS_OK) return errorSystem("ucp_worker_create failed: %s", ucs_status_string(st));

  ucp_address_t* address = nullptr;
  size_t len = 0;
  st = ucp_worker_get_address(worker_, &address, &len);
  if (st != UCS_OK) return errorSystem("ucp_worker_get_address failed: %s", ucs_status_string(st));
  const auto* bytes = reinterpret_cast<const uint8_t*>(address);
  workerAddress_.assign(bytes, bytes + len);
  ucp_worker_release_address(worker_, address);
  peerErrorMode_ = !sharedMemoryOnly();
  return Status::ok();
}

NetContext::~NetContext() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Comm*> open;
  for (auto& c : comms_)
    if (!c->closed()) open.push_back(c.get());
  for (Comm* c : open) {
    c->fail("the plugin is finalizing");
    closeComm(c);
  }
  attempts_.clear();
  listens_.clear();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  comms_.clear();  // after the worker: no UCX callback can reach their pools any more
  if (context_ != nullptr) ucp_cleanup(context_);
}

void NetContext::progress() {
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
  }
  for (RecvComm* c : losslessRecvs_)
    if (!c->probes().empty()) matchProbes(c);
}

void NetContext::matchProbes(RecvComm* comm) {
  // First come first served per tag: once a tag has nothing waiting, later receives on it must
  // not probe in this pass (a message arriving in between would jump the queue).
  idleTags_.clear();
  auto& q = comm->probes();
  size_t keep = 0;
  for (size_t k = 0; k < q.size(); ++k) {
    SubOp& op = q[k].request->ops[q[k].index];
    if (!op.probing) continue;  // ended meanwhile
    if (std::find(idleTags_.begin(), idleTags_.end(), op.tag) != idleTags_.end()) {
      q[keep++] = q[k];
      continue;
    }
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, op.tag, kProbeTagMask, 1, &info);
    if (msg == nullptr) {
      idleTags_.push_back(op.tag);
      q[keep++] = q[k];
      continue;
    }
    op.probing = false;
    op.compressed = (info.sender_tag & kCompressedTagBit) != 0;
    void* buffer = op.dst;
    size_t count = op.capacity;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv = onRecvDone;
    param.user_data = &op;
    if (op.compressed && !checkFrameSize(info.length, op.capacity).isOk()) {
      // The length is the peer's word: never size the staging buffer from it unchecked. A
      // receive of 0 bytes takes the message off UCX's queue without storing any of it (UCX
      // reports it truncated), so the tag's later messages still match in order.
      PLUGIN_WARN(
          "comm %u: refusing a compressed frame of %zu bytes from the peer at %s for a "
          "receive of %zu bytes",
          comm->id(), info.length, peerOf(comm->fd()).c_str(), op.capacity);
      op.refusedFrameBytes = info.length;
      static uint8_t nowhere;  // a valid address for UCX; nothing is ever written to it
      buffer = &nowhere;
      count = 0;
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
      param.memory_type = UCS_MEMORY_TYPE_HOST;
    } else if (op.compressed) {
      op.staging.reserve(std::max<size_t>(info.length, 1));
      buffer = op.staging.data();
      count = info.length;
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
      param.memory_type = UCS_MEMORY_TYPE_HOST;
    } else if (op.memType != UCS_MEMORY_TYPE_UNKNOWN) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
      param.memory_type = op.memType;
    }
    ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(worker_, buffer, count, msg, &param);
    if (UCS_PTR_IS_ERR(sp)) {
      op.status = UCS_PTR_STATUS(sp);
      op.done = true;
    } else if (sp == nullptr) {  // completed in place (eager data already here)
      op.bytes = info.length;
      op.done = true;
    } else {
      op.ucpRequest = sp;
    }
  }
  q.resize(keep);
}

Status NetContext::listen(int dev, void* handle, ListenComm** out) {
  *out = nullptr;
  if (dev != 0) return errorInvalidArgument("listen: device %d does not exist (terse has 1)", dev);
  auto l = std::make_unique<ListenComm>();
  l->ctx = this;
  l->nonce = (static_cast<uint64_t>(getpid()) << 32) ^ nextListenNonce_++;
  l->fd = ::socket(device_.bindAddr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->fd < 0) return errorSystem("listen: socket() failed: %s", errnoText().c_str());
  sockaddr_storage addr = device_.bindAddr;
  if (::bind(l->fd, reinterpret_cast<sockaddr*>(&addr), device_.bindLen) != 0)
    return errorSystem("listen: bind to %s (interface %s) failed: %s",
                       sockaddrToString(addr).c_str(), device_.ifname.c_str(), errnoText().c_str());
  if (::listen(l->fd, 128) != 0)
    return errorSystem("listen: listen() failed: %s", errnoText().c_str());
  socklen_t len = sizeof(addr);
  if (::getsockname(l->fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return errorSystem("listen: getsockname failed: %s", errnoText().c_str());

  auto* h = static_cast<WireHandle*>(handle);
  std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  h->magic = kHandleMagic;
  h->version = kProtocolVersion;
  h->listenNonce = l->nonce;
  std::memcpy(&h->addr, &addr, std::min<size_t>(len, sizeof(h->addr)));
  PLUGIN_TRACE("listening on %s", sockaddrToString(addr).c_str());
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
    a->peer = sockaddrToString(peer);
    a->fd = ::socket(peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a->fd < 0) return errorSystem("connect: socket() failed: %s", errnoText().c_str());
    setNoDelay(a->fd);
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
    setNoDelay(fd);
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
          header.addrLen = static_cast<uint32_t>(workerAddress_.size());
        } else {
          PLUGIN_WARN("accept: dropping a connection with a foreign or stale hello");
        }
        p->reply.resize(sizeof(header) + header.addrLen);
        std::memcpy(p->reply.data(), &header, sizeof(header));
        if (valid)
          std::memcpy(p->reply.data() + sizeof(header), workerAddress_.data(),
                      workerAddress_.size());
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

void NetContext::closeComm(Comm* comm) {
  losslessRecvs_.erase(std::remove(losslessRecvs_.begin(), losslessRecvs_.end(), comm),
                       losslessRecvs_.end());
  // A dead peer will never answer: give UCX a moment, not the full deadline.
  bool force = comm->failed() || comm->peerHungUp(true);
  auto deadline =
      std::chrono::steady_clock::now() + (force ? kDeadPeerCloseDeadline : kCloseDeadline);
  auto* send = dynamic_cast<SendComm*>(comm);
  if (send != nullptr && send->lossless() && send->stats().eligible > 0) {
    const LosslessStats& st = send->stats();
    PLUGIN_INFO(
        "comm %u: lossless: %llu of %llu sends of >= %zu bytes compressed; their %llu bytes took "
        "%llu on the wire (%.2fx)",
        comm->id(), static_cast<unsigned long long>(st.compressed),
        static_cast<unsigned long long>(st.eligible), lossless_.minBytes,
        static_cast<unsigned long long>(st.rawBytes), static_cast<unsigned long long>(st.wireBytes),
        st.wireBytes > 0 ? static_cast<double>(st.rawBytes) / static_cast<double>(st.wireBytes)
                         : 1.0);
  }
  if (send != nullptr && send->ep() != nullptr) {
    // Flush so bytes of sends NCCL saw complete reach the peer; force when the peer is gone.
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(send->ep(), &param);
    send->forgetEndpoint();
    if (UCS_PTR_IS_PTR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS &&
             std::chrono::steady_clock::now() < deadline)
        ucp_worker_progress(worker_);
      if (ucp_request_check_status(req) == UCS_INPROGRESS && !force)
        PLUGIN_WARN("closeSend: UCX did not finish closing the endpoint within %llds",
                    static_cast<long long>(kCloseDeadline.count()));
      ucp_request_free(req);
    }
  }
  for (auto& r : comm->pool())
    for (int i = 0; i < r.n; ++i)
      if (r.ops[i].ucpRequest != nullptr) ucp_request_cancel(worker_, r.ops[i].ucpRequest);
  while (comm->hasLiveUcxOps() && std::chrono::steady_clock::now() < deadline)
    ucp_worker_progress(worker_);
  if (comm->hasLiveUcxOps()) {
    // UCX still points into this comm's request pool; it is freed after the worker at finalize.
    PLUGIN_TRACE("comm %u: UCX still holds requests after close; kept until finalize", comm->id());
    comm->markClosed();
    return;
  }
  comms_.erase(
      std::find_if(comms_.begin(), comms_.end(), [&](const auto& p) { return p.get() == comm; }));
}

Status NetContext::closeSend(SendComm* comm) {
  closeComm(comm);
  return Status::ok();
}

Status NetContext::closeRecv(RecvComm* comm) {
  closeComm(comm);
  return Status::ok();
}

Status NetContext::regMr(Comm*, void* data, size_t size, int type, MemRegion** out) {
  *out = nullptr;
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA)
    return errorInvalidArgument("regMr: memory type %#x is not supported (ptrSupport is %#x)", type,
                                ptrSupport_);
  if ((type & ptrSupport_) == 0)
    return errorInvalidArgument(
        "regMr: CUDA memory needs a UCX built with CUDA support; this UCX moves host memory only "
        "(ptrSupport is %#x)",
        ptrSupport_);
  if (data == nullptr && size > 0)
    return errorInvalidArgument("regMr: NULL buffer of %zu bytes", size);
  *out = new MemRegion{reinterpret_cast<uintptr_t>(data), size, type};
  return Status::ok();
}

Status NetContext::deregMr(Comm*, MemRegion* region) {
  delete region;
  return Status::ok();
}

Status NetContext::isend(SendComm* comm, void* data, size_t size, int tag, MemRegion* mh,
                         NetRequest** out) {
  *out = nullptr;
  if (comm->failed()) return errorRemote("isend: %s", comm->failure().c_str());
  if (size > NCCL_MAX_NET_SIZE_BYTES)
    return errorInvalidArgument("isend: %zu bytes exceeds maxP2pBytes (%llu)", size,
                                NCCL_MAX_NET_SIZE_BYTES);
  TERSE_RETURN_IF_ERROR(checkRange(mh, data, size, "isend"));
  NetRequest* r = comm->allocRequest();
  if (r == nullptr) return Status::ok();  // all slots busy: NCCL retries
  r->n = 1;
  SubOp& op = r->ops[0];
  op.reset();
  op.bytes = size;  // test() reports the message's size, whatever went on the wire
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = onSendDone;
  param.user_data = &op;
  if (mh != nullptr) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param.memory_type = ucxMemoryType(mh);
  }
  const void* wire = data;
  size_t wireBytes = size;
  uint64_t wireTag = ucxTag(comm->id(), tag);
  // (A lossless context offers host memory only, see init: `data` is host memory here.)
  if (comm->lossless() && size >= lossless_.minBytes) {
    // UCX is progressed between slices: over TCP nothing else feeds the socket meanwhile.
    size_t frame = codec_->compress(
        data, size, &op.staging, [](void* c) { static_cast<NetContext*>(c)->progress(); }, this);
    LosslessStats& st = comm->stats();
    ++st.eligible;
    st.rawBytes += size;
    if (frame > 0) {
      ++st.compressed;
      wire = op.staging.data();
      wireBytes = frame;
      wireTag |= kCompressedTagBit;
      param.memory_type = UCS_MEMORY_TYPE_HOST;
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    }
    st.wireBytes += wireBytes;
  }
  ucs_status_ptr_t sp = ucp_tag_send_nbx(comm->ep(), wire, wireBytes, wireTag, &param);
  if (UCS_PTR_IS_ERR(sp)) {
    comm->freeRequest(r);
    comm->fail(std::string("ucp_tag_send_nbx failed: ") + ucs_status_string(UCS_PTR_STATUS(sp)));
    return errorRemote("isend: %s", comm->failure().c_str());
  }
  if (sp == nullptr)
    op.done = true;
  else
    op.ucpRequest = sp;
  *out = r;
  return Status::ok();
}

Status NetContext::irecv(RecvComm* comm, int n, void** data, const size_t* sizes, const int* tags,
                         void** mhandles, NetRequest** out) {
  *out = nullptr;
  if (comm->failed()) return errorRemote("irecv: %s", comm->failure().c_str());
  if (n < 1 || n > device_.maxRecvs)
    return errorInvalidArgument("irecv: %d buffers in one receive; this device takes 1..%d", n,
                                device_.maxRecvs);
  if (data == nullptr || sizes == nullptr || tags == nullptr)
    return errorInvalidArgument("irecv: data, sizes and tags must not be NULL");
  for (int i = 0; i < n; ++i) {
    auto* mh = mhandles != nullptr ? static_cast<MemRegion*>(mhandles[i]) : nullptr;
    TERSE_RETURN_IF_ERROR(checkRange(mh, data[i], sizes[i], "irecv"));
  }
  NetRequest* r = comm->allocRequest();
  if (r == nullptr) return Status::ok();
  if (comm->lossless()) {
    // Nothing is posted to UCX yet: progress() probes for each message in posting order.
    r->n = n;
    for (int i = 0; i < n; ++i) {
      SubOp& op = r->ops[i];
      op.reset();
      auto* mh = mhandles != nullptr ? static_cast<MemRegion*>(mhandles[i]) : nullptr;
      op.probing = true;
      op.dst = data[i];
      op.capacity = sizes[i];
      op.tag = ucxTag(comm->id(), tags[i]);
      if (mh != nullptr) op.memType = ucxMemoryType(mh);
      comm->probes().push_back(PendingProbe{r, i});
    }
    matchProbes(comm);
    *out = r;
    return Status::ok();
  }
  for (int i = 0; i < n; ++i) {
    SubOp& op = r->ops[i];
    op.reset();
    r->n = i + 1;
    auto* mh = mhandles != nullptr ? static_cast<MemRegion*>(mhandles[i]) : nullptr;
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = onRecvDone;
    param.user_data = &op;
    if (mh != nullptr) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
      param.memory_type = ucxMemoryType(mh);
    }
    ucs_status_ptr_t sp = ucp_tag_recv_nbx(worker_, data[i], sizes[i], ucxTag(comm->id(), tags[i]),
                                           ~uint64_t{0}, &param);
    if (UCS_PTR_IS_ERR(sp)) {
      r->n = i;
      for (int j = 0; j < i; ++j)
        if (r->ops[j].ucpRequest != nullptr) ucp_request_cancel(worker_, r->ops[j].ucpRequest);
      comm->abandon(r);
      return errorSystem("irecv: ucp_tag_recv_nbx failed: %s",
                         ucs_status_string(UCS_PTR_STATUS(sp)));
    }
    op.ucpRequest = sp;
  }
  *out = r;
  return Status::ok();
}

Status NetContext::test(NetRequest* r, int* done, int* sizes) {
  *done = 0;
  Comm* comm = r->comm;
  if (!r->inUse || r->abandoned)
    return errorInvalidUsage("test: request %p is not in flight (already completed?)", r);
  auto allDone = [&] {
    for (int i = 0; i < r->n; ++i)
      if (!r->ops[i].done) return false;
    return true;
  };
  progress();
  if (!allDone()) {
    bool hungUp = !comm->failed() && comm->peerHungUp(false);
    if (hungUp) progress();  // bytes the peer sent before leaving may still be queued
    if (!allDone() && (comm->failed() || hungUp)) {
      if (hungUp) comm->fail("the peer closed its connection (process exited or crashed?)");
      for (int i = 0; i < r->n; ++i)
        if (r->ops[i].ucpRequest != nullptr && dynamic_cast<RecvComm*>(comm) != nullptr)
          ucp_request_cancel(worker_, r->ops[i].ucpRequest);
      comm->abandon(r);
      return errorRemote("test: %s", comm->failure().c_str());
    }
    if (!allDone()) return Status::ok();
  }
  for (int i = 0; i < r->n; ++i) {
    const SubOp& op = r->ops[i];
    if (op.refusedFrameBytes > 0) {
      // Whatever UCX said about the 0-byte receive that dropped it, the frame is the error.
      Status why = checkFrameSize(op.refusedFrameBytes, op.capacity);
      comm->freeRequest(r);
      return errorInvalidUsage("test: %s", why.message().c_str());
    }
    if (op.status == UCS_OK) continue;
    comm->freeRequest(r);
    if (op.status == UCS_ERR_MESSAGE_TRUNCATED)
      return errorInvalidUsage(
          "test: a message larger than the posted receive arrived (receives may be larger than "
          "sends, never smaller)");
    comm->fail(std::string("UCX operation failed: ") + ucs_status_string(op.status));
    return errorRemote("test: %s", comm->failure().c_str());
  }
  if (comm->lossless()) TERSE_RETURN_IF_ERROR(decodeFrames(r));
  if (sizes != nullptr)
    for (int i = 0; i < r->n; ++i) sizes[i] = static_cast<int>(r->ops[i].bytes);
  comm->freeRequest(r);
  *done = 1;
  return Status::ok();
}

Status NetContext::decodeFrames(NetRequest* r) {
  Comm* comm = r->comm;
  for (int i = 0; i < r->n; ++i) {
    SubOp& op = r->ops[i];
    if (!op.compressed) continue;
    Result<size_t> raw = codec_->decompress(op.staging.data(), op.bytes, op.dst, op.capacity);
    if (raw.isOk()) {
      op.bytes = raw.value();
      op.compressed = false;
      continue;
    }
    comm->freeRequest(r);
    if (raw.status().code() == StatusCode::kInvalidUsage)
      return errorInvalidUsage("test: %s", raw.status().message().c_str());
    comm->fail("a compressed message from the peer is corrupt: " + raw.status().message());
    return errorRemote("test: %s", comm->failure().c_str());
  }
  return Status::ok();
}

}  // namespace terse::plugin
