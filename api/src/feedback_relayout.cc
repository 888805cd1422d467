// relayoutFeedback (communicator.h): error-feedback residuals follow the survivors of a shrink.
//
// Two allgathers agree on what every survivor holds (its old rank, its states' codecs, counts and
// server partitions, and any error it found in its own arguments), so every survivor reaches the
// same verdict from the same facts and either all go on or all fail alike; then one uncompressed
// allreduce (sum) of a zero-filled view of all tensors, into which each survivor has written the
// server chunks it kept, gives every survivor the old world's server residuals with the dead
// ranks' chunks zero. Old chunks are disjoint (one owner per element in a world), so each
// element's sum has at most one non-zero term and is exact. The states change only after that.
#include "terse/collectives/collective_op.h"
#include "terse/collectives/partition.h"
#include "terse/common/status.h"
#include "terse/communicator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

namespace terse {
namespace {

// The records travel as float32 through an uncompressed allgather. Each float carries 16 bits of
// an integer (exactly representable), so no bit pattern (a NaN's) depends on the transport.
class Record {
 public:
  void put(uint64_t v) {
    for (int k = 0; k < 4; ++k) data_.push_back(static_cast<float>((v >> (16 * k)) & 0xffff));
  }
  void put(const std::string& text) {
    put(text.size());
    for (unsigned char c : text) data_.push_back(static_cast<float>(c));
  }
  std::vector<float>& data() { return data_; }

 private:
  std::vector<float> data_;
};

// Reads a record back; a short or malformed one (a peer of another terse version) reads as
// zeros and sets bad(), which fails the call on every rank.
class Reader {
 public:
  Reader(const float* at, size_t size) : at_(at), size_(size) {}
  uint64_t u64() {
    uint64_t v = 0;
    for (int k = 0; k < 4; ++k) v |= piece(0xffff) << (16 * k);
    return v;
  }
  std::string text() {
    const uint64_t n = u64();
    std::string out;
    if (n > size_ - used_) {
      bad_ = true;
      return out;
    }
    for (uint64_t i = 0; i < n; ++i) out.push_back(static_cast<char>(piece(0xff)));
    return out;
  }
  bool bad() const { return bad_; }

