#include "terse/collectives/worker.h"

#include <exception>
#include <new>

namespace terse {

Work Work::completed(Status status) {
  auto state = std::make_shared<State>();
  state->done = true;
  state->status = std::move(status);
  return Work(state);
}

bool Work::test() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

Status Work::wait() const {
  if (!state_) return Status::ok();
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
  return state_->status;
}

CollectiveWorker::CollectiveWorker() : thread_([this] { loop(); }) {}

CollectiveWorker::~CollectiveWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Work CollectiveWorker::submit(std::function<Status()> job) {
  auto state = std::make_shared<Work::State>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(job), state);
  }
  cv_.notify_one();
  return Work(state);
}

void CollectiveWorker::loop() {
  for (;;) {
    std::function<Status()> job;
    std::shared_ptr<Work::State> state;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and everything drained
      job = std::move(queue_.front().first);
      state = std::move(queue_.front().second);
      queue_.pop_front();
    }
    // Nothing may escape this thread (it would end the process): whatever a job throws becomes
    // its status. The engine turns its own exceptions into statuses before this point, after
    // telling the peers; this is the last line of defence for everything else.
    Status s = Status::ok();
    try {
      s = job();
    } catch (const std::bad_alloc&) {
      s = errorSystem("out of memory on the collective thread");
    } catch (const std::exception& e) {
      s = errorInternal("unexpected exception on the collective thread: %s", e.what());
    } catch (...) {
      s = errorInternal("unexpected exception on the collective thread");
    }
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->status = std::move(s);
      state->done = true;
    }
    state->cv.notify_all();
  }
}

}  // namespace terse
