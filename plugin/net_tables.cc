// The exported NCCL net tables (every version of abi/nccl_plugin.h) over NetContext. Every entry
// point is a firewall: it returns an ncclResult_t, logs the error once, and lets no exception out.
// The entry points are written for v11; where an older version's member has another signature,
// an overload of the same name adapts its arguments and calls the v11 one.
#include "net_properties.h"
#include "net_ucx.h"
#include "entry_guard.h"
#include "plugin_log.h"
#include "table_builder.h"

#include "terse/common/logging.h"
#include "terse/common/socket.h"

#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>

namespace terse::plugin {
namespace {

// Process-wide state of one load of the library. Reset by dlclose (the statics go with it).
struct PluginState {
  std::mutex mu;
  std::optional<DeviceInfo> device;  // discovered by the first init, then fixed for this load
  int ptrSupport = NCCL_PTR_HOST;
  NetContext* legacy = nullptr;  // the one context of v8..v10 (their init has no ctx)
  int liveContexts = 0;          // v11 contexts not yet finalized

  // v8..v10 have no finalize: their context goes when NCCL dlcloses us (static destructors
  // run then), so a later dlopen starts from nothing and no UCX thread outlives the library.
  ~PluginState() {
    delete legacy;
    releaseNcclLogger(LogSide::kNet);
  }
};

PluginState& state() {
  static PluginState s;
  return s;
}

template <typename Body>
ncclResult_t guarded(const char* entry, Body&& body) noexcept {
  return guardEntry(
      entry, [](const char* e, const char* m) { PLUGIN_WARN("%s failed: %s", e, m); },
      std::forward<Body>(body));
}

// Shared by every init: the logger, and the device discovered once per load.
Status initCommon(ncclDebugLogger_t logger) {
  holdNcclLogger(LogSide::kNet, logger);
  PluginState& s = state();
  if (s.device) return Status::ok();
  TERSE_ASSIGN_OR_RETURN(DeviceInfo dev, discoverDevice());
  s.device = std::move(dev);
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  PLUGIN_INFO("Using [0]%s (setup via %s), speed %d Mbit/s%s, UCX %u.%u.%u, maxRecvs %d",
              s.device->name.c_str(), socketAddressText(s.device->bindAddr).c_str(),
              s.device->speedMbps, s.device->speedKnown ? "" : " (unknown link speed: default)",
              major, minor, release, s.device->maxRecvs);
  return Status::ok();
}

Result<NetContext*> newContext() {
  PluginState& s = state();
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<NetContext> ctx, NetContext::create(*s.device));
  s.ptrSupport = ctx->ptrSupport();
  return ctx.release();
}

// After the last context is gone nothing may call back into NCCL's logger: NCCL may dlclose us.
void maybeReleaseLogger() {
  PluginState& s = state();
  if (s.liveContexts == 0 && s.legacy == nullptr) releaseNcclLogger(LogSide::kNet);
}

ncclResult_t init(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t*, ncclDebugLogger_t logger,
                  ncclProfilerCallback_t) {
  return guarded("init", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(ctx, "init", "ctx"));
    *ctx = nullptr;
    PluginState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    TERSE_RETURN_IF_ERROR(initCommon(logger));
    TERSE_ASSIGN_OR_RETURN(NetContext * c, newContext());
    *ctx = c;
    ++s.liveContexts;
    PLUGIN_TRACE("init for comm %#llx", static_cast<unsigned long long>(commId));
    return Status::ok();
  });
}

ncclResult_t finalize(void* ctx) {
  return guarded("finalize", [&]() -> Status {
    PluginState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (ctx != nullptr) {
      delete static_cast<NetContext*>(ctx);
      --s.liveContexts;
    }
    maybeReleaseLogger();
    return Status::ok();
  });
}

