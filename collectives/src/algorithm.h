// The collectives' algorithm units and what they run with.
//
// Each unit is a free function of an AlgorithmContext: the ranks it runs over (the transport it
// is given, the world's or a group's), its workspaces by name, the pipeline settings, and the
// counters of the call in flight. A unit knows nothing of agreement, statistics, device staging,
// two-level layouts or failure handling: the engine (engine.cc) agrees on a call, picks one unit
// for it and turns whatever it returns into the call's outcome, and its two-level calls
// (two_level.cc) compose units over the engines of the node and cross-node groups. The units:
//   ring.cc            ring reduce-scatter and allgather (and allreduce as both), recursive
//                      doubling allreduce: uncompressed, float32 sums, the caller's type on the
//                      wire;
//   scatter_reduce.cc  the compressed collectives: scatter-reduce allreduce and reduce-scatter,
//                      compressed allgather.
#pragma once

#include "terse/collectives/engine.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace terse::detail {

// The engine's workspaces, by name. One unit runs at a time on an engine, so the flat units
// share slot numbers (a ring and a scatter-reduce never run in one call). The two-level slots
// differ from every flat one: a two-level call holds them while its groups' engines run flat
// units, and with a shared WorkspaceProvider (sim/) those engines draw from the same slots.
enum class Workspace : int {
  kDescriptors = 0,  // every rank's call descriptor (agreement)
  // ring and recursive doubling
  kRingSendStage = 1,  // outgoing segments in the wire type (not float32)
  kRingRecvStage = 2,  // incoming segments
  kFloatWork = 3,      // the float32 working copy of the tensor
  kPartnerFloats = 4,  // recursive doubling: the partner's float32 copy
  // scatter-reduce and the compressed allgather
  kChunkWire = 1,     // this rank's compressed chunks (or parts), [chunk][segment]
  kContribWire = 2,   // the contributions to this rank's chunk, [contributor][segment]
  kResultWire = 3,    // this rank's reduced chunk, compressed again
  kGatherWire = 4,    // the owners' reduced chunks, [owner][segment]
  kAccumulators = 5,  // float32 sums of this rank's chunk
  kDeviceStage = 6,   // device calls with `none`: pinned staging around the host ring
  // two-level
  kNodeInput = 7,    // the input widened to float32 (allreduce) or packed by slice (the others)
  kNodeSum = 8,      // the node's float32 sum of this rank's slice(s)
  kNodeStaged = 9,   // reduce-scatter: the cross step's input or result
  kNodeResult = 10,  // reduce-scatter, uncompressed: the cross step's result
  // auto's algorithm trials with a shared provider (CollectiveEngine::chooseAlgorithm): held
  // while the trial calls run, so distinct from every slot above
  kTrialSend = 11,
  kTrialRecv = 12
};

using Arithmetic = CollectiveEngine::Arithmetic;

// What a unit may use of the engine that runs it, and nothing else.
class AlgorithmContext {
 public:
  explicit AlgorithmContext(CollectiveEngine& engine) : e_(engine) {}

  Transport& transport() const { return e_.transport_; }
  std::chrono::milliseconds timeout() const { return e_.timeout_; }
  // Elements per pipeline segment (a multiple of every codec block size) and how many segment
  // rounds a compressed unit runs ahead (TERSE_SEGMENT_BYTES, TERSE_PIPELINE_DEPTH).
  size_t segmentElements() const { return e_.segmentElems_; }
  size_t pipelineDepth() const { return e_.depth_; }
  // The engine's count of bytes handed to the transport (RequestList adds each send's).
  uint64_t* bytesSent() const { return &e_.bytesSent_; }

  // Workspaces (CollectiveEngine::scratch and friends): host memory, or where the op's codecs
  // reach it for device calls.
  uint8_t* scratch(Workspace slot, size_t bytes) const { return e_.scratch(slot, bytes); }
  Result<uint8_t*> wireScratch(const CollectiveOp& op, Workspace slot, size_t bytes) const {
    return e_.wireScratch(op, slot, bytes);
  }
  Result<float*> accScratch(const CollectiveOp& op, size_t elems) const {
    return e_.accScratch(op, elems);
  }

  // The call's codec work, timed into its compress or reduce stage.
  template <typename Work>
  auto compressing(Work&& work) const -> decltype(work()) {
    return e_.timed(e_.compressSeconds_, std::forward<Work>(work));
  }
  template <typename Work>
  auto reducing(Work&& work) const -> decltype(work()) {
    return e_.timed(e_.reduceSeconds_, std::forward<Work>(work));
  }
  // The engine's own arithmetic (sums, conversions), which the simulation's hook may take.
  template <typename Work>
  void arithmetic(Arithmetic what, size_t elements, Work&& work) const {
    e_.arithmetic(what, elements, std::forward<Work>(work));
  }

 private:
  CollectiveEngine& e_;
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

}  // namespace terse::detail
