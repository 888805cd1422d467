// Who is left after a failure: the survivors of a world agree, through the store, on the ranks
// that are gone, so that they can build a smaller world (Communicator::shrink, docs/reliability.md
// "Shrinking after a failure").
//
// The store decides. Each survivor checks in under <prefix>/in/<rank> (with the ranks it asks to
// leave out), then watches the other ranks' check-ins until every rank has either checked in or
// is known gone: asked out by a survivor, seen dead (a peer on this host whose process has ended,
// published under <prefix>/dead/<rank> so the other survivors need not wait for it either), or
// not checked in when the timeout ran out. It then proposes that gone set under <prefix>/decision
// with set-if-absent: the first proposal wins and every survivor adopts it, so no two survivors
// can continue with different worlds. A rank the decision leaves out (slow past the timeout, or
// asked out) gets an error when it looks, never a place in the new world.
#pragma once

#include "terse/common/status.h"
#include "terse/rendezvous/store.h"

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace terse {

struct SurvivorAgreement {
  std::vector<int> gone;     // old ranks left out, ascending
  std::vector<int> members;  // old ranks of the new world, ascending (world order kept)
  int newRank = -1;          // this rank's index in members
  std::string describe;      // "ranks 1, 3 gone (1: process ended, seen by rank 0; ...)"
};

// `rank` of `size` (the old world) agrees with the other survivors under `prefix` (fresh for each
// shrink, the same on every survivor). `exclude`: old ranks this survivor asks to leave out
// (in range, not itself). `processGone(r)`: true when this process can see that rank r's process
// has ended. Each phase waits at most `timeout`. Errors: kInvalidArgument for a bad exclude list
// (before checking in: the others then leave this rank out at their timeout), kRemoteError when
// the decision leaves this rank out (saying why and who decided), the store's own errors (a TCP
// store whose server died) with the context that the shrink needs a store that outlives ranks.
Result<SurvivorAgreement> agreeOnSurvivors(Store& store, const std::string& prefix, int rank,
                                           int size, const std::vector<int>& exclude,
                                           const std::function<bool(int)>& processGone,
                                           std::chrono::milliseconds timeout);

// The exclude list's own check (agreeOnSurvivors makes it first): kInvalidArgument for a rank
// outside 0..size-1 or `rank` itself. A refusal checks nothing in, so the call can be retried.
Status checkShrinkExclude(int rank, int size, const std::vector<int>& exclude);

namespace rendezvous_detail {

// Why a rank is gone, as written in a decision.
enum class GoneReason : char { kExcluded = 'x', kProcessEnded = 'd', kNotSeen = 't' };

struct GoneRank {
  int rank = -1;
  GoneReason reason = GoneReason::kNotSeen;
  int by = -1;  // the survivor that asked it out or saw it end, or that proposed the decision
};

// "<rank> <reason> <by>\n" per gone rank, ascending; parse checks what another process wrote
// (kCorrupt naming the key's writer on anything else: ranks outside 0..size-1, repeated or
// unordered ranks).
std::string encodeDecision(const std::vector<GoneRank>& gone);
Result<std::vector<GoneRank>> parseDecision(const std::string& value, int size);
// A check-in: the ranks its writer asks out, "x" then ",r" for each.
std::string encodeCheckIn(const std::vector<int>& exclude);
Result<std::vector<int>> parseCheckIn(const std::string& value, int size, int writer);

}  // namespace rendezvous_detail
}  // namespace terse
