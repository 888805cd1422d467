#include "terse/api/internal.h"

#include "terse/collectives/collective_op.h"
#include "terse/collectives/partition.h"

#include "settings.h"

#include "terse/collectives/auto_select.h"
#include "terse/collectives/engine.h"
#include "terse/collectives/worker.h"
#include "terse/compressors/auto_spec.h"
#include "terse/compressors/codec.h"
#include "terse/common/env.h"
#include "terse/common/logging.h"
#include "terse/rendezvous/bootstrap.h"
#include "terse/rendezvous/survivors.h"
#include "terse/transport/fault.h"
#include "terse/transport/give_up.h"
#include "terse/transport/group.h"
#include "terse/transport/inproc.h"
#include "terse/transport/shared.h"
#include "terse/transport/transport.h"
#include "terse/transport/ucx.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <strings.h>

namespace terse {

// Settings of the api layer's own (terse/common/env.h). The rest of what a communicator reads is
// declared by the layer that uses it and read in settings.cc.
const EnvSetting kTimeoutMsSetting{
    {"TERSE_TIMEOUT_MS", "int", "300000",
     "Per-operation timeout in milliseconds for rendezvous, transport and collectives. A peer "
     "that does not answer within it is reported by rank.",
     1, kMaxTimeoutMs}};
const EnvSetting kTransportSetting{
    {"TERSE_TRANSPORT", "enum", "ucx",
     "Byte transport between processes: ucx (the default) or inproc (threads of one process, "
     "for tests).",
     0, 0, "ucx,inproc"}};
// Read by the Python package (python/terse/) to find this library before loading it; declared
// here, in the library it names, so the registry and docs/env.md know it.
const EnvSetting kLibrarySetting{
    {"TERSE_LIBRARY", "string", "",
     "Python package (python/, docs/pytorch.md): path of the libterse.so to load. When unset: "
     "the checkout's build/lib (when imported from the source tree), then the dynamic loader's "
     "search path (LD_LIBRARY_PATH, ldconfig), then /usr/local/lib and /usr/lib."}};

// TERSE_FAULT's phase=barrier (transport/fault.h) is the communicator's reserved tag range.
static_assert(kFaultPhases[3].value == Communicator::kReservedTagBase &&
                  (kMaxTransportTag & kFaultPhases[3].mask) == kFaultPhases[3].value,
              "transport/fault.h's barrier phase and Communicator::kReservedTagBase disagree");

Result<std::chrono::milliseconds> timeoutFromEnv() {
  TERSE_ASSIGN_OR_RETURN(int64_t ms, kTimeoutMsSetting.readInt());  // 1 ms .. a year
  return std::chrono::milliseconds(ms);
}

namespace {

// The store named by TERSE_STORE, opened once per process and kept until it exits. Rank 0 serves
// a TCP store, and the communicators of one job meet through it one after another: if each
// communicator opened (and rank 0 closed) its own, a peer already creating the next communicator
// could reach rank 0's closing server and fail, and rank 0 would then wait for it in vain. Kept
// past every communicator on purpose; destroyed with the process's other statics, which joins
// rank 0's server threads (every rank has read what it needed before its create returned).
Result<std::shared_ptr<Store>> processStore(const BootstrapInfo& info,
                                            std::chrono::milliseconds timeout) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<Store>> stores;
  std::lock_guard<std::mutex> lock(mutex);
  const std::string key = info.store + (info.rank == 0 ? " (serving)" : "");
  auto it = stores.find(key);
  if (it != stores.end()) return it->second;
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Store> opened, openStore(info, timeout));
  std::shared_ptr<Store> shared = std::move(opened);
  stores.emplace(key, shared);
  return shared;
}

// Each process is one rank, so communicators created in the same order on every rank get the
// same key prefix, and several can be built over one store.
std::string nextStorePrefix() {
  static std::atomic<unsigned> count{0};
  return "comm" + std::to_string(count.fetch_add(1));
}

}  // namespace

struct Communicator::Impl {
  // What a communicator and the communicators split from it share: the connections. Each
  // communicator drives them from a collective thread of its own (transport/shared.h), so calls
  // on different communicators never wait for each other's turn (issue #35).
  struct Shared {
    std::unique_ptr<SharedTransport> transport;
    // The next free group tag space (transport/group.h), agreed on by every split: each split
    // takes one, whatever its children (their two-level groups share it, step tags apart from
    // call tags, collectives/src/requests.h). Splits of different communicators run on
    // different threads: the mutex keeps the counter whole (the order of splits is the
    // caller's rule, docs/api.md).
    std::mutex spaceMutex;
    uint32_t nextSpace = 1;
  };

