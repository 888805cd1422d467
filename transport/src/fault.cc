#include "terse/transport/fault.h"
#include "terse/transport/settings.h"

#include "request.h"
#include "terse/common/env.h"
#include "terse/common/logging.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace terse {

static Status checkFaultSetting(const char* name, const std::string& value) {
  return parseFaultRules(value).status().withContext(name);
}

// TERSE_FAULT's declaration (transport/settings.h: the communicator reads it and hands the
// rules to the factories).
const EnvSetting kFaultSetting{
    {"TERSE_FAULT", "string", "",
     "Fault injection for tests (off when empty): rules separated by ';', e.g. "
     "kill:rank=2:after_sends=17, drop:rank=1:peer=0:phase=gather, delay:ms=50:count=0. "
     "Actions kill (SIGKILL the process), drop (close connections) and delay (sleep before a "
     "send); triggers after_sends=N / after_recvs=N; filters rank, peer, phase, tag. See "
     "transport/include/terse/transport/fault.h.",
     0, 0, nullptr, checkFaultSetting}};

namespace {

// An unsigned number, decimal or 0x hex, with nothing before or after it. Checked by hand
// rather than left to strtoull's base 0, which also skips any leading white space (tabs and
// newlines too) and reads "010" as octal 8.
bool parseNumber(const std::string& text, uint64_t max, uint64_t* out) {
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const char* allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
  const std::string digits = hex ? text.substr(2) : text;
  if (digits.empty() || digits.find_first_not_of(allowed) != std::string::npos) return false;
  if (!hex && digits.size() > 1 && digits[0] == '0') return false;  // not octal, not decimal
  errno = 0;
  unsigned long long v = std::strtoull(digits.c_str(), nullptr, hex ? 16 : 10);
  if (errno != 0 || v > max) return false;
  *out = v;
  return true;
}

Status badRule(const std::string& rule, const std::string& why) {
  return errorInvalidArgument(
      "TERSE_FAULT rule '%s': %s (form: kill|drop|delay[:rank=R][:peer=P][:after_sends=N|"
      "after_recvs=N][:phase=descriptor|reduce|gather|barrier|:tag=V/M][:ms=M][:count=C]; see "
      "docs/env.md)",
      rule.c_str(), why.c_str());
}

Result<FaultRule> parseRule(const std::string& text) {
  FaultRule rule;
  rule.text = text;
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    size_t colon = text.find(':', start);
    fields.push_back(text.substr(start, colon == std::string::npos ? colon : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  const std::string& action = fields[0];
  if (action == "kill")
    rule.action = FaultAction::kKill;
  else if (action == "drop")
    rule.action = FaultAction::kDrop;
  else if (action == "delay")
    rule.action = FaultAction::kDelay;
  else
    return badRule(text, "'" + action + "' is not an action (kill, drop, delay)");
  bool haveTrigger = false, haveMs = false, haveTags = false, haveCount = false;
  std::vector<std::string> seen;
  for (size_t i = 1; i < fields.size(); ++i) {
    const std::string& f = fields[i];
    size_t eq = f.find('=');
    if (eq == std::string::npos || eq == 0) return badRule(text, "'" + f + "' is not key=value");
    std::string key = f.substr(0, eq), value = f.substr(eq + 1);
    for (const auto& k : seen)
      if (k == key) return badRule(text, key + " is given twice");
    seen.push_back(key);
    uint64_t n = 0;
    const uint64_t kMaxRank = (uint64_t{1} << 24) - 1;
    if (key == "rank" || key == "peer") {
      if (!parseNumber(value, kMaxRank, &n))
        return badRule(text, key + "='" + value + "' is not a rank (0..2^24-1)");
      (key == "rank" ? rule.rank : rule.peer) = static_cast<int>(n);
    } else if (key == "after_sends" || key == "after_recvs") {
      if (haveTrigger) return badRule(text, "give after_sends or after_recvs, not both");
      if (!parseNumber(value, ~uint64_t{0}, &n))
        return badRule(text, key + "='" + value + "' is not a count");
      haveTrigger = true;
      rule.onRecv = key == "after_recvs";
      rule.after = n;
    } else if (key == "phase") {
      if (haveTags) return badRule(text, "give phase or tag, not both");
      bool found = false;
      for (const auto& p : kFaultPhases) {
        if (value != p.name) continue;
        rule.tagMask = p.mask;
        rule.tagValue = p.value;
        found = true;
      }
      if (!found)
        return badRule(text, "phase '" + value + "' is not descriptor, reduce, gather or barrier");
      haveTags = true;
    } else if (key == "tag") {
      if (haveTags) return badRule(text, "give phase or tag, not both");
      size_t slash = value.find('/');
      uint64_t v = 0, m = 0;
      if (slash == std::string::npos ||
          !parseNumber(value.substr(0, slash), kMaxTransportTag, &v) ||
          !parseNumber(value.substr(slash + 1), kMaxTransportTag, &m))
        return badRule(text, "tag='" + value + "' is not VALUE/MASK (numbers up to 2^40-1)");
      if ((v & ~m) != 0)
        return badRule(text,
                       "tag='" + value + "' has value bits outside its mask: nothing matches");
      rule.tagValue = v;
      rule.tagMask = m;
      haveTags = true;
    } else if (key == "ms") {
      if (!parseNumber(value, 3600000, &n))
        return badRule(text, "ms='" + value + "' is not a delay in milliseconds (0..3600000)");
      rule.delayMs = static_cast<int>(n);
      haveMs = true;
    } else if (key == "count") {
      if (!parseNumber(value, ~uint64_t{0}, &n))
        return badRule(text, "count='" + value + "' is not a count");
      rule.count = n;
      haveCount = true;
    } else {
      return badRule(text, "unknown field '" + key + "'");
    }
  }
  if (rule.action == FaultAction::kDelay && !haveMs) return badRule(text, "delay needs ms=M");
  if (rule.action != FaultAction::kDelay && (haveMs || haveCount))
    return badRule(text, std::string("ms and count belong to delay, not ") + action);
  return rule;
}

// The decorator. Counters are per rule and touched only by the driving thread (transport.h's
// rule); abort() still forwards from any thread.
class FaultTransport final : public Transport {
 public:
  FaultTransport(std::unique_ptr<Transport> inner, std::vector<FaultRule> rules)
      : inner_(std::move(inner)) {
    for (auto& r : rules) rules_.push_back(Armed{std::move(r), 0, 0});
    describe_ = inner_->describe() + "+faults";
    for (const auto& a : rules_)
      TERSE_INFO(kSubsysNet, "rank %d: TERSE_FAULT rule '%s' armed", inner_->rank(),
                 a.rule.text.c_str());
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string describe() const override { return describe_; }

  Status isend(int peer, uint64_t tag, const void* data, size_t bytes,
               TransportRequest** request) override {
    // A drop closes the connection first; the backend then fails the send itself, with the
    // same message any later operation with that peer gets.
    (void)hit(false, peer, tag);
    return inner_->isend(peer, tag, data, bytes, request);
  }

  Status irecv(int peer, uint64_t tag, void* data, size_t capacity,
               TransportRequest** request) override {
    return inner_->irecv(peer, tag, data, capacity, request);
  }

  Status test(TransportRequest* r, bool* done, size_t* bytes) override {
    if (r == nullptr || done == nullptr) return inner_->test(r, done, bytes);
    // Read before the backend may release the request.
    const bool recv = r->kind == RequestKind::kRecv;
    const int peer = r->peer;
    const uint64_t tag = r->tag;
    Status s = inner_->test(r, done, bytes);
    if (!s.isOk() || !*done || !recv) return s;
    Status why = hit(true, peer, tag);
    if (!why.isOk()) *done = false;
    return why;
  }

  Status wait(TransportRequest* r, size_t* bytes, std::chrono::milliseconds timeout) override {
    if (r == nullptr) return inner_->wait(r, bytes, timeout);
    const bool recv = r->kind == RequestKind::kRecv;
    const int peer = r->peer;
    const uint64_t tag = r->tag;
    Status s = inner_->wait(r, bytes, timeout);
    if (!s.isOk() || !recv) return s;
    return hit(true, peer, tag);
  }

  void cancel(TransportRequest* r) override { inner_->cancel(r); }
  void progress() override { inner_->progress(); }
  void abort(const Status& why) override { inner_->abort(why); }
  void disconnect(int peer, const Status& why) override { inner_->disconnect(peer, why); }
  bool peerProcessGone(int peer) const override { return inner_->peerProcessGone(peer); }

 private:
  struct Armed {
    FaultRule rule;
    uint64_t matched;  // matching operations seen
    uint64_t hits;     // operations hit
  };

  // Counts the operation against every rule and applies those it triggers. Returns the error a
  // dropped receive reports instead of its completion.
  Status hit(bool recv, int peer, uint64_t tag) {
    Status result;
    // Failure notices (give_up.h) belong to the failure handling, not to the protocol a rule
    // aims at: counting them would shift a rule's point by what earlier failures sent.
    if (tag == kFailureNoticeTag) return result;
    for (Armed& a : rules_) {
      const FaultRule& rule = a.rule;
      if (rule.onRecv != recv || (rule.peer >= 0 && rule.peer != peer) ||
          (tag & rule.tagMask) != rule.tagValue)
        continue;
      const uint64_t index = a.matched++;
      if (index < rule.after) continue;
      const bool once = rule.action != FaultAction::kDelay;
      if ((once && a.hits > 0) || (!once && rule.count != 0 && a.hits >= rule.count)) continue;
      ++a.hits;
      const char* verb = recv ? "receive from" : "send to";
      if (a.hits == 1 || rule.action != FaultAction::kDelay)
        TERSE_WARN(kSubsysNet,
                   "rank %d: TERSE_FAULT '%s' hits matching operation #%llu (%s rank %d, tag "
                   "%llu)",
                   inner_->rank(), rule.text.c_str(), static_cast<unsigned long long>(index + 1),
                   verb, peer, static_cast<unsigned long long>(tag));
      switch (rule.action) {
        case FaultAction::kKill:
          std::fflush(nullptr);
          ::kill(::getpid(), SIGKILL);
          break;
        case FaultAction::kDelay:
          std::this_thread::sleep_for(std::chrono::milliseconds(rule.delayMs));
          break;
        case FaultAction::kDrop: {
          Status why = errorRemote(
              "rank %d dropped %s (TERSE_FAULT '%s')", inner_->rank(),
              rule.peer >= 0 ? formatString("its connection to rank %d", rule.peer).c_str()
                             : "all its connections",
              rule.text.c_str());
          if (rule.peer >= 0)
            inner_->disconnect(rule.peer, why);
          else
            inner_->abort(why);
          if (recv && result.isOk())
            result = errorRemote("%s rank %d (tag %llu) failed: %s", verb, peer,
                                 static_cast<unsigned long long>(tag), why.message().c_str());
          break;
        }
      }
    }
    return result;
  }

  std::unique_ptr<Transport> inner_;
  std::vector<Armed> rules_;
  std::string describe_;
};

}  // namespace

Result<std::vector<FaultRule>> parseFaultRules(const std::string& text) {
  std::vector<FaultRule> rules;
  size_t start = 0;
  while (start <= text.size()) {
    size_t semi = text.find(';', start);
    if (semi == std::string::npos) semi = text.size();
    std::string one = text.substr(start, semi - start);
    if (!one.empty()) {
      TERSE_ASSIGN_OR_RETURN(FaultRule rule, parseRule(one));
      rules.push_back(std::move(rule));
    }
    start = semi + 1;
  }
  return rules;
}

std::unique_ptr<Transport> injectFaults(std::unique_ptr<Transport> inner,
                                        std::vector<FaultRule> rules) {
  if (inner == nullptr) return inner;
  std::vector<FaultRule> mine;
  for (auto& r : rules)
    if (r.rank < 0 || r.rank == inner->rank()) mine.push_back(std::move(r));
  if (mine.empty()) return inner;
  return std::make_unique<FaultTransport>(std::move(inner), std::move(mine));
}

}  // namespace terse
