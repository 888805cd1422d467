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
// node's allgather copies bytes, so every rank of the world ends bit-identical. Each step is a
// flat unit (runFlat) on a child context over a group transport (transport/group.h): the node's
// or the cross-node group's, sharing the parent's workspaces and counters (the two-level slots
// differ from every flat one). No step agrees again: the parent call's agreement covers them.
#include "algorithm.h"

#include "typed.h"

#include <algorithm>
#include <cstring>

namespace terse {

namespace detail {

namespace {

// One step on a group's context: the flat unit for it, at the group's next sequence number.
Status runStep(const AlgorithmContext& group, uint32_t& seq, const CollectiveOp& step) {
  return runFlat(group, step, seq++);
}

// Step 1 of allreduce and reduce-scatter: the node's float32 sum, by the ring's reduce-scatter
// core run in place on `work` (`count` float32 elements in this call's own workspace, which it
// overwrites): no copy into the ring unit's own float buffer, and the sum is read where the ring
// left it. Returns this rank's summed elements (its chunk of `work`); avg scales them here.
Result<float*> nodeSum(const TwoLevelContext& t, const CollectiveOp& op, float* work, size_t count,
                       const char* what) {
  TERSE_RETURN_IF_ERROR(
      ringReduceScatterCore(t.node, work, count, DataType::kFloat32, (*t.nodeSeq)++)
          .withContext(std::string("two-level ") + what + ", inside the node"));
  const Range own = chunkRange(count, t.node.transport().size(), t.node.transport().rank());
  float* sum = work + own.begin;
  if (op.op == ReduceOp::kAvg)
    t.world.arithmetic(Arithmetic::kConvert, own.length, [&] {
      fromFloat(sum, 1.0f / static_cast<float>(t.world.transport().size()), DataType::kFloat32, sum,
                own.length);
    });
  return sum;
}

}  // namespace

Status twoLevelAllreduce(const TwoLevelContext& t, const CollectiveOp& op) {
  // Nothing to move (every rank agreed on the count, so every group skips its steps alike),
  // and the empty workspaces would be null pointers.
  if (op.count == 0) return Status::ok();
  const int localSize = t.node.transport().size();
  const int localRank = t.node.transport().rank();
  const size_t es = dataTypeSize(op.dtype);
  const Range slice = chunkRange(op.count, localSize, localRank);
  const bool compressed = op.codec->id() != CodecId::kNone;

  // Step 1: the node's float32 sum of this rank's slice, on the input widened (or, for float32,
  // copied: the caller's send buffer is not ours to overwrite) into this call's workspace.
  auto* wide =
      reinterpret_cast<float*>(t.world.scratch(Workspace::kNodeInput, op.count * sizeof(float)));
  t.world.arithmetic(Arithmetic::kConvert, op.count,
                     [&] { toFloat(op.send, op.dtype, wide, op.count); });
  TERSE_ASSIGN_OR_RETURN(float* sum, nodeSum(t, op, wide, op.count, "allreduce"));

  // Step 2: the slice across nodes.
  auto* out = static_cast<uint8_t*>(op.recv) + slice.begin * es;
  CollectiveOp step;
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
        runStep(t.cross, *t.crossSeq, step).withContext("two-level allreduce, across nodes"));
    t.world.arithmetic(Arithmetic::kConvert, slice.length,
                       [&] { fromFloat(sum, 1.0f, op.dtype, out, slice.length); });
  } else {
    t.world.arithmetic(Arithmetic::kConvert, slice.length,
                       [&] { fromFloat(sum, 1.0f, op.dtype, out, slice.length); });
    step.send = out;
    step.recv = out;
    step.dtype = op.dtype;
    TERSE_RETURN_IF_ERROR(
        runStep(t.cross, *t.crossSeq, step).withContext("two-level allreduce, across nodes"));
  }

  // Step 3: every slice to every rank of the node (in place: this rank's part of recv).
  step = CollectiveOp{};
  step.kind = CollectiveKind::kAllGather;
  step.send = out;
  step.recv = op.recv;
  step.count = op.count;
  step.dtype = op.dtype;
  step.codec = t.none;
  step.algorithm = Algorithm::kFlat;
  return runStep(t.node, *t.nodeSeq, step).withContext("two-level allreduce, inside the node");
}

namespace {

// Residuals of the caller's ErrorFeedback moved into a scratch state laid out as a step's
// tensor (packed parts, padding), and back: reduce-scatter and allgather steps see their parts in
// another order and padded, while the caller's residuals stay at the tensor's own positions (so
// they keep their meaning for flat calls and other layouts). Padding residuals start at zero
// each call and are dropped.
struct ResidualView {
  std::vector<std::pair<size_t, size_t>> moves;  // (caller's position, step's position)
  std::vector<size_t> lengths;