  Impl(std::shared_ptr<Shared> shared, std::unique_ptr<Transport> group, std::vector<int> rootRanks,
       std::chrono::milliseconds timeout, CommSettings settings)
      : shared_(std::move(shared)),
        group_(std::move(group)),
        transport_(group_ ? group_.get() : shared_->transport.get()),
        rootRanks_(std::move(rootRanks)),
        timeout_(timeout),
        settings_(std::move(settings)),
        topology_(Topology::singleNode(transport_->size(), transport_->rank())),
        engine_(std::make_unique<CollectiveEngine>(*transport_, timeout, settings_.engine)),
        ownWorker_(std::make_unique<CollectiveWorker>()),
        worker_(ownWorker_.get()) {
    shared_->transport->addDriver();
    // Two-level allreduce's cross-node steps run on a thread of their own beside the node steps
    // (step_lane.h), a driver of the shared transport while it has jobs outstanding.
    SharedTransport* connections = shared_->transport.get();
    engine_->setStepLanes([connections] {
      return makeThreadLane([connections] { connections->addDriver(); },
                            [connections] { connections->removeDriver(); });
    });
  }
  ~Impl() {
    // The thread goes first (it finishes what is queued), then the engine that it ran.
    ownWorker_.reset();
    engine_.reset();
    shared_->transport->removeDriver();
  }

  int rank() const { return transport_->rank(); }
  Result<std::shared_ptr<const Codec>> codec(const std::string& spec);
  // wake: kByWaiter for the blocking forms, which wait at once (CollectiveWorker::Wake).
  Work submitCollective(CollectiveKind kind, const void* send, void* recv, size_t count,
                        DataType type, ReduceOp op, const CollectiveOptions& options,
                        CollectiveWorker::Wake wake = CollectiveWorker::Wake::kNow);
  // A call whose arguments failed before it reached the engine (codec spec, or the C API's
  // enum checks): joins the ranks' agreement as rejected and completes with `why`.
  Work submitRejected(const CollectiveOp& call, Status why);
  // Sets the topology and gives its node layout to the engine, whose two-level groups share tag
  // space `space` of the shared transport with this communicator (every rank passes the same).
  Status useTopology(Topology topology, uint32_t space);
  // The abort's reason once abort() was called. Checked when each operation starts, so that
  // operations that never touch the transport (a world of one) fail after an abort too.
  Status abortStatus() const;

  std::shared_ptr<Shared> shared_;
  // Split communicators: the group view of the shared transport (transport/group.h).
  std::unique_ptr<Transport> group_;
  Transport* transport_;        // group_, or the shared transport itself
  std::vector<int> rootRanks_;  // this communicator's ranks as ranks of the shared transport
  std::chrono::milliseconds timeout_;
  // The settings as read (and, for those every rank shares, compared) when the world's
  // communicator was made (settings.h); split communicators inherit them rather than read the
  // environment again.
  CommSettings settings_;
  Topology topology_;
  mutable std::mutex abortMutex_;
  Status abortWhy_;
  std::mutex codecMutex_;
  std::map<std::string, std::shared_ptr<const Codec>> codecs_;
  std::map<std::string, std::shared_ptr<AutoSelector>> selectors_;
  // Destroyed before the transports it runs on; the communicator's destructor first waits for
  // its queued calls.
  std::unique_ptr<CollectiveEngine> engine_;
  // This communicator's collective thread (~Impl stops it before the engine goes).
  std::unique_ptr<CollectiveWorker> ownWorker_;
  CollectiveWorker* worker_;
  // Where a shrink meets (world communicators made through a store this process keeps): the
  // store, this communicator's key scope in it, and how many shrinks were started on it.
  std::shared_ptr<Store> store_;
  std::string scope_;
  unsigned shrinks_ = 0;
  // {rank, size} in the communicator this one was shrunk from; {-1, 0} if not made by shrink.
  std::pair<int, int> shrunkFrom_{-1, 0};
  // splitOnce's communicators by {color, key}; released first by ~Communicator.
  std::mutex keptMutex_;
  std::map<std::pair<int, int>, std::shared_ptr<Communicator>> keptSplits_;
};

