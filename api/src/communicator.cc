#include "terse/communicator.h"

#include "terse/collectives/auto_select.h"
#include "terse/collectives/engine.h"
#include "terse/compressors/auto_spec.h"
#include "terse/compressors/codec.h"
#include "terse/common/env.h"
#include "terse/common/logging.h"
#include "terse/rendezvous/bootstrap.h"
#include "terse/transport/fault.h"
#include "terse/transport/give_up.h"
#include "terse/transport/inproc.h"
#include "terse/transport/transport.h"
#include "terse/transport/ucx.h"

#include <atomic>
#include <thread>
#include <strings.h>

namespace terse {

// TERSE_FAULT's phase=barrier (transport/fault.h) is the communicator's reserved tag range.
static_assert(kFaultPhases[3].value == Communicator::kReservedTagBase &&
                  (kMaxTransportTag & kFaultPhases[3].mask) == kFaultPhases[3].value,
              "transport/fault.h's barrier phase and Communicator::kReservedTagBase disagree");

namespace {

Result<std::chrono::milliseconds> timeoutFromEnv() {
  TERSE_ASSIGN_OR_RETURN(int64_t ms, envInt("TERSE_TIMEOUT_MS"));
  if (ms <= 0)
    return errorInvalidArgument("TERSE_TIMEOUT_MS=%lld must be a positive number of milliseconds",
                                static_cast<long long>(ms));
  return std::chrono::milliseconds(ms);
}

// Each process is one rank, so communicators created in the same order on every rank get the
// same key prefix, and several can be built over one store.
std::string nextStorePrefix() {
  static std::atomic<unsigned> count{0};
  return "comm" + std::to_string(count.fetch_add(1));
}

}  // namespace

Communicator::Communicator(std::unique_ptr<Transport> transport, std::chrono::milliseconds timeout)
    : transport_(std::move(transport)),
      timeout_(timeout),
      engine_(std::make_unique<CollectiveEngine>(*transport_, timeout)),
      worker_(std::make_unique<CollectiveWorker>()) {}

Communicator::~Communicator() = default;

std::unique_ptr<Communicator> Communicator::fromTransport(std::unique_ptr<Transport> transport,
                                                          std::chrono::milliseconds timeout) {
  return std::unique_ptr<Communicator>(new Communicator(std::move(transport), timeout));
}

Result<std::vector<std::unique_ptr<Communicator>>> Communicator::createInProcWorld(
    int size, std::chrono::milliseconds timeout) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<InProcFabric> fabric, makeInProcFabric(size));
  std::vector<std::unique_ptr<Communicator>> world;
  for (int r = 0; r < size; ++r) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t, createInProcTransport(fabric, r));
    world.push_back(fromTransport(std::move(t), timeout));
  }
  return world;
}

Result<std::unique_ptr<Communicator>> Communicator::createUcx(int rank, int size, Store& store,
                                                              std::chrono::milliseconds timeout,
                                                              const std::string& scope) {
  AddressAllGather exchange = [&](const std::string& mine) {
    return storeAllGather(store, scope, rank, size, mine, timeout);
  };
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                         createUcxTransport(rank, size, exchange, timeout));
  TERSE_INFO(kSubsysInit, "rank %d of %d: communicator over %s (store %s, timeout %lld ms)", rank,
             size, transport->describe().c_str(), store.describe().c_str(),
             static_cast<long long>(timeout.count()));
  return fromTransport(std::move(transport), timeout);
}

