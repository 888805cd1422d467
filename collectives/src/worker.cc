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
  // Not done, so its worker still exists (a worker finishes every job before it goes, and the
  // outcome is published under this lock); if the job is next and nothing runs, run it here.
  if (!state_->done && state_->worker != nullptr) {
    CollectiveWorker* worker = state_->worker;
    CollectiveWorker::Job job;
    if (worker->takeIfNext(state_.get(), &job)) {
      state_->worker = nullptr;
      lock.unlock();
      worker->runTaken(std::move(job));
      lock.lock();
    }
  }
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

uint64_t CollectiveWorker::ranByWaiters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ranByWaiters_;
}

Work CollectiveWorker::submit(std::function<Status()> job, Wake wake) {
  auto state = std::make_shared<Work::State>();
  state->worker = this;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(job), state);
  }
  if (wake == Wake::kNow) cv_.notify_one();
  return Work(state);
}

void CollectiveWorker::execute(Job job) {
  // Nothing may escape (on the worker's thread it would end the process): whatever a job throws
  // becomes its status. The engine turns its own exceptions into statuses before this point,
  // after telling the peers; this is the last line of defence for everything else.
  Status s = Status::ok();
  try {
    s = job.first();
  } catch (const std::bad_alloc&) {
    s = errorSystem("out of memory on the collective thread");
  } catch (const std::exception& e) {
    s = errorInternal("unexpected exception on the collective thread: %s", e.what());
  } catch (...) {
    s = errorInternal("unexpected exception on the collective thread");
  }
  {
    std::lock_guard<std::mutex> lock(job.second->mutex);
    job.second->status = std::move(s);
    job.second->done = true;
  }
  job.second->cv.notify_all();
}

bool CollectiveWorker::takeIfNext(const Work::State* state, Job* job) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (running_ || queue_.empty() || queue_.front().second.get() != state) return false;
  *job = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  ++ranByWaiters_;
  return true;
}

void CollectiveWorker::runTaken(Job job) {
  execute(std::move(job));
  // The worker's thread is woken only when it has something to do: a job queued meanwhile, or
  // the destructor waiting for `running_` to clear (notified under the lock, so the destructor
  // cannot free the condition variable before this thread is done with it).
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = false;
  if (stop_ || !queue_.empty()) cv_.notify_all();
}

void CollectiveWorker::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return !running_ && (stop_ || !queue_.empty()); });
      if (queue_.empty()) return;  // stop requested, everything drained, nothing running
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    {
      std::lock_guard<std::mutex> lock(job.second->mutex);
      job.second->worker = nullptr;
    }
    execute(std::move(job));
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
  }
}

}  // namespace terse
