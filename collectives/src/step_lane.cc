#include "terse/collectives/step_lane.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <new>
#include <mutex>
#include <thread>

namespace terse {

namespace {

Status nothingOutstanding() {
  return errorInternal("step lane: collect() with no job outstanding");
}

// A job's status, with anything it throws (std::bad_alloc for a workspace) turned into one: a
// lane thread must not end the process, and its submitter reports the failure like any other.
Status run(const std::function<Status()>& job) {
  try {
    return job();
  } catch (const std::bad_alloc&) {
    return errorSystem("step lane: out of memory");
  } catch (const std::exception& e) {
    return errorInternal("step lane: unexpected exception: %s", e.what());
  }
}

class ThreadLane final : public StepLane {
 public:
  ThreadLane(std::function<void()> enter, std::function<void()> leave)
      : enter_(std::move(enter)), leave_(std::move(leave)), thread_([this] { loop(); }) {}
  ~ThreadLane() override {
    {
      std::lock_guard<std::mutex> hold(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
    if (outstanding_ > 0 && leave_) leave_();  // jobs nobody collected (a submitter's bug)
  }

  void submit(std::function<Status()> job) override {
    // Registered before the lane's thread can touch the transport, and on this thread, which is
    // then not inside a wait: see step_lane.h.
    if (outstanding_ == 0 && enter_) enter_();
    {
      std::lock_guard<std::mutex> hold(mutex_);
      queued_.push_back(std::move(job));
      ++outstanding_;
    }
    changed_.notify_all();
  }

  Status collect() override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (outstanding_ == 0) return nothingOutstanding();
    changed_.wait(lock, [&] { return !done_.empty(); });
    Status s = std::move(done_.front());
    done_.pop_front();
    if (--outstanding_ == 0 && leave_) {
      lock.unlock();
      leave_();
    }
    return s;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || !queued_.empty(); });
      if (queued_.empty()) return;  // stopping, and every job ran
      std::function<Status()> job = std::move(queued_.front());
      queued_.pop_front();
      lock.unlock();
      Status s = run(job);
      lock.lock();
      done_.push_back(std::move(s));
      changed_.notify_all();
    }
  }

  std::function<void()> enter_, leave_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<Status()>> queued_;
  std::deque<Status> done_;
  size_t outstanding_ = 0;  // submitted and not yet collected (written by the submitter only)
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace

void InlineLane::submit(std::function<Status()> job) { done_.push_back(run(job)); }

Status InlineLane::collect() {
  if (done_.empty()) return nothingOutstanding();
  Status s = std::move(done_.front());
  done_.pop_front();
  return s;
}

std::unique_ptr<StepLane> makeInlineLane() { return std::make_unique<InlineLane>(); }

std::unique_ptr<StepLane> makeThreadLane(std::function<void()> enter, std::function<void()> leave) {
  return std::make_unique<ThreadLane>(std::move(enter), std::move(leave));
}

}  // namespace terse
