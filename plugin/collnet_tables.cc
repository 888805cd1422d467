// The exported NCCL CollNet tables (every version of abi/nccl_plugin.h) over collnet_comm. Every
// entry point is a firewall: it returns an ncclResult_t, logs a failure once, and lets no
// exception out. The entry points are written for v11; where an older version's member has
// another signature, an overload of the same name adapts it. Entry points named like a
// collnet_comm.h function carry an Entry suffix.
#include "collnet_comm.h"
#include "collnet_device.h"
#include "collnet_types.h"
#include "entry_guard.h"
#include "net_device.h"
#include "net_properties.h"
#include "plugin_log.h"
#include "table_builder.h"

#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>

namespace terse::plugin::collnet {
namespace {

struct Context {
  Config config;
};

// Per load of the library (dlclose resets it).
struct State {
  std::mutex mu;
  std::optional<DeviceInfo> device;
  std::optional<Config> legacy;  // v8..v10 have one init and no context
  int liveContexts = 0;
  ~State() { releaseNcclLogger(LogSide::kCollNet); }
};

State& state() {
  static State s;
  return s;
}

template <typename Body>
ncclResult_t guarded(const char* entry, Body&& body) noexcept {
  return guardEntry(
      entry, [](const char* e, const char* m) { COLLNET_WARN("%s failed: %s", e, m); },
      std::forward<Body>(body));
}

Result<Config> initCommon(ncclDebugLogger_t logger) {
  holdNcclLogger(LogSide::kCollNet, logger);
  State& s = state();
  if (!s.device) {
    TERSE_ASSIGN_OR_RETURN(DeviceInfo dev, discoverDevice());
    s.device = std::move(dev);
  }
  TERSE_ASSIGN_OR_RETURN(Config config, loadConfig());
  std::string feedback;
  if (config.errorFeedback)
    feedback = config.efPeriod.learn
                   ? " with error feedback per call position, its period to be found within " +
                         std::to_string(config.efPeriod.maxWarmup) + " calls (" +
                         config.warmupCodec + " until then)"
                   : " with error feedback per call position, period " +
                         std::to_string(config.efPeriod.period);
  std::string why;
  const bool onDevice = deviceBuffersSupported(&why);
  COLLNET_INFO("CollNet over UCX via %s (%s), codec %s%s; %s%s", s.device->name.c_str(),
               config.host.c_str(), config.codec.c_str(), feedback.c_str(),
               onDevice ? "GPU buffers run on the GPU (NCCL_PTR_CUDA)" : "host buffers only: ",
               onDevice ? "" : why.c_str());
  return config;
}

ncclResult_t init(void** ctx, uint64_t, ncclDebugLogger_t logger) {
  return guarded("init", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(ctx, "init", "ctx"));
    *ctx = nullptr;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    TERSE_ASSIGN_OR_RETURN(Config config, initCommon(logger));
    *ctx = new Context{std::move(config)};
    ++s.liveContexts;
    return Status::ok();
  });
}

ncclResult_t finalize(void* ctx) {
  return guarded("finalize", [&]() -> Status {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    if (ctx != nullptr) {
      delete static_cast<Context*>(ctx);
      --s.liveContexts;
    }
    // Nothing may call NCCL's logger once its last context is gone: NCCL may dlclose us.
    if (s.liveContexts == 0 && !s.legacy) releaseNcclLogger(LogSide::kCollNet);
    return Status::ok();
  });
}

// v8..v10: one init per load, no context.
ncclResult_t init(ncclDebugLogger_t logger) {
  return guarded("init", [&]() -> Status {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    TERSE_ASSIGN_OR_RETURN(Config config, initCommon(logger));
    s.legacy = std::move(config);
    return Status::ok();
  });
}

ncclResult_t devices(int* ndev) {
  return guarded("devices", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(ndev, "devices", "ndev"));
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    *ndev = s.device ? 1 : 0;
    return Status::ok();
  });
}

