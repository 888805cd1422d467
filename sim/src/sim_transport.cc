// The SimGrid transport (sim_transport.h): user-space tag matching, SimGrid for the time.
#include "terse/sim/sim_transport.h"

#include "request.h"  // transport/src: the one definition of TransportRequest

#include <simgrid/Exception.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/ConditionVariable.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Mailbox.hpp>
#include <simgrid/s4u/Mutex.hpp>
#include <simgrid/s4u/Semaphore.hpp>
#include <simgrid/s4u/Actor.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

namespace terse::sim {

namespace {

// The simulated transfer of one matched message, shared by its two requests: both complete when
// it does. `started` turns true once the put that carries it has returned: issuing it takes
// simcalls, during which other actors run and may already look at the requests.
struct Issuer;
struct Transfer : std::enable_shared_from_this<Transfer> {
  int from = 0, to = 0;
  size_t bytes = 0;
  std::shared_ptr<Issuer> by;  // the actor that issues its put (SimWorld::issue)
  bool endCounted = false;     // by->ended counts it
  simgrid::s4u::CommPtr comm;
  int slot = -1;  // the receiver's mailbox it is put into (SimWorld::issue)
  // The get that took it out of that mailbox (SimWorld::drain). It lives as long as
  // the transfer: the communication keeps a pointer into it and writes there whenever it is
  // finished again (each wait on it).
  simgrid::s4u::CommPtr got;
  bool started = false;
  bool done = false;  // a wait or test saw it finish
  double doneAt = 0;  // simulated time it was seen finished
  double gotAt = -1;  // simulated time of the get (drain); -1 before it
};

// One generation of a host's put issuer, an actor on that host that issues the puts of the
// transfers sent from it (SimWorld::issue says why).
struct Issuer {
  std::deque<std::shared_ptr<Transfer>> todo;
  simgrid::s4u::SemaphorePtr work = simgrid::s4u::Semaphore::create(0);  // a token per item
  size_t issued = 0, ended = 0;
  std::deque<std::shared_ptr<Transfer>> toDrain;  // ended transfers into its host (drain)
  size_t drained = 0;
  bool retired = false;  // a successor takes the new work; this one ends with its last put
  bool over() const { return retired && todo.empty() && toDrain.empty() && ended == issued; }
};

// The simulation side of a request. transfer is null for a message completed at the match (to
// oneself, or truncated).
struct SimOp {
  std::shared_ptr<Transfer> transfer;
  bool matched = false;
};

uint64_t queueKey(int src, uint64_t tag) { return (static_cast<uint64_t>(src) << 40) | tag; }

// The unmatched requests of one (src, tag), oldest first. Nearly every key holds one request
// (the engine's tags carry the call and the step), so a vector: a std::deque allocates about
// 600 bytes for its first element, and a ring posts n - 1 receives ahead per rank (flat `none`
// at 512 ranks: 770 -> 650 MB from this alone; the rest of the saving is keep()'s).
using RequestFifo = std::vector<TransportRequest*>;
using RequestQueues = std::unordered_map<uint64_t, RequestFifo>;

// Per receiving rank: unmatched sends to it and its unmatched receives, FIFO per (src, tag).
struct Inbox {
  RequestQueues sends;
  RequestQueues recvs;
  simgrid::s4u::MutexPtr mutex;
  simgrid::s4u::ConditionVariablePtr changed;  // a request of this rank matched or failed
};

bool removeFrom(RequestQueues& queues, uint64_t key, TransportRequest* r) {
  auto it = queues.find(key);
  if (it == queues.end()) return false;
  for (auto q = it->second.begin(); q != it->second.end(); ++q)
    if (*q == r) {
      it->second.erase(q);
      if (it->second.empty()) queues.erase(it);
      return true;
    }
  return false;
}

}  // namespace

class SimWorld {
 public:
  SimWorld(std::vector<simgrid::s4u::Host*> hosts, SimTransportOptions options)
      : hosts_(std::move(hosts)),
        options_(options),
        inbox_(hosts_.size()),
        gone_(hosts_.size()),
        traffic_(hosts_.size()),
        node_(hosts_.size()),
        anchor_(hosts_.size()),
        slots_(hosts_.size()),
        freeSlots_(hosts_.size()),
        issuer_(hosts_.size()) {
    for (size_t i = 0; i < node_.size(); ++i) node_[i] = static_cast<int>(i);
  }