// v8..v10: one context per load (their init has no ctx).
ncclResult_t init(ncclDebugLogger_t logger) {
  return guarded("init", [&]() -> Status {
    PluginState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    TERSE_RETURN_IF_ERROR(initCommon(logger));
    if (s.legacy == nullptr) {
      TERSE_ASSIGN_OR_RETURN(s.legacy, newContext());
    }
    return Status::ok();
  });
}
ncclResult_t init(ncclDebugLogger_t logger, ncclProfilerCallback_t) { return init(logger); }

ncclResult_t devices(int* ndev) {
  return guarded("devices", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(ndev, "devices", "ndev"));
    PluginState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    *ndev = s.device ? 1 : 0;
    return Status::ok();
  });
}

ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  return guarded("getProperties", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(props, "getProperties", "props"));
    PluginState& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.device) return errorInvalidUsage("getProperties called before a successful init");
    if (dev != 0) return errorInvalidArgument("getProperties: device %d does not exist", dev);
    const DeviceInfo& d = *s.device;
    *props = hostDeviceProperties(d, s.ptrSupport, d.maxComms, d.maxRecvs);
    return Status::ok();
  });
}

template <typename Props>
ncclResult_t getProperties(int dev, Props* props) {
  return getPropertiesAs<getPropertiesV11>(dev, props);
}

ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) {
  return guarded("listen", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(ctx, "listen", "ctx"));
    TERSE_RETURN_IF_ERROR(notNull(handle, "listen", "handle"));
    TERSE_RETURN_IF_ERROR(notNull(listenComm, "listen", "listenComm"));
    auto* c = static_cast<NetContext*>(ctx);
    std::lock_guard<std::mutex> lock(c->mutex());
    ListenComm* l = nullptr;
    TERSE_RETURN_IF_ERROR(c->listen(dev, handle, &l));
    *listenComm = l;
    return Status::ok();
  });
}

ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm,
                     ncclNetDeviceHandle_v11_t** sendDevComm) {
  return guarded("connect", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(ctx, "connect", "ctx"));
    TERSE_RETURN_IF_ERROR(notNull(handle, "connect", "handle"));
    TERSE_RETURN_IF_ERROR(notNull(sendComm, "connect", "sendComm"));
    *sendComm = nullptr;
    if (sendDevComm != nullptr) *sendDevComm = nullptr;  // host-only: no device handle
    auto* c = static_cast<NetContext*>(ctx);
    std::lock_guard<std::mutex> lock(c->mutex());
    SendComm* comm = nullptr;
    TERSE_RETURN_IF_ERROR(c->connect(dev, handle, &comm));
    *sendComm = static_cast<Comm*>(comm);
    return Status::ok();
  });
}

ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t** recvDevComm) {
  return guarded("accept", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(listenComm, "accept", "listenComm"));
    TERSE_RETURN_IF_ERROR(notNull(recvComm, "accept", "recvComm"));
    *recvComm = nullptr;
    if (recvDevComm != nullptr) *recvDevComm = nullptr;
    auto* l = static_cast<ListenComm*>(listenComm);
    NetContext* c = contextOf(l);
    std::lock_guard<std::mutex> lock(c->mutex());
    RecvComm* comm = nullptr;
    TERSE_RETURN_IF_ERROR(c->accept(l, &comm));
    *recvComm = static_cast<Comm*>(comm);
    return Status::ok();
  });
}

ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return guarded("regMr", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(comm, "regMr", "comm"));
    TERSE_RETURN_IF_ERROR(notNull(mhandle, "regMr", "mhandle"));
    auto* c = static_cast<Comm*>(comm);
    std::lock_guard<std::mutex> lock(c->context()->mutex());
    MemRegion* region = nullptr;
    TERSE_RETURN_IF_ERROR(c->context()->regMr(c, data, size, type, &region));
    *mhandle = region;
    return Status::ok();
  });
}

ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t, int fd,
                         void** mhandle) {
  if (fd == -1) return regMr(comm, data, size, type, mhandle);
  return guarded("regMrDmaBuf", [&]() -> Status {
    return errorUnsupported(
        "regMrDmaBuf: DMA-BUF registration is not supported (ptrSupport has "
        "no NCCL_PTR_DMABUF)");
  });
}

