#include "terse/transport/inproc.h"

#include "terse/transport/fault.h"

#include "request.h"
#include "terse/common/logging.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace terse {

namespace {

// (source rank, tag) packed the way the UCX backend packs its wire tag.
uint64_t matchKey(int source, uint64_t tag) { return (static_cast<uint64_t>(source) << 40) | tag; }

struct Fifo {
  TransportRequest* head = nullptr;
  TransportRequest* tail = nullptr;

  void push(TransportRequest* r) {
    r->next = nullptr;
    if (tail)
      tail->next = r;
    else
      head = r;
    tail = r;
  }
  TransportRequest* pop() {
    TransportRequest* r = head;
    if (r) {
      head = r->next;
      if (!head) tail = nullptr;
      r->next = nullptr;
    }
    return r;
  }
  bool remove(TransportRequest* r) {
    TransportRequest* prev = nullptr;
    for (TransportRequest* it = head; it; prev = it, it = it->next) {
      if (it != r) continue;
      if (prev)
        prev->next = it->next;
      else
        head = it->next;
      if (tail == it) tail = prev;
      it->next = nullptr;
      return true;
    }
    return false;
  }
};

void finish(TransportRequest* r, size_t bytes) {
  r->bytes = bytes;
  r->state.store(kReqDone, std::memory_order_release);
}

void fail(TransportRequest* r, Status why) {
  r->error = std::move(why);
  r->state.store(kReqFailed, std::memory_order_release);
}

}  // namespace

class InProcFabric {
 public:
  explicit InProcFabric(int size) : boxes_(size), gone_(size), attached_(size, false) {}

  int size() const { return static_cast<int>(boxes_.size()); }

  Status attach(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    if (attached_[rank])
      return errorInvalidUsage("rank %d is already attached to this fabric", rank);
    attached_[rank] = true;
    return Status::ok();
  }