Status checkDev(int dev) {
  if (dev != 0) return errorInvalidArgument("device %d does not exist (terse has device 0)", dev);
  if (!state().device) return errorInvalidUsage("getProperties before a successful init");
  return Status::ok();
}

ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  return guarded("getProperties", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(props, "getProperties", "props"));
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    TERSE_RETURN_IF_ERROR(checkDev(dev));
    // Host memory always; device memory where terse's device path runs (collnet_device.h),
    // otherwise NCCL stages CollNet data in host memory for us. One receive per request.
    const int ptrSupport = NCCL_PTR_HOST | (deviceBuffersSupported() ? NCCL_PTR_CUDA : 0);
    *props = hostDeviceProperties(*s.device, ptrSupport, 65536, 1);
    return Status::ok();
  });
}

template <typename Props>
ncclResult_t getProperties(int dev, Props* props) {
  return getPropertiesAs<getPropertiesV11>(dev, props);
}

ncclResult_t listenWith(const Config& config, int dev, void* handle, void** listenComm) {
  return guarded("listen", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(listenComm, "listen", "listenComm"));
    *listenComm = nullptr;
    if (dev != 0) return errorInvalidArgument("listen: device %d does not exist", dev);
    TERSE_ASSIGN_OR_RETURN(ListenComm * lc, listen(config, handle));
    *listenComm = lc;
    return Status::ok();
  });
}

ncclResult_t listenEntry(void* ctx, int dev, void* handle, void** listenComm) {
  if (ctx == nullptr) {
    COLLNET_WARN("listen failed: ctx is NULL (init did not succeed)");
    return ncclInvalidUsage;
  }
  return listenWith(static_cast<Context*>(ctx)->config, dev, handle, listenComm);
}

ncclResult_t listenEntry(int dev, void* handle, void** listenComm) {
  std::optional<Config> config;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    config = state().legacy;
  }
  if (!config) {
    COLLNET_WARN("listen failed: called before a successful init");
    return ncclInvalidUsage;
  }
  return listenWith(*config, dev, handle, listenComm);
}

ncclResult_t connectEntry(void* handles[], int nranks, int rank, void* listenComm,
                          void** collComm) {
  return guarded("connect", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(collComm, "connect", "collComm"));
    *collComm = nullptr;
    TERSE_ASSIGN_OR_RETURN(CollComm * cc,
                           connect(handles, nranks, rank, static_cast<ListenComm*>(listenComm)));
    *collComm = cc;
    return Status::ok();
  });
}

ncclResult_t reduceSupport(int dataType, int redOp, int* supportedOut) {
  return guarded("reduceSupport", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(supportedOut, "reduceSupport", "supported"));
    *supportedOut = supported(dataType, redOp) ? 1 : 0;
    return Status::ok();
  });
}

// Registration is bookkeeping only: terse hands buffers to UCX (host, or compressed bytes
// staged in pinned memory for device buffers) per call.
struct MemoryRegion {
  void* data;
  size_t size;
  int type;
};

ncclResult_t regMr(void* collComm, void* data, size_t size, int type, void** mhandle) {
  return guarded("regMr", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(collComm, "regMr", "collComm"));
    TERSE_RETURN_IF_ERROR(notNull(mhandle, "regMr", "mhandle"));
    *mhandle = nullptr;
    std::string why;
    if (type == NCCL_PTR_CUDA) {
      if (!deviceBuffersSupported(&why))
        return errorInvalidArgument(
            "regMr: device memory (NCCL_PTR_CUDA) is not taken here: %s (ptrSupport is "
            "NCCL_PTR_HOST)",
            why.c_str());
      if (size > 0 && !isDeviceBuffer(data))
        return errorInvalidArgument(
            "regMr: %p is registered as NCCL_PTR_CUDA but is not CUDA "
            "device memory",
            data);
    } else if (type != NCCL_PTR_HOST) {
      return errorInvalidArgument(
          "regMr: pointer type %#x is neither host (0x1) nor CUDA (0x2) memory", type);
    }
    *mhandle = new MemoryRegion{data, size, type};
    return Status::ok();
  });
}

ncclResult_t regMrDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t, int fd,
                         void** mhandle) {
  if (fd >= 0 || type == NCCL_PTR_DMABUF) {
    COLLNET_WARN("regMrDmaBuf failed: DMA-BUF registration is not supported (host memory only)");
    return ncclInvalidArgument;
  }
  return regMr(collComm, data, size, type, mhandle);
}