  int size() const { return static_cast<int>(hosts_.size()); }
  const SimTransportOptions& options() const { return options_; }

  // Each rank's inbox synchronisation objects, its mailboxes' receiver and its host's put
  // issuer are made by the rank's own actor (they need the engine).
  void attach(int rank) {
    Inbox& in = inbox_[rank];
    if (!in.mutex) in.mutex = simgrid::s4u::Mutex::create();
    if (!in.changed) in.changed = simgrid::s4u::ConditionVariable::create();
    if (!anchor_[rank]) {
      // The permanent receiver is an actor that stays on the rank's host and does nothing (a
      // suspended receiver would suspend every transfer to it): it blocks for good on a
      // semaphore, a daemon, so the simulation ends with the ranks.
      if (!never_) never_ = simgrid::s4u::Semaphore::create(0);
      auto never = never_;
      simgrid::s4u::ActorPtr anchor = simgrid::s4u::Actor::create(
          "rank" + std::to_string(rank) + "-inbox", hosts_[rank], [never] { never->acquire(); });
      anchor->daemonize();
      anchor_[rank] = anchor;
      startIssuer(rank);
    }
  }
  void wake(int rank) {
    if (inbox_[rank].changed) inbox_[rank].changed->notify_all();
  }

  // Why operations between a and b cannot run (ok when they can).
  Status blocked(const TransportRequest* r) const {
    if (!gone_[r->owner].isOk()) return gone_[r->owner];
    if (!gone_[r->peer].isOk())
      return errorRemote("%s rank %d (tag %llu) failed: rank %d is gone (%s)", requestVerb(r),
                         r->peer, static_cast<unsigned long long>(r->tag), r->peer,
                         gone_[r->peer].message().c_str());
    auto it = broken_.find(linkKey(r->owner, r->peer));
    if (it == broken_.end()) return Status::ok();
    if (it->second.by == r->owner)
      return errorRemote("%s rank %d (tag %llu) failed: %s", requestVerb(r), r->peer,
                         static_cast<unsigned long long>(r->tag), it->second.why.message().c_str());
    return errorRemote(
        "%s rank %d (tag %llu) failed: rank %d closed its connection to rank %d (%s)",
        requestVerb(r), r->peer, static_cast<unsigned long long>(r->tag), it->second.by, r->owner,
        it->second.why.message().c_str());
  }

  // Posts a send or receive; matches it against the other side's queue.
  void post(TransportRequest* r) {
    const bool send = r->kind == RequestKind::kSend;
    const int dst = send ? r->peer : r->owner;
    const int src = send ? r->owner : r->peer;
    Inbox& in = inbox_[dst];
    const uint64_t key = queueKey(src, r->tag);
    auto& others = send ? in.recvs : in.sends;
    auto it = others.find(key);
    if (it == others.end() || it->second.empty()) {
      (send ? in.sends : in.recvs)[key].push_back(r);
      return;
    }
    TransportRequest* other = it->second.front();
    it->second.erase(it->second.begin());
    if (it->second.empty()) others.erase(it);
    match(send ? r : other, send ? other : r);
  }

  // Takes `r` out of its queue if it is still unmatched; true if it was.
  bool unqueue(TransportRequest* r) {
    const bool send = r->kind == RequestKind::kSend;
    const int dst = send ? r->peer : r->owner;
    const int src = send ? r->owner : r->peer;
    Inbox& in = inbox_[dst];
    return removeFrom(send ? in.sends : in.recvs, queueKey(src, r->tag), r);
  }

  // A rank gave up: it and every unmatched request that involves it fail.
  void markGone(int rank, const Status& why) {
    if (!gone_[rank].isOk()) return;
    gone_[rank] = why;
    failUnmatched([&](const TransportRequest* r) { return r->owner == rank || r->peer == rank; });
  }
  void breakLink(int by, int peer, const Status& why) {
    if (broken_.count(linkKey(by, peer))) return;
    broken_[linkKey(by, peer)] = Broken{by, why};
    failUnmatched([&](const TransportRequest* r) {
      return (r->owner == by && r->peer == peer) || (r->owner == peer && r->peer == by);
    });
  }

