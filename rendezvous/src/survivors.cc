#include "terse/rendezvous/survivors.h"

#include "terse/rendezvous/bootstrap.h"

#include <algorithm>
#include <optional>
#include <thread>

namespace terse {
namespace rendezvous_detail {

std::string encodeDecision(const std::vector<GoneRank>& gone) {
  std::string out;
  for (const GoneRank& g : gone)
    out += std::to_string(g.rank) + " " + static_cast<char>(g.reason) + " " + std::to_string(g.by) +
           "\n";
  return out;
}

namespace {

// A canonical decimal in 0..size-1 ("0", "17"; no sign, no leading zeros).
bool parseRank(const std::string& text, int size, int* out) {
  if (text.empty() || text.size() > 9 || (text.size() > 1 && text[0] == '0')) return false;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v >= size) return false;
  *out = v;
  return true;
}

}  // namespace

Result<std::vector<GoneRank>> parseDecision(const std::string& value, int size) {
  std::vector<GoneRank> gone;
  auto bad = [&](const char* what) {
    return errorCorrupt("shrink: the survivors' decision in the store is malformed (%s): \"%s\"",
                        what, printableBytes(value.data(), value.size(), 300).c_str());
  };
  size_t at = 0;
  while (at < value.size()) {
    const size_t end = value.find('\n', at);
    if (end == std::string::npos) return bad("a line without its end");
    const std::string line = value.substr(at, end - at);
    at = end + 1;
    const size_t a = line.find(' '), b = line.find(' ', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos || b != a + 2)
      return bad("a line is not \"<rank> <reason> <by>\"");
    GoneRank g;
    if (!parseRank(line.substr(0, a), size, &g.rank) || !parseRank(line.substr(b + 1), size, &g.by))
      return bad("a rank outside the world");
    const char reason = line[a + 1];
    if (reason != 'x' && reason != 'd' && reason != 't') return bad("an unknown reason");
    g.reason = static_cast<GoneReason>(reason);
    if (!gone.empty() && gone.back().rank >= g.rank) return bad("ranks not ascending");
    gone.push_back(g);
  }
  return gone;
}

std::string encodeCheckIn(const std::vector<int>& exclude) {
  std::string out = "x";
  for (int r : exclude) out += "," + std::to_string(r);
  return out;
}

Result<std::vector<int>> parseCheckIn(const std::string& value, int size, int writer) {
  if (value.empty() || value[0] != 'x')
    return errorCorrupt("shrink: rank %d's check-in in the store is malformed: \"%s\"", writer,
                        printableBytes(value.data(), value.size(), 300).c_str());
  std::vector<int> out;
  size_t at = 1;
  while (at < value.size()) {
    if (value[at] != ',')
      return errorCorrupt("shrink: rank %d's check-in in the store is malformed: \"%s\"", writer,
                          printableBytes(value.data(), value.size(), 300).c_str());
    size_t end = value.find(',', at + 1);
    if (end == std::string::npos) end = value.size();
    int r = -1;
    if (!parseRank(value.substr(at + 1, end - at - 1), size, &r))
      return errorCorrupt("shrink: rank %d's check-in asks out a rank outside the world: \"%s\"",
                          writer, printableBytes(value.data(), value.size(), 300).c_str());
    out.push_back(r);
    at = end;
  }
  return out;
}

}  // namespace rendezvous_detail

namespace {

using rendezvous_detail::GoneRank;
using rendezvous_detail::GoneReason;

std::string describeGone(const std::vector<GoneRank>& gone) {
  if (gone.empty()) return "no rank gone";
  std::string s = gone.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < gone.size(); ++i) s += (i ? ", " : "") + std::to_string(gone[i].rank);
  s += " gone (";
  for (size_t i = 0; i < gone.size(); ++i) {
    const GoneRank& g = gone[i];
    s += (i ? "; " : "") + std::to_string(g.rank) + ": ";
    switch (g.reason) {
      case GoneReason::kExcluded: s += "asked out by rank " + std::to_string(g.by); break;
      case GoneReason::kProcessEnded:
        s += "its process ended, seen by rank " + std::to_string(g.by);
        break;
      case GoneReason::kNotSeen:
        s += "not checked in when rank " + std::to_string(g.by) + "'s timeout ran out";
        break;
    }
  }
  return s + ")";
}

