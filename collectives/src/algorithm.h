// The collectives' algorithm units and what they run with.
//
// Each unit is a free function of an AlgorithmContext: the ranks it runs over (the transport it
// is given, the world's or a group's), its workspaces by name, the pipeline settings, and the
// counters of the call in flight. Tests run units on contexts of their own over in-process
// transports (tests/collectives/algorithm_unit_test.cc). A unit knows nothing of agreement,
// statistics, device staging, two-level layouts or failure handling: the engine (engine.cc) agrees
// on a call, picks one unit for it and turns whatever it returns into the call's outcome, and its
// two-level calls (two_level.cc) compose flat units over child contexts on the node's and the
// cross-node group's transports.
// The units:
//   ring.cc            ring reduce-scatter and allgather (and allreduce as both), recursive
//                      doubling allreduce: uncompressed, float32 sums, the caller's type on the
//                      wire;
//   scatter_reduce.cc  the compressed collectives: scatter-reduce allreduce and reduce-scatter,
//                      compressed allgather.
#pragma once

#include "terse/collectives/collective_op.h"
#include "terse/collectives/step_lane.h"
#include "terse/collectives/workspaces.h"
#include "terse/transport/transport.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace terse::detail {

// What a unit may use, and nothing else: the ranks it runs over (a transport, the world's or a
// group's), the call's settings, named workspaces, the counters of the call in flight and the
// arithmetic hook. A context borrows them (it is a cheap value; the owner outlives the call):
// the engine builds one per call from its own (CollectiveEngine::context), and a test or the
// simulator can build one over a transport and workspaces of its own, with no engine at all.
class AlgorithmContext {
 public:
  using Settings = UnitSettings;  // collective_op.h

  AlgorithmContext(Transport& transport, const Settings& settings, Workspaces& workspaces,
                   CallCounters& counters, ArithmeticHook* hook = nullptr)
      : transport_(&transport),
        settings_(settings),
        workspaces_(&workspaces),
        counters_(&counters),
        hook_(hook) {}

  Transport& transport() const { return *transport_; }
  std::chrono::milliseconds timeout() const { return settings_.timeout; }
  size_t segmentElements() const { return settings_.segmentElements; }
  size_t pipelineDepth() const { return settings_.pipelineDepth; }
  size_t smallBytes() const { return settings_.smallBytes; }
  const Settings& settings() const { return settings_; }
  ArithmeticHook* hook() const { return hook_; }
  // This context over another transport (a group's): the same settings, workspaces, counters
  // and hook.
  AlgorithmContext over(Transport& transport) const {
    AlgorithmContext other = *this;
    other.transport_ = &transport;
    return other;
  }
  // The count of bytes handed to the transport (RequestList adds each send's).
  uint64_t* bytesSent() const { return &counters_->bytesSent; }
  const CallCounters& counters() const { return *counters_; }

  // Workspaces: host memory, or where the op's codecs reach it for device calls.
  uint8_t* scratch(Workspace slot, size_t bytes) const { return workspaces_->host(slot, bytes); }
  Result<uint8_t*> wireScratch(const CollectiveOp& op, Workspace slot, size_t bytes) const {
    return workspaces_->wire(op, slot, bytes);
  }
  Result<float*> accScratch(const CollectiveOp& op, size_t elems) const {
    return workspaces_->accumulators(op, elems);
  }

  // The call's codec work, timed into its compress or reduce stage.
  template <typename Work>
  auto compressing(Work&& work) const -> decltype(work()) {
    return timed(counters_->compressSeconds, std::forward<Work>(work));
  }
  template <typename Work>
  auto reducing(Work&& work) const -> decltype(work()) {
    return timed(counters_->reduceSeconds, std::forward<Work>(work));
  }
  // The unit's own arithmetic (sums, conversions), which the simulation's hook may take (charge
  // to the simulated host and skip); otherwise run and timed as the reduce stage.
  template <typename Work>
  void arithmetic(Arithmetic what, size_t elements, Work&& work) const {
    if (hook_ && hook_->take(what, elements)) return;
    timed(counters_->reduceSeconds, [&] {
      work();
      return 0;
    });
  }

 private:
  template <typename Work>
  static auto timed(double& seconds, Work&& work) -> decltype(work()) {
    const auto start = std::chrono::steady_clock::now();
    auto result = work();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }

  Transport* transport_;
  Settings settings_;
  Workspaces* workspaces_;
  CallCounters* counters_;
  ArithmeticHook* hook_;
};

// ring.cc. After ringReduceScatterCore, chunk `rank` of `work` (float32, the whole tensor)
// holds the sum over ranks; before ringAllgatherCore, chunk `rank` of `buffer` (count elements
// of `dtype`) holds this rank's part.
Status ringAllreduce(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq);
Status ringReduceScatter(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq);
Status ringAllgather(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq);
Status ringReduceScatterCore(const AlgorithmContext& ctx, float* work, size_t count, DataType wire,
                             uint32_t seq);
Status ringAllgatherCore(const AlgorithmContext& ctx, void* buffer, size_t count, DataType dtype,
                         uint32_t seq);