ncclResult_t deregMr(void* comm, void* mhandle) {
  return guarded("deregMr", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(comm, "deregMr", "comm"));
    auto* c = static_cast<Comm*>(comm);
    std::lock_guard<std::mutex> lock(c->context()->mutex());
    return c->context()->deregMr(c, static_cast<MemRegion*>(mhandle));
  });
}

// The comm NCCL passed, as a `kind` ("send", "receive") comm, or why it is not one.
template <typename CommT>
Result<CommT*> commAs(void* comm, const char* entry, const char* kind) {
  auto* typed = dynamic_cast<CommT*>(static_cast<Comm*>(comm));
  if (typed == nullptr) return errorInvalidArgument("%s: the comm is not a %s comm", entry, kind);
  return typed;
}

ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void*,
                   void** request) {
  return guarded("isend", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(sendComm, "isend", "sendComm"));
    TERSE_RETURN_IF_ERROR(notNull(request, "isend", "request"));
    *request = nullptr;
    TERSE_ASSIGN_OR_RETURN(SendComm * send, commAs<SendComm>(sendComm, "isend", "send"));
    std::lock_guard<std::mutex> lock(send->context()->mutex());
    NetRequest* r = nullptr;
    TERSE_RETURN_IF_ERROR(
        send->context()->isend(send, data, size, tag, static_cast<MemRegion*>(mhandle), &r));
    *request = r;
    return Status::ok();
  });
}

ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                   void**, void** request) {
  return guarded("irecv", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(recvComm, "irecv", "recvComm"));
    TERSE_RETURN_IF_ERROR(notNull(request, "irecv", "request"));
    *request = nullptr;  // overwrites NCCL's optional-completion marker: we always return one
    TERSE_ASSIGN_OR_RETURN(RecvComm * recv, commAs<RecvComm>(recvComm, "irecv", "receive"));
    std::lock_guard<std::mutex> lock(recv->context()->mutex());
    NetRequest* r = nullptr;
    TERSE_RETURN_IF_ERROR(recv->context()->irecv(recv, n, data, sizes, tags, mhandles, &r));
    *request = r;
    return Status::ok();
  });
}

ncclResult_t iflush(void* recvComm, int, void**, int*, void**, void** request) {
  return guarded("iflush", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(recvComm, "iflush", "recvComm"));
    TERSE_RETURN_IF_ERROR(notNull(request, "iflush", "request"));
    // UCX completes a receive only once the bytes are in place (host, or CUDA through
    // cuda_copy), so there is never anything left to flush.
    *request = nullptr;
    return Status::ok();
  });
}

ncclResult_t test(void* request, int* done, int* sizes) {
  return guarded("test", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(request, "test", "request"));
    TERSE_RETURN_IF_ERROR(notNull(done, "test", "done"));
    auto* r = static_cast<NetRequest*>(request);
    std::lock_guard<std::mutex> lock(r->comm->context()->mutex());
    return r->comm->context()->test(r, done, sizes);
  });
}

// closeSend and closeRecv: NULL closes nothing; a comm of the other kind is refused.
template <typename CommT>
ncclResult_t closeComm(void* comm, const char* entry, const char* kind,
                       Status (NetContext::*close)(CommT*)) {
  return guarded(entry, [&]() -> Status {
    if (comm == nullptr) return Status::ok();
    TERSE_ASSIGN_OR_RETURN(CommT * typed, commAs<CommT>(comm, entry, kind));
    NetContext* c = typed->context();
    std::lock_guard<std::mutex> lock(c->mutex());
    return (c->*close)(typed);
  });
}

ncclResult_t closeSend(void* sendComm) {
  return closeComm<SendComm>(sendComm, "closeSend", "send", &NetContext::closeSend);
}

ncclResult_t closeRecv(void* recvComm) {
  return closeComm<RecvComm>(recvComm, "closeRecv", "receive", &NetContext::closeRecv);
}

