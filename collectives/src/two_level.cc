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
#include "requests.h"

#include "typed.h"

#include "terse/collectives/partition.h"
#include "terse/collectives/step_lane.h"
#include "terse/transport/group.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace terse {

namespace detail {

namespace {

// One step on a group's context: the flat unit for it, at the group's next sequence number.
Status runStep(const AlgorithmContext& group, uint32_t& seq, const CollectiveOp& step) {
  return runFlat(group, step, nextStepSeq(seq));
}

// Step 1 of allreduce and reduce-scatter: the node's float32 sum, by the ring's reduce-scatter
// core run in place on `work` (`count` float32 elements in this call's own workspace, which it
// overwrites): no copy into the ring unit's own float buffer, and the sum is read where the ring
// left it. Returns this rank's summed elements (its chunk of `work`); avg scales them here.
Result<float*> nodeSum(const TwoLevelContext& t, const CollectiveOp& op, float* work, size_t count,
                       const char* what) {
  TERSE_RETURN_IF_ERROR(
      ringReduceScatterCore(t.node, work, count, DataType::kFloat32, nextStepSeq(*t.nodeSeq))
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

size_t twoLevelSegmentElements(size_t configured, int localSize, size_t count) {
  // Whole multiples of 65536 elements per local rank, so that every rank's slice of a segment
  // (chunkRange of it) starts on a codec block boundary wherever the segment starts.
  const size_t unit = size_t{65536} * static_cast<size_t>(std::max(localSize, 1));
  const size_t segment = std::max(unit, configured / unit * unit);
  return std::min(segment, std::max<size_t>(count, 1));
}

// The pipelined allreduce. Segment s = [s*S, min((s+1)*S, count)), S from
// twoLevelSegmentElements; each segment goes through the three steps as the unpipelined
// algorithm does with the whole tensor (slice c of the segment is chunkRange(length, L, c)).
// This thread runs the node steps and the cross-node steps run on t.lane, one segment behind:
//   node sum(0), cross(0) to the lane, node sum(1), cross(1) to the lane, collect cross(0),
//   node allgather(0), node sum(2), cross(2) to the lane, collect cross(1), allgather(1), ...
// so while segment s crosses between nodes, segment s+1 is summed inside the node. Every rank
// runs its node's steps and its cross group's steps in the same order, so no wait closes a
// cycle. The cross steps run on their own context (t.cross: its own workspaces and counters),
// the only state they share with this thread being the segment's own slice of `wide` and of
// recv, and the error-feedback residuals of the slice's positions, which nothing here touches.
// The results depend on S (the node's sums are in each segment's ring order, compressed blocks
// follow the segment's slices), not on the lane: every rank uses the same S (the setting must
// be alike everywhere, as TERSE_SEGMENT_BYTES must), and an inline lane gives the same bytes.
Status twoLevelAllreduce(const TwoLevelContext& t, const CollectiveOp& op) {
  // Nothing to move (every rank agreed on the count, so every group skips its steps alike),
  // and the empty workspaces would be null pointers.
  if (op.count == 0) return Status::ok();
  const int localSize = t.node.transport().size();
  const int localRank = t.node.transport().rank();
  const size_t es = dataTypeSize(op.dtype);
  const bool compressed = op.codec->id() != CodecId::kNone;
  const size_t S =
      twoLevelSegmentElements(t.world.settings().twoLevelSegmentElements, localSize, op.count);
  auto* wide =
      reinterpret_cast<float*>(t.world.scratch(Workspace::kNodeInput, op.count * sizeof(float)));
  // One segment has nothing to overlap: it runs inline, not through a thread (which would only
  // add a hand-off and put the shared transport into its polling mode for the call).
  InlineLane inlineLane;
  StepLane* lane = t.lane != nullptr && op.count > S ? t.lane : &inlineLane;

  // Step 3 of segment [begin, begin + length): every slice to every rank of the node (in place:
  // this rank's slice of the segment in recv is its chunk of the segment).
  auto gather = [&](size_t begin, size_t length) {
    CollectiveOp step;
    step.kind = CollectiveKind::kAllGather;
    step.recv = static_cast<uint8_t*>(op.recv) + begin * es;
    step.send =
        static_cast<uint8_t*>(step.recv) + chunkRange(length, localSize, localRank).begin * es;
    step.count = length;
    step.dtype = op.dtype;
    step.codec = t.none;
    step.algorithm = Algorithm::kFlat;
    return runStep(t.node, *t.nodeSeq, step).withContext("two-level allreduce, inside the node");
  };

  Status failed;
  size_t submitted = 0, gathered = 0;  // segments handed to the lane, segments finished
  // Collects the lane's oldest segment and, while nothing failed, gathers it inside the node.
  auto finishOldest = [&] {
    Status crossed = lane->collect();
    if (failed.isOk() && !crossed.isOk()) failed = crossed;
    const size_t begin = gathered * S;
    ++gathered;
    if (failed.isOk()) failed = gather(begin, std::min(S, op.count - begin));
  };
  for (size_t begin = 0; begin < op.count && failed.isOk(); begin += S) {
    const size_t length = std::min(S, op.count - begin);
    const Range slice = chunkRange(length, localSize, localRank);
    // Step 1: the node's float32 sum of this rank's slice of the segment, on the input widened
    // (or, for float32, copied: the caller's send buffer is not ours to overwrite) into this
    // call's workspace.
    float* segment = wide + begin;
    t.world.arithmetic(Arithmetic::kConvert, length, [&] {
      toFloat(static_cast<const uint8_t*>(op.send) + begin * es, op.dtype, segment, length);
    });
    auto summed = nodeSum(t, op, segment, length, "allreduce");
    if (!summed.isOk()) {
      failed = summed.status();
      break;
    }
    float* sum = summed.value();

    // Step 2, on the lane: the slice across nodes.
    auto* out = static_cast<uint8_t*>(op.recv) + (begin + slice.begin) * es;
    CollectiveOp step;
    step.kind = CollectiveKind::kAllReduce;
    step.count = slice.length;
    step.op = ReduceOp::kSum;
    step.codec = op.codec;
    step.algorithm = Algorithm::kFlat;
    step.policyWork = op.policyWork;
    // Uncompressed slices above the small-message size run the ring's cores on the float32
    // sum itself, the caller's type on the wire (as flat `none` sends): no conversion of the
    // slice into the caller's type and back into float32 around a ring unit, and only this
    // rank's chunk of the slice is converted out (the allgather moves the caller's type).
    const bool ringOnSum = !compressed && slice.length * sizeof(float) > t.cross.smallBytes();
    if (compressed) {
      step.send = sum;
      step.recv = sum;
      step.dtype = DataType::kFloat32;
      step.feedback = op.feedback;
      step.feedbackOffset = op.feedbackOffset + begin + slice.begin;
    } else if (!ringOnSum) {
      t.world.arithmetic(Arithmetic::kConvert, slice.length,
                         [&] { fromFloat(sum, 1.0f, op.dtype, out, slice.length); });
      step.send = out;
      step.recv = out;
      step.dtype = op.dtype;
    }
    const uint32_t seq = nextStepSeq(*t.crossSeq);
    const DataType dtype = op.dtype;
    lane->submit([&t, step, seq, sum, out, dtype, compressed, ringOnSum]() -> Status {
      if (ringOnSum) {
        const AlgorithmContext& cross = t.cross;
        TERSE_RETURN_IF_ERROR(ringReduceScatterCore(cross, sum, step.count, dtype, seq)
                                  .withContext("two-level allreduce, across nodes"));
        const Range own =
            chunkRange(step.count, cross.transport().size(), cross.transport().rank());
        cross.arithmetic(Arithmetic::kConvert, own.length, [&] {
          fromFloat(sum + own.begin, 1.0f, dtype, out + own.begin * dataTypeSize(dtype),
                    own.length);
        });
        return ringAllgatherCore(cross, out, step.count, dtype, seq)
            .withContext("two-level allreduce, across nodes");
      }
      TERSE_RETURN_IF_ERROR(
          runFlat(t.cross, step, seq).withContext("two-level allreduce, across nodes"));
      if (compressed)
        t.cross.arithmetic(Arithmetic::kConvert, step.count,
                           [&] { fromFloat(sum, 1.0f, dtype, out, step.count); });
      return Status::ok();
    });
    ++submitted;
    if (submitted - gathered > 1) finishOldest();
  }
  // Every segment handed to the lane is collected, after a failure too: the lane's jobs borrow
  // this call's buffers.
  while (gathered < submitted) finishOldest();
  return failed;
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

Result<std::unique_ptr<TwoLevelLayout>> TwoLevelLayout::make(Transport& world,
                                                             const std::vector<int>& nodeOfRank,
                                                             uint32_t localSpace,
                                                             uint32_t crossSpace,
                                                             std::string* whyNot) {
  const int n = world.size(), r = world.rank();
  if (static_cast<int>(nodeOfRank.size()) != n)
    return errorInvalidArgument("two-level layout: %zu node entries for a world of %d",
                                nodeOfRank.size(), n);
  std::vector<std::vector<int>> nodes;  // the ranks of each node, in rank order
  for (int i = 0; i < n; ++i) {
    const int node = nodeOfRank[i];
    if (node < 0 || node >= n)
      return errorInvalidArgument("two-level layout: rank %d's node %d is outside 0..%d", i, node,
                                  n - 1);
    if (static_cast<int>(nodes.size()) <= node) nodes.resize(node + 1);
    nodes[node].push_back(i);
  }
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [](const auto& v) { return v.empty(); }),
              nodes.end());
  const size_t perNode = nodes[0].size();
  if (nodes.size() == 1) {
    *whyNot = "every rank is on one node";
    return std::unique_ptr<TwoLevelLayout>();
  }
  if (perNode == 1 &&
      std::all_of(nodes.begin(), nodes.end(), [](const auto& v) { return v.size() == 1; })) {
    *whyNot = "every node has one rank";
    return std::unique_ptr<TwoLevelLayout>();
  }
  for (const auto& v : nodes) {
    if (v.size() != perNode) {
      std::string sizes;
      for (const auto& w : nodes) sizes += (sizes.empty() ? "" : "+") + std::to_string(w.size());
      *whyNot = "the nodes hold different numbers of ranks (" + sizes +
                "), so some local index has no rank on some node";
      return std::unique_ptr<TwoLevelLayout>();
    }
  }
  // This rank's node and local index; the cross group is the ranks of that local index, one per
  // node, in node order.
  std::vector<int> local, cross;
  for (const auto& v : nodes) {
    auto at = std::find(v.begin(), v.end(), r);
    if (at != v.end()) local = v;
  }
  const size_t localIndex =
      static_cast<size_t>(std::find(local.begin(), local.end(), r) - local.begin());
  for (const auto& v : nodes) cross.push_back(v[localIndex]);
  auto layout = std::make_unique<TwoLevelLayout>();
  TERSE_ASSIGN_OR_RETURN(layout->localTransport, createGroupTransport(world, local, localSpace));
  TERSE_ASSIGN_OR_RETURN(layout->crossTransport, createGroupTransport(world, cross, crossSpace));
  TERSE_ASSIGN_OR_RETURN(layout->none, makeCodec("none"));
  layout->nodes = nodes;
  layout->localIndex = static_cast<int>(localIndex);
  for (size_t k = 0; k < nodes.size(); ++k)
    if (nodes[k][localIndex] == r) layout->node = static_cast<int>(k);
  whyNot->clear();
  return layout;
}

TwoLevelContext TwoLevelLayout::context(const AlgorithmContext& world) {
  return TwoLevelContext{world,
                         world.over(*localTransport),
                         AlgorithmContext(*crossTransport, world.settings(), crossWorkspaces,
                                          crossCounters, world.hook()),
                         &nodes,
                         node,
                         localIndex,
                         none.get(),
                         &stepFeedback,
                         &localSeq,
                         &crossSeq,
                         lane.get()};
}

}  // namespace detail
}  // namespace terse
