// Bookkeeping for the many nonblocking transfers of one collective: tags that cannot collide
// between calls, and a request list that cancels whatever is still pending when a collective
// leaves early (so no transfer can write into a buffer the caller has already reused).
#pragma once

#include "terse/transport/fault.h"
#include "terse/transport/group.h"
#include "terse/transport/transport.h"

#include <chrono>
#include <cstdint>
#include <vector>

namespace terse::detail {

// Tag layout (34 bits, kGroupTagBits, so that groups of ranks get tag spaces of their own above
// them, transport/group.h): step (1) | sequence (13) | phase (2) | index (18). Calls on one
// engine run one after another, so 8192 sequence numbers keep any two calls whose messages could
// meet apart. The step bit marks the steps of two-level collectives (two_level.cc), which run
// over the node and cross-node groups with sequences of their own: those groups share the tag
// space of the communicator whose steps they run (a communicator and its two-level groups take
// one space, so a world's 62 spaces are 62 splits whatever the layout, docs/api.md), and the bit
// keeps a step's messages from matching a call's. A sequence number with kStepSeqFlag set is a
// step's; the engine's own call numbers never have it (CollectiveEngine::nextSeq).
enum Phase : uint64_t { kPhaseReduce = 0, kPhaseGather = 1, kPhaseDescriptor = 2 };
constexpr size_t kMaxTagIndex = (size_t{1} << 18) - 1;
constexpr uint32_t kStepSeqFlag = uint32_t{1} << 31;
constexpr uint64_t makeTag(uint32_t seq, Phase phase, size_t index) {
  const uint64_t step = (seq & kStepSeqFlag) ? 1 : 0;
  return (step << 33) | (uint64_t{seq & 0x1fffu} << 20) | (uint64_t{phase} << 18) |
         (index & kMaxTagIndex);
}
// The sequence number of the next step of a two-level group whose steps `counter` counts.
inline uint32_t nextStepSeq(uint32_t& counter) {
  return kStepSeqFlag | (counter++ & ~kStepSeqFlag);
}

// TERSE_FAULT's phase=NAME filters (transport/fault.h) select these tag classes.
constexpr bool faultPhaseMatches(const char* name, Phase phase) {
  for (const auto& p : kFaultPhases) {
    bool same = true;
    for (size_t i = 0; same && (p.name[i] || name[i]); ++i) same = p.name[i] == name[i];
    if (!same) continue;
    return (makeTag(kStepSeqFlag | 0x1fffu, phase, kMaxTagIndex) & p.mask) == p.value &&
           (makeTag(0, phase, 0) & p.mask) == p.value;
  }
  return false;
}
static_assert(makeTag(kStepSeqFlag | 0x1fffu, kPhaseDescriptor, kMaxTagIndex) <= kMaxGroupTag &&
                  makeTag(kStepSeqFlag, kPhaseReduce, 0) != makeTag(0, kPhaseReduce, 0),
              "the collectives' tags must fit a group's tag space");
static_assert(faultPhaseMatches("reduce", kPhaseReduce) &&
                  faultPhaseMatches("gather", kPhaseGather) &&
                  faultPhaseMatches("descriptor", kPhaseDescriptor),
              "the collectives' tag layout and transport/fault.h's phases disagree");

class RequestList {
 public:
  // `sentBytes`, when given, accumulates the bytes of every send posted (for benchmark tables).
  RequestList(Transport& t, std::chrono::milliseconds timeout, uint64_t* sentBytes = nullptr)
      : t_(t), timeout_(timeout), sentBytes_(sentBytes) {}
  ~RequestList() { cancelAll(); }
  RequestList(const RequestList&) = delete;
  RequestList& operator=(const RequestList&) = delete;

  // Posts and remembers; returns the slot to wait on.
  Status send(int peer, uint64_t tag, const void* data, size_t bytes, size_t* slot) {
    TransportRequest* r = nullptr;
    TERSE_RETURN_IF_ERROR(t_.isend(peer, tag, data, bytes, &r));
    if (sentBytes_) *sentBytes_ += bytes;
    *slot = add({r, peer, kAnySize});
    return Status::ok();
  }
  Status recv(int peer, uint64_t tag, void* data, size_t capacity, size_t* slot) {
    return post(peer, tag, data, capacity, kAnySize, slot);
  }
  // A receive whose message must be exactly `bytes` long (the uncompressed paths, where every
  // rank agreed on the count): wait() fails a shorter message as corrupt, so stale bytes in the
  // buffer are never reduced or returned as if a peer had sent them.
  Status recvExact(int peer, uint64_t tag, void* data, size_t bytes, size_t* slot) {
    return post(peer, tag, data, bytes, bytes, slot);
  }
  // Blocks until the request in `slot` completes; *bytes gets its size.
  Status wait(size_t slot, size_t* bytes = nullptr) {
    size_t got = 0;
    Entry& e = entries_[slot];
    TransportRequest* r = e.request;
    e.request = nullptr;
    if (r == nullptr) return errorInternal("request slot %zu waited twice", slot);
    TERSE_RETURN_IF_ERROR(t_.wait(r, &got, timeout_));
    if (e.exact != kAnySize && got != e.exact)
      return errorCorrupt("rank %d sent a %zu-byte message where %zu bytes were expected", e.peer,
                          got, e.exact);
    if (bytes) *bytes = got;
    return Status::ok();
  }
  Status waitAll() {
    for (size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].request) TERSE_RETURN_IF_ERROR(wait(i));
    entries_.clear();
    return Status::ok();
  }
  void cancelAll() {
    for (Entry& e : entries_)
      if (e.request) t_.cancel(e.request), e.request = nullptr;
    entries_.clear();
  }
  void reserve(size_t n) { entries_.reserve(n); }

 private:
  static constexpr size_t kAnySize = ~size_t{0};
  struct Entry {
    TransportRequest* request;  // nullptr once waited on or cancelled
    int peer;
    size_t exact;  // a receive's required length; kAnySize: any length up to the capacity
  };
  Status post(int peer, uint64_t tag, void* data, size_t capacity, size_t exact, size_t* slot) {
    TransportRequest* r = nullptr;
    TERSE_RETURN_IF_ERROR(t_.irecv(peer, tag, data, capacity, &r));
    *slot = add({r, peer, exact});
    return Status::ok();
  }
  size_t add(Entry e) {
    entries_.push_back(e);
    return entries_.size() - 1;
  }
  Transport& t_;
  std::chrono::milliseconds timeout_;
  uint64_t* sentBytes_;
  std::vector<Entry> entries_;
};

}  // namespace terse::detail