ncclResult_t deregMr(void*, void* mhandle) {
  return guarded("deregMr", [&]() -> Status {
    delete static_cast<MemoryRegion*>(mhandle);
    return Status::ok();
  });
}

// Every error a call returns to NCCL is a declined call in the statistics.
ncclResult_t countDeclined(void* collComm, ncclResult_t result) {
  if (result != ncclSuccess) noteDeclined(static_cast<CollComm*>(collComm));
  return result;
}

ncclResult_t iallreduceEntry(void* collComm, void* sendData, void* recvData, size_t count,
                             int dataType, int redOp, void*, void*, void** request) {
  const ncclResult_t result = guarded("iallreduce", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(request, "iallreduce", "request"));
    *request = nullptr;
    TERSE_ASSIGN_OR_RETURN(Request * r, iallreduce(static_cast<CollComm*>(collComm), sendData,
                                                   recvData, count, dataType, redOp));
    *request = r;
    return Status::ok();
  });
  return countDeclined(collComm, result);
}

ncclResult_t iallreduceEntry(void* collComm, void* sendData, void* recvData, int count,
                             int dataType, int redOp, void* sendMh, void* recvMh, void** request) {
  if (count < 0) {
    COLLNET_WARN("iallreduce failed: negative count %d", count);
    return countDeclined(collComm, ncclInvalidArgument);
  }
  return iallreduceEntry(collComm, sendData, recvData, static_cast<size_t>(count), dataType, redOp,
                         sendMh, recvMh, request);
}

ncclResult_t iallgatherEntry(void* collComm, void* sendData, int nRecvParts,
                             ncclNetSGE_v11_t* recvParts, size_t bytesPerRank, size_t windowOffset,
                             size_t windowBytes, void*, void** request) {
  const ncclResult_t result = guarded("iallgather", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(request, "iallgather", "request"));
    *request = nullptr;
    TERSE_ASSIGN_OR_RETURN(
        Request * r, iallgather(static_cast<CollComm*>(collComm), sendData, nRecvParts, recvParts,
                                bytesPerRank, windowOffset, windowBytes));
    *request = r;
    return Status::ok();
  });
  return countDeclined(collComm, result);
}

ncclResult_t ireducescatterEntry(void* collComm, int nSendParts, ncclNetSGE_v11_t* sendParts,
                                 void* recvData, size_t bytesPerRank, size_t windowOffset,
                                 size_t windowBytes, int dataType, int redOp, void*,
                                 void** request) {
  const ncclResult_t result = guarded("ireducescatter", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(request, "ireducescatter", "request"));
    *request = nullptr;
    TERSE_ASSIGN_OR_RETURN(Request * r, ireducescatter(static_cast<CollComm*>(collComm), nSendParts,
                                                       sendParts, recvData, bytesPerRank,
                                                       windowOffset, windowBytes, dataType, redOp));
    *request = r;
    return Status::ok();
  });
  return countDeclined(collComm, result);
}

// v8 parts carry 32-bit sizes: widen them into the v11 shape.
std::unique_ptr<ncclNetSGE_v11_t[]> widen(int n, const ncclNetSGE_v8_t* parts) {
  if (n <= 0 || parts == nullptr) return nullptr;
  std::unique_ptr<ncclNetSGE_v11_t[]> out(new ncclNetSGE_v11_t[static_cast<size_t>(n)]);
  for (int i = 0; i < n; ++i) out[i] = {parts[i].mhandle, parts[i].address, parts[i].size};
  return out;
}

ncclResult_t iallgatherEntry(void* collComm, void* sendData, int nRecvParts,
                             ncclNetSGE_v8_t* recvParts, size_t bytesPerRank, size_t windowOffset,
                             size_t windowBytes, void* sendMh, void** request) {
  auto parts = widen(nRecvParts, recvParts);
  return iallgatherEntry(collComm, sendData, parts ? nRecvParts : 0, parts.get(), bytesPerRank,
                         windowOffset, windowBytes, sendMh, request);
}

