// A handle on one collective submitted with a Communicator's *Async calls (and on the jobs of
// the collective thread inside terse). Copyable; all copies see the same completion.
#pragma once

#include <terse/status.h>

#include <memory>

namespace terse {

class CollectiveWorker;

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
  // The completion the collective thread signals; defined with it (collectives/worker.h), so
  // this header needs no thread primitives.
  struct State;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

}  // namespace terse