// The internal entry points (terse/api/internal.h) reach the private constructor through this.
struct CommunicatorAccess {
  using Impl = Communicator::Impl;
  static std::unique_ptr<Communicator> make(std::unique_ptr<Communicator::Impl> impl) {
    return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
  }
  static Impl& impl(Communicator& comm) { return *comm.impl_; }
};

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  // This communicator's queued calls finish first; then its figures are final.
  (void)impl_->worker_->run([] { return Status::ok(); });
  // splitOnce's children go (unless a caller still holds one) while this one is whole.
  {
    std::lock_guard<std::mutex> lock(impl_->keptMutex_);
    impl_->keptSplits_.clear();
  }
  if (!logEnabled(LogLevel::kInfo, kSubsysColl)) return;
  const CollectiveStats& st = impl_->engine_->stats();
  auto line = [&](const char* name, const CollectiveStats::Kind& k) {
    if (k.calls + k.failures == 0) return;
    TERSE_INFO(kSubsysColl,
               "rank %d stats: %s %llu calls (%llu failed), %llu bytes -> %llu on the wire, "
               "%.3f s (compress %.3f s, reduce %.3f s)",
               rank(), name, static_cast<unsigned long long>(k.calls),
               static_cast<unsigned long long>(k.failures),
               static_cast<unsigned long long>(k.rawBytes),
               static_cast<unsigned long long>(k.wireBytes), k.seconds, k.compressSeconds,
               k.reduceSeconds);
  };
  line("allreduce", st.allreduce);
  line("reducescatter", st.reduceScatter);
  line("allgather", st.allgather);
  line("auto's own calibration and measurement", st.autoPolicy);
  for (const auto& pick : st.autoPicks)
    TERSE_INFO(kSubsysColl, "rank %d stats: auto ran %llu calls with %s", rank(),
               static_cast<unsigned long long>(pick.second), pick.first.c_str());
}

CollectiveStats Communicator::stats() {
  CollectiveStats copy;
  Status s = impl_->worker_->run([&] {
    copy = impl_->engine_->stats();
    return Status::ok();
  });
  (void)s;  // the job cannot fail
  return copy;
}

namespace {

std::unique_ptr<Communicator> communicatorWithSettings(std::unique_ptr<Transport> transport,
                                                       std::chrono::milliseconds timeout,
                                                       CommSettings settings) {
  auto shared = std::make_shared<CommunicatorAccess::Impl::Shared>();
  std::vector<int> ranks(transport->size());
  for (int r = 0; r < transport->size(); ++r) ranks[r] = r;
  shared->transport = std::make_unique<SharedTransport>(std::move(transport));
  return CommunicatorAccess::make(std::make_unique<CommunicatorAccess::Impl>(
      std::move(shared), nullptr, std::move(ranks), timeout, std::move(settings)));
}

}  // namespace

std::unique_ptr<Communicator> communicatorFromTransport(std::unique_ptr<Transport> transport,
                                                        std::chrono::milliseconds timeout) {
  return communicatorWithSettings(std::move(transport), timeout, readInProcessSettings());
}

Result<std::unique_ptr<Communicator>> Communicator::split(int color, int key) {
  // Everything runs on this communicator's thread, in order with its calls: an allgather of
  // (color, key, next free tag space) over this communicator, so every rank derives the same
  // groups and the same space.
  std::unique_ptr<Communicator> child;
  Status s = impl_->worker_->run([&]() -> Status {
    TERSE_RETURN_IF_ERROR(impl_->abortStatus());
    const int n = size();
    auto none = impl_->codec("none");
    if (!none.isOk()) return none.status();
    // int32 values carried bit for bit in float32 slots (allgather with `none` copies bytes).
    uint32_t nextSpace = 0;
    {
      std::lock_guard<std::mutex> lock(impl_->shared_->spaceMutex);
      nextSpace = impl_->shared_->nextSpace;
    }
    std::vector<int32_t> mine = {color, key, static_cast<int32_t>(nextSpace), 0};
    std::vector<int32_t> all(4 * static_cast<size_t>(n));
    CollectiveOp op;
    op.kind = CollectiveKind::kAllGather;
    op.send = mine.data();
    op.recv = all.data();
    op.count = all.size();
    op.codec = none->get();
    TERSE_RETURN_IF_ERROR(impl_->engine_->run(op).withContext("split: exchanging colors and keys"));
    uint32_t space = 0;
    for (int r = 0; r < n; ++r) space = std::max(space, static_cast<uint32_t>(all[4 * r + 2]));
    // The children take this one space (disjoint children share it, as they share no rank),
    // their two-level groups included. Every rank of this communicator moves past it, whether
    // it is in a child or not.
    {
      std::lock_guard<std::mutex> lock(impl_->shared_->spaceMutex);
      impl_->shared_->nextSpace = std::max(impl_->shared_->nextSpace, space + 1);
    }
    if (space > kMaxGroupSpace)
      return errorUnsupported(
          "split: a rank of this communicator has taken part in %u splits, the most the %u tag "
          "spaces of a world's connections allow (each split takes one above every space its "
          "ranks have used, nested or not, and none is reused when communicators are destroyed; "
          "docs/api.md)",
          kMaxGroupSpace, kMaxGroupSpace);
    if (color < 0) return Status::ok();
    std::vector<int> members;
    for (int r = 0; r < n; ++r)
      if (all[4 * r] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return all[4 * a + 1] < all[4 * b + 1]; });
    std::vector<int> roots;
    for (int r : members) roots.push_back(impl_->rootRanks_[r]);
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Transport> group,
                           createGroupTransport(*impl_->shared_->transport, roots, space, "split"));
    child.reset(new Communicator(std::make_unique<Impl>(impl_->shared_, std::move(group), roots,
                                                        impl_->timeout_, impl_->settings_)));
    // The child's topology is this one's restricted to its members; its two-level groups (when
    // it spans several nodes evenly) live in its own space.
    std::vector<std::string> keys;
    for (int r : members) keys.push_back(std::to_string(impl_->topology_.nodeOfRank[r]));
    return child->impl_->useTopology(Topology::fromNodeKeys(keys, child->rank()), space);
  });
  if (!s.isOk()) return s;
  return child;
}

