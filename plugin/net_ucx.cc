#include "net_ucx.h"

#include "net_connect.h"

#include "plugin_log.h"
#include "terse/common/socket.h"
#include "terse/transport/ucx_core.h"

#include <fcntl.h>
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
// Receives of a lossless comm match comm id and NCCL tag, whatever the compressed bit says.
constexpr uint64_t kProbeTagMask = ~kCompressedTagBit;
// A staging buffer grown past this by one large message is freed when the request ends.
constexpr size_t kKeepStagingBytes = 16u << 20;

uint64_t ucxTag(uint32_t recvCommId, int tag) {
  return (static_cast<uint64_t>(recvCommId) << 32) | static_cast<uint32_t>(tag);
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

}  // namespace

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
  UcxWorkerOptions options;
  options.threadMode = UCS_THREAD_MODE_SERIALIZED;  // our mutex serializes NCCL's threads
  // With UCX's default get-based rendezvous the sender's request completes only after the
  // receiver sends an ack, which UCX may queue until the receiver's next progress call. NCCL
  // stops calling test() on a receiver that has nothing pending, so the sender could wait
  // indefinitely. Put-based rendezvous completes the sender on its own progress. A user's
  // UCX_RNDV_SCHEME wins (ucxOpenWorker leaves a variable the user set alone).
  options.tweaks.push_back(UcxConfigTweak{"RNDV_SCHEME", "put_zcopy"});
  TERSE_RETURN_IF_ERROR(ucxOpenWorker(options, &ucx_));
  for (const std::string& note : ucx_.notes) PLUGIN_TRACE("%s", note.c_str());

  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(ucx_.context, &attr) == UCS_OK &&
      (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0)
    ptrSupport_ |= NCCL_PTR_CUDA;
  // Compression and decompression run on the CPU over NCCL's buffers: with lossless compression
  // on, only host buffers are offered, and NCCL stages GPU data through host memory.
  if (lossless_.enabled) ptrSupport_ = NCCL_PTR_HOST;

  peerErrorMode_ = !ucxTlsOnlySharedMemory(ucxTlsFromEnv());
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
  ucxCloseWorker(&ucx_);
  comms_.clear();  // after the worker: no UCX callback can reach their pools any more
}

void NetContext::progress() {
  for (int i = 0; i < 64 && ucp_worker_progress(ucx_.worker) != 0; ++i) {
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
    ucp_tag_message_h msg = ucp_tag_probe_nb(ucx_.worker, op.tag, kProbeTagMask, 1, &info);
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
          comm->id(), info.length, socketPeerText(comm->fd()).c_str(), op.capacity);
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
    ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(ucx_.worker, buffer, count, msg, &param);
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
    ucs_status_ptr_t req = ucxCloseEndpoint(send->ep(), force);
    send->forgetEndpoint();
    if (req != nullptr) {
      if (!ucxWaitRequest(ucx_.worker, req, deadline) && !force)
        PLUGIN_WARN("closeSend: UCX did not finish closing the endpoint within %llds",
                    static_cast<long long>(kCloseDeadline.count()));
      ucp_request_free(req);
    }
  }
  for (auto& r : comm->pool())
    for (int i = 0; i < r.n; ++i)
      if (r.ops[i].ucpRequest != nullptr) ucp_request_cancel(ucx_.worker, r.ops[i].ucpRequest);
  while (comm->hasLiveUcxOps() && std::chrono::steady_clock::now() < deadline)
    ucp_worker_progress(ucx_.worker);
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
    ucs_status_ptr_t sp = ucp_tag_recv_nbx(ucx_.worker, data[i], sizes[i],
                                           ucxTag(comm->id(), tags[i]), ~uint64_t{0}, &param);
    if (UCS_PTR_IS_ERR(sp)) {
      r->n = i;
      for (int j = 0; j < i; ++j)
        if (r->ops[j].ucpRequest != nullptr) ucp_request_cancel(ucx_.worker, r->ops[j].ucpRequest);
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
          ucp_request_cancel(ucx_.worker, r->ops[i].ucpRequest);
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
    comm->fail(std::string("UCX operation failed: ") + ucs_status_string(op.status) +
               (ucxIsPeerFailure(op.status) ? " (the peer probably died)" : ""));
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