  void add(size_t callerAt, size_t stepAt, size_t length) {
    moves.emplace_back(callerAt, stepAt);
    lengths.push_back(length);
  }
  Status load(ErrorFeedback& caller, ErrorFeedback& step) const {
    const float* from = caller.worker();
    float* to = step.worker();
    for (size_t i = 0; i < moves.size(); ++i)
      std::copy(from + moves[i].first, from + moves[i].first + lengths[i], to + moves[i].second);
    return Status::ok();
  }
  void store(ErrorFeedback& step, ErrorFeedback& caller) const {
    const float* from = step.worker();
    float* to = caller.worker();
    for (size_t i = 0; i < moves.size(); ++i)
      std::copy(from + moves[i].second, from + moves[i].second + lengths[i], to + moves[i].first);
  }
};

// The cross-node step's error-feedback state for `count` elements of `spec`: the engine's, made
// again only when the codec or the size changes and otherwise zeroed (what matters is loaded
// from the caller's state each call; padding starts at zero).
Result<ErrorFeedback*> stepFeedback(ErrorFeedback& kept, const std::string& spec, size_t count) {
  if (kept.codecSpec() != spec || kept.count() != count) {
    TERSE_ASSIGN_OR_RETURN(kept, ErrorFeedback::create(spec, count));
  } else {
    kept.reset();
  }
  return &kept;
}

}  // namespace

// Reduce-scatter: rank w's part is chunkRange(count, W, w). The parts are packed by (local index,
// node), each padded to m = ceil(count / W) elements, so that both steps split evenly:
//   1. inside the node, reduce-scatter of the packed float32 tensor (W*m elements, `none`):
//      local index c gets the node's sums of the N parts owned by the ranks of local index c;
//   2. across nodes, those ranks reduce-scatter that N*m slice with the call's codec (float32;
//      `none` in the caller's type), and the rank on node k gets block k: its own part.
Status twoLevelReduceScatter(const TwoLevelContext& t, const CollectiveOp& op) {
  // Nothing to move (every rank agreed on the count, so every group skips its steps alike),
  // and the empty workspaces would be null pointers.
  if (op.count == 0) return Status::ok();
  const int world = t.world.transport().size();
  const size_t nodes = (*t.nodes).size(), perNode = (*t.nodes)[0].size();
  const size_t c = static_cast<size_t>(t.localIndex);
  const size_t m = (op.count + world - 1) / world;
  const size_t es = dataTypeSize(op.dtype);
  const bool compressed = op.codec->id() != CodecId::kNone;
  auto partOf = [&](size_t localIndex, size_t node) {
    return chunkRange(op.count, world, (*t.nodes)[node][localIndex]);
  };

  auto* packed =
      reinterpret_cast<float*>(t.world.scratch(Workspace::kNodeInput, world * m * sizeof(float)));
  t.world.arithmetic(Arithmetic::kConvert, perNode * nodes * m, [&] {
    for (size_t ci = 0; ci < perNode; ++ci)
      for (size_t k = 0; k < nodes; ++k) {
        Range part = partOf(ci, k);
        float* block = packed + (ci * nodes + k) * m;
        toFloat(static_cast<const uint8_t*>(op.send) + part.begin * es, op.dtype, block,
                part.length);
        std::fill(block + part.length, block + m, 0.0f);
      }
  });
  TERSE_ASSIGN_OR_RETURN(float* sum, nodeSum(t, op, packed, world * m, "reduce-scatter"));

  const Range mine = partOf(c, t.nodeIndex);
  CollectiveOp step;
  step.kind = CollectiveKind::kReduceScatter;
  step.count = nodes * m;
  step.op = ReduceOp::kSum;
  step.codec = op.codec;
  step.algorithm = Algorithm::kFlat;
  step.policyWork = op.policyWork;
  if (compressed) {
    auto* out =
        reinterpret_cast<float*>(t.world.scratch(Workspace::kNodeStaged, m * sizeof(float)));
    step.send = sum;
    step.recv = out;
    step.dtype = DataType::kFloat32;
    ResidualView view;
    if (op.feedback) {
      TERSE_ASSIGN_OR_RETURN(step.feedback,
                             stepFeedback(*t.stepFeedback, op.codec->spec(), nodes * m));
      for (size_t k = 0; k < nodes; ++k)
        view.add(op.feedbackOffset + partOf(c, k).begin, k * m, partOf(c, k).length);
      TERSE_RETURN_IF_ERROR(view.load(*op.feedback, *step.feedback));
    }
    TERSE_RETURN_IF_ERROR(
        runStep(t.cross, *t.crossSeq, step).withContext("two-level reduce-scatter, across nodes"));
    if (op.feedback) view.store(*step.feedback, *op.feedback);
    t.world.arithmetic(Arithmetic::kConvert, mine.length,
                       [&] { fromFloat(out, 1.0f, op.dtype, op.recv, mine.length); });
    return Status::ok();
  }
  uint8_t* typed = t.world.scratch(Workspace::kNodeStaged, nodes * m * es);
  uint8_t* out = t.world.scratch(Workspace::kNodeResult, m * es);
  t.world.arithmetic(Arithmetic::kConvert, nodes * m,
                     [&] { fromFloat(sum, 1.0f, op.dtype, typed, nodes * m); });
  step.send = typed;
  step.recv = out;
  step.dtype = op.dtype;
  TERSE_RETURN_IF_ERROR(
      runStep(t.cross, *t.crossSeq, step).withContext("two-level reduce-scatter, across nodes"));
  if (mine.length > 0) std::memcpy(op.recv, out, mine.length * es);
  return Status::ok();
}

