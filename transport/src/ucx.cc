#include "terse/transport/ucx.h"

#include "terse/transport/fault.h"
#include "terse/transport/ucx_core.h"

#include "peer_input.h"
#include "ucx_text.h"
#include "request.h"
#include "terse/common/env.h"
#include "terse/common/logging.h"

#include <ucp/api/ucp.h>

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace terse {

// TERSE_UCX_TCP_EAGER's declaration (transport/settings.h: the communicator reads it and
// passes TransportSettings::ucxTcpEager).
const EnvSetting kUcxTcpEagerSetting{
    {"TERSE_UCX_TCP_EAGER", "int", "1",
     "With UCX_TLS naming only tcp (and self) and no UCX_RNDV_THRESH of the user's, terse's "
     "transport sends every message eagerly (UCX's RNDV_THRESH=inf): UCX's rendezvous waits "
     "for a busy receiver to answer each message before data moves, which cost the compressed "
     "collectives 10-15% of a 1 Gbit/s link. 0 leaves the threshold to UCX. Not applied with "
     "shared memory or RDMA, where rendezvous is the faster protocol.",
     0, 1}};

namespace {

constexpr int kTagBits = 40;
constexpr uint64_t kFullMask = ~uint64_t{0};

uint64_t wireTag(int source, uint64_t tag) {
  return (static_cast<uint64_t>(source) << kTagBits) | tag;
}

// What makes a pid from another rank name a process here: the same host name, the same boot of
// the kernel (host names repeat across machines and containers) and the same pid namespace
// (containers on one host each number their processes from 1). Ranks whose identities are equal
// can watch each other's processes (checkPeerProcesses).
std::string hostIdentity() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) std::strcpy(name, "unknown");
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat ns {};
  std::string pidns = "?";
  if (stat("/proc/self/ns/pid", &ns) == 0)
    pidns = std::to_string(static_cast<unsigned long long>(ns.st_dev)) + ":" +
            std::to_string(static_cast<unsigned long long>(ns.st_ino));
  std::string id = std::string(name) + " boot " + boot + " pidns " + pidns;
  // Without /proc nothing proves that another rank's pid is a process here: an identity that
  // matches no other rank's keeps every peer on UCX's own failure reporting.
  if (boot.empty() || pidns == "?") id += " pid " + std::to_string(getpid());
  return id.substr(0, kMaxPeerHostBytes);
}

class UcxTransport;

struct PeerErrorArg {
  UcxTransport* self;
  int peer;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(int rank, int size, std::chrono::milliseconds timeout, std::vector<int> nodeOfRank,
               bool eagerSetting)
      : rank_(rank),
        size_(size),
        timeout_(timeout),
        nodeOfRank_(std::move(nodeOfRank)),
        eps_(size, nullptr),
        peerFailed_(size),
        droppedOnly_(size, false),
        errArgs_(size) {
    for (int p = 0; p < size; ++p) errArgs_[p] = {this, p};
    failedQueue_.reserve(size);
    const std::string tls = ucxTlsFromEnv();
    tls_ = tls.empty() ? "all" : tls;
    describe_ = "ucx(" + tls_ + ")";
    // With only shared-memory transports allowed, asking UCX for a PEER-mode endpoint just makes
    // it log an error before we fall back; skip the question.
    peerModeUnreachable_ = ucxTlsOnlySharedMemory(tls);
    // TCP only: there UCX's rendezvous protocol, which it picks for messages of tens of KiB and
    // up, waits for the receiver to answer each message's request before any data moves, and a
    // receiver busy compressing or reducing answers late: at 1 Gbit/s the compressed collectives'
    // half- and quarter-size segments lost 10-15% of the link to it (docs/benchmarks.md). Sending
    // eagerly lets TCP's own buffers carry the data while the receiver computes. On with
    // TERSE_UCX_TCP_EAGER (default 1, TransportSettings::ucxTcpEager) and no UCX_RNDV_THRESH of
    // the user's.
    eagerTcp_ = ucxTlsOnlyTcp(tls) && !ucxUserSet("RNDV_THRESH") && eagerSetting;
    if (eagerTcp_) describe_ = "ucx(" + tls + ", eager)";
  }

  ~UcxTransport() override { shutdown(); }