 private:
  uint64_t piece(uint64_t max) {
    if (used_ >= size_) {
      bad_ = true;
      return 0;
    }
    const float f = at_[used_++];
    if (!(f >= 0.0f && f <= static_cast<float>(max)) || f != static_cast<float>(uint64_t(f))) {
      bad_ = true;
      return 0;
    }
    return static_cast<uint64_t>(f);
  }
  const float* at_;
  size_t size_;
  size_t used_ = 0;
  bool bad_ = false;
};

// What one survivor holds, as its record says.
struct StateInfo {
  std::string spec;
  uint64_t count = 0;
  uint64_t serverWorld = 0;
  bool allgather = false;
};
struct Holding {
  std::string error;  // what this survivor found wrong with its own arguments ("" when nothing)
  uint64_t oldRank = 0, oldWorld = 0;
  std::vector<StateInfo> states;
};

Holding describe(int oldRank, int oldWorld, const std::vector<ErrorFeedback*>& feedback) {
  Holding h;
  h.oldRank = oldRank < 0 ? 0 : static_cast<uint64_t>(oldRank);
  h.oldWorld = oldWorld < 0 ? 0 : static_cast<uint64_t>(oldWorld);
  if (oldWorld <= 0 || oldRank < 0 || oldRank >= oldWorld)
    h.error = "old rank " + std::to_string(oldRank) + " of a world of " + std::to_string(oldWorld) +
              " is out of range";
  for (size_t i = 0; i < feedback.size(); ++i) {
    const ErrorFeedback* ef = feedback[i];
    StateInfo s;
    if (ef == nullptr) {
      if (h.error.empty()) h.error = "state " + std::to_string(i) + " is null";
    } else {
      s.spec = ef->codecSpec();
      s.count = ef->count();
      s.serverWorld = static_cast<uint64_t>(std::max(0, ef->serverWorldSize()));
      s.allgather = ef->usedForAllgather();
    }
    h.states.push_back(std::move(s));
  }
  return h;
}

std::vector<float> encode(const Holding& h) {
  Record r;
  r.put(h.error);
  r.put(h.oldRank);
  r.put(h.oldWorld);
  r.put(h.states.size());
  for (const StateInfo& s : h.states) {
    r.put(s.spec);
    r.put(s.count);
    r.put(s.serverWorld);
    r.put(s.allgather ? 1 : 0);
  }
  return std::move(r.data());
}

bool decode(const float* at, size_t size, Holding* h) {
  Reader in(at, size);
  h->error = in.text();
  h->oldRank = in.u64();
  h->oldWorld = in.u64();
  const uint64_t n = in.u64();
  if (in.bad() || n > size) return false;
  for (uint64_t i = 0; i < n && !in.bad(); ++i) {
    StateInfo s;
    s.spec = in.text();
    s.count = in.u64();
    s.serverWorld = in.u64();
    s.allgather = in.u64() != 0;
    h->states.push_back(std::move(s));
  }
  return !in.bad();
}

// The verdict every survivor reaches alike from the same records: ok, or what is wrong.
Status judge(const std::vector<Holding>& all) {
  const auto who = [&](size_t r) {
    return "rank " + std::to_string(r) + " (old rank " + std::to_string(all[r].oldRank) + ")";
  };
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].error.empty())
      return errorInvalidArgument("%s: %s", who(r).c_str(), all[r].error.c_str());
  const uint64_t oldWorld = all[0].oldWorld;
  if (oldWorld < all.size())
    return errorInvalidArgument("the old world of %llu ranks cannot have %zu survivors",
                                static_cast<unsigned long long>(oldWorld), all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].oldWorld != oldWorld)
      return errorInvalidArgument("%s says the old world had %llu ranks, rank 0 says %llu",
                                  who(r).c_str(), static_cast<unsigned long long>(all[r].oldWorld),
                                  static_cast<unsigned long long>(oldWorld));
    // A shrink keeps the old order, so old ranks rise with the new ones; anything else is a
    // wrong oldRank (two survivors claiming one, or ranks mixed up).
    if (r > 0 && all[r].oldRank <= all[r - 1].oldRank)
      return errorInvalidArgument(
          "%s follows %s: old ranks must rise with the new ranks (a shrink keeps the order); is "
          "oldRank this process's rank in the old world?",
          who(r).c_str(), who(r - 1).c_str());
    if (all[r].states.size() != all[0].states.size())
      return errorInvalidArgument("%s passes %zu states, rank 0 passes %zu", who(r).c_str(),
                                  all[r].states.size(), all[0].states.size());
  }
  for (size_t i = 0; i < all[0].states.size(); ++i) {
    const StateInfo& first = all[0].states[i];
    for (size_t r = 0; r < all.size(); ++r) {
      const StateInfo& s = all[r].states[i];
      if (s.allgather)
        return errorInvalidArgument(
            "state %zu of %s was used by an allgather: it holds that rank's part of the tensor, "
            "whose size changes with the world, so it cannot be re-laid out; make a new state "
            "for the new part (ErrorFeedback::create with Communicator::partOf's length)",
            i, who(r).c_str());
      if (s.spec != first.spec || s.count != first.count)
        return errorInvalidArgument(
            "state %zu: %s has codec '%s' and %llu elements, rank 0 has codec '%s' and %llu: "
            "pass the same tensors' states in the same order on every survivor",
            i, who(r).c_str(), s.spec.c_str(), static_cast<unsigned long long>(s.count),
            first.spec.c_str(), static_cast<unsigned long long>(first.count));
    }
  }
  return Status::ok();
}

}  // namespace