ncclResult_t ireducescatterEntry(void* collComm, int nSendParts, ncclNetSGE_v8_t* sendParts,
                                 void* recvData, size_t bytesPerRank, size_t windowOffset,
                                 size_t windowBytes, int dataType, int redOp, void* recvMh,
                                 void** request) {
  auto parts = widen(nSendParts, sendParts);
  return ireducescatterEntry(collComm, parts ? nSendParts : 0, parts.get(), recvData, bytesPerRank,
                             windowOffset, windowBytes, dataType, redOp, recvMh, request);
}

ncclResult_t iflush(void*, void*, int, void*, void** request) {
  // Nothing is ever in flight towards a GPU once test said done: host results are written by
  // the CPU, device results by kernels and copies on the plugin's stream, which the request
  // waits for before it completes.
  if (request != nullptr) *request = nullptr;
  return ncclSuccess;
}

ncclResult_t testEntry(void* request, int* done, int* size) {
  return guarded("test", [&]() -> Status {
    TERSE_RETURN_IF_ERROR(notNull(done, "test", "done"));
    bool finished = false;
    size_t bytes = 0;
    Status s = test(static_cast<Request*>(request), &finished, &bytes);
    *done = finished ? 1 : 0;
    if (finished && s.isOk() && size != nullptr)
      *size = bytes > static_cast<size_t>(std::numeric_limits<int>::max())
                  ? std::numeric_limits<int>::max()
                  : static_cast<int>(bytes);
    return s;
  });
}

ncclResult_t closeCollEntry(void* collComm) {
  return guarded("closeColl", [&]() { return closeColl(static_cast<CollComm*>(collComm)); });
}

ncclResult_t closeListenEntry(void* listenComm) {
  return guarded("closeListen",
                 [&]() { return closeListen(static_cast<ListenComm*>(listenComm)); });
}

// Any version's virtual-device struct: there is nothing to merge.
template <typename VProps>
ncclResult_t makeVDevice(int*, VProps*) {
  COLLNET_WARN("makeVDevice: terse's CollNet has one device and no virtual devices");
  return ncclInvalidUsage;
}

// Every version's table (table_builder.h).
template <typename Table>
constexpr Table collNetTable() {
  Table t{};
  t.name = "terse";
  t.init = init;
  t.devices = devices;
  t.getProperties = getProperties;
  t.listen = listenEntry;
  t.connect = connectEntry;
  t.reduceSupport = reduceSupport;
  t.regMr = regMr;
  t.regMrDmaBuf = regMrDmaBuf;
  t.deregMr = deregMr;
  t.iallreduce = iallreduceEntry;
  t.iallgather = iallgatherEntry;
  t.ireducescatter = ireducescatterEntry;
  t.iflush = iflush;
  t.test = testEntry;
  t.closeColl = closeCollEntry;
  t.closeListen = closeListenEntry;
  if constexpr (HasMakeVDevice<Table>::value) t.makeVDevice = makeVDevice;
  if constexpr (HasFinalize<Table>::value) t.finalize = finalize;
  return t;
}

}  // namespace
}  // namespace terse::plugin::collnet

// One line per ABI version, newest first (abi/nccl_plugin.h lists them).
using terse::plugin::collnet::collNetTable;
TERSE_NCCL_TABLE const ncclCollNet_v12_t ncclCollNetPlugin_v12 = collNetTable<ncclCollNet_v12_t>();
TERSE_NCCL_TABLE const ncclCollNet_v11_t ncclCollNetPlugin_v11 = collNetTable<ncclCollNet_v11_t>();
TERSE_NCCL_TABLE const ncclCollNet_v10_t ncclCollNetPlugin_v10 = collNetTable<ncclCollNet_v10_t>();
TERSE_NCCL_TABLE const ncclCollNet_v9_t ncclCollNetPlugin_v9 = collNetTable<ncclCollNet_v9_t>();
TERSE_NCCL_TABLE const ncclCollNet_v8_t ncclCollNetPlugin_v8 = collNetTable<ncclCollNet_v8_t>();