  std::vector<SimTraffic>& traffic() { return traffic_; }
  // SimGrid 3.32 must not lose the last reference to a communication while its kernel may
  // still call back into it (it crashed in EngineImpl::handle_ended_actions when the requests
  // dropped theirs as soon as they saw it finish). So the world lets go of a transfer's
  // communications only here, inside an actor: once it was seen finished and taken out of
  // its mailbox, and the clock has moved past both moments. Its requests may still hold the
  // rest of it (a ring's sends are waited on only at the end of a phase, n^2 of them in a
  // world of n), but once done a request never looks at the communications again (finished,
  // awaitEnd), so what they hold is a few words, not SimGrid's objects (about 600 bytes a
  // message, which made a ring's memory grow as n^2: 11.3 GB at 2048 ranks). One given up
  // half-way stays until the simulation ends.
  void keep(std::shared_ptr<Transfer> t) {
    if (kept_.size() >= nextSweep_) {
      const double now = simgrid::s4u::Engine::get_clock();
      auto over = [now](const std::shared_ptr<Transfer>& k) {
        if (!k->done || k->doneAt >= now || k->gotAt < 0 || k->gotAt >= now) return false;
        k->comm = nullptr;
        k->got = nullptr;
        return true;
      };
      kept_.erase(std::remove_if(kept_.begin(), kept_.end(), over), kept_.end());
      // Next sweep once as many again were added: a sweep walks every kept transfer, and
      // thousands are in flight at once in a large world, so sweeping every few dozen
      // additions cost a walk of them all per few dozen messages.
      nextSweep_ = std::max<size_t>(2 * kept_.size(), 256);
    }
    kept_.push_back(std::move(t));
  }

  // Called once per transfer, when a rank sees it end. (A transfer both of whose requests were
  // cancelled after the match is never seen ending: its issuer then never ends and its
  // mailbox is not reused, which costs only memory.)
  void ended(Transfer& t) {
    if (t.endCounted || !t.by) return;
    t.endCounted = true;
    requestDrain(t);
    Issuer& by = *t.by;
    ++by.ended;
    if (by.retired && by.ended == by.issued) by.work->release();  // let it end
  }
  void setNodes(std::vector<int> nodes) { node_ = std::move(nodes); }
  Inbox& inbox(int rank) { return inbox_[rank]; }

 private:
  // Takes an ended transfer out of its mailbox (see drain), once.
  void requestDrain(Transfer& t) {
    Issuer& by = *issuer_[t.to];
    by.toDrain.push_back(t.shared_from_this());
    by.work->release();
  }

  // A put to a mailbox with a permanent receiver waits in the mailbox's done queue, holding
  // its communication, until a get takes it; nothing else empties that queue (Mailbox::clear
  // would fail communications still running). And a get walks that queue (in SimGrid 3.32),
  // so it must stay short: each transfer has a mailbox of its own, one of a pool per receiving
  // rank (slots_), and once it has ended its receiving host's issuer takes it out with a get
  // and gives the mailbox back. The get is the issuer's, not a rank's: a got communication
  // stays in the getter's list of activities, and an issuer's list goes when it ends.
  //
  // The get takes the oldest put of its mailbox, so it must find this transfer's put and no
  // other: were two puts ever in one mailbox, a get could take the other one while it still
  // runs, and once keep() let go of this transfer's get, that running communication would
  // write through a pointer into the freed get when it ends (heap corruption, or SimGrid's
  // "Cannot copy N bytes: must be sizeof(void*)"). takeSlot keeps the slots exclusive; this
  // check turns a breach into a clear stop instead of a corrupted heap.
  void drain(const std::shared_ptr<Transfer>& t) {
    static void* sink = nullptr;  // where SimGrid writes the put's payload pointer
    t->got = slots_[t->to][t->slot]->get_async<void>(&sink);
    t->gotAt = simgrid::s4u::Engine::get_clock();
    if (t->got->get_impl() != t->comm->get_impl()) {
      std::fprintf(stderr,
                   "terse-sim: internal error: the mailbox of the transfer %d -> %d (slot %d) "
                   "held another transfer's put; stopping before it corrupts memory\n",
                   t->from, t->to, t->slot);
      std::abort();
    }
    freeSlots_[t->to].push_back(t->slot);
  }