Status relayoutFeedback(Communicator& shrunk, int oldRank, int oldWorld,
                        const std::vector<ErrorFeedback*>& feedback) {
  const int n = shrunk.size(), me = shrunk.rank();
  // Uncompressed, no feedback, and flat: auto would time both algorithms at this size first,
  // extra calls of the view's size for an exchange made once.
  CollectiveOptions plain;
  plain.algorithm = "flat";
  const auto fail = [](const Status& s) { return s.withContext("relayoutFeedback"); };

  // The view of every tensor's server residuals, the states one after another, made before the
  // exchange: a survivor short of memory says so in its record, and every survivor then fails
  // alike, rather than the others waiting in the allreduce for one that threw.
  Holding own = describe(oldRank, oldWorld, feedback);
  std::vector<size_t> base;
  size_t total = 0;
  for (const ErrorFeedback* ef : feedback) {
    base.push_back(total);
    const size_t count = ef ? ef->count() : 0;
    if (own.error.empty() && count > kMaxCollectiveElements - total)
      own.error = "the states hold more than 2^60 elements together";
    if (own.error.empty()) total += count;
  }
  std::vector<float> view;
  if (own.error.empty()) {
    try {
      view.assign(total, 0.0f);
    } catch (const std::bad_alloc&) {
      own.error = "out of memory for the view of " + std::to_string(total) + " float residuals";
    }
  }

  // 1. Every survivor's record: first their lengths (one float each), then the records padded
  //    to the longest.
  const std::vector<float> mine = encode(own);
  std::vector<float> lengths(static_cast<size_t>(n), 0.0f);
  {
    std::vector<float> send(1, static_cast<float>(mine.size()));
    if (mine.size() >= (size_t{1} << 24))
      send[0] = -1.0f;  // too long to count exactly in a float: every rank refuses below
    Status s =
        shrunk.allgather(send.data(), lengths.data(), lengths.size(), DataType::kFloat32, plain);
    if (!s.isOk()) return fail(s);
  }
  size_t longest = 0;
  for (int r = 0; r < n; ++r) {
    if (lengths[r] == -1.0f)
      return fail(errorInvalidArgument("rank %d passes too many states for one call", r));
    // A peer's length is checked before it becomes a size: NaN, a fraction or anything past
    // the bound the sender keeps to is a record of another version, or corrupt.
    if (!(lengths[r] >= 0.0f && lengths[r] < 16777216.0f) || lengths[r] != std::floor(lengths[r]))
      return fail(
          errorInvalidUsage("rank %d's record length is malformed (another terse version?)", r));
    longest = std::max(longest, static_cast<size_t>(lengths[r]));
  }
  std::vector<float> records(longest * static_cast<size_t>(n), 0.0f);
  {
    std::vector<float> send(longest, 0.0f);
    std::copy(mine.begin(), mine.end(), send.begin());
    Status s =
        shrunk.allgather(send.data(), records.data(), records.size(), DataType::kFloat32, plain);
    if (!s.isOk()) return fail(s);
  }
  std::vector<Holding> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    if (!decode(records.data() + static_cast<size_t>(r) * longest, static_cast<size_t>(lengths[r]),
                &all[r]))
      return fail(errorInvalidUsage("rank %d's record is malformed (another terse version?)", r));
  TERSE_RETURN_IF_ERROR(fail(judge(all)));

  // 2. The survivors agree, so every one has the same counts, total and view size.
  // Server residuals of another partition than the old world's flat allreduce contribute
  // nothing (those elements restart from zero, as at any change of partition): the two-level
  // allreduce keeps them per cross-node lane (a world of as many ranks as nodes), and a state
  // that an earlier relayout reached while another survivor's failed holds the new world's.
  // Each survivor decides for its own chunks only, so the sum stays exact either way.
  for (size_t i = 0; i < feedback.size(); ++i)
    if (feedback[i]->serverWorldSize() == oldWorld)
      feedback[i]->copyServerTo(view.data() + base[i]);
  if (total > 0) {
    Status s = shrunk.allreduce(view.data(), view.data(), total, DataType::kFloat32, ReduceOp::kSum,
                                plain);
    if (!s.isOk()) return fail(s);
  }

  // 3. Each state keeps the chunk it owns in the new world; the worker residual stays.
  for (size_t i = 0; i < feedback.size(); ++i) {
    const auto chunk = Communicator::allreduceChunk(feedback[i]->count(), n, me);
    TERSE_RETURN_IF_ERROR(
        fail(feedback[i]->setServerFrom(n, chunk.first, chunk.second, view.data() + base[i])));
  }
  return Status::ok();
}

}  // namespace terse
