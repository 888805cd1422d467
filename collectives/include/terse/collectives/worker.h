// Runs a communicator's collectives in order on one background thread, so callers get
// nonblocking handles while the transport is still driven by a single thread (transport.h's
// rule). Jobs are executed strictly in submission order, which is also the order the ranks must
// agree on.
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