  Status init(const AddressAllGather& allgather) {
    UcxWorkerOptions options;
    options.threadMode = UCS_THREAD_MODE_SINGLE;
    if (eagerTcp_)
      options.tweaks.push_back(UcxConfigTweak{"RNDV_THRESH", "inf", true,
                                              "set TERSE_UCX_TCP_EAGER=0 to leave it to UCX"});
    TERSE_RETURN_IF_ERROR(ucxOpenWorker(options, &ucx_));
    // What peers need: our host identity and pid (for the liveness check below) and the worker
    // address.
    const std::string myHost = hostIdentity();
    PeerBlob self{myHost, static_cast<int>(getpid()), ucx_.address};
    std::string mine = encodePeerBlob(self);
    TERSE_ASSIGN_OR_RETURN(std::vector<std::string> blobs, allgather(mine));
    if (static_cast<int>(blobs.size()) != size_)
      return errorInternal("worker address exchange returned %zu addresses for %d ranks",
                           blobs.size(), size_);
    for (int p = 0; p < size_; ++p) {
      // Another process's bytes: an empty address would reach ucp_ep_create, and a pid of 0 or
      // below would make the liveness check signal a process group.
      PeerBlob blob;
      TERSE_RETURN_IF_ERROR(parsePeerBlob(p, reinterpret_cast<const uint8_t*>(blobs[p].data()),
                                          blobs[p].size(), &blob));
      PeerInfo info;
      info.sameHost = blob.host == myHost;
      info.pid = blob.pid;
      info.address = std::move(blob.address);
      // Same node in the topology and a process this rank can watch: see ucx.h.
      info.sameNode = p != rank_ && ucxTlsAllowsSharedMemory(tls_) &&
                      static_cast<int>(nodeOfRank_.size()) == size_ &&
                      nodeOfRank_[p] == nodeOfRank_[rank_] && info.sameHost && info.pid != getpid();
      peers_.push_back(std::move(info));
    }
    TERSE_RETURN_IF_ERROR(connectSameNode());
    choosePollsPerYield();
    TERSE_INFO(kSubsysNet, "rank %d: UCX transport %s ready (%zu-byte worker address)", rank_,
               describe_.c_str(), ucx_.address.size());
    return Status::ok();
  }

  // How often a wait steps aside (sched_yield) while it polls. Where this world has more
  // processes on this host than the CPUs this process may run on, a rank spinning on a message
  // holds the CPU the sender needs: it yields after every poll, as OpenMPI does when
  // oversubscribed. Elsewhere after 256 polls, so a rank with a CPU of its own keeps its
  // latency. Measured with `chrt -r 10 build/bin/terse-run -n 4 build/bin/terse-bench allreduce
  // -b 4K -e 1M -f 16 -n 1000 -w 100 --codec none` on 2 CPUs (2026-11-29): 4 KiB 98 -> 28 us,
  // 64 KiB 233 -> 132 us, 1 MiB 1245 -> 826 us; with 2 ranks yielding after every poll would
  // cost 4.0 -> 5.9 us at 4 KiB.
  void choosePollsPerYield() {
    std::set<int> processes = {static_cast<int>(getpid())};
    for (const PeerInfo& p : peers_)
      if (p.sameHost) processes.insert(p.pid);
    cpu_set_t set;
    CPU_ZERO(&set);
    int cpus = sched_getaffinity(0, sizeof(set), &set) == 0
                   ? CPU_COUNT(&set)
                   : static_cast<int>(std::thread::hardware_concurrency());
    if (cpus <= 0) cpus = 1;
    const bool oversubscribed = static_cast<int>(processes.size()) > cpus;
    pollsPerYield_ = oversubscribed ? 1 : 256;
    if (oversubscribed)
      TERSE_INFO(kSubsysNet,
                 "rank %d: %zu ranks of this world on this host and %d CPUs for this one: waits "
                 "yield after every poll",
                 rank_, processes.size(), cpus);
  }

