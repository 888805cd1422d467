// Runs a communicator's collectives in order, one at a time, so callers get nonblocking handles
// while the transport is still driven by one thread at a time (transport.h's rule). Jobs are
// executed strictly in submission order, which is also the order the ranks must agree on.
//
// Usually the worker's own thread runs them. A caller that waits on a job nobody has started,
// at the head of the queue while no job runs, runs it itself on its own thread instead: a
// blocking call (submit, then wait at once) then costs no hand-off to the collective thread and
// back, which on a busy host was two scheduler wake-ups per call, most of a small collective's
// time (docs/design.md, "The collective thread"). Order and mutual exclusion are unchanged:
// whoever runs a job holds the one `running_` flag, and the queue is taken from the front only.
#pragma once

#include "terse/common/status.h"

#include <terse/work.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace terse {

// What a Work handle (include/terse/work.h) waits on.
struct Work::State {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  Status status;
  // The worker that queued it, while it may still run it on a waiter's thread (null once the
  // job has started, or for a Work made finished). Read and cleared under the worker's mutex.
  CollectiveWorker* worker = nullptr;
};

class CollectiveWorker {
 public:
  CollectiveWorker();
  // Finishes every job already submitted (including one a waiter is running), then stops the
  // thread.
  ~CollectiveWorker();
  CollectiveWorker(const CollectiveWorker&) = delete;
  CollectiveWorker& operator=(const CollectiveWorker&) = delete;

  // Whether submit wakes the worker's thread for the job.
  enum class Wake {
    kNow,       // yes: the caller may wait later, or never (an asynchronous call)
    kByWaiter,  // no: the caller waits on it at once (a blocking call) and so runs it itself
                // when it is next; if a job runs or waits ahead of it, the thread is awake
                // already (or is woken when a waiter's job ends) and reaches it in turn
  };
  // Queues `job`; it runs after every job submitted before it.
  Work submit(std::function<Status()> job, Wake wake = Wake::kNow);
  // Runs `job` in order with the queue and waits for it (for blocking calls): on this thread
  // when the queue is idle.
  Status run(std::function<Status()> job) { return submit(std::move(job), Wake::kByWaiter).wait(); }

  // How many jobs ran on a waiter's thread rather than the worker's (for tests).
  uint64_t ranByWaiters() const;

 private:
  friend class Work;
  using Job = std::pair<std::function<Status()>, std::shared_ptr<Work::State>>;
  void loop();
  // Work::wait's turn, with state->mutex held: takes the job of `state` into *job when it is
  // next and nothing runs (then `running_` is this caller's until runTaken).
  bool takeIfNext(const Work::State* state, Job* job);
  // Runs what takeIfNext took and gives `running_` back.
  void runTaken(Job job);
  // Runs one job taken from the queue and publishes its outcome; `running_` is held.
  static void execute(Job job);

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool running_ = false;  // a job is running, on the worker's thread or a waiter's
  bool stop_ = false;
  uint64_t ranByWaiters_ = 0;
  std::thread thread_;
};

}  // namespace terse
