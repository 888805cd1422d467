#include "collnet_comm.h"

#include "collnet_device.h"
#include "collnet_residuals.h"
#include "collnet_stats.h"
#include "collnet_types.h"
#include "collnet_window.h"
#include "net_handshake.h"
#include "plugin_log.h"

#include "terse/communicator.h"
#include "terse/kernels/device.h"
#include "terse/rendezvous/store.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <random>
#include <vector>

namespace terse::plugin::collnet {

static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "CollNet handle must fit NCCL's");

class ListenComm {
 public:
  Config config;
  Handle handle{};
  std::unique_ptr<Store> store;  // serving; rank 0's connect takes it over
};

class CollComm {
 public:
  Config config;
  std::unique_ptr<Store> store;  // rank 0 keeps serving until closeColl, harmless for others
  // Declared before comm: the Communicator (its worker thread) goes first, then the stream.
  DeviceStream stream;  // calls on device buffers run on it
  std::unique_ptr<Communicator> comm;
  std::mutex mu;
  std::unique_ptr<ResidualSequence> residuals;
  CollNetCounters counters;  // guarded by mu; the collectives' own figures are comm->stats()
};

class Request {
 public:
  Work work;
  size_t bytes = 0;
  std::vector<uint8_t> staging;
  // Device buffers: staging lives on the device and copies are ordered on the comm's stream.
  device::DeviceBuffer deviceStaging;
  void* stream = nullptr;  // non-null: the call ran on device buffers on this stream
  // Scatters a staged result into NCCL's parts once the collective is done.
  std::vector<ncclNetSGE_v11_t> recvParts;
  size_t partStride = 0;  // allgather: bytes per rank in staging (padded)
  size_t partBytes = 0;   // allgather: bytes per rank NCCL expects

  uint8_t* stagingData() {
    return stream != nullptr ? static_cast<uint8_t*>(deviceStaging.data()) : staging.data();
  }
};

Result<ListenComm*> listen(const Config& config, void* handle) {
  if (handle == nullptr) return errorInvalidArgument("listen: handle is NULL");
  auto lc = std::make_unique<ListenComm>();
  lc->config = config;
  std::random_device rd;
  lc->handle.nonce = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  // The kernel picks the port (port 0), so two jobs on a host never race for one.
  int port = 0;
  auto store = createTcpStore(config.host, 0, /*serve=*/true, config.timeout, &port);
  if (!store.isOk())
    return errorSystem("listen: could not serve a rendezvous store on %s: %s", config.host.c_str(),
                       store.status().message().c_str());
  lc->store = std::move(*store);
  lc->handle.port = port;
  lc->handle.magic = kHandleMagic;
  lc->handle.version = kHandleVersion;
  std::snprintf(lc->handle.host, sizeof(lc->handle.host), "%s", config.host.c_str());
  std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  std::memcpy(handle, &lc->handle, sizeof(Handle));
  return lc.release();
}

Status closeListen(ListenComm* listen) {
  delete listen;
  return Status::ok();
}

Result<CollComm*> connect(void* const* handles, int nranks, int rank, ListenComm* listen) {
  if (handles == nullptr || listen == nullptr)
    return errorInvalidArgument("connect: handles or listenComm is NULL");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return errorInvalidArgument("connect: rank %d of %d is out of range", rank, nranks);
  // Every rank's handle came from a peer through NCCL: all are checked, rank 0's is used.
  Handle root{};
  for (int r = 0; r < nranks; ++r) {
    if (handles[r] == nullptr) return errorInvalidArgument("connect: handles[%d] is NULL", r);
    Handle h;
    TERSE_RETURN_IF_ERROR(parseHandle(r, handles[r], &h));
    if (r == 0) root = h;
  }
  auto cc = std::make_unique<CollComm>();
  cc->config = listen->config;
  if (rank == 0) {
    if (root.nonce != listen->handle.nonce)
      return errorInvalidUsage("connect: rank 0's handles[0] is not its own listen handle");
    cc->store = std::move(listen->store);
  } else {
    TERSE_ASSIGN_OR_RETURN(cc->store,
                           createTcpStore(root.host, root.port, false, cc->config.timeout));
  }
  char scope[48];
  std::snprintf(scope, sizeof(scope), "collnet-%016llx",
                static_cast<unsigned long long>(root.nonce));
  TERSE_ASSIGN_OR_RETURN(
      cc->comm, Communicator::createUcx(rank, nranks, *cc->store, cc->config.timeout, scope));
  if (cc->config.errorFeedback)
    cc->residuals = std::make_unique<ResidualSequence>(cc->config.codec, cc->config.warmupCodec,
                                                       cc->config.efPeriod, &cc->counters);
  COLLNET_INFO("rank %d of %d connected via %s:%d, codec %s%s", rank, nranks, root.host, root.port,
               cc->config.codec.c_str(), cc->config.errorFeedback ? " with error feedback" : "");
  return cc.release();
}

