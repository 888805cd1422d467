#include "ef_period.h"

#include <cerrno>
#include <cstdlib>

namespace terse::plugin::collnet {
namespace {

Status badSetting(const std::string& value) {
  return errorInvalidArgument(
      "TERSE_COLLNET_EF_PERIOD='%s' is not a period: use auto (learn it, the default), "
      "auto:warmup=N (learn it within N calls, %zu <= N <= %zu), or the reduce calls per "
      "training step as a non-negative integer (0 turns error feedback off)",
      value.c_str(), CallSequence::kRepeats, CallSequence::kMaxWarmupLimit);
}

// A whole non-negative decimal number, nothing else.
bool parseCount(const std::string& text, unsigned long long* out) {
  if (text.empty() || text.size() > 19) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  *out = std::strtoull(text.c_str(), nullptr, 10);
  return true;
}

}  // namespace

Result<PeriodSetting> parsePeriodSetting(const std::string& value) {
  PeriodSetting s;
  s.maxWarmup = CallSequence::kDefaultMaxWarmup;
  if (value.empty() || value == "auto") return s;
  const std::string prefix = "auto:warmup=";
  unsigned long long n = 0;
  if (value.compare(0, prefix.size(), prefix) == 0) {
    if (!parseCount(value.substr(prefix.size()), &n) || n < CallSequence::kRepeats ||
        n > CallSequence::kMaxWarmupLimit)
      return badSetting(value);
    s.maxWarmup = static_cast<size_t>(n);
    return s;
  }
  if (!parseCount(value, &n)) return badSetting(value);
  s.learn = false;
  s.period = static_cast<size_t>(n);
  s.maxWarmup = 0;
  return s;
}

CallSequence::CallSequence(const PeriodSetting& setting)
    : fixed_(!setting.learn),
      fixedPeriod_(setting.learn ? 0 : setting.period),
      maxWarmup_(setting.learn ? setting.maxWarmup : 0),
      state_(setting.learn ? State::kWatching : State::kLocked) {
  if (fixed_ && fixedPeriod_ == 0) state_ = State::kGaveUp;  // off: never a residual
  if (!fixed_ && maxWarmup_ < kRepeats) maxWarmup_ = kRepeats;
}

CallSequence::Decision CallSequence::next(const CallKey& key) {
  if (fixed_) return nextFixed(key);
  switch (state_) {
    case State::kWatching: return watch(key);
    case State::kGaveUp: return Decision{};
    case State::kLocked: break;
  }
  Decision d;
  const size_t p = position_;
  if (key != keys_[p]) {
    d.event = Event::kChanged;
    d.brokenPosition = p;
    d.brokenStep = step_;
    d.expected = keys_[p];
    ++resets_;
    // The calls of this period before the break matched: learning starts again from the
    // period's first call, which is where a changed step most likely begins.
    // At most one period's worth of history (<= maxWarmup / kRepeats), so the bound is not hit
    // here; whether it already shows a period is decided with the next call.
    restartWatching(p, key);
    return d;
  }
  d.residual = true;
  d.position = p;
  if (++position_ == keys_.size()) {
    position_ = 0;
    ++step_;
  }
  return d;
}

CallSequence::Decision CallSequence::nextFixed(const CallKey& key) {
  Decision d;
  if (state_ == State::kGaveUp) return d;  // period 0: error feedback off
  if (position_ == fixedPeriod_) {
    position_ = 0;
    ++step_;
  }
  // Positions learn their key when first used, so a large period costs nothing up front.
  if (position_ < keys_.size() && keys_[position_] != key) {
    d.event = Event::kChanged;
    d.brokenPosition = position_;
    d.brokenStep = step_;
    d.expected = keys_[position_];
    ++resets_;
    keys_.clear();
    position_ = 0;
    step_ = 0;
  }
  if (position_ == keys_.size()) keys_.push_back(key);
  d.residual = true;
  d.position = position_++;
  return d;
}

void CallSequence::restartWatching(size_t keepPositions, const CallKey& key) {
  std::vector<CallKey> kept(keys_.begin(), keys_.begin() + static_cast<ptrdiff_t>(keepPositions));
  keys_.clear();
  history_.clear();
  pi_.clear();
  position_ = 0;
  step_ = 0;
  state_ = State::kWatching;
  for (const CallKey& k : kept) record(k);
  record(key);
}

void CallSequence::record(const CallKey& key) {
  // Extend the prefix function by one key (Knuth-Morris-Pratt).
  const size_t i = history_.size();
  history_.push_back(key);
  size_t k = i == 0 ? 0 : pi_[i - 1];
  while (k > 0 && history_[i] != history_[k]) k = pi_[k - 1];
  if (i > 0 && history_[i] == history_[k]) ++k;
  pi_.push_back(k);
}

void CallSequence::dropHistory() {
  history_.clear();
  history_.shrink_to_fit();
  pi_.clear();
  pi_.shrink_to_fit();
}

CallSequence::Decision CallSequence::watch(const CallKey& key) {
  Decision d;
  record(key);
  // The shortest p with history[j] == history[j + p] for every j is n - pi[n-1]; take it once
  // the history holds kRepeats whole copies of it. Positions count from the history's first
  // call, so the next call (index n) is position n mod p.
  const size_t n = history_.size();
  const size_t period = n - pi_.back();
  if (n >= kRepeats * period) {
    keys_.assign(history_.begin(), history_.begin() + static_cast<ptrdiff_t>(period));
    position_ = n % period;
    step_ = 0;
    state_ = State::kLocked;
    d.event = Event::kLearned;
    lastWarmup_ = n;
    dropHistory();
    return d;
  }
  if (n >= maxWarmup_) {
    state_ = State::kGaveUp;
    d.event = Event::kGaveUp;
    lastWarmup_ = n;
    dropHistory();
  }
  return d;
}

}  // namespace terse::plugin::collnet