Result<std::shared_ptr<Communicator>> Communicator::splitOnce(int color, int key) {
  // Held across the split: a second caller (against the one-thread rule) waits for the first's
  // communicator rather than making a split the other ranks never match.
  std::lock_guard<std::mutex> lock(impl_->keptMutex_);
  const std::pair<int, int> at{color, key};
  auto kept = impl_->keptSplits_.find(at);
  if (kept != impl_->keptSplits_.end()) return kept->second;
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> made, split(color, key));
  std::shared_ptr<Communicator> shared = std::move(made);
  impl_->keptSplits_.emplace(at, shared);
  return shared;
}

Status Communicator::Impl::useTopology(Topology topology, uint32_t space) {
  topology_ = std::move(topology);
  // The node group and the cross-node group share the space: no pair of ranks is in both (a
  // node's ranks against ranks of other nodes), and their step tags are apart from the
  // communicator's call tags (collectives/src/requests.h).
  TERSE_RETURN_IF_ERROR(engine_->enableTwoLevel(topology_.nodeOfRank, space, space));
  if (rank() == 0) {
    const std::string& why = engine_->twoLevelUnavailable();
    if (why.empty())
      TERSE_INFO(kSubsysColl,
                 "%s: allreduce, reduce-scatter and allgather run two-level (TERSE_ALGO or a call "
                 "picks otherwise)",
                 topology_.describe().c_str());
    else if (topology_.nodeCount > 1)
      TERSE_INFO(kSubsysColl, "%s: allreduce runs flat, since %s", topology_.describe().c_str(),
                 why.c_str());
  }
  return Status::ok();
}

std::string Communicator::twoLevelUnavailable() const {
  return impl_->engine_->twoLevelUnavailable();  // set once at creation, before any call
}

namespace {

// communicatorFromTransport with a node layout and settings, less the check of TERSE_ALGO
// against the layout.
Result<std::unique_ptr<Communicator>> communicatorWithLayout(
    std::unique_ptr<Transport> transport, std::chrono::milliseconds timeout,
    const std::vector<std::string>& nodeKeys, CommSettings settings) {
  if (static_cast<int>(nodeKeys.size()) != transport->size())
    return errorInvalidArgument("%zu node keys for a world of %d ranks", nodeKeys.size(),
                                transport->size());
  const int rank = transport->rank();
  auto comm = communicatorWithSettings(std::move(transport), timeout, std::move(settings));
  // The world's two-level groups share the world's own tags (space 0), so every one of the
  // world's tag spaces is left for splits.
  TERSE_RETURN_IF_ERROR(
      CommunicatorAccess::impl(*comm).useTopology(Topology::fromNodeKeys(nodeKeys, rank), 0));
  return comm;
}

// TERSE_ALGO=twolevel on a world that cannot run it is a setting that cannot be honoured: say
// so now, on every rank alike (they all see the same layout and the same agreed settings), not
// at each allreduce.
Status twoLevelSettingHonoured(Communicator& comm) {
  if (CommunicatorAccess::impl(comm).engine_->defaultAlgorithm() == Algorithm::kTwoLevel &&
      !comm.twoLevelUnavailable().empty())
    return errorInvalidUsage("TERSE_ALGO=twolevel, but %s (%s); unset it or set auto or flat",
                             comm.twoLevelUnavailable().c_str(),
                             comm.topology().describe().c_str());
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Communicator>> communicatorFromTransport(
    std::unique_ptr<Transport> transport, std::chrono::milliseconds timeout,
    const std::vector<std::string>& nodeKeys) {
  TERSE_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> comm,
      communicatorWithLayout(std::move(transport), timeout, nodeKeys, readInProcessSettings()));
  TERSE_RETURN_IF_ERROR(twoLevelSettingHonoured(*comm));
  return comm;
}

Result<std::vector<std::unique_ptr<Communicator>>> createInProcWorld(
    const std::vector<std::string>& nodeKeys, std::chrono::milliseconds timeout) {
  const int size = static_cast<int>(nodeKeys.size());
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<InProcFabric> fabric, makeInProcFabric(size));
  // Read once for every rank (one environment). Faults are parsed before any rank attaches, so
  // a malformed TERSE_FAULT leaves the fabric free for a retry.
  CommSettings settings = readInProcessSettings();
  TERSE_ASSIGN_OR_RETURN(settings.transport.faults, readFaultRules());
  std::vector<std::unique_ptr<Communicator>> world;
  for (int r = 0; r < size; ++r) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t,
                           createInProcTransport(fabric, r, settings.transport));
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                           communicatorWithLayout(std::move(t), timeout, nodeKeys, settings));
    TERSE_RETURN_IF_ERROR(twoLevelSettingHonoured(*comm));
    world.push_back(std::move(comm));
  }
  return world;
}