Status closeColl(CollComm* comm) {
  if (comm != nullptr && comm->comm) {
    // NCCL closes a comm once its calls are done; stats() waits for any still queued, so the
    // figures are final. NCCL's logger decides whether INFO is shown.
    const CollectiveStats stats = comm->comm->stats();
    StatsContext context;
    context.rank = comm->comm->rank();
    context.nranks = comm->comm->size();
    context.codec = comm->config.codec;
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->residuals) {
      context.errorFeedback = true;
      context.warmupCodec = comm->config.warmupCodec;
      context.period = comm->residuals->periodText();
    }
    for (const std::string& line : describeStats(context, stats, comm->counters))
      COLLNET_INFO("%s", line.c_str());
  }
  delete comm;
  return Status::ok();
}

namespace {

// The codec and residual of a reduce call: the configured codec without residuals unless the
// codec keeps them; empty calls do not count as positions.
Result<CollectiveOptions> optionsFor(CollComm* comm, Kind kind, size_t count, DataType type) {
  if (!comm->residuals || count == 0) return CollectiveOptions{comm->config.codec, nullptr};
  TERSE_ASSIGN_OR_RETURN(ResidualSequence::Plan plan, comm->residuals->next(kind, count, type));
  return CollectiveOptions{*plan.codec, plan.feedback};
}

// The comm's stream when any of the buffers is device memory, nullptr for host calls. Device
// buffers are only taken when this process offers the device path (collnet_device.h).
Result<void*> streamFor(CollComm* comm, const char* entry, std::initializer_list<const void*> bufs,
                        int nParts = 0, const ncclNetSGE_v11_t* parts = nullptr) {
  bool onDevice = false;
  for (const void* b : bufs) onDevice |= isDeviceBuffer(b);
  for (int i = 0; i < nParts; ++i) onDevice |= isDeviceBuffer(parts[i].address);
  if (!onDevice) return static_cast<void*>(nullptr);
  std::string why;
  if (!deviceBuffersSupported(&why))
    return errorInvalidUsage(
        "%s: a buffer is CUDA device memory, but CollNet reports host memory only here (%s)", entry,
        why.c_str());
  return comm->stream.get();
}

}  // namespace

Result<Request*> iallreduce(CollComm* comm, const void* send, void* recv, size_t count,
                            int dataType, int redOp) {
  if (comm == nullptr) return errorInvalidArgument("iallreduce: collComm is NULL");
  TERSE_ASSIGN_OR_RETURN(DataType type, mapType(dataType));
  TERSE_ASSIGN_OR_RETURN(ReduceOp op, mapOp(redOp));
  if (count > 0 && (send == nullptr || recv == nullptr))
    return errorInvalidArgument("iallreduce: NULL buffer for %zu elements", count);
  std::lock_guard<std::mutex> lock(comm->mu);
  TERSE_ASSIGN_OR_RETURN(void* stream, streamFor(comm, "iallreduce", {send, recv}));
  TERSE_ASSIGN_OR_RETURN(CollectiveOptions options,
                         optionsFor(comm, Kind::kAllReduce, count, type));
  options.stream = stream;
  auto req = std::make_unique<Request>();
  req->bytes = count * dataTypeSize(type);
  req->stream = stream;
  req->work = comm->comm->allreduceAsync(send, recv, count, type, op, options);
  return req.release();
}