// A store error during a shrink says what a shrink needs of the store.
Status storeFailed(const Status& s, Store& store) {
  std::string hint;
  if (store.describe().rfind("tcp(", 0) == 0)
    hint =
        "; a TCP store served by rank 0 ends with rank 0's process: to survive any rank, use a "
        "store that outlives the ranks (TERSE_STORE=<directory>, terse-run --store <dir>, or a "
        "store served outside the job)";
  return Status(s.code(),
                "shrink: the store " + store.describe() + " failed: " + s.message() + hint);
}

}  // namespace

Status checkShrinkExclude(int rank, int size, const std::vector<int>& exclude) {
  if (rank < 0 || rank >= size)
    return errorInvalidArgument("shrink: rank %d outside a world of %d", rank, size);
  for (int r : exclude) {
    if (r < 0 || r >= size)
      return errorInvalidArgument("shrink: exclude names rank %d, outside this world of %d ranks",
                                  r, size);
    if (r == rank)
      return errorInvalidArgument(
          "shrink: rank %d asks to exclude itself; a rank that leaves does not call shrink (the "
          "others exclude it, or leave it out when it does not check in)",
          rank);
  }
  return Status::ok();
}

Result<SurvivorAgreement> agreeOnSurvivors(Store& store, const std::string& prefix, int rank,
                                           int size, const std::vector<int>& exclude,
                                           const std::function<bool(int)>& processGone,
                                           std::chrono::milliseconds timeout) {
  using rendezvous_detail::encodeCheckIn;
  using rendezvous_detail::encodeDecision;
  using rendezvous_detail::parseCheckIn;
  using rendezvous_detail::parseDecision;
  TERSE_RETURN_IF_ERROR(checkShrinkExclude(rank, size, exclude));
  std::vector<int> asked = exclude;
  std::sort(asked.begin(), asked.end());
  asked.erase(std::unique(asked.begin(), asked.end()), asked.end());
  const std::string me = std::to_string(rank);
  auto key = [&](const char* what, int r) { return prefix + "/" + what + "/" + std::to_string(r); };
  {
    auto held = store.setIfAbsent(key("in", rank), encodeCheckIn(asked));
    if (!held.isOk()) return storeFailed(held.status(), store);
    if (held.value())
      return errorInvalidUsage(
          "shrink: rank %d checked in twice under %s (two processes with the same rank, or shrink "
          "called again on a communicator whose shrink failed)",
          rank, prefix.c_str());
  }

  // What this rank knows of each rank: present (checked in), gone (with why), or not yet.
  enum class State { kUnknown, kPresent, kGone };
  std::vector<State> state(size, State::kUnknown);
  std::vector<bool> checkedIn(size, false);
  std::vector<GoneRank> why(size);
  state[rank] = State::kPresent;
  checkedIn[rank] = true;
  auto markGone = [&](int r, GoneReason reason, int by) {
    if (state[r] == State::kGone) return;
    state[r] = State::kGone;
    why[r] = GoneRank{r, reason, by};
  };
  for (int r : asked) markGone(r, GoneReason::kExcluded, rank);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto delay = std::chrono::milliseconds(1);
  std::optional<std::string> decision;
  for (;;) {
    auto got = store.tryGet(prefix + "/decision");
    if (!got.isOk()) return storeFailed(got.status(), store);
    if (got.value()) {
      decision = std::move(got).value();
      break;
    }
    for (int r = 0; r < size; ++r) {
      if (checkedIn[r]) continue;
      // Every check-in's requests count, even one from a rank already asked out (a rank that
      // was asked out and checks in anyway learns so from the decision).
      auto in = store.tryGet(key("in", r));
      if (!in.isOk()) return storeFailed(in.status(), store);
      if (in.value()) {
        TERSE_ASSIGN_OR_RETURN(std::vector<int> theirs, parseCheckIn(*in.value(), size, r));
        checkedIn[r] = true;
        if (state[r] == State::kUnknown) state[r] = State::kPresent;
        for (int x : theirs) markGone(x, GoneReason::kExcluded, r);
        continue;
      }
      if (state[r] != State::kUnknown) continue;
      auto dead = store.tryGet(key("dead", r));
      if (!dead.isOk()) return storeFailed(dead.status(), store);
      if (dead.value()) {
        // The witness wrote its rank; anything else still says the process ended.
        int by = rank;
        const std::string& w = *dead.value();
        if (!w.empty() && w.size() < 10 &&
            std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
            std::stoi(w) < size)
          by = std::stoi(w);
        markGone(r, GoneReason::kProcessEnded, by);
      } else if (processGone && processGone(r)) {
        // Tell the other survivors, who may not share this host with it.
        auto set = store.setIfAbsent(key("dead", r), me);
        if (!set.isOk()) return storeFailed(set.status(), store);
        markGone(r, GoneReason::kProcessEnded, rank);
      }
    }
    const bool settled =
        std::none_of(state.begin(), state.end(), [](State s) { return s == State::kUnknown; });
    const bool late = std::chrono::steady_clock::now() >= deadline;
    if (settled || late) {
      std::vector<GoneRank> proposal;
      for (int r = 0; r < size; ++r) {
        if (state[r] == State::kUnknown) markGone(r, GoneReason::kNotSeen, rank);
        if (state[r] == State::kGone) proposal.push_back(why[r]);
      }
      auto held = store.setIfAbsent(prefix + "/decision", encodeDecision(proposal));
      if (!held.isOk()) return storeFailed(held.status(), store);
      decision = held.value() ? *held.value() : encodeDecision(proposal);
      break;
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(32));
  }

  TERSE_ASSIGN_OR_RETURN(std::vector<GoneRank> gone, parseDecision(*decision, size));
  SurvivorAgreement out;
  out.describe = describeGone(gone);
  std::vector<bool> isGone(size, false);
  for (const GoneRank& g : gone) {
    isGone[g.rank] = true;
    out.gone.push_back(g.rank);
    if (g.rank == rank)
      return errorRemote(
          "shrink: the survivors left rank %d out of the new world (%s); it cannot join it", rank,
          out.describe.c_str());
  }
  for (int r = 0; r < size; ++r)
    if (!isGone[r]) {
      if (r == rank) out.newRank = static_cast<int>(out.members.size());
      out.members.push_back(r);
    }

  // Every member confirms the decision before any connection is made: a member that has seen a
  // rank of the new world end since (it checked in and died), or that asked out a rank the
  // decision keeps, refuses, and so does every other member, naming it, instead of some of them
  // going on. A member that never confirms makes the others fail at their timeout, naming it.
  std::string verdict = "ok";
  for (int r : asked)
    if (!isGone[r])
      verdict =
          "rank " + me + " asked rank " + std::to_string(r) + " out, but the decision keeps it";
  for (int r : out.members)
    if (verdict == "ok" && r != rank && processGone && processGone(r))
      verdict = "rank " + me + " saw rank " + std::to_string(r) +
                "'s process end, but the decision keeps it (it died after checking in)";
  auto all = storeAllGather(store, prefix + "/confirm", out.newRank,
                            static_cast<int>(out.members.size()), verdict, timeout);
  if (!all.isOk()) {
    if (all.status().code() == StatusCode::kTimeout ||
        all.status().code() == StatusCode::kRemoteError)
      return Status(all.status().code(),
                    "shrink: confirming " + out.describe +
                        " (ranks numbered in the new world): " + all.status().message());
    return storeFailed(all.status(), store);
  }
  for (size_t i = 0; i < all.value().size(); ++i)
    if (all.value()[i] != "ok")
      return errorRemote("shrink: the survivors refuse to continue: %s; decided: %s",
                         printableBytes(all.value()[i].data(), all.value()[i].size(), 300).c_str(),
                         out.describe.c_str());
  return out;
}

}  // namespace terse