Result<std::vector<std::unique_ptr<Communicator>>> createInProcWorld(
    int size, std::chrono::milliseconds timeout) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<InProcFabric> fabric, makeInProcFabric(size));
  // Read once for every rank (one environment). Faults are parsed before any rank attaches, so
  // a malformed TERSE_FAULT leaves the fabric free for a retry.
  CommSettings settings = readInProcessSettings();
  TERSE_ASSIGN_OR_RETURN(settings.transport.faults, readFaultRules());
  std::vector<std::unique_ptr<Communicator>> world;
  for (int r = 0; r < size; ++r) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t,
                           createInProcTransport(fabric, r, settings.transport));
    world.push_back(communicatorWithSettings(std::move(t), timeout, settings));
  }
  return world;
}

Result<std::unique_ptr<Communicator>> Communicator::createUcx(int rank, int size, Store& store,
                                                              std::chrono::milliseconds timeout,
                                                              const std::string& scope) {
  TERSE_RETURN_IF_ERROR(checkEnvironment());
  if (timeout.count() < 1 || timeout.count() > kMaxTimeoutMs)
    return errorInvalidArgument("timeout %lld ms is outside 1..%lld ms",
                                static_cast<long long>(timeout.count()),
                                static_cast<long long>(kMaxTimeoutMs));
  // Every setting this communicator (and its splits) runs with, read once, here.
  TERSE_ASSIGN_OR_RETURN(CommSettings settings, readCommSettings());
  TERSE_ASSIGN_OR_RETURN(Topology topology,
                         exchangeTopology(store, scope, rank, size, timeout, settings.node));
  // The settings every rank must share are compared through the store before any connection
  // exists: every rank reads every rank's values and reaches the same verdict, so a rank that
  // set TERSE_SEGMENT_BYTES alone fails creation everywhere with the setting's name instead of
  // corrupting the first call. The communicator (and its splits) then run with these values,
  // not with what the environment says later.
  TERSE_ASSIGN_OR_RETURN(
      std::vector<std::string> published,
      storeAllGather(store, scope + "/settings", rank, size, settings.agreed.encode(), timeout));
  TERSE_RETURN_IF_ERROR(AgreedSettings::compare(published));
  AddressAllGather exchange = [&](const std::string& mine) {
    return storeAllGather(store, scope, rank, size, mine, timeout);
  };
  TERSE_ASSIGN_OR_RETURN(
      std::unique_ptr<Transport> transport,
      createUcxTransport(rank, size, exchange, timeout, topology.nodeOfRank, settings.transport));
  TERSE_INFO(kSubsysInit,
             "rank %d of %d: communicator over %s (store %s, timeout %lld ms); %s, this rank is "
             "local rank %d of %d on node %d",
             rank, size, transport->describe().c_str(), store.describe().c_str(),
             static_cast<long long>(timeout.count()), topology.describe().c_str(),
             topology.localRank, topology.localSize, topology.node);
  std::vector<std::string> keys;
  for (int node : topology.nodeOfRank) keys.push_back(std::to_string(node));
  TERSE_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> comm,
      communicatorWithLayout(std::move(transport), timeout, keys, std::move(settings)));
  Status honoured = twoLevelSettingHonoured(*comm);
  if (!honoured.isOk()) {
    // Every rank refuses alike, but not at the same moment: a rank that closed its connections
    // at once failed the peers still making theirs with a UCX error instead of this reason
    // (issue #35). A barrier first: past it, every rank has its connections, and closing them
    // is an ordinary teardown. Its own failure changes nothing about the reason.
    (void)comm->barrier();
    return honoured;
  }
  return comm;
}

