// Two-level allreduce: exact inside a node, compressed between nodes.
//
// For a world of N nodes with L ranks each, rank (node k, local index c), tensor of `count`
// elements, slice c = chunkRange(count, L, c):
//   1. inside the node, reduce-scatter the tensor widened to float32 with `none` (float32 on the
//      wire, so the node's sum is exact float32 arithmetic in the ring's order); local rank c
//      ends with the node's sum of slice c. avg multiplies it by 1/(N*L) here.
//   2. across nodes, the ranks of local index c allreduce slice c among themselves with the
//      call's codec: compressed codecs on the float32 slice (error feedback on the slice's own
//      positions of the caller's residuals), `none` on the slice converted to the caller's type
//      (the caller's type on the wire, as flat `none` sends). Every local index drives its own
//      share of the node's traffic, and each node sends 1/L of what one flat rank sends.
//   3. inside the node, allgather the slices (the caller's type, `none`).
// The cross-node allreduce gives the ranks of one local index bit-identical slices, and the
// node's allgather copies bytes, so every rank of the world ends bit-identical. Each step is an
// existing algorithm run by the group's own engine over a group transport (transport/group.h).
#include "terse/collectives/engine.h"

#include "typed.h"

namespace terse {

Status CollectiveEngine::runStep(CollectiveEngine& group, const CollectiveOp& step) {
  const uint64_t before = group.bytesSent_;
  const uint32_t seq = group.seq_++;
  Status s = group.runAgreedGuarded(step, seq);
  bytesSent_ += group.bytesSent_ - before;
  compressSeconds_ += group.compressSeconds_;
  reduceSeconds_ += group.reduceSeconds_;
  group.compressSeconds_ = group.reduceSeconds_ = 0;
  return s;
}

Status CollectiveEngine::twoLevelAllreduce(const CollectiveOp& op) {
  TwoLevel& groups = *twoLevel_;
  const int localSize = groups.local->transport().size();
  const int localRank = groups.local->transport().rank();
  const size_t es = dataTypeSize(op.dtype);
  const Range slice = chunkRange(op.count, localSize, localRank);
  const bool compressed = op.codec->id() != CodecId::kNone;

  // Step 1: the node's float32 sum of this rank's slice.
  const float* wide = static_cast<const float*>(op.send);
  if (op.dtype != DataType::kFloat32) {
    auto* widened = reinterpret_cast<float*>(scratch(7, op.count * sizeof(float)));
    timed(reduceSeconds_, [&] {
      detail::toFloat(op.send, op.dtype, widened, op.count);
      return 0;
    });
    wide = widened;
  }
  auto* sum = reinterpret_cast<float*>(scratch(8, slice.length * sizeof(float)));
  CollectiveOp step;
  step.kind = CollectiveKind::kReduceScatter;
  step.send = wide;
  step.recv = sum;
  step.count = op.count;
  step.dtype = DataType::kFloat32;
  step.op = ReduceOp::kSum;
  step.codec = groups.none.get();
  step.algorithm = Algorithm::kFlat;
  TERSE_RETURN_IF_ERROR(
      runStep(*groups.local, step).withContext("two-level allreduce, inside the node"));
  if (op.op == ReduceOp::kAvg)
    detail::fromFloat(sum, 1.0f / static_cast<float>(transport_.size()), DataType::kFloat32, sum,
                      slice.length);

  // Step 2: the slice across nodes.
  auto* out = static_cast<uint8_t*>(op.recv) + slice.begin * es;
  step = CollectiveOp{};
  step.kind = CollectiveKind::kAllReduce;
  step.count = slice.length;
  step.op = ReduceOp::kSum;
  step.codec = op.codec;
  step.algorithm = Algorithm::kFlat;
  step.policyWork = op.policyWork;
  if (compressed) {
    step.send = sum;
    step.recv = sum;
    step.dtype = DataType::kFloat32;
    step.feedback = op.feedback;
    step.feedbackOffset = op.feedbackOffset + slice.begin;
    TERSE_RETURN_IF_ERROR(
        runStep(*groups.cross, step).withContext("two-level allreduce, across nodes"));
    detail::fromFloat(sum, 1.0f, op.dtype, out, slice.length);
  } else {
    detail::fromFloat(sum, 1.0f, op.dtype, out, slice.length);
    step.send = out;
    step.recv = out;
    step.dtype = op.dtype;
    TERSE_RETURN_IF_ERROR(
        runStep(*groups.cross, step).withContext("two-level allreduce, across nodes"));
  }

  // Step 3: every slice to every rank of the node (in place: this rank's part of recv).
  step = CollectiveOp{};
  step.kind = CollectiveKind::kAllGather;
  step.send = out;
  step.recv = op.recv;
  step.count = op.count;
  step.dtype = op.dtype;
  step.codec = groups.none.get();
  step.algorithm = Algorithm::kFlat;
  return runStep(*groups.local, step).withContext("two-level allreduce, inside the node");
}

}  // namespace terse
