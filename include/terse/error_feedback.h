// Error-feedback state for one tensor (or one fused bucket), owned by the caller.
//
// 1-bit SGD / EF-SGD / DGC keep a residual e per tensor: send C(g + e), keep e = (g + e) -
// D(C(g + e)). In terse's compressed allreduce there are two residuals: the worker residual over
// the whole tensor (first compression, every rank) and the server residual over the chunk this
// rank owns and re-compresses for the allgather. Both live here so the caller can checkpoint
// them with the model and load them again.
//
// Not thread-safe: one collective at a time may use an ErrorFeedback object.
//
// Public (installed): callers create, checkpoint and restore these. prepareFor(), server() and
// the device accessors are how terse's own collectives use the residuals; callers need not.
#pragma once

#include <terse/status.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace terse {

class ErrorFeedback {
 public:
  ErrorFeedback();
  ~ErrorFeedback();
  ErrorFeedback(const ErrorFeedback& other);
  ErrorFeedback& operator=(const ErrorFeedback& other);
  ErrorFeedback(ErrorFeedback&& other) noexcept;
  ErrorFeedback& operator=(ErrorFeedback&& other) noexcept;

  // For a tensor of `count` elements compressed with `codecSpec` (canonicalized; an invalid spec
  // is an error). Residuals start at zero. An auto policy spec ("auto:max=onebit") makes a state
  // that serves whichever codec the policy picks; the residuals reset when the pick changes.
  static Result<ErrorFeedback> create(const std::string& codecSpec, size_t count);

  size_t count() const { return worker_.size(); }
  const std::string& codecSpec() const { return spec_; }

  // kInvalidArgument naming both sides when this object was made for another codec or size
  // (an auto state accepts each codec its policy allows).
  Status checkCompatible(const std::string& codecSpec, size_t count) const;

  // Called by the collectives before a call with the concrete codec `codecSpec`: residuals left
  // by a different codec are reset (they mean something else), so only auto states ever reset.
  // `part` is true for an allgather, whose state covers this rank's part of the tensor only.
  void prepareFor(const std::string& codecSpec, bool part = false);
  // Whether an allgather has used this state (since it was made or copied; a checkpoint does not
  // record it). Such a state is sized for this rank's part, which changes with the world size,
  // so relayoutFeedback (communicator.h) refuses it.
  bool usedForAllgather() const { return usedForPart_; }

  // The worker residual: count() floats (host memory).
  float* worker() {
    pullToHost();
    return worker_.data();
  }
  const float* worker() const {
    pullToHost();
    return worker_.data();
  }

  // The server residual for the chunk [offset, offset + length) of the tensor that this rank
  // owns, given the world size. A rank may own several disjoint chunks of one tensor (the
  // segments of a pipelined two-level allreduce each give it one), and each keeps its residual.
  // A chunk that overlaps a kept one without being it, or another world size, means another
  // partition: the residuals it overlaps (all of them, for another world size) are dropped and
  // it starts at zero, so stale residuals of another partition are never applied.
  // nullptr (with a warning) when the chunk does not fit the tensor; an empty chunk may give
  // nullptr too, so the collectives use serverChecked(), which tells the two apart. The pointer
  // stays valid until a chunk overlapping this one, or of another world size, is asked for.
  float* server(int worldSize, size_t offset, size_t length);
  // As server(), but a chunk outside the tensor is kInvalidArgument and an empty chunk (a
  // rank whose share of a short tensor is nothing) is a valid, possibly null, pointer.
  Result<float*> serverChecked(int worldSize, size_t offset, size_t length);
  // The kept chunks: the first one's offset (0 if none; an empty chunk asked for alone is kept
  // as the rank's partition), their number and their total length.
  size_t serverOffset() const { return regions_.empty() ? 0 : regions_.front().offset; }
  size_t serverRegions() const { return regions_.size(); }
  size_t serverLength() const;
  int serverWorldSize() const { return serverWorld_; }

  // For moving a state to another world (relayoutFeedback in communicator.h; checkpoints that
  // load at another world size): copyServerTo writes each kept chunk's residual at its offset of
  // `full` (count() floats) and leaves the other elements alone. setServerFrom replaces every
  // kept chunk with the single chunk [offset, offset + length) of world `worldSize`, its values
  // read from `full` at the same offsets (a null `full` means zeros); kInvalidArgument, state
  // unchanged, when the chunk does not fit the tensor or the world size is not positive.
  void copyServerTo(float* full) const;
  Status setServerFrom(int worldSize, size_t offset, size_t length, const float* full);

  // Zeroes both residuals (keeps sizes).
  void reset();

  // Device (CUDA) residuals, for collectives on device buffers. The residuals live in one place
  // at a time: these move them to the device (stream-ordered on `stream`) and return device
  // pointers; the host accessors, serialize() and copies move them back (synchronously, so the
  // caller must have finished its stream work first, as the collectives do before returning).
  // kUnsupported in builds without CUDA; kSystemError when the device allocation fails.
  Result<float*> deviceWorker(void* stream);
  Result<float*> deviceServer(int worldSize, size_t offset, size_t length, void* stream);
  bool residualsOnDevice() const;

  // Checkpoint form: versioned, little-endian, self-describing (docs/wire-format.md). The
  // decoder validates everything and fails on truncation or corruption.
  std::vector<uint8_t> serialize() const;
  static Result<ErrorFeedback> deserialize(const void* bytes, size_t size);

 private:
  struct DeviceResiduals;
  // Brings device residuals back into worker_/server_ (no-op when they are on the host). Moving
  // the residuals does not change the state's value, hence const and the mutable members.
  void pullToHost() const;
  Status pushToDevice(void* stream);

  // One owned chunk's server residual.
  struct Region {
    size_t offset = 0;
    std::vector<float> values;
  };

  std::string spec_;
  std::string activeSpec_;  // the concrete codec of the last call (auto states)
  mutable std::vector<float> worker_;
  mutable std::vector<Region> regions_;              // disjoint, by offset
  mutable std::unique_ptr<DeviceResiduals> device_;  // null until the first device call
  int serverWorld_ = 0;
  bool usedForPart_ = false;  // see usedForAllgather()
};

}  // namespace terse
