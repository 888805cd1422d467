// ShardedOneBitAdam: OneBitAdam with ZeRO stage 1/2 sharded optimizer state. Every rank keeps a
// full replica of the (flat float32) parameters, but the moments, the frozen variance and the
// update exist only for this rank's shard, chunkRange(count, world, rank), the part terse's
// reduce-scatter hands it. docs/optim.md ("Sharded OneBitAdam") has the design and measurements.
//
// Why not plain 1-bit Adam on a shard: it compresses the preconditioned momentum
// u_i = (b1 m + (1 - b1) g_i) / d of the whole tensor on every rank, which needs m and the
// frozen denominator d for every element on every rank. Here the shard owner keeps m exactly
// and only the gradient-side term is compressed:
//  - warm-up (steps 1..W): reduce-scatter (avg) of the gradients, uncompressed; AdamW on the
//    shard; all-gather of the updated parameters. Exactly AdamW on the averaged gradient.
//  - at the end of step W the variance freezes; each owner computes, per element of its shard,
//    the power-of-two scale 2^e nearest below d = sqrt(v / c2) + eps (an int8 exponent, with a
//    sentinel for coordinates that never had a gradient), and the exponents are all-gathered
//    once: every rank then holds 1 byte per parameter instead of d's 4.
//  - compressed (steps > W): each rank sends x_i = g_i / 2^e (exact: a power of two) through a
//    compressed reduce-scatter (avg; int8 by default, error feedback optional); the owner gets
//    avg(x), multiplies by 2^e (exact again), updates m = b1 m + (1 - b1) avg(g) and takes the
//    AdamW step with the frozen v, and the parameters are all-gathered, exactly or with
//    `paramCodec` (the owner then steps on an fp32 master shard and every rank keeps the decoded
//    values). The codec so works in units within a factor 2 of Adam's own (every coordinate O(1)),
//    the property OneBitAdam's `u` gives it, while m and d never leave their owner.
// Every rank's parameters come from the same all-gather, so the replicas stay bit-identical.
//
// Memory per rank: m and v for the shard (2 x 4 bytes x count / world), the exponents (count
// bytes), the codec's worker residual when error feedback is on (4 bytes x count: the error of
// what this rank sent, which only the sender can know), the local momentum with localMomentum
// (4 bytes x count), the master shard with a lossy
// parameter all-gather (4 bytes x count / world), and a 4-byte x count scratch buffer.
//
// Not thread-safe. Every rank must create (or load) the state with the same count and options:
// the first step (or reduce()) checks that on every rank and refuses a difference there, naming
// the option. Every rank steps with the same learning rate (not checked: it is per call).
#pragma once

#include "terse/common/status.h"
#include "terse/compressors/error_feedback.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace terse {

class Communicator;

struct ShardedOneBitAdamOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weightDecay = 0.01f;  // decoupled (AdamW)
  // The codec of the reduce-scatter after warm-up (any terse spec). int8 by default: without
  // error feedback it trains as well as AdamW on the tests' tasks and keeps the state at about
  // 1/world of OneBitAdam's; onebit needs error feedback and diverged on the PyTorch MLP task
  // (docs/optim.md, "Sharded OneBitAdam").
  std::string codec = "int8";
  // Steps of uncompressed AdamW before the variance freezes (>= 1).
  int64_t warmupSteps = 100;
  // Keep a worker residual for the compressed reduce-scatter. Needed for biased codecs (onebit,
  // topk); without it the state is only the shard's (about 1/world of OneBitAdam's).
  bool errorFeedback = false;
  // The codec of the parameter all-gather after warm-up (qwZ-style): "none" (exact, default) or
  // any terse spec, e.g. "int8" or "bf16". Not "none": the owner keeps an fp32 master copy of
  // its shard (4 bytes x count / world more state), steps on it, and every rank (the owner
  // included) takes the all-gather's decoded values as its replica, so the replicas stay
  // bit-identical and the compression error never accumulates in the master.
  std::string paramCodec = "none";
  // Send each rank's own momentum instead of its gradient (after warm-up). Every rank keeps the
  // momentum of its own scaled gradients over the whole tensor (4 bytes x count more state),
  // which starts from the owners' m, all-gathered once at the freeze; the ranks' average is the
  // momentum of the averaged gradient (it is linear), so the owner takes the reduce-scatter's
  // result as m. A 1-bit codec's error then lands once in the update instead of being integrated
  // by the owner's momentum, which is what keeps onebit with error feedback stable on tasks where
  // the gradient form diverges (docs/optim.md, "Which codec").
  bool localMomentum = false;
  // Keep a copy of one other rank's shard state (its "buddy": ranks pair as (2k, 2k + 1), the
  // last three form a ring when the world is odd), refreshed at the end of every step, so that
  // shrink() can rebuild a dead rank's shard with nothing lost. Costs one partner's
  // non-replicated state in memory (m and v of its shard, its master shard, its local momentum
  // and worker residual where those options are on; on the split step, update()'s parameter
  // shard, which FSDP2 keeps nowhere else) and its changes per step on a pair
  // communicator split once (docs/optim.md, "Buddy copy and shrink"). Not in checkpoints.
  bool buddyCopy = false;
};