Result<std::unique_ptr<Communicator>> Communicator::createFromEnv() {
  // Every TERSE_* setting is checked now, so a typo fails here with its name rather than later,
  // silently or on the collective thread.
  TERSE_RETURN_IF_ERROR(checkEnvironment());
  TERSE_ASSIGN_OR_RETURN(BootstrapInfo info, bootstrapInfoFrom(readBootstrapVariables()));
  setLogRank(info.rank);
  TERSE_ASSIGN_OR_RETURN(std::chrono::milliseconds timeout, timeoutFromEnv());
  TERSE_ASSIGN_OR_RETURN(std::string backend, kTransportSetting.readEnum());
  if (backend == "inproc")
    return errorInvalidUsage(
        "TERSE_TRANSPORT=inproc connects threads of one process (terse's own tests build such "
        "worlds in-process); unset it for processes");
  std::shared_ptr<Store> store;
  if (info.store.empty()) {
    store = createMemoryStore();  // a world of one needs nobody to meet
  } else {
    TERSE_ASSIGN_OR_RETURN(store, processStore(info, timeout));
  }
  TERSE_INFO(kSubsysBoot, "rank %d of %d (rank from %s), local rank %d, store %s", info.rank,
             info.size, info.rankSource.c_str(), info.localRank, store->describe().c_str());
  const std::string scope = nextStorePrefix();
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                         createUcx(info.rank, info.size, *store, timeout, scope));
  comm->impl_->store_ = store;  // kept for shrink()
  comm->impl_->scope_ = scope;
  // The launcher's idea of this rank's node against terse's own (from the node keys): they
  // differ when TERSE_NODE splits a host the launcher sees as one, or the launcher's variables
  // are stale. terse's topology decides; the difference is worth a line.
  const Topology& t = comm->topology();
  if ((info.launcherLocalRank >= 0 && info.launcherLocalRank != t.localRank) ||
      (info.launcherLocalSize >= 0 && info.launcherLocalSize != t.localSize))
    TERSE_WARN(kSubsysBoot,
               "rank %d: the launcher (%s) says local rank %d of %d, but the node keys say local "
               "rank %d of %d (%s); terse uses the node keys (set TERSE_NODE to change them)",
               info.rank, info.localSource.c_str(), info.launcherLocalRank, info.launcherLocalSize,
               t.localRank, t.localSize, t.describe().c_str());
  return comm;
}

const Topology& Communicator::topology() const { return impl_->topology_; }
std::chrono::milliseconds Communicator::timeout() const { return impl_->timeout_; }

Transport& transportOf(Communicator& comm) { return *CommunicatorAccess::impl(comm).transport_; }

const CollectiveEngine& engineOf(Communicator& comm) {
  return *CommunicatorAccess::impl(comm).engine_;
}

Work submitRejected(Communicator& comm, const CollectiveOp& call, Status why) {
  return CommunicatorAccess::impl(comm).submitRejected(call, std::move(why));
}

Work Communicator::reject(const Status& why) {
  CollectiveOp call;  // a rejected call's descriptor carries only the mark of its rejection
  call.kind = CollectiveKind::kAllReduce;
  return impl_->submitRejected(call, why);
}

int Communicator::rank() const { return impl_->transport_->rank(); }
int Communicator::size() const { return impl_->transport_->size(); }

// The barrier runs on the worker thread like the collectives, and in the same sequence of
// agreements (CollectiveEngine::barrier): a rank that calls a collective where the others call
// the barrier makes both fail at once rather than wait on each other's tags.
Status Communicator::barrier() {
  return impl_->worker_->run([this] {
    TERSE_RETURN_IF_ERROR(impl_->abortStatus());
    return impl_->engine_->barrier();
  });
}

void Communicator::abort(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(impl_->abortMutex_);
    // The first reason wins, as in the transports.
    if (impl_->abortWhy_.isOk())
      impl_->abortWhy_ = why.isOk() ? errorRemote("rank %d aborted", rank()) : why;
  }
  impl_->transport_->abort(why);
  // The transport drops its connections, which is how the peers learn, on the thread that
  // drives it: with nothing queued that thread would sleep and the peers would wait out their
  // timeout. One turn of progress on it does that now (or at once after the call in flight,
  // which the abort itself ends).
  (void)impl_->worker_->submit([this] {
    impl_->transport_->progress();
    return Status::ok();
  });
}

