// The collective thread (collectives/worker.h): jobs in submission order, one at a time, and a
// blocking caller running its own job when the queue is idle instead of handing it to the
// worker's thread and waiting to be woken.
#include "terse/collectives/worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace terse {
namespace {

// A gate a job waits at until the test opens it.
class Gate {
 public:
  void open() { promise_.set_value(); }
  void pass() const { future_.wait(); }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
};

TEST(CollectiveWorker, ABlockingCallOnAnIdleQueueRunsOnTheCallersThread) {
  CollectiveWorker worker;
  std::thread::id ranOn;
  ASSERT_TRUE(worker
                  .run([&] {
                    ranOn = std::this_thread::get_id();
                    return Status::ok();
                  })
                  .isOk());
  EXPECT_EQ(ranOn, std::this_thread::get_id());
  EXPECT_EQ(worker.ranByWaiters(), 1u);
}

TEST(CollectiveWorker, AnAsynchronousJobRunsWithoutAnyoneWaiting) {
  CollectiveWorker worker;
  std::promise<std::thread::id> ranOn;
  Work work = worker.submit([&] {
    ranOn.set_value(std::this_thread::get_id());
    return Status::ok();
  });
  // Never waited on through the Work: the worker's thread must have started it by itself.
  EXPECT_NE(ranOn.get_future().get(), std::this_thread::get_id());
  EXPECT_TRUE(work.wait().isOk());
  EXPECT_EQ(worker.ranByWaiters(), 0u);
}

TEST(CollectiveWorker, ABlockingCallBehindQueuedJobsRunsAfterThemInOrder) {
  CollectiveWorker worker;
  Gate gate;
  std::mutex mutex;
  std::vector<int> order;
  auto record = [&](int n) {
    std::lock_guard<std::mutex> lock(mutex);
    order.push_back(n);
  };
  Work first = worker.submit([&] {
    gate.pass();
    record(1);
    return Status::ok();
  });
  Work second = worker.submit([&] {
    record(2);
    return Status::ok();
  });
  std::thread blocking([&] {
    EXPECT_TRUE(worker
                    .run([&] {
                      record(3);
                      return Status::ok();
                    })
                    .isOk());
  });
  gate.open();
  blocking.join();
  EXPECT_TRUE(first.wait().isOk());
  EXPECT_TRUE(second.wait().isOk());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

// A blocking job queued while another caller runs its own is not announced to the worker's
// thread; it must still run when the first ends (the ending caller wakes the thread).
TEST(CollectiveWorker, ABlockingCallBehindAWaitersJobIsNotLost) {
  CollectiveWorker worker;
  Gate gate;
  std::atomic<bool> firstRunning{false};
  std::thread first([&] {
    EXPECT_TRUE(worker
                    .run([&] {
                      firstRunning = true;
                      gate.pass();
                      return Status::ok();
                    })
                    .isOk());
  });
  while (!firstRunning) std::this_thread::yield();
  std::thread::id secondRanOn;
  std::thread second([&] {
    EXPECT_TRUE(worker
                    .run([&] {
                      secondRanOn = std::this_thread::get_id();
                      return Status::ok();
                    })
                    .isOk());
  });
  // `second` is queued behind a running job (or not yet submitted); either way it ends.
  gate.open();
  first.join();
  second.join();
  EXPECT_NE(secondRanOn, std::thread::id());
}

TEST(CollectiveWorker, DestructionWaitsForAJobAWaiterIsRunning) {
  Gate gate;
  std::atomic<bool> jobRunning{false}, jobDone{false}, destroyed{false};
  auto worker = std::make_unique<CollectiveWorker>();
  std::thread caller([&] {
    Status s = worker->run([&] {
      jobRunning = true;
      gate.pass();
      jobDone = true;
      return Status::ok();
    });
    EXPECT_TRUE(s.isOk());
  });
  while (!jobRunning) std::this_thread::yield();
  std::thread destroyer([&] {
    worker.reset();
    destroyed = true;
    EXPECT_TRUE(jobDone) << "the worker went while a caller was still running its job";
  });
  gate.open();
  destroyer.join();
  caller.join();
  EXPECT_TRUE(destroyed);
}

TEST(CollectiveWorker, AnExceptionInAWaitersJobBecomesItsStatus) {
  CollectiveWorker worker;
  Status s = worker.run([]() -> Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("boom"), std::string::npos);
  EXPECT_TRUE(worker.run([] { return Status::ok(); }).isOk());
}

}  // namespace
}  // namespace terse
