// Runs a communicator's collectives in order on one background thread, so callers get
// nonblocking handles while the transport is still driven by a single thread (transport.h's
// rule). Jobs are executed strictly in submission order, which is also the order the ranks must
// agree on.
#pragma once

#include "terse/common/status.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace terse {

// A handle on one submitted job. Copyable; all copies see the same completion.
class Work {
 public:
  Work() = default;
  // A Work that is already finished with `status` (errors found before anything was queued).
  static Work completed(Status status);
  // True once the job finished (successfully or not). Never blocks.
  bool test() const;
  // Blocks until the job finished and returns its status. A default-constructed Work is done.
  Status wait() const;

 private:
  friend class CollectiveWorker;
  struct State {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    Status status;
  };
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

class CollectiveWorker {
 public:
  CollectiveWorker();
  // Finishes every job already submitted, then stops the thread.
  ~CollectiveWorker();
  CollectiveWorker(const CollectiveWorker&) = delete;
  CollectiveWorker& operator=(const CollectiveWorker&) = delete;

  // Queues `job`; it runs after every job submitted before it.
  Work submit(std::function<Status()> job);
  // Runs `job` in order with the queue and waits for it (for blocking calls).
  Status run(std::function<Status()> job) { return submit(std::move(job)).wait(); }

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<Status()>, std::shared_ptr<Work::State>>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace terse