Result<std::unique_ptr<Communicator>> Communicator::shrink(const std::vector<int>& exclude,
                                                           std::vector<int>* gone) {
  if (impl_->group_)
    return errorUnsupported(
        "shrink: this communicator was split from another; shrink the world communicator and "
        "split the new one again");
  if (!impl_->store_)
    return errorUnsupported(
        "shrink: this communicator keeps no store to meet through (only communicators from "
        "createFromEnv or terse_comm_create do)");
  // In order with this communicator's calls, on its thread; after a failure or an abort too,
  // which is when it is needed. The old connections are not used: the agreement goes through
  // the store, and the new world gets connections of its own.
  std::unique_ptr<Communicator> made;
  Status s = impl_->worker_->run([&]() -> Status {
    const auto started = std::chrono::steady_clock::now();
    // Bad arguments take no shrink number, so every survivor's next shrink still meets the
    // others' under the same keys.
    TERSE_RETURN_IF_ERROR(checkShrinkExclude(rank(), size(), exclude));
    const std::string prefix = impl_->scope_ + "/shrink" + std::to_string(impl_->shrinks_++);
    SharedTransport* old = impl_->shared_->transport.get();
    TERSE_ASSIGN_OR_RETURN(SurvivorAgreement agreed,
                           agreeOnSurvivors(
                               *impl_->store_, prefix, rank(), size(), exclude,
                               [old](int r) { return old->peerProcessGone(r); }, impl_->timeout_));
    auto created = createUcx(agreed.newRank, static_cast<int>(agreed.members.size()),
                             *impl_->store_, impl_->timeout_, prefix + "/world");
    if (!created.isOk())
      return created.status().withContext("shrink: creating the new world (" + agreed.describe +
                                          ")");
    std::unique_ptr<Communicator> next = std::move(created).value();
    // Returns only once every member has reached the others: a barrier on the new world (in
    // worlds up to TERSE_AGREEMENT_DIRECT_RANKS every pair exchanges a message), whose outcome
    // each member then publishes in the store. A barrier can succeed on some members and fail
    // on others (those it reached before the link failed), so every member reads every
    // outcome and all refuse together, never some going on with a world that others left.
    const Status reached = next->barrier();
    const std::string outcome = reached.isOk() ? "ok" : reached.toString();
    auto outcomes =
        storeAllGather(*impl_->store_, prefix + "/ready", agreed.newRank,
                       static_cast<int>(agreed.members.size()), outcome, impl_->timeout_);
    if (!outcomes.isOk())
      return outcomes.status().withContext("shrink: confirming the new world's connections");
    for (size_t i = 0; i < outcomes.value().size(); ++i)
      if (outcomes.value()[i] != "ok")
        return errorRemote(
            "shrink: rank %zu of the new world (%s) could not reach the others, so no survivor "
            "goes on: %s",
            i, agreed.describe.c_str(),
            printableBytes(outcomes.value()[i].data(), outcomes.value()[i].size(), 600).c_str());
    next->impl_->store_ = impl_->store_;
    next->impl_->scope_ = prefix + "/world";
    next->impl_->shrunkFrom_ = {rank(), size()};
    TERSE_INFO(kSubsysInit, "rank %d of %d is rank %d of %d after a shrink (%s) in %.3f s", rank(),
               size(), agreed.newRank, static_cast<int>(agreed.members.size()),
               agreed.describe.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    if (gone) *gone = agreed.gone;
    made = std::move(next);
    return Status::ok();
  });
  if (!s.isOk()) return s;
  return made;
}

std::pair<int, int> Communicator::shrunkFrom() const { return impl_->shrunkFrom_; }

Status Communicator::Impl::abortStatus() const {
  std::lock_guard<std::mutex> lock(abortMutex_);
  return abortWhy_;
}

Status Communicator::setTimeout(std::chrono::milliseconds timeout) {
  if (timeout.count() < 1 || timeout.count() > kMaxTimeoutMs)
    return errorInvalidArgument("timeout %lld ms is outside 1..%lld ms",
                                static_cast<long long>(timeout.count()),
                                static_cast<long long>(kMaxTimeoutMs));
  impl_->timeout_ = timeout;
  impl_->engine_->setTimeout(timeout);
  return Status::ok();
}

uint64_t Communicator::bytesSent() const { return impl_->engine_->bytesSent(); }

std::pair<size_t, size_t> Communicator::partOf(size_t count) const {
  Range r = chunkRange(count, size(), rank());
  return {r.begin, r.length};
}

std::pair<size_t, size_t> Communicator::allreduceChunk(size_t count, int size, int rank) {
  Range r = allreduceChunkRange(count, size, rank);
  return {r.begin, r.length};
}

Result<std::shared_ptr<const Codec>> Communicator::Impl::codec(const std::string& spec) {
  std::lock_guard<std::mutex> lock(codecMutex_);
  auto it = codecs_.find(spec);
  if (it != codecs_.end()) return it->second;
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<const Codec> made, makeCodec(spec));
  codecs_.emplace(spec, made);
  return made;
}