Result<std::unique_ptr<Communicator>> Communicator::createFromEnv() {
  TERSE_ASSIGN_OR_RETURN(BootstrapInfo info, readBootstrapEnv());
  setLogRank(info.rank);
  TERSE_ASSIGN_OR_RETURN(std::chrono::milliseconds timeout, timeoutFromEnv());
  TERSE_ASSIGN_OR_RETURN(std::string backend, envString("TERSE_TRANSPORT"));
  if (strcasecmp(backend.c_str(), "inproc") == 0)
    return errorInvalidUsage(
        "TERSE_TRANSPORT=inproc connects threads of one process; build those communicators with "
        "Communicator::fromTransport(createInProcTransport(...)), or unset it for processes");
  if (strcasecmp(backend.c_str(), "ucx") != 0)
    return errorInvalidArgument("TERSE_TRANSPORT='%s' is not a transport (accepted: ucx, inproc)",
                                backend.c_str());
  std::shared_ptr<Store> store;
  if (info.store.empty()) {
    store = createMemoryStore();  // a world of one needs nobody to meet
  } else {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Store> opened, openStore(info, timeout));
    store = std::move(opened);
  }
  TERSE_INFO(kSubsysBoot, "rank %d of %d (rank from %s), local rank %d, store %s", info.rank,
             info.size, info.rankSource.c_str(), info.localRank, store->describe().c_str());
  return createUcx(info.rank, info.size, *store, timeout, nextStorePrefix());
}

int Communicator::rank() const { return transport_->rank(); }
int Communicator::size() const { return transport_->size(); }

// The barrier runs on the worker thread like the collectives: one thread drives the transport.
Status Communicator::barrier() {
  return worker_->run([this] {
    TERSE_RETURN_IF_ERROR(abortStatus());
    Status s = barrierNow();
    // As after a failed collective (CollectiveEngine::run): ranks in later rounds may wait on
    // this one; dropping the connections tells them now.
    if (!s.isOk()) {
      s = giveUpOnWorld(*transport_, std::move(s));
      TERSE_WARN(kSubsysColl,
                 "rank %d: barrier failed, aborted the transport so the peers fail "
                 "now: %s",
                 rank(), s.message().c_str());
    }
    return s;
  });
}

// Dissemination barrier: in round k every rank signals rank+2^k and hears from rank-2^k, so
// after ceil(log2 n) rounds each rank has (transitively) heard from all. Within one round the
// sources differ, and consecutive barriers stay apart by per-(peer, tag) FIFO order.
Status Communicator::waitBoth(TransportRequest* a, TransportRequest* b) {
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  TransportRequest* pending[2] = {a, b};
  for (unsigned spin = 0;; ++spin) {
    for (int i = 0; i < 2; ++i) {
      if (pending[i] == nullptr) continue;
      bool done = false;
      Status s = transport_->test(pending[i], &done, nullptr);
      if (!s.isOk()) {
        pending[i] = nullptr;  // released by test
        if (pending[1 - i]) transport_->cancel(pending[1 - i]);
        return s;
      }
      if (done) pending[i] = nullptr;
    }
    if (!pending[0] && !pending[1]) return Status::ok();
    if (spin % 256 == 255) {
      if (std::chrono::steady_clock::now() >= deadline) {
        // wait() names the peer and releases the request; cancel the other one.
        TransportRequest* first = pending[0] ? pending[0] : pending[1];
        TransportRequest* other = first == pending[0] ? pending[1] : nullptr;
        if (other) transport_->cancel(other);
        return transport_->wait(first, nullptr, std::chrono::milliseconds(0));
      }
      std::this_thread::yield();
    }
  }
}

Status Communicator::barrierNow() {
  const int n = size(), me = rank();
  ++barrierCount_;
  uint8_t out = 1, in = 0;
  int round = 0;
  for (int step = 1; step < n; step <<= 1, ++round) {
    const int to = (me + step) % n, from = (me - step % n + n) % n;
    const uint64_t tag = kReservedTagBase + static_cast<uint64_t>(round);
    TransportRequest *recv = nullptr, *send = nullptr;
    Status s = transport_->irecv(from, tag, &in, sizeof in, &recv);
    if (s.isOk()) {
      s = transport_->isend(to, tag, &out, sizeof out, &send);
      if (!s.isOk()) transport_->cancel(recv);
    }
    // Wait on both at once: whichever peer is gone fails its side at once and names it, while a
    // sequential wait could sit on a transfer whose other end has already given up.
    if (s.isOk()) s = waitBoth(recv, send);
    if (!s.isOk())
      return s.withContext("barrier " + std::to_string(barrierCount_) + " on rank " +
                           std::to_string(me));
  }
  return Status::ok();
}