  // Connects to the ranks on this node now, so that what carries their bytes is known from the
  // start (describe(), the INFO line) rather than after the first message. Over shared memory an
  // endpoint is a local affair: nothing is sent to the peer.
  Status connectSameNode() {
    std::vector<int> local;
    std::string transports;  // every transport of every same-node endpoint, once
    bool shm = true;         // every same-node endpoint uses a shared-memory transport
    for (int p = 0; p < size_; ++p) {
      if (!peers_[p].sameNode) continue;
      ucp_ep_h ep = nullptr;
      TERSE_RETURN_IF_ERROR(endpoint(p, &ep));
      local.push_back(p);
      shm = shm && ucxUsesSharedMemory(peers_[p].transports);
      size_t start = 0;
      const std::string& mine = peers_[p].transports;
      while (start <= mine.size()) {
        size_t end = mine.find(',', start);
        if (end == std::string::npos) end = mine.size();
        const std::string tl = mine.substr(start, end - start);
        if (("," + transports + ",").find("," + tl + ",") == std::string::npos)
          transports += (transports.empty() ? "" : ",") + tl;
        start = end + 1;
      }
    }
    if (local.empty()) return Status::ok();
    // "ucx(all; node: sysv,cma shared memory)": UCX_TLS (or "all"), then what UCX chose for
    // this node's ranks.
    describe_.pop_back();
    describe_ += "; node: " + transports + (shm ? " shared memory)" : ")");
    std::string ranks;
    for (int p : local) ranks += (ranks.empty() ? "" : ",") + std::to_string(p);
    TERSE_INFO(kSubsysNet,
               "rank %d: same-node ranks %s over %s (%s); a dead one is noticed by watching its "
               "process, one that aborts or leaves says so before it goes",
               rank_, ranks.c_str(), transports.c_str(),
               shm ? "shared memory" : "not all of them over shared memory: UCX's choice");
    return Status::ok();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return describe_; }

  Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
               TransportRequest** request) override {
    TERSE_RETURN_IF_ERROR(
        checkTransferArgs("isend", rank_, size_, peer, tag, data, bytes, request));
    TERSE_RETURN_IF_ERROR(checkUsable(peer, "send to", tag));
    ucp_ep_h ep = nullptr;
    TERSE_RETURN_IF_ERROR(endpoint(peer, &ep));
    TransportRequest* r = newRequest(RequestKind::kSend, peer, tag, const_cast<void*>(data), bytes);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &UcxTransport::onSend;
    param.user_data = r;
    ucs_status_ptr_t sp = ucp_tag_send_nbx(ep, data, bytes, wireTag(rank_, tag), &param);
    return started(r, sp, bytes, request);
  }

  Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
               TransportRequest** request) override {
    TERSE_RETURN_IF_ERROR(
        checkTransferArgs("irecv", rank_, size_, peer, tag, data, capacity, request));
    Status usable = checkUsable(peer, "receive from", tag);
    if (!usable.isOk()) {
      // A peer that finished and left (the end of every job) or died may have sent this message
      // before it went: then it waits in UCX's unexpected queue and is still delivered.
      if (ucx_.worker == nullptr || aborted_.load(std::memory_order_acquire) ||
          !alreadyArrived(peer, tag))
        return usable;
    } else {
      // An endpoint to the sender is what lets UCX tell us when it dies while we wait.
      ucp_ep_h ep = nullptr;
      TERSE_RETURN_IF_ERROR(endpoint(peer, &ep));
    }
    TransportRequest* r = newRequest(RequestKind::kRecv, peer, tag, data, capacity);
    ucp_request_param_t param{};
    // Always a request: the received length reaches us through the callback alone (UCX 1.13
    // reports 0 through recv_info for messages that complete later).
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = &UcxTransport::onRecv;
    param.user_data = r;
    ucs_status_ptr_t sp =
        ucp_tag_recv_nbx(ucx_.worker, data, capacity, wireTag(peer, tag), kFullMask, &param);
    return started(r, sp, 0, request);
  }

  Status test(TransportRequest* r, bool* done, size_t* bytes) override {
    if (r == nullptr || done == nullptr) return errorInvalidArgument("test: null argument");
    if (r->state.load(std::memory_order_relaxed) == kReqFree)
      return errorInvalidUsage("test: the request was already released");
    if (r->state.load(std::memory_order_relaxed) == kReqPending) progress();
    if (aborted_.load(std::memory_order_acquire)) {
      // The abort may have landed after progress() above: drop the connections now, or peers
      // would wait for their timeout if this thread stops driving us after this call.
      if (!abortHandled_) handleAbort();
      Status why = abortStatus();
      cancel(r);
      return why;
    }
    if (r->state.load(std::memory_order_acquire) == kReqPending) {
      if (!peerFailed_[r->peer].isOk()) {
        // The peer is gone but UCX has not completed this request (a rendezvous send to a peer
        // without failure reporting stays pending forever): fail it ourselves.
        Status why = errorRemote("%s rank %d (tag %llu) failed: %s", requestVerb(r), r->peer,
                                 static_cast<unsigned long long>(r->tag),
                                 peerFailed_[r->peer].message().c_str());
        cancel(r);
        return why;
      }
      *done = false;
      return Status::ok();
    }
    Status result = outcome(r);
    if (result.isOk()) {
      *done = true;
      if (bytes) *bytes = r->bytes;
    }
    releaseRequest(r);
    return result;
  }

  Status wait(TransportRequest* r, size_t* bytes, std::chrono::milliseconds timeout) override {
    if (r == nullptr) return errorInvalidArgument("wait: null request");
    // Oversubscribed hosts (more ranks than cores) need the spinning ranks to step aside
    // (choosePollsPerYield).
    return pollUntilDone(*this, r, bytes, timeout, pollsPerYield_, [] { sched_yield(); });
  }

  void cancel(TransportRequest* r) override {
    if (r == nullptr || r->state.load(std::memory_order_relaxed) == kReqFree || r->orphan) return;
    // After an abort the connections go first (whatever this thread calls last, peers learn).
    if (aborted_.load(std::memory_order_acquire) && !abortHandled_) handleAbort();
    if (r->state.load(std::memory_order_acquire) == kReqPending && r->backend && ucx_.worker) {
      ucp_request_cancel(ucx_.worker, r->backend);
      if (!progressUntilDone(r, std::chrono::milliseconds(50)) && !peerFailed_[r->peer].isOk()) {
        // Its peer is gone, so nothing will touch the buffer any more; UCX keeps the request
        // until the worker goes.
        r->orphan = true;
        return;
      }
      if (r->state.load(std::memory_order_acquire) == kReqPending) {
        // UCX cannot cancel a transfer already on the wire. Its buffer must not be touched after
        // we return, so the connection to that peer goes: closing it completes the request.
        failPeer(r->peer,
                 errorRemote("the connection to rank %d was closed because a %s it was "
                             "cancelled mid-transfer (after an error or timeout)",
                             r->peer, r->kind == RequestKind::kSend ? "send to" : "receive from"));
        if (!progressUntilDone(r, std::chrono::milliseconds(1000))) {
          TERSE_WARN(kSubsysNet, "rank %d: a cancelled %s rank %d is still in UCX's hands", rank_,
                     requestVerb(r), r->peer);
          r->orphan = true;
          return;
        }
      }
    }
    releaseRequest(r);
  }

  void progress() override {
    if (ucx_.worker == nullptr) return;  // aborted
    ucp_worker_progress(ucx_.worker);
    if (!failedQueue_.empty()) closeFailedPeers();
    if (watchingPids_) {
      // Both checks at a low rate: progress() runs once per test() of every small message, and
      // a probe per same-node peer on each call cost 10% of the small-message rate (terse-bench
      // p2p -b 64 over shared memory). A notice is seen within a millisecond.
      const auto now = std::chrono::steady_clock::now();
      if (now >= nextNoticeCheck_) {
        nextNoticeCheck_ = now + std::chrono::milliseconds(1);
        checkLeavingNotices();
      }
      checkPeerProcesses(now);
    }
    if (aborted_.load(std::memory_order_relaxed) && !abortHandled_) handleAbort();
  }

  void abort(const Status& why) override {
    std::lock_guard<std::mutex> lock(abortMu_);
    if (aborted_.load()) return;
    abortWhy_ = why.isOk() ? errorRemote("rank %d aborted", rank_) : why;
    aborted_.store(true, std::memory_order_release);
  }

  // A peer's host and pid are fixed once the transport exists, so any thread may ask.
  bool peerProcessGone(int peer) const override {
    if (peer < 0 || peer >= static_cast<int>(peers_.size()) || peer == rank_) return false;
    const PeerInfo& info = peers_[peer];
    return info.sameHost && info.pid > 0 && info.pid != getpid() && !processAlive(info.pid);
  }

  void disconnect(int peer, const Status& why) override {
    if (peer < 0 || peer >= size_ || peer == rank_ || ucx_.worker == nullptr) return;
    Status reason =
        why.isOk() ? errorRemote("rank %d disconnected from rank %d", rank_, peer) : why;
    for (const auto& req : pool_.all())
      if (req->state.load(std::memory_order_relaxed) == kReqPending && req->peer == peer &&
          req->kind == RequestKind::kSend) {
        // A send in flight can only be taken back by closing its endpoint.
        failPeer(peer, std::move(reason));
        return;
      }
    // Otherwise the endpoint stays open until shutdown (which force-closes it). Closing it now
    // makes the peer's UCX reconnect and queue wire-up replies here, which UCX 1.13 asserts on
    // when this worker is destroyed (see drainWorker); the fault tests hit that in about one
    // teardown in ten.
    if (!peerFailed_[peer].isOk()) return;
    peerFailed_[peer] = std::move(reason);
    droppedOnly_[peer] = true;
    cancelReceivesFrom(peer);
  }

  // On the driving thread, after abort(): drop every connection so the peers' pending operations
  // fail promptly (they see their endpoint to us break), and cancel our own.
  void handleAbort() {
    abortHandled_ = true;
    Status why = abortStatus();
    TERSE_INFO(kSubsysNet, "rank %d: aborting: %s", rank_, why.message().c_str());
    sendLeavingNotices();
    for (int p = 0; p < size_; ++p)
      if (peerFailed_[p].isOk()) failPeer(p, why);
    drainWorker();
    // Destroying the worker also drops the connections UCX opened on our side for the peers'
    // endpoints, which is what makes their pending operations with us fail.
    for (const auto& req : pool_.all()) {
      TransportRequest* r = req.get();
      const int state = r->state.load(std::memory_order_relaxed);
      if (state == kReqDone && r->backend) {
        // Finished but not yet collected by test(): hand UCX's request back while it exists.
        ucp_request_free(r->backend);
        r->backend = nullptr;
      }
      if (state != kReqPending) continue;
      r->backend = nullptr;  // freed with the worker
      r->ucsStatus = UCS_ERR_CANCELED;
      if (r->orphan)
        pool_.release(r);
      else
        r->state.store(kReqDone, std::memory_order_release);
    }
    discardNotices();
    ucp_worker_destroy(ucx_.worker);
    ucx_.worker = nullptr;
  }

  // Peers whose endpoints cannot report failure (watchPid) do not see our connections drop when
  // we abort or close: an endpoint over shared memory is a local affair (a FIFO in the peer's
  // segment). So we tell them: an empty message on the failure-notice tag, after any notice
  // giveUpOnWorld sent with the reason (give_up.h), which it thus cannot overtake. A peer's
  // process watch would notice only when we exit, which an aborted rank may not do for long.
  void sendLeavingNotices() {
    static const char kNothing = 0;
    std::vector<ucs_status_ptr_t> sending;
    for (int p = 0; p < size_; ++p) {
      if (!peers_[p].watchPid || !peerFailed_[p].isOk() || eps_[p] == nullptr) continue;
      ucp_request_param_t param{};
      ucs_status_ptr_t sp =
          ucp_tag_send_nbx(eps_[p], &kNothing, 0, wireTag(rank_, kFailureNoticeTag), &param);
      if (UCS_PTR_IS_PTR(sp)) sending.push_back(sp);
    }
    // A 0-byte message over shared memory is normally written into the peer's FIFO at once; a
    // full FIFO gets a moment (the peer may be gone, so not more).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    for (ucs_status_ptr_t sp : sending) {
      if (!ucxWaitRequest(ucx_.worker, sp, deadline)) ucp_request_cancel(ucx_.worker, sp);
      ucp_request_free(sp);
    }
  }

  // Just before the worker goes: receives the notices nobody asked for (peers that left with us
  // at the end of a job), which UCX would otherwise report one by one as unmatched at
  // ucp_worker_destroy.
  void discardNotices() {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      ucp_tag_recv_info_t info{};
      for (int n = 0; n < 16; ++n) {
        ucp_tag_message_h m =
            ucp_tag_probe_nb(ucx_.worker, wireTag(p, kFailureNoticeTag), kFullMask, 1, &info);
        if (m == nullptr) break;
        // Into a member: should UCX still hold the request when we give up on it below, the
        // buffer outlives the worker. A longer message is truncated, which is fine here.
        ucp_request_param_t param{};
        ucs_status_ptr_t sp =
            ucp_tag_msg_recv_nbx(ucx_.worker, noticeSink_, sizeof noticeSink_, m, &param);
        if (!UCS_PTR_IS_PTR(sp)) continue;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
        if (!ucxWaitRequest(ucx_.worker, sp, deadline)) {
          ucp_request_cancel(ucx_.worker, sp);
          ucp_request_free(sp);
          return;  // the buffer is taken while UCX holds the request; leave the rest
        }
        ucp_request_free(sp);
      }
    }
  }

  // The receiving side of sendLeavingNotices(): a notice (empty, or giveUpOnWorld's with the
  // reason) waiting in UCX's unexpected queue fails its sender. It stays queued, so that
  // giveUpOnWorld can still read the reason and a receive posted now still gets it. Everything
  // the peer sent before it was read first: one peer's messages arrive in order.
  void checkLeavingNotices() {
    for (int p = 0; p < size_; ++p) {
      if (!peers_[p].watchPid || !peerFailed_[p].isOk() || !alreadyArrived(p, kFailureNoticeTag))
        continue;
      failPeer(p, errorRemote("rank %d aborted or closed its transport (it said so before it "
                              "went; its log says why)",
                              p));
      TERSE_INFO(kSubsysNet, "rank %d: %s", rank_, peerFailed_[p].message().c_str());
    }
  }

  // For peers whose endpoints cannot report failure: a peer process that has exited (or is a
  // zombie) is failed, at most every 100 ms.
  void checkPeerProcesses(std::chrono::steady_clock::time_point now) {
    if (now < nextPidCheck_) return;
    nextPidCheck_ = now + std::chrono::milliseconds(100);
    bool drained = false;
    for (int p = 0; p < size_; ++p) {
      if (!peers_[p].watchPid || !peerFailed_[p].isOk() || processAlive(peers_[p].pid)) continue;
      // Whatever the peer wrote into our shared-memory FIFO before it went is still to be read:
      // read it all (the peer can add nothing more) before failing what is left pending.
      if (!drained) drainWorker();
      drained = true;
      failPeer(p,
               errorRemote("rank %d (pid %d on this host) is no longer running", p, peers_[p].pid));
      TERSE_INFO(kSubsysNet, "rank %d: %s", rank_, peerFailed_[p].message().c_str());
    }
  }

  static bool processAlive(int pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) return kill(pid, 0) == 0 || errno == EPERM;
    char buf[256] = {};
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    // "pid (comm) S ...": the state follows the last ')'.
    const char* close = std::strrchr(buf, ')');
    if (n == 0 || close == nullptr || close[1] == '\0') return true;
    char state = close[2];
    return state != 'Z' && state != 'X';
  }

  // Called by UCX from inside ucp_worker_progress.
  void notePeerFailure(int peer, ucs_status_t status) {
    droppedOnly_[peer] = false;  // whatever disconnect() assumed, the connection is broken now
    if (!peerFailed_[peer].isOk()) return;
    peerFailed_[peer] = errorRemote(
        "the connection to rank %d broke (UCX: %s); rank %d probably died, aborted, or gave up "
        "after a failure of its own (its log says which), or closed its transport",
        peer, ucs_status_string(status), peer);
    // INFO, not WARN: a peer that finished and closed its transport looks the same at the end of
    // a job; operations that involve a failed peer report it through their Status.
    TERSE_INFO(kSubsysNet, "rank %d: %s", rank_, peerFailed_[peer].message().c_str());
    failedQueue_.push_back(peer);
  }

 private:
  static void onSend(void* ucxRequest, ucs_status_t status, void* user) {
    auto* r = static_cast<TransportRequest*>(user);
    r->ucsStatus = status;
    if (status == UCS_OK) r->bytes = r->size;
    static_cast<UcxTransport*>(r->ctx)->completed(r);
  }

  static void onRecv(void* ucxRequest, ucs_status_t status, const ucp_tag_recv_info_t* info,
                     void* user) {
    auto* r = static_cast<TransportRequest*>(user);
    r->ucsStatus = status;
    if (status == UCS_OK) r->bytes = info->length;
    static_cast<UcxTransport*>(r->ctx)->completed(r);
  }

  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* a = static_cast<PeerErrorArg*>(arg);
    a->self->notePeerFailure(a->peer, status);
  }

  void completed(TransportRequest* r) {
    if (r->orphan) {
      releaseRequest(r);
      return;
    }
    r->state.store(kReqDone, std::memory_order_release);
  }

  Status abortStatus() {
    std::lock_guard<std::mutex> lock(abortMu_);
    return abortWhy_;
  }

  // True when a message from `peer` with `tag` has arrived and waits for its receive.
  bool alreadyArrived(int peer, uint64_t tag) {
    ucp_tag_recv_info_t info{};
    return ucp_tag_probe_nb(ucx_.worker, wireTag(peer, tag), kFullMask, 0, &info) != nullptr;
  }

  Status checkUsable(int peer, const char* verb, uint64_t tag) {
    if (aborted_.load(std::memory_order_acquire)) {
      if (!abortHandled_) handleAbort();
      return abortStatus();
    }
    if (!peerFailed_[peer].isOk())
      return errorRemote("%s rank %d (tag %llu) failed: %s", verb, peer,
                         static_cast<unsigned long long>(tag), peerFailed_[peer].message().c_str());
    return Status::ok();
  }

  Status endpoint(int peer, ucp_ep_h* ep) {
    if (eps_[peer] == nullptr) {
      // Same-node peers go without peer-failure reporting so that UCX may use shared memory
      // (ucx.h).
      const bool sameNode = peers_[peer].sameNode;
      bool peerMode = !peerModeUnreachable_ && !sameNode;
      const bool askedPeerMode = peerMode;
      ucs_status_t s =
          ucxCreateEndpoint(ucx_.worker, peers_[peer].address, &peerMode,
                            &UcxTransport::onEndpointError, &errArgs_[peer], &eps_[peer]);
      // UCX refused PEER mode (shared memory only, UCX 1.13): the same transports serve every
      // peer, so UCX is asked only once.
      if (askedPeerMode && !peerMode) peerModeUnreachable_ = true;
      if (s == UCS_OK && !peerMode) {
        if (!sameNode)
          TERSE_INFO(kSubsysNet,
                     "rank %d: the transports to rank %d (%s) cannot report peer failure; a dead "
                     "process on this host is noticed by polling it, others by the timeout",
                     rank_, peer, describe_.c_str());
        if (peers_[peer].sameHost && peers_[peer].pid != getpid()) {
          peers_[peer].watchPid = true;
          watchingPids_ = true;
        }
      }
      if (s != UCS_OK)
        return errorRemote(
            "cannot create a UCX endpoint to rank %d (%s); check that UCX_TLS and "
            "UCX_NET_DEVICES allow a path between the two ranks",
            peer, ucs_status_string(s));
      peers_[peer].transports = ucxEndpointTransports(eps_[peer]);
      TERSE_TRACE(kSubsysNet, "rank %d: endpoint to rank %d created over %s (%s)", rank_, peer,
                  peers_[peer].transports.c_str(),
                  peerMode ? "UCX reports its failure" : "terse watches it");
    }
    *ep = eps_[peer];
    return Status::ok();
  }

  TransportRequest* newRequest(RequestKind kind, int peer, uint64_t tag, void* data, size_t size) {
    TransportRequest* r = pool_.acquire();
    r->kind = kind;
    r->owner = rank_;
    r->peer = peer;
    r->tag = tag;
    r->data = data;
    r->size = size;
    r->ctx = this;
    return r;
  }

  Status started(TransportRequest* r, ucs_status_ptr_t sp, size_t immediateBytes,
                 TransportRequest** request) {
    if (sp == nullptr) {  // completed in place
      r->ucsStatus = UCS_OK;
      r->bytes = immediateBytes;
      r->state.store(kReqDone, std::memory_order_relaxed);
    } else if (UCS_PTR_IS_ERR(sp)) {
      r->ucsStatus = UCS_PTR_STATUS(sp);
      Status why = outcome(r);
      releaseRequest(r);
      return why;
    } else {
      r->backend = sp;
    }
    *request = r;
    return Status::ok();
  }

  // The Status a finished request reports.
  Status outcome(const TransportRequest* r) const {
    auto s = static_cast<ucs_status_t>(r->ucsStatus);
    if (s == UCS_OK) return Status::ok();
    const auto tag = static_cast<unsigned long long>(r->tag);
    if (s == UCS_ERR_MESSAGE_TRUNCATED)
      return errorInvalidUsage(
          "receive from rank %d (tag %llu): the message is larger than the %zu-byte buffer; post "
          "a larger receive",
          r->peer, tag, r->size);
    if (!peerFailed_[r->peer].isOk())
      return errorRemote("%s rank %d (tag %llu) failed: %s", requestVerb(r), r->peer, tag,
                         peerFailed_[r->peer].message().c_str());
    if (ucxIsPeerFailure(s))
      return errorRemote("%s rank %d (tag %llu) failed: UCX reported %s; rank %d probably died",
                         requestVerb(r), r->peer, tag, ucs_status_string(s), r->peer);
    if (s == UCS_ERR_CANCELED)
      return errorInvalidUsage("%s rank %d (tag %llu) was cancelled", requestVerb(r), r->peer, tag);
    // Transports without failure reporting fail in their own words when the peer has gone
    // (shared memory: UCS_ERR_SHMEM_SEGMENT once the peer's segment is gone with its process).
    // A peer process on this host that no longer runs makes it the peer's failure, as the
    // contract says, rather than a local system error.
    const PeerInfo& info = peers_[r->peer];
    if (info.sameHost && info.pid != getpid() && !processAlive(info.pid))
      return errorRemote(
          "%s rank %d (tag %llu) failed: UCX reported %s; rank %d (pid %d on this host) is no "
          "longer running",
          requestVerb(r), r->peer, tag, ucs_status_string(s), r->peer, info.pid);
    return errorSystem("%s rank %d (tag %llu) failed in UCX: %s", requestVerb(r), r->peer, tag,
                       ucs_status_string(s));
  }

  void releaseRequest(TransportRequest* r) {
    if (r->backend) ucp_request_free(r->backend);
    pool_.release(r);
  }

  // Progresses until the worker has been quiet for a moment (bounded), just before it is
  // destroyed. UCX 1.13 (with assertions, as Debian builds it) aborts the process when
  // ucp_worker_destroy purges an endpoint that still has a wire-up reply queued (the assertion
  // was removed upstream, openucx/ucx#8175). Such replies get queued when peers (re)connect to
  // us just as we tear down, which is what happens right after a peer failed, a connection was
  // dropped or a call was abandoned; letting the worker run until it is quiet sends them first.
  // After a failure the quiet period is longer: the fault tests measured 1 crash in 25 runs of
  // twelve worlds with 20 ms and none with 100 ms (FaultRecovery.TeardownRightAfterADropped...).
  void drainWorker() {
    const auto quiet = std::chrono::milliseconds(troubled() ? 100 : 20);
    const auto start = std::chrono::steady_clock::now();
    const auto limit = std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(2));
    auto lastActivity = start;
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      if (ucp_worker_progress(ucx_.worker) > 0) lastActivity = now;
      if (now - lastActivity >= quiet || now - start >= limit) break;
    }
  }

  // A peer failed, was dropped, or this rank aborted.
  bool troubled() const {
    bool any = aborted_.load(std::memory_order_relaxed);
    for (const Status& f : peerFailed_) any |= !f.isOk();
    return any;
  }

  bool progressUntilDone(TransportRequest* r, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (r->state.load(std::memory_order_acquire) == kReqPending) {
      ucp_worker_progress(ucx_.worker);
      if (std::chrono::steady_clock::now() >= deadline) return false;
    }
    return true;
  }

  // Marks `peer` failed (if not already) and force-closes its endpoint, which completes every
  // outstanding operation on it with UCS_ERR_CANCELED.
  void failPeer(int peer, Status why) {
    if (peerFailed_[peer].isOk()) {
      peerFailed_[peer] = std::move(why);
      failedQueue_.push_back(peer);
    }
    closeFailedPeers();
  }

  // Runs outside UCX callbacks: closes failed peers' endpoints and cancels the receives posted
  // for them (a receive is not tied to an endpoint, so UCX would leave it waiting forever).
  void closeFailedPeers() {
    while (!failedQueue_.empty()) {
      int peer = failedQueue_.back();
      failedQueue_.pop_back();
      if (eps_[peer]) {
        ucs_status_ptr_t sp = ucxCloseEndpoint(eps_[peer], /*force=*/true);
        eps_[peer] = nullptr;
        if (sp != nullptr) ucp_request_free(sp);
      }
      cancelReceivesFrom(peer);
    }
  }

  // A receive is not tied to an endpoint, so UCX would leave one for a failed peer waiting.
  void cancelReceivesFrom(int peer) {
    for (const auto& req : pool_.all()) {
      TransportRequest* r = req.get();
      if (r->state.load(std::memory_order_relaxed) == kReqPending && r->peer == peer &&
          r->kind == RequestKind::kRecv && r->backend)
        ucp_request_cancel(ucx_.worker, r->backend);
    }
  }

  void shutdown() {
    if (ucx_.worker) {
      sendLeavingNotices();
      const bool force = aborted_.load();
      std::vector<ucs_status_ptr_t> closing;
      for (int p = 0; p < size_; ++p) {
        if (!eps_[p]) continue;
        ucs_status_ptr_t sp =
            ucxCloseEndpoint(eps_[p], force || (!peerFailed_[p].isOk() && !droppedOnly_[p]));
        eps_[p] = nullptr;
        if (sp != nullptr) closing.push_back(sp);
      }
      // A graceful close flushes; bound it so a vanished peer cannot hold us here.
      auto limit = std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(10));
      auto deadline = std::chrono::steady_clock::now() + limit;
      for (ucs_status_ptr_t sp : closing) {
        ucxWaitRequest(ucx_.worker, sp, deadline);
        ucp_request_free(sp);
      }
      for (const auto& req : pool_.all())
        if (req->state.load() == kReqPending && req->backend) {
          ucp_request_cancel(ucx_.worker, req->backend);
          req->orphan = true;
        }
      drainWorker();
      discardNotices();
      if (troubled() && ucxPurgeAssertsOnWireup()) {
        // UCX before 1.14 may abort the process in ucp_worker_destroy after a failure
        // (openucx/ucx#8175): peers that connect to a rank while it tears down after a failure
        // queue exactly the wire-up replies it asserts on, and drainWorker makes that rare but
        // not impossible when the peers are slow to accept (the fault tests still saw it in about
        // 1 of 150 worlds on a loaded machine). So the worker and its context are kept for the
        // life of the process, never progressed again: one idle worker (memory, a listening
        // socket, connections its peers opened) per failed world, only when something failed.
        TERSE_INFO(kSubsysNet,
                   "rank %d: UCX %s: the worker of a failed world is parked, not destroyed "
                   "(openucx/ucx#8175)",
                   rank_, ucp_get_version_string());
        ucxParkWorker(&ucx_);
        return;
      }
    }
    // The worker (unless handleAbort destroyed it already) and the context.
    ucxCloseWorker(&ucx_);
  }

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const std::vector<int> nodeOfRank_;  // empty: unknown, every peer is treated as remote
  std::string tls_;                    // UCX_TLS, or "all"
  UcxWorker ucx_;  // context and worker; the worker is null after handleAbort destroyed it
  struct PeerInfo {
    std::string address;  // the UCX worker address
    int pid = 0;
    bool sameHost = false;   // same host identity (hostIdentity()): its pid names a process here
    bool sameNode = false;   // same node in the topology and sameHost: see ucx.h
    bool watchPid = false;   // its endpoint cannot report failure; we poll its process instead
    std::string transports;  // what UCX chose for the endpoint ("sysv,cma"), once it exists
  };
  std::vector<PeerInfo> peers_;
  bool watchingPids_ = false;
  unsigned pollsPerYield_ = 256;  // choosePollsPerYield
  bool peerModeUnreachable_ = false;
  std::chrono::steady_clock::time_point nextPidCheck_{};
  std::chrono::steady_clock::time_point nextNoticeCheck_{};
  std::vector<ucp_ep_h> eps_;
  std::vector<Status> peerFailed_;  // ok while the peer is healthy
  // Failed by disconnect() alone: the peer itself may be fine, so shutdown closes gracefully.
  std::vector<bool> droppedOnly_;
  std::vector<PeerErrorArg> errArgs_;
  std::vector<int> failedQueue_;  // failed peers whose endpoints still need closing
  std::atomic<bool> aborted_{false};
  bool abortHandled_ = false;  // driving thread only
  std::mutex abortMu_;
  Status abortWhy_;
  RequestPool pool_;
  std::string describe_;
  char noticeSink_[512];   // discardNotices() receives notices nobody asked for into it
  bool eagerTcp_ = false;  // UCX_TLS=tcp: rendezvous threshold raised (see the constructor)
};

}  // namespace

Result<std::unique_ptr<Transport>> createUcxTransport(int rank, int size,
                                                      const AddressAllGather& allgather,
                                                      std::chrono::milliseconds timeout,
                                                      std::vector<int> nodeOfRank,
                                                      const TransportSettings& settings) {
  if (size < 1 || size > kMaxRanks)
    return errorInvalidArgument("world size %d is outside [1, 2^24]", size);
  if (rank < 0 || rank >= size)
    return errorInvalidArgument("rank %d is outside the world of %d ranks", rank, size);
  if (!allgather) return errorInvalidArgument("createUcxTransport: no address exchange given");
  if (!nodeOfRank.empty() && static_cast<int>(nodeOfRank.size()) != size)
    return errorInvalidArgument("createUcxTransport: %zu node numbers for a world of %d ranks",
                                nodeOfRank.size(), size);
  auto t = std::make_unique<UcxTransport>(rank, size, timeout, std::move(nodeOfRank),
                                          settings.ucxTcpEager);
  TERSE_RETURN_IF_ERROR(
      t->init(allgather).withContext("creating the UCX transport of rank " + std::to_string(rank)));
  return injectFaults(std::move(t), settings.faults);
}

}  // namespace terse