Status validateShardedOneBitAdamOptions(const ShardedOneBitAdamOptions& options);

class ShardedOneBitAdam {
 public:
  // State for this rank's shard of a `count`-element parameter buffer at `worldSize` ranks.
  static Result<ShardedOneBitAdam> create(size_t count, int worldSize, int rank,
                                          const ShardedOneBitAdamOptions& options);

  ShardedOneBitAdam(ShardedOneBitAdam&&) noexcept;
  ShardedOneBitAdam& operator=(ShardedOneBitAdam&&) noexcept;
  ~ShardedOneBitAdam();

  // One step at learning rate lr. params: the full replica (count floats), updated on every
  // rank; grads: this rank's own gradient (count floats, left unchanged). comm must have the
  // world size and rank the state was made for. A failed gradient reduce-scatter leaves the
  // parameters and the moments untouched; a failed parameter all-gather may leave params partly
  // written (the moments are kept as they were on the host path). params and grads are both host
  // memory, or (CUDA builds) both device memory: the state then moves to the device on the first
  // step and the kernels and collectives run on `stream`.
  Status step(Communicator& comm, float* params, const float* grads, float lr,
              void* stream = nullptr);

  // The same step split for a caller that runs the parameter all-gather itself (FSDP2, whose
  // sharded parameters are the shards): reduce() is the step's reduce-scatter (uncompressed
  // average of the gradients in warm-up; afterwards the compressed one of the scaled gradients or
  // local momenta), `reduced` receiving this rank's shardLength() values; update() is the owner's
  // step on its shard `paramShard` (shardLength() floats, updated in place) from what reduce()
  // gave, and at the freeze it all-gathers the scales. Host memory only, paramCodec "none";
  // every reduce() is followed by one update() (a second reduce() first is refused). A buffer
  // may be null where it has no elements: the shard's on a rank whose shard is empty (fewer
  // elements than ranks), every one at count 0 (as for step()'s).
  Status reduce(Communicator& comm, const float* grads, float* reduced);
  Status update(Communicator& comm, float* paramShard, const float* reduced, float lr);

  size_t count() const { return count_; }
  int worldSize() const { return world_; }
  int rank() const { return rank_; }
  size_t shardOffset() const { return offset_; }
  size_t shardLength() const { return m_.size(); }
  const ShardedOneBitAdamOptions& options() const { return options_; }
  int64_t steps() const { return steps_; }
  bool frozen() const { return frozenAt_ > 0; }
  int64_t frozenAt() const { return frozenAt_; }
  // This rank's shard of the moments (host copies, pulled from the device first if there).
  const std::vector<float>& momentum() const;
  const std::vector<float>& variance() const;
  // Bytes of persistent optimizer state on this rank (moments, exponents, residuals), and of the
  // scratch buffers the step keeps between calls.
  size_t stateBytes() const;
  size_t scratchBytes() const;
  // Of stateBytes(): the buddy copy (0 without buddyCopy or before the first refresh).
  size_t buddyBytes() const;
  // Turns the buddy copy on or off for the next steps (a state from deserialize() has it off);
  // every rank must do the same, which the next step checks.
  void setBuddyCopy(bool on);

  // After Communicator::shrink: continue on `shrunk` (the survivors, ranks renumbered densely in
  // the old order). Collective over `shrunk`: the survivors learn each other's old ranks, gather
  // every survivor's state and the dead ranks' shards (from the buddy copies, or else from
  // `lostParts`: the dead ranks' serialized parts from the caller's last checkpoint, any subset
  // on any survivor), and re-shard as deserialize() does for the smaller world. A dead rank's
  // shard from a checkpoint (or from a buddy copy a step behind) keeps that part's moments, as
  // old as it is, and drops its worker residual (stale); from a current buddy copy the result is
  // bit-identical to deserialize() of every old rank's part. When a dead rank's shard is in
  // neither, every survivor fails naming the lost old ranks, and the state is unchanged. The
  // buddy copy (if on) is rebuilt on the new world at the next step.
  Status shrink(Communicator& shrunk,
                const std::vector<std::pair<const void*, size_t>>& lostParts = {});
  // shrink()'s gathering alone, for a caller that re-shards with its own element order
  // (FSDPShardedOneBitAdam: FSDP2 lays the elements out per world size): every old rank's
  // checkpoint part as of now, indexed by old rank (the dead ranks' rebuilt as shrink() does),
  // for deserializeRemapped(); and, indexed alike, each dead rank's parameter shard where its
  // buddy copy holds one (kept by update(), whose callers have no other copy of it; empty
  // otherwise). Collective over `shrunk` as shrink() is; this state is left as it is.
  struct ShrunkParts {
    std::vector<std::vector<uint8_t>> parts;
    std::vector<std::vector<float>> params;
  };
  Result<ShrunkParts> shrinkParts(
      Communicator& shrunk, const std::vector<std::pair<const void*, size_t>>& lostParts = {});