Work Communicator::Impl::submitCollective(CollectiveKind kind, const void* send, void* recv,
                                          size_t count, DataType type, ReduceOp op,
                                          const CollectiveOptions& options,
                                          CollectiveWorker::Wake wake) {
  CollectiveOp call;
  call.kind = kind;
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
  if (!options.algorithm.empty()) {
    auto algorithm = parseAlgorithm(options.algorithm);
    if (!algorithm.isOk()) return submitRejected(call, algorithm.status());
    call.algorithm = algorithm.value();
  }
  std::string* chosen = options.chosen;
  if (isAutoSpec(options.codec)) {
    std::shared_ptr<AutoSelector> selector;
    Status made = Status::ok();
    {
      std::lock_guard<std::mutex> lock(codecMutex_);
      auto it = selectors_.find(options.codec);
      if (it == selectors_.end()) {
        auto created = AutoSelector::create(options.codec);
        if (created.isOk())
          it = selectors_.emplace(options.codec, std::move(created).value()).first;
        else
          made = created.status();
      }
      if (made.isOk()) selector = it->second;
    }
    if (!made.isOk()) return submitRejected(call, std::move(made));
    // The pick (and the first call's calibration) happens in order on the worker thread.
    return worker_->submit(
        [this, call, selector, chosen]() mutable -> Status {
          TERSE_RETURN_IF_ERROR(abortStatus());
          call.requested = selector->spec();  // agreed on too: auto against int8 is a disagreement
          TERSE_ASSIGN_OR_RETURN(call.codec, selector->choose(*engine_, call));
          const std::string picked = call.codec->spec();
          ++engine_->mutableStats().autoPicks[picked];
          if (chosen) *chosen = picked;
          return engine_->run(call);
        },
        wake);
  }
  auto parsed = codec(options.codec);
  if (!parsed.isOk()) return submitRejected(call, parsed.status());
  std::shared_ptr<const Codec> keep = parsed.value();
  call.codec = keep.get();
  if (chosen) *chosen = keep->spec();
  return worker_->submit(
      [this, call, keep] {
        TERSE_RETURN_IF_ERROR(abortStatus());
        return engine_->run(call);
      },
      wake);
}

Work Communicator::Impl::submitRejected(const CollectiveOp& call, Status why) {
  // The call still takes its place in the ranks' sequence, as a rejected one, so the peers fail
  // this same call at once (naming this rank) instead of pairing their call with this rank's
  // next one or waiting for its data.
  return worker_->submit([this, call, why]() -> Status {
    TERSE_RETURN_IF_ERROR(abortStatus());
    return engine_->reject(call, why);
  });
}

Work Communicator::allreduceAsync(const void* send, void* recv, size_t count, DataType type,
                                  ReduceOp op, const CollectiveOptions& options) {
  return impl_->submitCollective(CollectiveKind::kAllReduce, send, recv, count, type, op, options);
}

Work Communicator::reduceScatterAsync(const void* send, void* recv, size_t count, DataType type,
                                      ReduceOp op, const CollectiveOptions& options) {
  return impl_->submitCollective(CollectiveKind::kReduceScatter, send, recv, count, type, op,
                                 options);
}

Work Communicator::allgatherAsync(const void* send, void* recv, size_t count, DataType type,
                                  const CollectiveOptions& options) {
  return impl_->submitCollective(CollectiveKind::kAllGather, send, recv, count, type,
                                 ReduceOp::kSum, options);
}

Work submitCall(Communicator& comm, CollectiveKind kind, const void* send, void* recv, size_t count,
                DataType type, ReduceOp op, const CollectiveOptions& options, bool blocking) {
  return CommunicatorAccess::impl(comm).submitCollective(
      kind, send, recv, count, type, op, options,
      blocking ? CollectiveWorker::Wake::kByWaiter : CollectiveWorker::Wake::kNow);
}

Status Communicator::allreduce(const void* send, void* recv, size_t count, DataType type,
                               ReduceOp op, const CollectiveOptions& options) {
  return submitCall(*this, CollectiveKind::kAllReduce, send, recv, count, type, op, options, true)
      .wait();
}

Status Communicator::reduceScatter(const void* send, void* recv, size_t count, DataType type,
                                   ReduceOp op, const CollectiveOptions& options) {
  return submitCall(*this, CollectiveKind::kReduceScatter, send, recv, count, type, op, options,
                    true)
      .wait();
}

Status Communicator::allgather(const void* send, void* recv, size_t count, DataType type,
                               const CollectiveOptions& options) {
  return submitCall(*this, CollectiveKind::kAllGather, send, recv, count, type, ReduceOp::kSum,
                    options, true)
      .wait();
}

}  // namespace terse