Result<Request*> ireducescatter(CollComm* comm, int nParts, const ncclNetSGE_v11_t* parts,
                                void* recv, size_t bytesPerRank, size_t windowOffset,
                                size_t windowBytes, int dataType, int redOp) {
  if (comm == nullptr) return errorInvalidArgument("ireducescatter: collComm is NULL");
  TERSE_ASSIGN_OR_RETURN(DataType type, mapType(dataType));
  TERSE_ASSIGN_OR_RETURN(ReduceOp op, mapOp(redOp));
  const int nranks = comm->comm->size();
  TERSE_RETURN_IF_ERROR(checkWindow("ireducescatter", nranks, nParts, parts, bytesPerRank,
                                    windowOffset, windowBytes));
  const size_t elem = dataTypeSize(type);
  if (bytesPerRank % elem != 0)
    return errorInvalidUsage(
        "ireducescatter: bytesPerRank %zu is not a multiple of the %zu-byte "
        "%s element",
        bytesPerRank, elem, dataTypeName(type));
  if (bytesPerRank > 0 && recv == nullptr)
    return errorInvalidArgument("ireducescatter: recvData is NULL");
  const size_t count = windowBytes / elem;
  std::lock_guard<std::mutex> lock(comm->mu);
  TERSE_ASSIGN_OR_RETURN(void* stream, streamFor(comm, "ireducescatter", {recv}, nParts, parts));
  TERSE_ASSIGN_OR_RETURN(CollectiveOptions options,
                         optionsFor(comm, Kind::kReduceScatter, count, type));
  options.stream = stream;
  auto req = std::make_unique<Request>();
  req->bytes = bytesPerRank;
  req->stream = stream;
  const void* send = nParts > 0 ? parts[0].address : nullptr;
  if (!singleContiguous(nParts, parts)) {
    // Scattered parts are gathered into one buffer in window order (on the device for device
    // parts, ordered before the collective on the same stream).
    if (stream != nullptr) {
      TERSE_RETURN_IF_ERROR(req->deviceStaging.reserve(windowBytes).status());
    } else {
      req->staging.resize(windowBytes);
    }
    TERSE_RETURN_IF_ERROR(gatherParts(stream, nParts, parts, req->stagingData()));
    send = req->stagingData();
  }
  req->work = comm->comm->reduceScatterAsync(send, recv, count, type, op, options);
  return req.release();
}

Result<Request*> iallgather(CollComm* comm, const void* send, int nParts,
                            const ncclNetSGE_v11_t* parts, size_t bytesPerRank, size_t windowOffset,
                            size_t windowBytes) {
  if (comm == nullptr) return errorInvalidArgument("iallgather: collComm is NULL");
  const int nranks = comm->comm->size();
  TERSE_RETURN_IF_ERROR(
      checkWindow("iallgather", nranks, nParts, parts, bytesPerRank, windowOffset, windowBytes));
  if (bytesPerRank > 0 && send == nullptr)
    return errorInvalidArgument("iallgather: sendData is NULL");
  std::lock_guard<std::mutex> lock(comm->mu);
  TERSE_ASSIGN_OR_RETURN(void* stream, streamFor(comm, "iallgather", {send}, nParts, parts));
  auto req = std::make_unique<Request>();
  req->bytes = windowBytes;
  req->stream = stream;
  // Allgather carries opaque bytes and is never compressed. terse moves elements, so the bytes
  // travel as 4- or 2-byte units; an odd per-rank size is padded by one byte in a staging copy.
  DataType unitType = bytesPerRank % 4 == 0 ? DataType::kFloat32 : DataType::kFloat16;
  size_t stride = bytesPerRank + (bytesPerRank % 2);
  const size_t count = stride * static_cast<size_t>(nranks) / dataTypeSize(unitType);
  const void* sendBuf = send;
  void* recvBuf = nParts > 0 ? parts[0].address : nullptr;
  if (stride != bytesPerRank || !singleContiguous(nParts, parts)) {
    const size_t stagingBytes = stride * static_cast<size_t>(nranks) + stride;
    if (stream != nullptr) {
      TERSE_RETURN_IF_ERROR(req->deviceStaging.reserve(stagingBytes).status());
    } else {
      req->staging.resize(stagingBytes);
    }
    uint8_t* mine = req->stagingData() + stride * static_cast<size_t>(nranks);
    TERSE_RETURN_IF_ERROR(stageCopy(stream, mine, send, bytesPerRank));
    sendBuf = mine;
    recvBuf = req->stagingData();
    req->recvParts.assign(parts, parts + nParts);
    req->partStride = stride;
    req->partBytes = bytesPerRank;
  }
  CollectiveOptions options{"none", nullptr};
  options.stream = stream;
  req->work = comm->comm->allgatherAsync(sendBuf, recvBuf, count, unitType, options);
  return req.release();
}

void noteDeclined(CollComm* comm) {
  if (comm == nullptr) return;
  try {  // called outside the entry points' exception firewall
    std::lock_guard<std::mutex> lock(comm->mu);
    ++comm->counters.declined;
  } catch (...) {
  }
}

Status test(Request* request, bool* done, size_t* bytes) {
  if (request == nullptr) return errorInvalidArgument("test: request is NULL");
  if (!request->work.test()) {
    *done = false;
    return Status::ok();
  }
  std::unique_ptr<Request> req(request);
  *done = true;
  Status s = req->work.wait();
  if (!s.isOk()) return s;
  if (!req->recvParts.empty())
    TERSE_RETURN_IF_ERROR(scatterAllgather(req->stream, req->recvParts, req->stagingData(),
                                           req->partStride, req->partBytes));
  *bytes = req->bytes;
  return Status::ok();
}

}  // namespace terse::plugin::collnet