  // A mailbox into `to` with nothing in it, its receiver set.
  //
  // A new slot's index is reserved before the first simcall: Mailbox::by_name and
  // set_receiver are both simcalls, in which other actors run, and the issuers of other hosts
  // sending to `to` at the same simulated time take slots of `to` too. Reserved after by_name,
  // two issuers read the same size() and both took that slot, the same mailbox: two puts in
  // one mailbox, which drain() cannot tell apart.
  int takeSlot(int to) {
    auto& free = freeSlots_[to];
    if (!free.empty()) {
      const int slot = free.back();
      free.pop_back();
      return slot;
    }
    const int slot = static_cast<int>(slots_[to].size());
    slots_[to].push_back(nullptr);  // ours from here on; only our put and drain use it
    simgrid::s4u::Mailbox* m = simgrid::s4u::Mailbox::by_name("terse-sim-" + std::to_string(to) +
                                                              "-" + std::to_string(slot));
    m->set_receiver(anchor_[to]);
    slots_[to][slot] = m;  // by index: other takers may have grown slots_[to] meanwhile
    return slot;
  }

  struct Broken {
    int by;
    Status why;
  };
  static uint64_t linkKey(int a, int b) {
    if (a > b) std::swap(a, b);
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
  }

  // Every wake-up is a simcall (other actors run in it), so the queues are walked first and the
  // ranks woken after.
  template <typename Pred>
  void failUnmatched(Pred involves) {
    std::vector<int> toWake;
    for (int dst = 0; dst < size(); ++dst) {
      for (auto* queues : {&inbox_[dst].sends, &inbox_[dst].recvs}) {
        for (auto it = queues->begin(); it != queues->end();) {
          auto& q = it->second;
          for (auto r = q.begin(); r != q.end();) {
            if (involves(*r)) {
              (*r)->error = blocked(*r);
              (*r)->state.store(kReqFailed, std::memory_order_relaxed);
              toWake.push_back((*r)->owner);
              r = q.erase(r);
            } else {
              ++r;
            }
          }
          it = q.empty() ? queues->erase(it) : std::next(it);
        }
      }
    }
    for (int rank : toWake) wake(rank);
  }

  // Everything about the two requests is settled before the first simcall (starting the
  // transfer, waking the owners): after it, either request may already be released.
  void match(TransportRequest* send, TransportRequest* recv) {
    auto* sop = static_cast<SimOp*>(send->backend);
    auto* rop = static_cast<SimOp*>(recv->backend);
    const int from = send->owner, to = recv->owner;
    sop->matched = rop->matched = true;
    std::shared_ptr<Transfer> transfer;
    if (send->size > recv->size) {
      // Truncation is never silent: the receive fails, the sender's bytes are dropped.
      recv->error = errorInvalidUsage(
          "receive from rank %d (tag %llu): the message has %zu bytes but the buffer holds only "
          "%zu; post a larger receive",
          recv->peer, static_cast<unsigned long long>(recv->tag), send->size, recv->size);
      recv->state.store(kReqFailed, std::memory_order_relaxed);
      send->bytes = send->size;
      send->state.store(kReqDone, std::memory_order_relaxed);
    } else {
      const size_t n = send->size;
      if (n > 0 && (options_.copyPayload || n <= options_.copyBelow))
        std::memcpy(recv->data, send->data, n);
      send->bytes = recv->bytes = n;
      SimTraffic& out = traffic_[from];
      SimTraffic& in = traffic_[to];
      ++out.messagesSent;
      out.bytesSent += n;
      ++in.messagesReceived;
      in.bytesReceived += n;
      if (node_[from] != node_[to]) {
        out.bytesSentOffNode += n;
        in.bytesReceivedOffNode += n;
      }
      if (from == to) {
        send->state.store(kReqDone, std::memory_order_relaxed);
        recv->state.store(kReqDone, std::memory_order_relaxed);
      } else {
        transfer = std::make_shared<Transfer>();
        sop->transfer = transfer;
        rop->transfer = transfer;
        keep(transfer);
      }
    }
    if (transfer) {
      transfer->from = from;
      transfer->to = to;
      transfer->bytes = send->size;
      issue(transfer);  // its issuer wakes both ranks once the transfer has started
      return;
    }
    wake(from);
    if (to != from) wake(to);
  }

