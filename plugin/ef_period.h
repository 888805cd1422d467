// Which residual (if any) each CollNet reduce call of an error-feedback codec uses.
//
// NCCL hands CollNet slices of its staging buffer, not tensors, so the plugin ties residuals to
// positions in the repeating sequence of reduce calls a training step makes. The period of that
// sequence is either given (TERSE_COLLNET_EF_PERIOD=P) or learned here: the calls' (kind, count,
// datatype) keys are watched for a bounded warm-up, the shortest period that has repeated
// kRepeats times in a row is taken, and from the next call on every position keeps a residual.
// A call that breaks the sequence drops every residual and learning starts again; a sequence
// that never repeats within the bound stays without residuals.
//
// Pure logic (no residuals, logging or I/O here): CallSequence says what to do with a call and
// which event happened; collnet_comm.cc owns the residuals and writes the log lines. Every rank
// sees the same calls, so every rank takes the same decisions at the same call.
#pragma once

#include "terse/common/status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace terse::plugin::collnet {

// What identifies a call's place in the sequence. kind and type are the caller's numbering.
struct CallKey {
  uint8_t kind = 0;
  uint8_t type = 0;
  uint64_t count = 0;
  bool operator==(const CallKey& o) const {
    return kind == o.kind && type == o.type && count == o.count;
  }
  bool operator!=(const CallKey& o) const { return !(*this == o); }
};

// TERSE_COLLNET_EF_PERIOD as parsed: a fixed period, off (0), or learned within maxWarmup calls.
struct PeriodSetting {
  bool learn = true;
  size_t period = 0;  // fixed period; 0 with learn == false: error feedback off
  size_t maxWarmup = 0;
};

// "" and "auto": learn within kDefaultMaxWarmup calls; "auto:warmup=N": within N calls
// (kRepeats <= N <= kMaxWarmupLimit); a non-negative integer: that fixed period (0: off).
// Anything else (a negative number included) is kInvalidArgument naming the accepted forms.
Result<PeriodSetting> parsePeriodSetting(const std::string& value);

class CallSequence {
 public:
  // Full repeats of a candidate period seen before it is taken. 3 rather than 2: a step that
  // starts with two equal buckets is not taken as period 1; a run of three or more still is,
  // and the next call breaks it (one kChanged, then the real period is learned). The cost is a
  // warm-up of 3 steps.
  static constexpr size_t kRepeats = 3;
  // Calls watched before giving up: periods up to kDefaultMaxWarmup / kRepeats (21845) calls
  // are found; history costs 24 bytes per watched call (key and prefix value).
  static constexpr size_t kDefaultMaxWarmup = 65536;
  static constexpr size_t kMaxWarmupLimit = size_t{1} << 24;

  explicit CallSequence(const PeriodSetting& setting);

  enum class Event {
    kNone,
    kLearned,  // the period was found with this call; residuals from the next call on
    kChanged,  // this call broke the sequence: every residual must be dropped
    kGaveUp,   // no period within the bound: no residuals for the rest of this sequence's life
  };

  struct Decision {
    bool residual = false;  // true: use (creating if new) the residual of `position`
    size_t position = 0;
    Event event = Event::kNone;
    // kChanged: where the sequence broke and what that position held.
    size_t brokenPosition = 0;
    uint64_t brokenStep = 0;
    CallKey expected;
  };

  Decision next(const CallKey& key);

  bool learning() const { return state_ == State::kWatching; }
  bool gaveUp() const { return state_ == State::kGaveUp; }
  // The period in use: the fixed one, the learned one, or 0 while none is known.
  size_t period() const {
    if (fixed_) return fixedPeriod_;
    return state_ == State::kLocked ? keys_.size() : 0;
  }
  // Calls run without residuals in the current warm-up, or in the last one once it ended.
  size_t warmupCalls() const { return state_ == State::kWatching ? history_.size() : lastWarmup_; }
  uint64_t resets() const { return resets_; }
  size_t maxWarmup() const { return maxWarmup_; }
  bool fixed() const { return fixed_; }

 private:
  enum class State { kWatching, kLocked, kGaveUp };

  Decision nextFixed(const CallKey& key);
  Decision watch(const CallKey& key);
  void restartWatching(size_t keepPositions, const CallKey& key);
  void record(const CallKey& key);
  void dropHistory();

  bool fixed_;
  size_t fixedPeriod_ = 0;
  size_t maxWarmup_ = 0;
  State state_;
  // Locked: the key each position holds; fixed periods fill it as positions are first used.
  std::vector<CallKey> keys_;
  size_t position_ = 0;  // position of the next call
  uint64_t step_ = 0;    // full periods completed since the lock
  uint64_t resets_ = 0;
  size_t lastWarmup_ = 0;
  // Watching: the calls since learning (re)started and their prefix-function values (the
  // longest proper border of history[0..i]), so the shortest period of the history is
  // size - pi.back(), updated in amortised O(1) per call.
  std::vector<CallKey> history_;
  std::vector<size_t> pi_;
};

}  // namespace terse::plugin::collnet
