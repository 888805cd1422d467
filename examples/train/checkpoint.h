// Checkpoints of the training example: the model and optimizer (written once, by rank 0) and
// every rank's error-feedback state (one file per rank), loadable at the same world size
// (bit-exact) or at another one (the residuals re-partitioned, see repartitionFeedback).
//
// Layout of a checkpoint directory:
//   model.bin          step, world size, codec, parameters, momentum
//   feedback-<r>.bin   rank r's ErrorFeedback objects (one per tensor or one fused bucket),
//                      each in ErrorFeedback::serialize() form: worker residual (whole tensor)
//                      and server residual (the chunk rank r owned, with its offset)
// Every file ends in a checksum and is written under a temporary name, then renamed.
#pragma once

#include "terse/common/status.h"
#include "terse/compressors/error_feedback.h"

#include <cstdint>
#include <string>
#include <vector>

namespace terse::train {

struct ModelState {
  uint64_t step = 0;  // optimizer steps taken
  int world = 0;      // world size that wrote it
  std::string codec;  // canonical codec spec of the feedback files ("" when there are none)
  std::vector<float> params, momentum;
};

Status saveModel(const std::string& dir, const ModelState& state);
Result<ModelState> loadModel(const std::string& dir);

Status saveFeedback(const std::string& dir, int rank, const std::vector<ErrorFeedback>& feedback);
Result<std::vector<ErrorFeedback>> loadFeedbackFile(const std::string& dir, int rank);

// The files' bytes, which the functions above write and read: the decoders are pure functions
// of a file's contents (`what` names it in errors), so fuzz/fuzz_checkpoint.cc drives exactly
// what a resume reads. Errors are kCorrupt (or ErrorFeedback::deserialize's) and say where.
std::vector<uint8_t> encodeModel(const ModelState& state);
Result<ModelState> decodeModel(const std::vector<uint8_t>& bytes, const std::string& what);
std::vector<uint8_t> encodeFeedback(int rank, const std::vector<ErrorFeedback>& feedback);
// Refuses a file another rank wrote (its rank field is not `rank`).
Result<std::vector<ErrorFeedback>> decodeFeedback(const std::vector<uint8_t>& bytes,
                                                  const std::string& what, int rank);

// Rebuilds rank newRank's error feedback for one tensor in a world of newWorld from the states
// every rank of the old world saved for it (saved[i] from old rank i, all for the same codec
// and size):
//  - server residual: the old ranks' chunks put back into a full-tensor view, then the chunk
//    that allreduce gives newRank in the new world (allreduceChunkRange,
//    collectives/collective_op.h) cut out of it. Server residuals live in the units of the
//    averaged result, so they move unchanged.
//  - worker residual: the mean of the old ranks' worker residuals, on every new rank. With
//    ReduceOp::kAvg the correction still owed to the averaged gradient is
//    (1/n_old) * sum(old worker residuals); giving each of the n_new ranks the mean keeps that
//    total exactly, whatever n_new is (mapping old ranks onto new ones would drop or double
//    residuals when the world shrinks or grows).
// Fails with a message naming the mismatch when the saved states disagree or do not tile the
// tensor.
Result<ErrorFeedback> repartitionFeedback(const std::vector<const ErrorFeedback*>& saved,
                                          int newWorld, int newRank);

// Loads this rank's error feedback from a checkpoint written by `savedWorld` ranks: its own
// file as is when the world size is unchanged, else every old rank's file re-partitioned.
Result<std::vector<ErrorFeedback>> loadFeedback(const std::string& dir, int savedWorld, int world,
                                                int rank);

}  // namespace terse::train