  // This rank's part of a world-size-independent checkpoint (versioned, checksummed): options,
  // step, its shard's offset and moments, the exponents, its residual. deserialize() takes the
  // parts of every rank of the saving world (any order) and builds the state of `rank` in a
  // world of `worldSize` ranks, re-partitioning the moments by offset. Residuals are folded so
  // that what the ranks still owe the average is kept: new rank j takes
  // (newWorld / oldWorld) * sum of old ranks i with i % newWorld == j (i.e. unchanged at the
  // same world size).
  std::vector<uint8_t> serialize() const;
  static Result<ShardedOneBitAdam> deserialize(
      const std::vector<std::pair<const void*, size_t>>& parts, int worldSize, int rank);
  // The same for a caller whose element order changes with the world size (FSDP2 pads every
  // parameter's dim 0 to a multiple of it): the new state has `count` elements, element k taken
  // from the saved tensor's element source[k], or a fresh zero state where source[k] is -1 (new
  // padding). Moments, the master shard and the scales move with their elements; local momenta
  // and worker residuals become the old ranks' average on every new rank (the average the next
  // reduce-scatter injects stays the same).
  static Result<ShardedOneBitAdam> deserializeRemapped(
      const std::vector<std::pair<const void*, size_t>>& parts, int worldSize, int rank,
      size_t count, const int64_t* source);

 private:
  struct Device;
  ShardedOneBitAdam();
  Status stepHost(Communicator& comm, float* params, const float* grads, float lr);
  Status stepDevice(Communicator& comm, float* params, const float* grads, float lr, void* stream);
  // Computes the frozen exponents of this rank's shard from `v` (host copy) and all-gathers
  // them into scratch_ (as floats); the caller commits them once the step succeeded.
  Status gatherExponents(Communicator& comm, const float* v, float lr, int64_t t);
  // With localMomentum, at the freeze: the owners' m all-gathered, every rank's local momentum
  // set from it (scaled down by the exponents gathered into scratch_), into localScratch_.
  Status gatherLocalMomentum(Communicator& comm, const float* mShard);
  // The freeze's gathered state taken (exponents from scratch_, local momentum): step t.
  void commitFreeze(int64_t t);
  // The call's two buffers, each with the elements it moves (a null one is refused only where
  // that is not 0), and the learning rate.
  struct Buffer {
    const void* data;
    const char* name;
    size_t elements;
  };
  Status checkStepArguments(Communicator& comm, Buffer a, Buffer b, float lr, const char* what,
                            bool talks);
  // At the first call that talks (step or reduce) of a state made or loaded here: the ranks
  // compare their counts, steps and options (one small exact all-gather), so a mismatch is an
  // error on every rank naming it, before any collective could pair with another rank's
  // different one.
  Status agree(Communicator& comm);
  // The compressed phase's values to send: the scaled gradient, or (localMomentum) the rank's
  // new local momentum, written to x (count floats).
  void valuesToSend(const float* grads, float* x) const;
  // The owner's step on its shard from the averaged values: mNew and pNew (len floats each).
  void warmupShard(const float* gAvg, const float* p, float* mNew, float* vNew, float* pNew,
                   float lr, int64_t t) const;
  void compressedShard(const float* avg, const float* p, float* mNew, float* pNew, float lr,
                       int64_t t) const;
  void pullToHost() const;
  // The buddy copy: the group of this rank (sorted old ranks), the pair communicator, and the
  // copy of the member before this one in the group, as of step `step`.
  struct Buddy;
  // After a step (or update(), whose parameter shard `paramShard` the copy holds too).
  Status refreshBuddy(Communicator& comm, bool vChanged, const float* paramShard, bool withParams);
  std::vector<uint8_t> partOfBuddy(const std::vector<uint8_t>& own) const;

  size_t count_ = 0;
  int world_ = 1;
  int rank_ = 0;
  size_t offset_ = 0;
  ShardedOneBitAdamOptions options_;
  int64_t steps_ = 0;
  int64_t frozenAt_ = 0;
  mutable std::vector<float> m_;       // shard
  mutable std::vector<float> v_;       // shard (frozen after warm-up)
  std::vector<int8_t> scaleExp_;       // whole tensor, set at the freeze (empty before)
  mutable std::vector<float> master_;  // fp32 shard of the parameters (compressed all-gather only)
  mutable std::vector<float> localM_;  // whole tensor, this rank's own momentum (localMomentum)
  ErrorFeedback feedback_;             // whole tensor's worker residual (compressed phase)
  bool hasFeedback_ = false;
  // Scratch: the scaled gradient (count), and the shard's new m and p (until the collectives
  // succeeded).
  std::vector<float> scratch_;
  std::vector<float> shardScratch_;
  std::vector<float> localScratch_;  // the local momentum being made (until the step succeeded)
  bool reduced_ = false;             // reduce() ran, update() not yet
  bool agreed_ = false;              // agree() found every rank alike
  mutable std::unique_ptr<Device> device_;
  std::unique_ptr<Buddy> buddy_;
};

}  // namespace terse