Status recursiveDoublingAllreduce(const AlgorithmContext& ctx, const CollectiveOp& op,
                                  uint32_t seq);
// The ring's segment for a call of `count` elements over `n` ranks: about a quarter of a chunk,
// at least 64 Ki elements, at most `configured` (the engine's segment), and coarse enough for
// the tag space.
size_t ringSegmentElements(size_t configured, int n, size_t count);

// scatter_reduce.cc: op.codec compresses; op.kind is allreduce or reduce-scatter for the first.
Status scatterReduce(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq);
Status compressedAllgather(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq);

// The flat unit for op (engine.cc): compressed calls scatter-reduce (or the compressed
// allgather); uncompressed ones ring, or recursive doubling for allreduces of at most
// ctx.smallBytes() float32 bytes and on one rank.
Status runFlat(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq);

// two_level.cc: the two-level units, composed of flat units over two child contexts. `world`
// is the caller's context (its workspaces, counters and arithmetic; its transport's size is the
// world's); `node` and `cross` run over the group transports of this rank's node and of its
// local index across nodes, each with its own sequence of step numbers (tags marked as steps',
// requests.h, so the groups may share the tag space of the communicator they serve).
struct TwoLevelContext {
  AlgorithmContext world, node, cross;
  const std::vector<std::vector<int>>* nodes;  // each node's ranks in rank order, nodes in order
  int nodeIndex = 0, localIndex = 0;           // this rank's node and index inside it
  const Codec* none = nullptr;                 // the uncompressed steps' codec
  ErrorFeedback* stepFeedback = nullptr;  // the cross step's residuals (reduce-scatter, allgather)
  uint32_t* nodeSeq = nullptr;
  uint32_t* crossSeq = nullptr;
  // Where allreduce's cross-node steps run while this thread runs the next segment's node step
  // (step_lane.h); null: an inline lane, the same schedule without overlap. `cross` must then
  // have workspaces and counters of its own (nothing of it is shared with `world` and `node`).
  StepLane* lane = nullptr;
};
// The segment of the pipelined two-level allreduce for a call of `count` elements over nodes of
// `localSize` ranks: `configured` rounded down to whole 65536 elements per local rank (at least
// one of them), at most the count.
size_t twoLevelSegmentElements(size_t configured, int localSize, size_t count);
// Whether such a call runs in more than one segment (and so wants a lane beside it).
inline bool twoLevelPipelines(size_t configured, int localSize, size_t count) {
  return count > twoLevelSegmentElements(configured, localSize, count);
}
// Two-level's state on one rank, made from the world's node layout: each node's ranks, this
// rank's node and local index, the node's and the cross-node group's transports with their step
// numbers, the uncompressed steps' codec, and what the cross-node steps keep of their own (their
// residuals across calls, workspaces, counters, and the lane the engine gives a pipelined
// allreduce). It owns what a TwoLevelContext borrows and builds it, so the engine and the tests
// need not fill one field by field.
struct TwoLevelLayout {
  // The layout of `nodeOfRank` (the node of each rank of `world`, the same on every rank), its
  // groups in tag spaces `localSpace` and `crossSpace`. Null where two-level cannot run (one
  // node, one rank per node, nodes of different sizes), with *whyNot saying why; an error for a
  // layout that is not one (wrong length, a node out of range).
  static Result<std::unique_ptr<TwoLevelLayout>> make(Transport& world,
                                                      const std::vector<int>& nodeOfRank,
                                                      uint32_t localSpace, uint32_t crossSpace,
                                                      std::string* whyNot);

  // A call's context: `world` (the caller's), node steps over the node's transport with the
  // world's workspaces, counters and hook, cross-node steps over the cross group's with the
  // layout's own workspaces and counters (fold them into the call's afterwards,
  // takeCrossCounters).
  TwoLevelContext context(const AlgorithmContext& world);
  // The cross-node steps' counts since the last call, reset.
  CallCounters takeCrossCounters() { return std::exchange(crossCounters, CallCounters{}); }

  std::vector<std::vector<int>> nodes;  // each node's ranks in rank order, nodes in node order
  int node = 0, localIndex = 0;         // this rank's
  std::unique_ptr<Transport> localTransport, crossTransport;
  uint32_t localSeq = 0, crossSeq = 0;
  std::shared_ptr<const Codec> none;  // the uncompressed steps' codec
  // The cross-node step's error-feedback state in reduce-scatter and allgather (stepFeedback in
  // two_level.cc): kept across calls instead of a tensor-slice allocation per call.
  ErrorFeedback stepFeedback;
  Workspaces crossWorkspaces;
  CallCounters crossCounters;
  std::unique_ptr<StepLane> lane;  // null: inline
};

Status twoLevelAllreduce(const TwoLevelContext& t, const CollectiveOp& op);
Status twoLevelReduceScatter(const TwoLevelContext& t, const CollectiveOp& op);
Status twoLevelAllgather(const TwoLevelContext& t, const CollectiveOp& op);

}  // namespace terse::detail