  // Starts the transfer of a matched message: a put of its size into the receiver's mailbox,
  // which has a permanent receiver (an actor on the receiver's host), so the put starts at once
  // without a matching get, from the host of the actor that issues it to the receiver's host.
  //
  // Why not Comm::sendto_init(from, to), which was used first: SimGrid 3.32 keeps such a
  // host-to-host communication in one std::list for the whole world, and each one's end
  // removes it with std::list::remove, a walk of every communication in flight (32,000-36,000
  // at 192 ranks). A put is kept in the list of the actor that issued it instead, and its end
  // walks the lists of the actors waiting on it (CommImpl::finish). So neither rank issues the
  // puts (the engine's descriptor exchange alone leaves 2n of them outstanding per rank, and
  // every end would walk those): the ranks' lists stay empty and each end costs the same at
  // any world size. A put is issued by its host's issuer actor, woken here: it runs at this
  // same simulated time, so the transfer still starts at the match and the predictions are
  // those of sendto (compared to the 0.1 us). An issuer never waits on its puts, so their list
  // only grows; after kIssuerBatch puts (or gets, see drain) it hands over to a successor and
  // ends once its puts have all ended, which frees its list (see Issuer, ended).
  void issue(const std::shared_ptr<Transfer>& t) {
    std::shared_ptr<Issuer> by = issuer_[t->from];
    t->by = by;
    by->todo.push_back(t);
    by->work->release();
  }

  static constexpr size_t kIssuerBatch = 512;

  void startIssuer(int host) {
    auto me = std::make_shared<Issuer>();
    issuer_[host] = me;
    simgrid::s4u::ActorPtr a =
        simgrid::s4u::Actor::create("rank" + std::to_string(host) + "-puts", hosts_[host],
                                    [this, host, me] { runIssuer(host, me); });
    a->daemonize();
  }

  void runIssuer(int host, const std::shared_ptr<Issuer>& me) {
    for (;;) {
      if (me->over()) return;  // its list of activities goes with it
      me->work->acquire();
      if (!me->toDrain.empty()) {
        std::shared_ptr<Transfer> t = std::move(me->toDrain.front());
        me->toDrain.pop_front();
        drain(t);
        ++me->drained;
        retireIfDue(host, *me);
        continue;
      }
      if (me->todo.empty()) continue;
      std::shared_ptr<Transfer> t = std::move(me->todo.front());
      me->todo.pop_front();
      t->slot = takeSlot(t->to);
      t->comm = slots_[t->to][t->slot]->put_async(t.get(), t->bytes);
      t->started = true;
      ++me->issued;
      retireIfDue(host, *me);
      wake(t->from);
      wake(t->to);
    }
  }

  void retireIfDue(int host, Issuer& me) {
    if (me.retired || me.issued + me.drained < kIssuerBatch) return;
    me.retired = true;
    startIssuer(host);  // new work goes to the successor; me finishes what it holds
  }

  std::vector<std::shared_ptr<Transfer>> kept_;
  size_t nextSweep_ = 256;
  std::vector<simgrid::s4u::Host*> hosts_;
  SimTransportOptions options_;
  std::vector<Inbox> inbox_;
  std::vector<Status> gone_;
  std::unordered_map<uint64_t, Broken> broken_;
  std::vector<SimTraffic> traffic_;
  std::vector<int> node_;
  std::vector<simgrid::s4u::ActorPtr> anchor_;              // per rank: its mailboxes' receiver
  std::vector<std::vector<simgrid::s4u::Mailbox*>> slots_;  // per receiving rank (drain)
  std::vector<std::vector<int>> freeSlots_;
  simgrid::s4u::SemaphorePtr never_;             // what the mailboxes' receivers wait on
  std::vector<std::shared_ptr<Issuer>> issuer_;  // per host: the generation taking new work
};

namespace {

class SimTransport final : public Transport {
 public:
  SimTransport(std::shared_ptr<SimWorld> world, int rank) : world_(std::move(world)), rank_(rank) {
    world_->attach(rank_);
  }
  ~SimTransport() override {
    // Unmatched requests must not outlive the pool their queue entries point into.
    for (const auto& r : pool_.all())
      if (r->state.load(std::memory_order_relaxed) == kReqPending) world_->unqueue(r.get());
  }

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  std::string describe() const override { return "simgrid"; }

  Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
               TransportRequest** request) override {
    TERSE_RETURN_IF_ERROR(
        checkTransferArgs("isend", rank_, size(), peer, tag, data, bytes, request));
    chargePost();
    *request = start(RequestKind::kSend, peer, tag, const_cast<void*>(data), bytes);
    return Status::ok();
  }
  Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
               TransportRequest** request) override {
    TERSE_RETURN_IF_ERROR(
        checkTransferArgs("irecv", rank_, size(), peer, tag, data, capacity, request));
    chargePost();
    *request = start(RequestKind::kRecv, peer, tag, data, capacity);
    return Status::ok();
  }

