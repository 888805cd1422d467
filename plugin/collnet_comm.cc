#include "collnet_comm.h"

#include "collnet_device.h"
#include "collnet_stats.h"
#include "net_handshake.h"

#include "net_device.h"

#include "terse/common/env.h"
#include "terse/communicator.h"
#include "terse/compressors/auto_spec.h"
#include "terse/compressors/codec.h"
#include "terse/compressors/error_feedback.h"
#include "terse/kernels/device.h"
#include "terse/rendezvous/store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <initializer_list>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

namespace terse::plugin::collnet {
namespace {

std::atomic<ncclDebugLogger_t> gLogger{nullptr};

static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "CollNet handle must fit NCCL's");

enum class Kind : uint8_t { kAllReduce, kReduceScatter };
const char* kindName(Kind k) { return k == Kind::kAllReduce ? "allreduce" : "reduce-scatter"; }

Result<DataType> mapType(int dataType) {
  switch (dataType) {
    case ncclCollFloat32: return DataType::kFloat32;
    case ncclCollFloat16: return DataType::kFloat16;
    case ncclCollBfloat16: return DataType::kBFloat16;
    default: break;
  }
  return errorInvalidArgument(
      "NCCL datatype %d is not reduced by terse's CollNet (reduceSupport declined it): only "
      "float16 (6), float32 (7) and bfloat16 (9) are",
      dataType);
}

Result<ReduceOp> mapOp(int redOp) {
  if (redOp == ncclCollSum) return ReduceOp::kSum;
  if (redOp == ncclCollAvg) return ReduceOp::kAvg;
  return errorInvalidArgument(
      "NCCL reduction op %d is not reduced by terse's CollNet (reduceSupport declined it): only "
      "sum (0) and avg (4) are",
      redOp);
}

std::string numericHost(const sockaddr_storage& addr) {
  char host[NI_MAXHOST] = {0};
  socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return "";
  return host;
}

// A port the kernel considers free on `host` right now. Another process may take it before
// the store binds it; listen then simply asks again.
Result<int> probeFreePort(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), "0", &hints, &res);
  if (rc != 0) return errorSystem("cannot resolve %s: %s", host.c_str(), gai_strerror(rc));
  int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0) {
    freeaddrinfo(res);
    return errorSystem("socket() failed: %s", std::strerror(errno));
  }
  int port = -1;
  if (::bind(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
      port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  int err = errno;
  ::close(fd);
  freeaddrinfo(res);
  if (port <= 0)
    return errorSystem("cannot bind a port on %s: %s", host.c_str(), std::strerror(err));
  return port;
}

// Residuals of error-feedback codecs, one per position in the training step's call sequence.
// NCCL repeats the same calls every step; CallSequence (ef_period.h) maps each call to a
// position of the given or learned period, or to none while the period is being learned. This
// class owns the residuals of those positions and says, once per event, what happened.
class ResidualSequence {
 public:
  struct Plan {
    ErrorFeedback* feedback = nullptr;  // nullptr: run without residuals
    const std::string* codec = nullptr;
  };

  // `counters` (the CollComm's, guarded by its mutex like this object) gets each call's figures.
  ResidualSequence(std::string codec, std::string warmupCodec, const PeriodSetting& setting,
                   CollNetCounters* counters)
      : codec_(std::move(codec)),
        warmupCodec_(std::move(warmupCodec)),
        sequence_(setting),
        counters_(counters) {}

  // The period for the statistics line.
  std::string periodText() const {
    if (sequence_.fixed()) return formatString("%zu (TERSE_COLLNET_EF_PERIOD)", sequence_.period());
    if (sequence_.gaveUp()) return "not found";
    if (sequence_.learning()) return "not learned yet";
    return formatString("%zu (learned)", sequence_.period());
  }

  Result<Plan> next(Kind kind, size_t count, DataType type) {
    const CallKey key{static_cast<uint8_t>(kind), static_cast<uint8_t>(type), count};
    CallSequence::Decision d = sequence_.next(key);
    switch (d.event) {
      case CallSequence::Event::kNone: break;
      case CallSequence::Event::kLearned:
        ++counters_->periodsLearned;
        COLLNET_INFO(
            "error-feedback period learned: %zu reduce calls per step, after %zu warm-up calls "
            "run with %s; residuals are kept per position from the next call on",
            sequence_.period(), sequence_.warmupCalls(), warmupCodec_.c_str());
        break;
      case CallSequence::Event::kChanged:
        ++counters_->resets;
        warnChanged(d, kind, count, type);
        break;
      case CallSequence::Event::kGaveUp:
        COLLNET_WARN(
            "error-feedback period not found: the last %zu reduce calls did not repeat %zu times "
            "in a row; this communicator stays without residuals and runs %s instead of %s from "
            "now on (set TERSE_COLLNET_EF_PERIOD to the reduce calls per step to force a period, "
            "or auto:warmup=N to watch more calls)",
            sequence_.warmupCalls(), CallSequence::kRepeats, warmupCodec_.c_str(), codec_.c_str());
        break;
    }
    if (!d.residual) {
      ++counters_->withoutResidual;
      return Plan{nullptr, &warmupCodec_};
    }
    ++counters_->withResidual;
    if (d.position >= slots_.size()) slots_.resize(d.position + 1);
    std::unique_ptr<ErrorFeedback>& slot = slots_[d.position];
    if (!slot) {
      TERSE_ASSIGN_OR_RETURN(ErrorFeedback fb, ErrorFeedback::create(codec_, count));
      slot = std::make_unique<ErrorFeedback>(std::move(fb));
    }
    return Plan{slot.get(), &codec_};
  }

 private:
  void warnChanged(const CallSequence::Decision& d, Kind kind, size_t count, DataType type) {
    const char* heldKind = kindName(static_cast<Kind>(d.expected.kind));
    const char* heldType = dataTypeName(static_cast<DataType>(d.expected.type));
    const size_t dropped = slots_.size();
    slots_.clear();  // stale residuals are never applied to another region
    if (sequence_.fixed())
      COLLNET_WARN(
          "error-feedback sequence changed: call %zu of step %llu (TERSE_COLLNET_EF_PERIOD=%zu) "
          "is a %s of %zu %s, but that position held a %s of %zu %s; resetting all %zu residuals "
          "and restarting the sequence at this call",
          d.brokenPosition, static_cast<unsigned long long>(d.brokenStep), sequence_.period(),
          kindName(kind), count, dataTypeName(type), heldKind,
          static_cast<size_t>(d.expected.count), heldType, dropped);
    else
      COLLNET_WARN(
          "error-feedback sequence changed: call %zu of step %llu (learned period) is a %s of "
          "%zu %s, but that position held a %s of %zu %s; dropping all %zu residuals and "
          "learning the period again (calls run with %s meanwhile)",
          d.brokenPosition, static_cast<unsigned long long>(d.brokenStep), kindName(kind), count,
          dataTypeName(type), heldKind, static_cast<size_t>(d.expected.count), heldType, dropped,
          warmupCodec_.c_str());
  }

  std::string codec_;
  std::string warmupCodec_;
  CallSequence sequence_;
  CollNetCounters* counters_;
  std::vector<std::unique_ptr<ErrorFeedback>> slots_;
};

}  // namespace

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