ncclResult_t closeListen(void* listenComm) {
  return guarded("closeListen", [&]() -> Status {
    if (listenComm == nullptr) return Status::ok();
    auto* l = static_cast<ListenComm*>(listenComm);
    NetContext* c = contextOf(l);
    std::lock_guard<std::mutex> lock(c->mutex());
    return c->closeListen(l);
  });
}

// ---- older signatures: adapt the arguments, then call the v11 entry point ----------------------

ncclResult_t listen(int dev, void* handle, void** listenComm) {
  NetContext* c = state().legacy;
  if (c == nullptr)
    return guarded("listen", [] { return errorInvalidUsage("listen before init"); });
  return listen(c, dev, handle, listenComm);
}

ncclResult_t connect(int dev, ncclNetCommConfig_v10_t*, void* handle, void** sendComm,
                     ncclNetDeviceHandle_v10_t** sendDevComm) {
  NetContext* c = state().legacy;
  if (c == nullptr)
    return guarded("connect", [] { return errorInvalidUsage("connect before init"); });
  return connect(c, dev, handle, sendComm, sendDevComm);
}

ncclResult_t connect(int dev, void* handle, void** sendComm,
                     ncclNetDeviceHandle_v9_t** sendDevComm) {
  return connect(dev, nullptr, handle, sendComm, sendDevComm);
}

ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                   void** request) {
  return isend(sendComm, data, size, tag, mhandle, nullptr, request);
}

ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                   void** request) {
  return irecv(recvComm, n, data, sizes, tags, mhandles, nullptr, request);
}

ncclResult_t isend(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0)
    return guarded("isend", [&] { return errorInvalidArgument("isend: negative size %d", size); });
  return isend(sendComm, data, static_cast<size_t>(size), tag, mhandle, nullptr, request);
}

ncclResult_t irecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                   void** request) {
  if (n < 1 || n > kMaxGroupedRecvs || sizes == nullptr)
    return guarded("irecv", [&] {
      return errorInvalidArgument("irecv: %d buffers (1..%d) or NULL sizes", n, kMaxGroupedRecvs);
    });
  size_t wide[kMaxGroupedRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0)
      return guarded("irecv", [&] { return errorInvalidArgument("irecv: negative size"); });
    wide[i] = static_cast<size_t>(sizes[i]);
  }
  return irecv(recvComm, n, data, wide, tags, mhandles, nullptr, request);
}

// Every version's table (table_builder.h). Left NULL, as NCCL allows: getDeviceMr and
// irecvConsumed (host-only device, no unpack offload), makeVDevice (one device, nothing to
// merge) and setNetAttr (hints only; UCX picks lanes itself).
template <typename Table>
constexpr Table netTable() {
  Table t{};
  t.name = "terse";
  t.init = init;
  t.devices = devices;
  t.getProperties = getProperties;
  t.listen = listen;
  t.connect = connect;
  t.accept = accept;
  t.regMr = regMr;
  t.regMrDmaBuf = regMrDmaBuf;
  t.deregMr = deregMr;
  t.isend = isend;
  t.irecv = irecv;
  t.iflush = iflush;
  t.test = test;
  t.closeSend = closeSend;
  t.closeRecv = closeRecv;
  t.closeListen = closeListen;
  if constexpr (HasFinalize<Table>::value) t.finalize = finalize;
  return t;
}

}  // namespace
}  // namespace terse::plugin

// One line per ABI version, newest first (abi/nccl_plugin.h lists them).
using terse::plugin::netTable;
TERSE_NCCL_TABLE const ncclNet_v12_t ncclNetPlugin_v12 = netTable<ncclNet_v12_t>();
TERSE_NCCL_TABLE const ncclNet_v11_t ncclNetPlugin_v11 = netTable<ncclNet_v11_t>();
TERSE_NCCL_TABLE const ncclNet_v10_t ncclNetPlugin_v10 = netTable<ncclNet_v10_t>();
TERSE_NCCL_TABLE const ncclNet_v9_t ncclNetPlugin_v9 = netTable<ncclNet_v9_t>();
TERSE_NCCL_TABLE const ncclNet_v8_t ncclNetPlugin_v8 = netTable<ncclNet_v8_t>();