  // SimTransportOptions::postSeconds of this rank's time.
  void chargePost() {
    const double seconds = world_->options().postSeconds;
    if (seconds > 0) simgrid::s4u::this_actor::sleep_for(seconds);
  }

  Status test(TransportRequest* r, bool* done, size_t* bytes) override {
    if (r == nullptr || done == nullptr) return errorInvalidArgument("test: null argument");
    *done = false;
    if (finished(r)) return finish(r, done, bytes);
    simgrid::s4u::this_actor::sleep_for(world_->options().pollSeconds);
    if (finished(r)) return finish(r, done, bytes);
    return Status::ok();
  }

  Status wait(TransportRequest* r, size_t* bytes, std::chrono::milliseconds timeout) override {
    if (r == nullptr) return errorInvalidArgument("wait: null request");
    const double deadline =
        simgrid::s4u::Engine::get_clock() + std::chrono::duration<double>(timeout).count();
    auto* op = static_cast<SimOp*>(r->backend);
    while (r->state.load(std::memory_order_relaxed) != kReqFailed) {
      const double left = deadline - simgrid::s4u::Engine::get_clock();
      if (!ready(op)) {
        // Locking is a simcall (other actors may run and match us), so look again under the
        // lock; between that look and the wait no other actor runs, so no wake-up is lost.
        Inbox& in = world_->inbox(rank_);
        std::unique_lock<simgrid::s4u::Mutex> lock(*in.mutex);
        if (ready(op) || r->state.load(std::memory_order_relaxed) == kReqFailed) continue;
        if (left <= 0 || in.changed->wait_for(lock, left) == std::cv_status::timeout) {
          if (ready(op) || r->state.load(std::memory_order_relaxed) == kReqFailed) continue;
          lock.unlock();
          return timedOut(r, timeout);
        }
        continue;
      }
      if (!op->transfer) break;
      // A matched transfer always ends (the simulated network never fails), so it is waited on
      // without a timeout: the timeout bounds the wait for a peer that never posts. (Both ranks
      // wait on the same communication, and SimGrid 3.32 keeps one timeout per activity: a
      // second waiter's timeout outlived the transfer and crashed the engine when it fired.)
      try {
        awaitEnd(*op->transfer);
      } catch (const simgrid::Exception& e) {
        Status why = errorRemote("%s rank %d: simulated transfer failed: %s", requestVerb(r),
                                 r->peer, e.what());
        release(r);
        return why;
      }
      op->transfer->done = true;
      op->transfer->doneAt = simgrid::s4u::Engine::get_clock();
      r->state.store(kReqDone, std::memory_order_relaxed);
      break;
    }
    bool done = false;
    return finish(r, &done, bytes);
  }

  void cancel(TransportRequest* r) override {
    if (r == nullptr) return;
    auto* op = static_cast<SimOp*>(r->backend);
    // Unmatched: it simply leaves its queue. Matched: the bytes already moved and the transfer
    // runs on for the peer's side; this side forgets it.
    if (!op->matched) world_->unqueue(r);
    release(r);
  }

  void progress() override {}

  void abort(const Status& why) override {
    if (aborted_.isOk()) aborted_ = why.isOk() ? errorInternal("transport aborted") : why;
    world_->markGone(rank_, aborted_);
  }