void setLogger(ncclDebugLogger_t logger) { gLogger.store(logger); }

void log(LogLevel level, const char* file, int line, const char* fmt, ...) {
  ncclDebugLogger_t logger = gLogger.load();
  if (logger == nullptr && !logEnabled(level, kSubsysPlugin)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (logger != nullptr)
    logger(static_cast<ncclDebugLogLevel>(level), NCCL_INIT | NCCL_COLL | NCCL_NET, file, line,
           "CollNet/terse : %s", buf);
  else
    logMessage(level, kSubsysPlugin, file, line, "CollNet/terse : %s", buf);
}

bool supported(int dataType, int redOp) { return mapType(dataType).isOk() && mapOp(redOp).isOk(); }

namespace {

// Canonicalises *spec (a codec or an `auto[:max=NAME]` policy) and says whether it may need
// error feedback (onebit, topk, or an auto policy that allows them). A spec terse does not know
// is a WARN and becomes "none".
Result<bool> validateSpec(std::string* spec) {
  if (isAutoSpec(*spec)) {
    auto parsed = parseAutoSpec(*spec);
    if (parsed.isOk()) {
      bool feedback = false;
      for (const std::string& candidate : parsed->candidates) {
        TERSE_ASSIGN_OR_RETURN(std::shared_ptr<const Codec> codec, makeCodec(candidate));
        feedback |= codec->wantsErrorFeedback();
      }
      *spec = parsed->canonical;
      return feedback;
    }
    COLLNET_WARN(
        "TERSE_COLLNET_CODEC='%s' is not a codec terse knows (%s); CollNet runs "
        "uncompressed (codec none)",
        spec->c_str(), parsed.status().message().c_str());
    *spec = "none";
    return false;
  }
  auto codec = makeCodec(*spec);
  if (!codec.isOk()) {
    COLLNET_WARN(
        "TERSE_COLLNET_CODEC='%s' is not a codec terse knows (%s); CollNet runs "
        "uncompressed (codec none)",
        spec->c_str(), codec.status().message().c_str());
    *spec = "none";
    return false;
  }
  *spec = (*codec)->spec();
  return (*codec)->wantsErrorFeedback();
}

}  // namespace

Result<Config> loadConfig() {
  Config c;
  TERSE_ASSIGN_OR_RETURN(int64_t timeoutMs, envInt("TERSE_TIMEOUT_MS"));
  if (timeoutMs <= 0)
    return errorInvalidArgument("TERSE_TIMEOUT_MS=%lld must be > 0", (long long)timeoutMs);
  c.timeout = std::chrono::milliseconds(timeoutMs);
  TERSE_ASSIGN_OR_RETURN(std::string periodValue, envString("TERSE_COLLNET_EF_PERIOD"));
  TERSE_ASSIGN_OR_RETURN(PeriodSetting period, parsePeriodSetting(periodValue));
  TERSE_ASSIGN_OR_RETURN(std::string spec, envString("TERSE_COLLNET_CODEC"));
  if (spec.empty()) spec = "none";
  TERSE_ASSIGN_OR_RETURN(bool needsFeedback, validateSpec(&spec));
  const bool off = !period.learn && period.period == 0;
  if (needsFeedback && off) {
    COLLNET_WARN(
        "TERSE_COLLNET_CODEC='%s' needs error feedback, which TERSE_COLLNET_EF_PERIOD=0 turns "
        "off, so CollNet runs uncompressed (codec none)",
        spec.c_str());
    spec = "none";
    needsFeedback = false;
  }
  c.errorFeedback = needsFeedback;
  c.efPeriod = period;
  c.codec = spec;
  c.warmupCodec = "none";
  if (needsFeedback && isAutoSpec(spec)) {
    // The policy's candidates that keep no residuals: everything up to int8.
    TERSE_ASSIGN_OR_RETURN(AutoSpec noResidual, parseAutoSpec("auto:max=int8"));
    c.warmupCodec = noResidual.canonical;
  }
  TERSE_ASSIGN_OR_RETURN(DeviceInfo dev, discoverDevice());
  c.host = numericHost(dev.bindAddr);
  if (c.host.empty() || c.host.size() >= sizeof(Handle{}.host))
    return errorSystem("cannot print the address of interface %s", dev.ifname.c_str());
  return c;
}

Result<ListenComm*> listen(const Config& config, void* handle) {
  if (handle == nullptr) return errorInvalidArgument("listen: handle is NULL");
  auto lc = std::make_unique<ListenComm>();
  lc->config = config;
  std::random_device rd;
  lc->handle.nonce = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  Status last;
  for (int attempt = 0; attempt < 16 && !lc->store; ++attempt) {
    TERSE_ASSIGN_OR_RETURN(int port, probeFreePort(config.host));
    auto store = createTcpStore(config.host, port, /*serve=*/true, config.timeout);
    if (store.isOk()) {
      lc->store = std::move(*store);
      lc->handle.port = port;
    } else {
      last = store.status();
    }
  }
  if (!lc->store)
    return errorSystem("listen: could not serve a rendezvous store on %s: %s", config.host.c_str(),
                       last.message().c_str());
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

// The window restriction shared by ireducescatter and iallgather: terse runs the whole
// nranks x bytesPerRank collective in one call, so the window must be all of it.
Status checkWindow(const char* entry, int nranks, int nParts, const ncclNetSGE_v11_t* parts,
                   size_t bytesPerRank, size_t windowOffset, size_t windowBytes) {
  size_t total = bytesPerRank * static_cast<size_t>(nranks);
  if (windowOffset != 0 || windowBytes != total)
    return errorInvalidUsage(
        "%s: window [%zu, +%zu) is not the whole %d x %zu-byte buffer; terse's CollNet only "
        "runs whole-buffer windows (windowOffset 0, windowBytes nranks * bytesPerRank)",
        entry, windowOffset, windowBytes, nranks, bytesPerRank);
  if (nParts < 0 || (nParts > 0 && parts == nullptr))
    return errorInvalidArgument("%s: %d parts with a NULL array", entry, nParts);
  size_t sum = 0;
  for (int i = 0; i < nParts; ++i) {
    if (parts[i].size > 0 && parts[i].address == nullptr)
      return errorInvalidArgument("%s: part %d has a NULL address", entry, i);
    sum += parts[i].size;
  }
  if (sum != windowBytes)
    return errorInvalidUsage("%s: the %d parts hold %zu bytes, the window is %zu", entry, nParts,
                             sum, windowBytes);
  return Status::ok();
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

// Stages `bytes` from `src` at `dst`: memcpy on the host, a stream-ordered copy on the device.
Status stageCopy(void* stream, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  if (stream == nullptr) {
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  return device::copyAsync(dst, src, bytes, stream);
}

bool singleContiguous(int nParts, const ncclNetSGE_v11_t* parts) {
  for (int i = 1; i < nParts; ++i)
    if (static_cast<const uint8_t*>(parts[i - 1].address) + parts[i - 1].size != parts[i].address)
      return false;
  return true;
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
    size_t at = 0;
    for (int i = 0; i < nParts; ++i) {
      TERSE_RETURN_IF_ERROR(
          stageCopy(stream, req->stagingData() + at, parts[i].address, parts[i].size));
      at += parts[i].size;
    }
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
  if (!req->recvParts.empty()) {
    // Unpack the staged allgather: rank r's bytes sit at r * stride; NCCL's window is the
    // unpadded concatenation, cut into its parts in order.
    size_t windowAt = 0;
    for (const auto& part : req->recvParts) {
      size_t copied = 0;
      while (copied < part.size) {
        size_t rank = (windowAt + copied) / req->partBytes;
        size_t within = (windowAt + copied) % req->partBytes;
        size_t n = std::min(part.size - copied, req->partBytes - within);
        TERSE_RETURN_IF_ERROR(stageCopy(req->stream, static_cast<uint8_t*>(part.address) + copied,
                                        req->stagingData() + rank * req->partStride + within, n));
        copied += n;
      }
      windowAt += part.size;
    }
    // Device parts: NCCL reads them once test says done, so the copies must have landed.
    if (req->stream != nullptr) TERSE_RETURN_IF_ERROR(device::synchronize(req->stream));
  }
  *bytes = req->bytes;
  return Status::ok();
}

}  // namespace terse::plugin::collnet
