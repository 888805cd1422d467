// A second thread of control for the steps of a pipelined algorithm: two-level allreduce hands
// each segment's cross-node step to a lane and runs the next segment's node step meanwhile, so
// the link between nodes works while the node does (collectives/src/two_level.cc).
//
// Jobs run one at a time, in the order they were submitted; collect() returns their statuses in
// that same order. A job borrows whatever its submitter gave it, so the submitter collects every
// job it submitted before those borrowings end, after a failure too (collect() waits; it never
// abandons a running job).
//
// Who provides a lane decides what "another thread" means: the communicator's lane is an OS
// thread registered as a driver of its shared transport (transport/shared.h); the simulator's is
// a SimGrid actor on the rank's host (sim/), so the overlap costs simulated time the way it would
// cost real time; without a provider the inline lane runs each job at submit, the same schedule
// with nothing overlapping (and the same results, which tests compare).
#pragma once

#include "terse/common/status.h"

#include <deque>
#include <functional>
#include <memory>

namespace terse {

class StepLane {
 public:
  virtual ~StepLane() = default;
  // Queues `job` behind the jobs submitted before it.
  virtual void submit(std::function<Status()> job) = 0;
  // Waits for the oldest job not yet collected and returns its status (kInternal when nothing
  // is outstanding).
  virtual Status collect() = 0;
};

// Makes a lane for one engine, on the thread of control that will submit to it.
using StepLaneFactory = std::function<std::unique_ptr<StepLane>()>;

// Runs each job inside submit(): no thread, no allocation beyond its queue of statuses.
class InlineLane final : public StepLane {
 public:
  void submit(std::function<Status()> job) override;
  Status collect() override;

 private:
  std::deque<Status> done_;
};
std::unique_ptr<StepLane> makeInlineLane();

// An OS thread of its own, started here and joined by the lane's destructor (after its queued
// jobs). `enter` runs on the submitter's thread when a job is submitted to an idle lane (nothing
// outstanding), before the lane's thread can start it; `leave` when the last outstanding job is
// collected. So a transport that must know how many threads drive it at once
// (SharedTransport::addDriver) counts the lane for exactly as long as jobs may run, and learns
// it before either thread waits: a submitter that had entered a single-driver wait, holding the
// transport's lock while it blocks, could otherwise keep the lane from posting what a peer needs
// to finish that very wait (a cycle through the other ranks' node and cross-node steps).
std::unique_ptr<StepLane> makeThreadLane(std::function<void()> enter = nullptr,
                                         std::function<void()> leave = nullptr);

}  // namespace terse