  void disconnect(int peer, const Status& why) override {
    if (peer < 0 || peer >= size() || peer == rank_) return;
    world_->breakLink(rank_, peer, why);
  }

 private:
  TransportRequest* start(RequestKind kind, int peer, uint64_t tag, void* data, size_t size) {
    TransportRequest* r = pool_.acquire();
    r->kind = kind;
    r->owner = rank_;
    r->peer = peer;
    r->tag = tag;
    r->data = data;
    r->size = size;
    SimOp* op = opFor(r);
    *op = SimOp{};
    r->backend = op;
    Status why = world_->blocked(r);
    if (!why.isOk()) {
      r->error = why;
      r->state.store(kReqFailed, std::memory_order_relaxed);
      return r;
    }
    world_->post(r);
    return r;
  }

  // Matched, and its transfer (if any) started.
  static bool ready(const SimOp* op) {
    return op->matched && (!op->transfer || op->transfer->started);
  }

  // Blocks until the transfer has ended (at once if it has), and tells its issuer.
  void awaitEnd(Transfer& t) {
    if (!t.done) t.comm->wait();  // once done, keep() may have let go of the communication
    world_->ended(t);
  }

  // Done or failed, with the transfer (if any) over.
  bool finished(TransportRequest* r) {
    const int s = r->state.load(std::memory_order_relaxed);
    if (s == kReqFailed) return true;
    auto* op = static_cast<SimOp*>(r->backend);
    if (!ready(op)) return false;
    if (!op->transfer) return true;
    if (!op->transfer->done && !op->transfer->comm->test()) return false;  // see awaitEnd
    world_->ended(*op->transfer);
    op->transfer->done = true;
    op->transfer->doneAt = simgrid::s4u::Engine::get_clock();
    r->state.store(kReqDone, std::memory_order_relaxed);
    return true;
  }

  Status finish(TransportRequest* r, bool* done, size_t* bytes) {
    if (r->state.load(std::memory_order_relaxed) == kReqFailed) {
      Status why = r->error;
      release(r);
      return why;
    }
    *done = true;
    if (bytes) *bytes = r->bytes;
    release(r);
    return Status::ok();
  }

  Status timedOut(TransportRequest* r, std::chrono::milliseconds timeout) {
    Status why = errorTimeout("%s rank %d (tag %llu) timed out after %lld ms (simulated)",
                              requestVerb(r), r->peer, static_cast<unsigned long long>(r->tag),
                              static_cast<long long>(timeout.count()));
    cancel(r);
    return why;
  }

  void release(TransportRequest* r) {
    auto* op = static_cast<SimOp*>(r->backend);
    op->transfer = nullptr;
    pool_.release(r);
  }

  // One SimOp per pooled request, kept next to it for the request's whole life.
  SimOp* opFor(TransportRequest* r) {
    auto it = ops_.find(r);
    if (it != ops_.end()) return it->second.get();
    return (ops_[r] = std::make_unique<SimOp>()).get();
  }

  std::shared_ptr<SimWorld> world_;
  int rank_;
  Status aborted_;
  RequestPool pool_;
  std::unordered_map<TransportRequest*, std::unique_ptr<SimOp>> ops_;
};

}  // namespace

std::shared_ptr<SimWorld> makeSimWorld(std::vector<simgrid::s4u::Host*> hosts,
                                       SimTransportOptions options) {
  return std::make_shared<SimWorld>(std::move(hosts), options);
}

Result<std::unique_ptr<Transport>> createSimTransport(std::shared_ptr<SimWorld> world, int rank) {
  if (!world) return errorInvalidArgument("createSimTransport: no world");
  if (rank < 0 || rank >= world->size())
    return errorInvalidArgument("createSimTransport: rank %d is not in a world of %d", rank,
                                world->size());
  return std::unique_ptr<Transport>(new SimTransport(std::move(world), rank));
}

const std::vector<SimTraffic>& simTraffic(const SimWorld& world) {
  return const_cast<SimWorld&>(world).traffic();
}

void setSimNodes(SimWorld& world, std::vector<int> nodeOfRank) {
  world.setNodes(std::move(nodeOfRank));
}

}  // namespace terse::sim