  // Queues `r` (a send from r->owner to r->peer, or a receive of r->owner from r->peer), or
  // matches it with its counterpart and copies the bytes.
  void post(TransportRequest* r) {
    TransportRequest* send = nullptr;
    TransportRequest* recv = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!gone_[r->owner].isOk()) {
        fail(r, gone_[r->owner]);
        return;
      }
      if (!gone_[r->peer].isOk()) {
        fail(r, peerGone(r->peer, r));
        return;
      }
      if (!broken_.empty() && broken_.count(linkKey(r->owner, r->peer))) {
        fail(r, linkBroken(r));
        return;
      }
      if (r->kind == RequestKind::kSend) {
        Mailbox& box = boxes_[r->peer];
        uint64_t key = matchKey(r->owner, r->tag);
        auto it = box.recvs.find(key);
        if (it != box.recvs.end() && it->second.head) {
          send = r;
          recv = it->second.pop();
        } else {
          box.sends[key].push(r);
        }
      } else {
        Mailbox& box = boxes_[r->owner];
        uint64_t key = matchKey(r->peer, r->tag);
        auto it = box.sends.find(key);
        if (it != box.sends.end() && it->second.head) {
          recv = r;
          send = it->second.pop();
        } else {
          box.recvs[key].push(r);
        }
      }
      if (send) {
        send->state.store(kReqCopying, std::memory_order_relaxed);
        recv->state.store(kReqCopying, std::memory_order_relaxed);
      }
    }
    if (send) deliver(send, recv);
  }

  // Removes a still-queued request; waits out one whose copy is under way.
  void cancel(TransportRequest* r) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (r->state.load(std::memory_order_acquire) == kReqPending) {
        Mailbox& box = boxes_[r->kind == RequestKind::kSend ? r->peer : r->owner];
        auto& queues = r->kind == RequestKind::kSend ? box.sends : box.recvs;
        uint64_t key = matchKey(r->kind == RequestKind::kSend ? r->owner : r->peer, r->tag);
        auto it = queues.find(key);
        if (it != queues.end()) it->second.remove(r);
        fail(r, errorInvalidUsage("cancelled"));
        return;
      }
    }
    while (r->state.load(std::memory_order_acquire) == kReqCopying) std::this_thread::yield();
  }

  // Marks `rank` gone and fails everything queued that involves it: its own requests with
  // `why`, the other ranks' with kRemoteError naming it.
  void leave(int rank, const Status& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!gone_[rank].isOk()) return;
      gone_[rank] = why.isOk() ? errorRemote("rank %d left", rank) : why;
      failQueued([&](const TransportRequest* r) {
        if (r->owner == rank) return gone_[rank];
        if (r->peer == rank) return peerGone(rank, r);
        return Status::ok();
      });
    }
    cv_.notify_all();
  }

  // Breaks the link between `rank` and `peer` (rank's Transport::disconnect): what is queued
  // between the two fails, and so does everything either posts for the other later.
  void breakLink(int rank, int peer, const Status& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.count(linkKey(rank, peer))) return;
      broken_.emplace(linkKey(rank, peer),
                      Broken{rank, why.isOk() ? errorRemote("disconnected") : why});
      failQueued([&](const TransportRequest* r) {
        bool between =
            (r->owner == rank && r->peer == peer) || (r->owner == peer && r->peer == rank);
        return between ? linkBroken(r) : Status::ok();
      });
    }
    cv_.notify_all();
  }

  // Sleeps briefly unless something completes; bounded so a missed wakeup costs 1 ms at most.
  void waitForActivity() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(1));
  }

 private:
  struct Mailbox {
    // Both keyed by (source rank, tag) in the receiver's mailbox.
    std::unordered_map<uint64_t, Fifo> sends;
    std::unordered_map<uint64_t, Fifo> recvs;
  };

  struct Broken {
    int by;  // the rank that disconnected
    Status why;
  };
  static uint64_t linkKey(int a, int b) {
    return (static_cast<uint64_t>(std::min(a, b)) << 32) | static_cast<uint64_t>(std::max(a, b));
  }

  // Under mu_: fails every queued request for which `why(r)` is an error, keeps the others in
  // order.
  template <typename Why>
  void failQueued(const Why& why) {
    for (Mailbox& box : boxes_) {
      for (auto* queues : {&box.sends, &box.recvs}) {
        for (auto& entry : *queues) {
          Fifo keep;
          while (TransportRequest* r = entry.second.pop()) {
            Status s = why(r);
            if (s.isOk())
              keep.push(r);
            else
              fail(r, std::move(s));
          }
          entry.second = keep;
        }
      }
    }
  }

  // Under mu_: why `r` cannot use its broken link.
  Status linkBroken(const TransportRequest* r) const {
    const Broken& b = broken_.at(linkKey(r->owner, r->peer));
    if (b.by == r->owner)
      return errorRemote("%s rank %d (tag %llu) failed: %s", requestVerb(r), r->peer,
                         static_cast<unsigned long long>(r->tag), b.why.message().c_str());
    return errorRemote(
        "%s rank %d (tag %llu) failed: rank %d closed its connection to rank %d (%s)",
        requestVerb(r), r->peer, static_cast<unsigned long long>(r->tag), b.by, r->owner,
        b.why.message().c_str());
  }

  Status peerGone(int peer, const TransportRequest* r) const {
    return errorRemote("%s rank %d (tag %llu) failed: rank %d is gone (%s)", requestVerb(r), peer,
                       static_cast<unsigned long long>(r->tag), peer,
                       gone_[peer].message().c_str());
  }

  // Copies outside the lock: both requests are in kReqCopying, which nobody else touches.
  void deliver(TransportRequest* send, TransportRequest* recv) {
    if (send->size > recv->size) {
      fail(recv,
           errorInvalidUsage(
               "receive from rank %d (tag %llu): the message has %zu bytes but the buffer "
               "holds only %zu; post a larger receive",
               recv->peer, static_cast<unsigned long long>(recv->tag), send->size, recv->size));
      finish(send, send->size);
    } else {
      if (send->size > 0) std::memcpy(recv->data, send->data, send->size);
      finish(recv, send->size);
      finish(send, send->size);
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Mailbox> boxes_;
  std::vector<Status> gone_;  // ok while the rank is alive
  std::vector<bool> attached_;
  std::unordered_map<uint64_t, Broken> broken_;  // by linkKey
};

namespace {

class InProcTransport final : public Transport {
 public:
  InProcTransport(std::shared_ptr<InProcFabric> fabric, int rank)
      : fabric_(std::move(fabric)), rank_(rank) {}

  ~InProcTransport() override {
    fabric_->leave(rank_, errorRemote("rank %d's transport was destroyed", rank_));
    // A peer may still be copying into one of our buffers; let it finish before the pool goes.
    for (const auto& r : pool_.all())
      while (r->state.load(std::memory_order_acquire) == kReqCopying) std::this_thread::yield();
  }

  int rank() const override { return rank_; }
  int size() const override { return fabric_->size(); }
  std::string describe() const override { return "inproc"; }

  Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
               TransportRequest** request) override {
    TERSE_RETURN_IF_ERROR(
        checkTransferArgs("isend", rank_, size(), peer, tag, data, bytes, request));
    return start(RequestKind::kSend, peer, tag, const_cast<void*>(data), bytes, request);
  }

  Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
               TransportRequest** request) override {
    TERSE_RETURN_IF_ERROR(
        checkTransferArgs("irecv", rank_, size(), peer, tag, data, capacity, request));
    return start(RequestKind::kRecv, peer, tag, data, capacity, request);
  }

  Status test(TransportRequest* r, bool* done, size_t* bytes) override {
    if (r == nullptr || done == nullptr) return errorInvalidArgument("test: null argument");
    int state = r->state.load(std::memory_order_acquire);
    if (state == kReqDone) {
      *done = true;
      if (bytes) *bytes = r->bytes;
      pool_.release(r);
      return Status::ok();
    }
    if (state == kReqFailed) {
      Status why = std::move(r->error);
      pool_.release(r);
      return why;
    }
    if (state == kReqFree) return errorInvalidUsage("test: the request was already released");
    *done = false;
    return Status::ok();
  }

  Status wait(TransportRequest* r, size_t* bytes, std::chrono::milliseconds timeout) override {
    if (r == nullptr) return errorInvalidArgument("wait: null request");
    return pollUntilDone(*this, r, bytes, timeout, 1, [this] { fabric_->waitForActivity(); });
  }

  void cancel(TransportRequest* r) override {
    if (r == nullptr || r->state.load(std::memory_order_acquire) == kReqFree) return;
    fabric_->cancel(r);
    pool_.release(r);
  }

  void progress() override {}

  void abort(const Status& why) override {
    fabric_->leave(rank_, why.isOk() ? errorRemote("rank %d aborted", rank_) : why);
  }

  void disconnect(int peer, const Status& why) override {
    if (peer < 0 || peer >= size() || peer == rank_) return;
    fabric_->breakLink(rank_, peer, why);
  }

 private:
  Status start(RequestKind kind, int peer, uint64_t tag, void* data, size_t size,
               TransportRequest** request) {
    TransportRequest* r = pool_.acquire();
    r->kind = kind;
    r->owner = rank_;
    r->peer = peer;
    r->tag = tag;
    r->data = data;
    r->size = size;
    fabric_->post(r);
    *request = r;
    return Status::ok();
  }

  std::shared_ptr<InProcFabric> fabric_;
  int rank_;
  RequestPool pool_;
};

}  // namespace

Result<std::shared_ptr<InProcFabric>> makeInProcFabric(int size) {
  if (size < 1 || size > (1 << 24))
    return errorInvalidArgument("in-process fabric size %d is outside [1, 2^24]", size);
  return std::make_shared<InProcFabric>(size);
}

Result<std::unique_ptr<Transport>> createInProcTransport(std::shared_ptr<InProcFabric> fabric,
                                                         int rank,
                                                         const TransportSettings& settings) {
  if (!fabric) return errorInvalidArgument("createInProcTransport: null fabric");
  if (rank < 0 || rank >= fabric->size())
    return errorInvalidArgument("rank %d is outside the fabric's world of %d", rank,
                                fabric->size());
  TERSE_RETURN_IF_ERROR(fabric->attach(rank));
  return injectFaults(std::unique_ptr<Transport>(new InProcTransport(std::move(fabric), rank)),
                      settings.faults);
}

}  // namespace terse