void Communicator::abort(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(abortMutex_);
    // The first reason wins, as in the transports.
    if (abortWhy_.isOk()) abortWhy_ = why.isOk() ? errorRemote("rank %d aborted", rank()) : why;
  }
  transport_->abort(why);
}

Status Communicator::abortStatus() const {
  std::lock_guard<std::mutex> lock(abortMutex_);
  return abortWhy_;
}

void Communicator::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  engine_->setTimeout(timeout);
}

uint64_t Communicator::bytesSent() const { return engine_->bytesSent(); }

std::pair<size_t, size_t> Communicator::partOf(size_t count) const {
  Range r = chunkRange(count, size(), rank());
  return {r.begin, r.length};
}

Result<std::shared_ptr<const Codec>> Communicator::codec(const std::string& spec) {
  std::lock_guard<std::mutex> lock(codecMutex_);
  auto it = codecs_.find(spec);
  if (it != codecs_.end()) return it->second;
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<const Codec> made, makeCodec(spec));
  codecs_.emplace(spec, made);
  return made;
}

Work Communicator::submitCollective(int kind, const void* send, void* recv, size_t count,
                                    DataType type, ReduceOp op, const CollectiveOptions& options) {
  CollectiveOp call;
  call.kind = static_cast<CollectiveKind>(kind);
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.dtype = type;
  call.op = op;
  call.feedback = options.feedback;
  // Device buffers are recognised by their memory kind (always host in builds without CUDA);
  // the engine rejects a device/host mix with a message.
  call.device = device::isDeviceMemory(send) || device::isDeviceMemory(recv);
  call.stream = options.stream;
  if (isAutoSpec(options.codec)) {
    std::shared_ptr<AutoSelector> selector;
    {
      std::lock_guard<std::mutex> lock(codecMutex_);
      auto it = selectors_.find(options.codec);
      if (it == selectors_.end()) {
        auto made = AutoSelector::create(options.codec);
        if (!made.isOk()) return Work::completed(made.status());
        it = selectors_.emplace(options.codec, std::move(made).value()).first;
      }
      selector = it->second;
    }
    // The pick (and the first call's calibration) happens in order on the worker thread.
    std::string* chosen = options.chosen;
    return worker_->submit([this, call, selector, chosen]() mutable -> Status {
      TERSE_RETURN_IF_ERROR(abortStatus());
      TERSE_ASSIGN_OR_RETURN(call.codec, selector->choose(*engine_, call));
      if (chosen) *chosen = call.codec->spec();
      return engine_->run(call);
    });
  }
  auto parsed = codec(options.codec);
  if (!parsed.isOk()) return Work::completed(parsed.status());
  std::shared_ptr<const Codec> keep = parsed.value();
  call.codec = keep.get();
  if (options.chosen) *options.chosen = keep->spec();
  return worker_->submit([this, call, keep] {
    TERSE_RETURN_IF_ERROR(abortStatus());
    return engine_->run(call);
  });
}

Work Communicator::allreduceAsync(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op, const CollectiveOptions& options) {
  return submitCollective(static_cast<int>(CollectiveKind::kAllReduce), send, recv, count, type, op,
                          options);
}

Work Communicator::reduceScatterAsync(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, const CollectiveOptions& options) {
  return submitCollective(static_cast<int>(CollectiveKind::kReduceScatter), send, recv, count, type,
                          op, options);
}

Work Communicator::allgatherAsync(const void* send, void* recv, size_t count, DataType type,
                                  const CollectiveOptions& options) {
  return submitCollective(static_cast<int>(CollectiveKind::kAllGather), send, recv, count, type,
                          ReduceOp::kSum, options);
}

}  // namespace terse