// Allgather, the reduce-scatter's layout run backwards: across nodes, the ranks of local index c
// allgather their parts (each padded to m, the call's codec) into the packed slice c; inside the
// node, every rank allgathers the packed slices (`none`); then each part moves to its place.
Status twoLevelAllgather(const TwoLevelContext& t, const CollectiveOp& op) {
  // Nothing to move (every rank agreed on the count, so every group skips its steps alike),
  // and the empty workspaces would be null pointers.
  if (op.count == 0) return Status::ok();
  const int world = t.world.transport().size();
  const size_t nodes = (*t.nodes).size(), perNode = (*t.nodes)[0].size();
  const size_t c = static_cast<size_t>(t.localIndex), k = static_cast<size_t>(t.nodeIndex);
  const size_t m = (op.count + world - 1) / world;
  const size_t es = dataTypeSize(op.dtype);
  auto partOf = [&](size_t localIndex, size_t node) {
    return chunkRange(op.count, world, (*t.nodes)[node][localIndex]);
  };
  uint8_t* packed = t.world.scratch(Workspace::kNodeInput, world * m * es);
  const Range mine = partOf(c, k);
  uint8_t* myBlock = packed + (c * nodes + k) * m * es;
  if (mine.length > 0) std::memcpy(myBlock, op.send, mine.length * es);
  std::memset(myBlock + mine.length * es, 0, (m - mine.length) * es);

  CollectiveOp step;
  step.kind = CollectiveKind::kAllGather;
  step.send = myBlock;  // in place: this rank's part of the slice
  step.recv = packed + c * nodes * m * es;
  step.count = nodes * m;
  step.dtype = op.dtype;
  step.codec = op.codec;
  step.algorithm = Algorithm::kFlat;
  step.policyWork = op.policyWork;
  ResidualView view;
  if (op.feedback) {
    TERSE_ASSIGN_OR_RETURN(step.feedback, stepFeedback(*t.stepFeedback, op.codec->spec(), m));
    view.add(op.feedbackOffset, 0, mine.length);
    TERSE_RETURN_IF_ERROR(view.load(*op.feedback, *step.feedback));
  }
  TERSE_RETURN_IF_ERROR(
      runStep(t.cross, *t.crossSeq, step).withContext("two-level allgather, across nodes"));
  if (op.feedback) view.store(*step.feedback, *op.feedback);

  step = CollectiveOp{};
  step.kind = CollectiveKind::kAllGather;
  step.send = packed + c * nodes * m * es;  // in place again
  step.recv = packed;
  step.count = world * m;
  step.dtype = op.dtype;
  step.codec = t.none;
  step.algorithm = Algorithm::kFlat;
  TERSE_RETURN_IF_ERROR(
      runStep(t.node, *t.nodeSeq, step).withContext("two-level allgather, inside the node"));
  for (size_t ci = 0; ci < perNode; ++ci)
    for (size_t kk = 0; kk < nodes; ++kk) {
      Range part = partOf(ci, kk);
      if (part.length > 0)
        std::memcpy(static_cast<uint8_t*>(op.recv) + part.begin * es,
                    packed + (ci * nodes + kk) * m * es, part.length * es);
    }
  return Status::ok();
}

}  // namespace detail
}  // namespace terse
