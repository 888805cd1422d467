// Collective algorithms over a Transport and the codecs.
//
//  - Uncompressed (`none`): recursive doubling for small messages (latency-bound), ring
//    reduce-scatter + ring allgather for large ones (bandwidth-optimal), reducing in float32
//    and sending the caller's element type on the wire, as NCCL does.
//  - Compressed: scatter-reduce (1-bit Adam, CGX). Each rank compresses every chunk of its input
//    once (worker residual) and sends chunk j to rank j; rank j decompresses the n contributions
//    in rank order into float32, reduces, recompresses once (server residual) and sends the
//    result to everyone. Every rank, the owner included, writes the decoded broadcast, so all
//    ranks hold bit-identical results.
//  - Both are pipelined in segments (TERSE_SEGMENT_BYTES) so compressing, sending and reducing
//    different segments overlap.
//
// Before any data moves, the ranks exchange a small descriptor of the call (kind, count, type,
// op, codec spec): a rank that disagrees makes the call fail on every rank with a message saying
// who disagreed on what, instead of hanging or producing garbage.
//
// Not thread-safe: one collective at a time per engine (the api layer queues them).
#pragma once

#include "terse/collectives/collective_op.h"
#include "terse/collectives/partition.h"
#include "terse/collectives/step_lane.h"
#include "terse/collectives/workspaces.h"
#include "terse/compressors/codec.h"
#include "terse/compressors/error_feedback.h"
#include "terse/kernels/device.h"
#include "terse/transport/transport.h"

#include <terse/stats.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace terse {
namespace detail {
struct CallDescriptor;   // collectives/src/descriptor.h
class AlgorithmContext;  // collectives/src/algorithm.h: what the algorithm units see
struct TwoLevelLayout;   // collectives/src/algorithm.h: two-level's groups and state
}  // namespace detail
class AgreedSettings;  // terse/common/env.h
class EnvSetting;      // terse/common/env.h

// TERSE_PIPELINE_DEPTH, the engine's one setting that each rank may choose alone: the entry
// points read it (api/src/settings.h, terse-sim) and pass it in EngineSettings.
extern const EnvSetting kPipelineDepthSetting;

// The engine's tunables, as values: the engine never reads the environment. A communicator
// makes them from the settings it read and compared at its creation (api/src/settings.h), and
// its splits inherit them; an engine built alone (unit tests, the simulator's own runs) gets the
// registered defaults unless it is handed others.
struct EngineSettings {
  size_t segmentBytes = 0;                 // TERSE_SEGMENT_BYTES
  size_t twoLevelSegmentBytes = 0;         // TERSE_TWOLEVEL_SEGMENT_BYTES
  size_t smallBytes = 0;                   // TERSE_SMALL_BYTES
  size_t directAgreementRanks = 0;         // TERSE_AGREEMENT_DIRECT_RANKS
  size_t pipelineDepth = 1;                // TERSE_PIPELINE_DEPTH (per rank)
  Algorithm algorithm = Algorithm::kAuto;  // TERSE_ALGO: what calls that ask for auto run

  // Every tunable at its registered default.
  static EngineSettings defaults();
  // The values every rank shares from `agreed` (read and compared by the communicator), with
  // this rank's pipeline depth.
  static EngineSettings from(const AgreedSettings& agreed, size_t pipelineDepth);
};

class CollectiveEngine {
 public:
  CollectiveEngine(Transport& transport, std::chrono::milliseconds timeout,
                   const EngineSettings& settings = EngineSettings::defaults());
  ~CollectiveEngine();

  // Runs one collective to completion on the calling thread. On error, every request it posted
  // has been cancelled and the message names the failing peer or the disagreement; recv is then
  // unspecified (partially written) and must not be used.
  //
  // Errors found before any data moved (this rank's arguments, ranks disagreeing on the call)
  // leave every rank in step and the transport usable. Any other failure (a dead or silent
  // peer, a corrupt message, a local system error) leaves the ranks out of step: the engine
  // then aborts the transport with that error, so the peers still waiting on this rank fail at
  // once, naming it, instead of waiting out their timeout, and every later operation of this
  // rank fails with the same error.
  Status run(const CollectiveOp& op);

  // The other outcomes of a caller's call, each taking the call's place in the ranks' sequence
  // of agreements, so that no rank is left waiting for it:
  //  - reject: the caller's arguments were found invalid before they reached the engine (an
  //    unknown codec spec, an enum out of range): the peers fail this call at once with
  //    kInvalidUsage naming this rank; returns `why`.
  //  - agree: only the agreement on `op`, whose codec may not be chosen yet (op.codec null,
  //    op.requested the auto spec): auto's calibration runs collectives of its own, and ranks
  //    that disagree on the caller's call must learn it from the caller's call, not from a
  //    calibration step. Arguments are validated as in run().
  //  - barrier: returns once every rank has entered it; a rank that made a collective call
  //    instead gets kInvalidUsage, as does this one, and both stay usable.
  Status reject(const CollectiveOp& op, Status why);
  Status agree(const CollectiveOp& op);
  Status barrier();

  // Gives the engine the world's node layout (node of each rank, the same on every rank), so it
  // can run two-level calls: over a group transport of this engine's transport in tag space
  // `localSpace` for this rank's node, and one in `crossSpace` for the ranks with this rank's
  // local index. Collective in effect: every rank must make the same call, before any call that
  // might run two-level. When the layout has one node, one rank per node, or nodes of different
  // sizes, two-level stays off and twoLevelUnavailable() says why.
  Status enableTwoLevel(const std::vector<int>& nodeOfRank, uint32_t localSpace,
                        uint32_t crossSpace);
  // Why calls cannot run two-level here ("" when they can).
  const std::string& twoLevelUnavailable() const { return twoLevelWhyNot_; }
  // The algorithm a call of `op` runs, whatever its kind: op.algorithm, else TERSE_ALGO, else,
  // where the layout allows two-level, auto's measured choice for the call's (kind, codec, type,
  // size class) once made (run() makes it), and two-level until then (what the `auto` codec
  // calibrates with), else flat. kInvalidUsage when the call itself asks for two-level
  // and the layout cannot run it (TERSE_ALGO=twolevel then runs flat: the communicator checked
  // it at creation, and split children follow it where they can); every rank reaches the same
  // answer (same layout, same settings), and the descriptor catches ranks whose settings differ.
  Result<Algorithm> resolveAlgorithm(const CollectiveOp& op) const;

  // Where the engine's host workspaces come from. By default each engine keeps grow-only
  // buffers of its own. The simulation (sim/) hands every simulated rank's engine one shared
  // provider: its sizing codecs never read workspaces and the values `none` computes in them do
  // not change simulated time, so thousands of ranks need one set of workspaces instead of one
  // each. Reaches the two-level groups' engines too. Not for real ranks: concurrent calls of
  // engines sharing a provider overwrite each other's data.
  // workspace(slot, bytes): at least `bytes` bytes for workspace `slot`. Unlike an engine's own
  // buffers, the memory must stay valid and in place for the provider's life (a parent engine
  // and its groups' engines ask for the same slots while holding earlier answers).
  using WorkspaceProvider = detail::Workspaces::Provider;
  void setWorkspaceProvider(std::shared_ptr<WorkspaceProvider> provider);
  const std::shared_ptr<WorkspaceProvider>& workspaceProvider() const {
    return workspaces_.provider();
  }

  // Where the engine's own host arithmetic goes: the float32 sums of uncompressed data and the
  // conversions between the caller's type and float32, which no codec call covers. By default
  // it runs. The simulation's sizing mode hands every engine a hook that charges it to the
  // simulated host at modelled rates and skips it (its values do not change simulated time, and
  // thousands of simulated ranks' real float arithmetic would dominate the wall time). Reaches
  // the two-level groups' engines too.
  // (ArithmeticHook and Arithmetic live in collective_op.h: the units call the hook too.)
  using Arithmetic = terse::Arithmetic;
  using ArithmeticHook = terse::ArithmeticHook;
  void setArithmeticHook(std::shared_ptr<ArithmeticHook> hook);

  // What runs the cross-node steps of a pipelined two-level allreduce beside the node steps
  // (step_lane.h): the communicator gives a thread, the simulator an actor; by default an inline
  // lane (the same segments, nothing overlapping).
  void setStepLanes(StepLaneFactory factory) { laneFactory_ = std::move(factory); }
  // Segment of the pipelined two-level allreduce (default TERSE_TWOLEVEL_SEGMENT_BYTES, bytes
  // of float32). Every rank of the world must set the same.
  void setTwoLevelSegmentBytes(size_t bytes) {
    unit_.twoLevelSegmentElements = std::max<size_t>(bytes / 4, 1);
  }

  // The clock auto's measurements (measure.h: its codec and its algorithm choices) are timed
  // with, in seconds (default: steady_clock). The simulation gives its simulated clock, so its
  // `auto` picks what is faster in simulated time.
  void setClock(std::function<double()> clock) { clock_ = std::move(clock); }
  double now() const;

  // TERSE_ALGO as constructed (EngineSettings::algorithm): what calls that ask for auto run.
  Algorithm defaultAlgorithm() const { return defaultAlgorithm_; }

  // Elements per pipeline segment are derived from this (default TERSE_SEGMENT_BYTES).
  // (The setters reach the two-level groups' engines too.)
  void setSegmentBytes(size_t bytes);
  // Messages up to this many bytes use recursive doubling (default TERSE_SMALL_BYTES).
  void setSmallBytes(size_t bytes);
  // Worlds of at most this many ranks agree on a call by an all-to-all of descriptors, larger
  // ones by a dissemination in ceil(log2 n) rounds (default TERSE_AGREEMENT_DIRECT_RANKS).
  // Every rank of the world must set the same.
  void setDirectAgreementRanks(size_t ranks) { directAgreementRanks_ = ranks; }
  // Segment rounds compressed ahead of the one being reduced (1-8, TERSE_PIPELINE_DEPTH).
  void setPipelineDepth(size_t depth);
  size_t pipelineDepth() const { return unit_.pipelineDepth; }

  // Elements per segment for a given codec: a multiple of every block size terse accepts, so a
  // segment never splits a compression block.
  size_t segmentElements() const { return unit_.segmentElements; }
  // kCollectiveChunkAlign and kMaxCollectiveElements (collective_op.h) by their older names.
  static constexpr size_t kChunkAlign = kCollectiveChunkAlign;
  static constexpr size_t kMaxElements = kMaxCollectiveElements;

  // Bytes this rank has handed to the transport since construction (all calls, descriptors
  // included): what benchmarks report as wire bytes.
  uint64_t bytesSent() const { return counters_.bytesSent; }

  // Calls, failures, bytes and time of everything run() / reject() / agree() / barrier() did
  // (read it on the thread that drives the engine).
  const CollectiveStats& stats() const { return stats_; }
  CollectiveStats& mutableStats() { return stats_; }  // the api layer adds auto's picks

  Transport& transport() { return transport_; }
  std::chrono::milliseconds timeout() const { return unit_.timeout; }
  void setTimeout(std::chrono::milliseconds timeout);

 private:
  // run() and reject() without the stats bookkeeping, which their public forms add.
  Status runCounted(const CollectiveOp& op);
  Status rejectNow(const CollectiveOp& op, Status why);
  // needCodec: false for agree(), where auto has not picked yet.
  Status validate(const CollectiveOp& op, bool needCodec = true) const;
  Status dispatch(const CollectiveOp& op, uint32_t seq);
  Status runAgreed(const CollectiveOp& op, uint32_t seq);
  // The next call's sequence number (descriptors and tags; never a two-level step's).
  uint32_t nextSeq();
  // Whether run() picks the algorithm of `requested` by measurement: auto asked for and not
  // overridden by TERSE_ALGO, a two-level layout, host buffers, a caller's call.
  bool choosesByMeasurement(const CollectiveOp& requested) const;
  // Sets op->algorithm to auto's choice for its key, measuring first if there is none yet: the
  // ranks agree on the call (descriptor with algorithm auto), time flat and two-level on scratch
  // buffers at the call's size, and adopt the faster by the slowest rank's figures. Errors are
  // the call's (already given up on where the ranks fell out of step).
  Status chooseAlgorithm(CollectiveOp* op);
  Status giveUp(const CollectiveOp& op, uint32_t seq, Status why);
  // `none` and two-level calls on device buffers: stage through pinned host memory around the
  // host algorithms.
  Status stagedOnHost(const CollectiveOp& op, uint32_t seq);
  // rejected: this rank found its own arguments invalid and tells the others so.
  // Every rank learns whether all made the same call: an all-to-all of descriptors in worlds of
  // up to directAgreementRanks_ ranks, a dissemination of summaries (disseminateDescriptor) in
  // larger ones, so that the messages per call grow as n log n, not n^2.
  Status exchangeDescriptors(const CollectiveOp& op, uint32_t seq, bool rejected = false);
  Status disseminateDescriptor(CollectiveKind kind, const detail::CallDescriptor& mine,
                               uint32_t seq, bool rejected);
  // The context the algorithm units (collectives/src/algorithm.h) run a call with: this
  // engine's transport, settings, workspaces, counters and arithmetic hook, lent for the call.
  detail::AlgorithmContext context();
  using Workspace = detail::Workspace;
  uint8_t* scratch(Workspace slot, size_t bytes) { return workspaces_.host(slot, bytes); }

  // The stats row of a collective kind.
  CollectiveStats::Kind& statsOf(const CollectiveOp& op);
  // Adds one finished call to the stats: its status, wall time and transport bytes.
  void countCall(const CollectiveOp& op, const Status& status,
                 std::chrono::steady_clock::time_point start, uint64_t bytesBefore);

  Transport& transport_;
  // The timeout, segments, pipeline depth and small-message threshold the units run with.
  UnitSettings unit_;
  // The two-level layout (enableTwoLevel; collectives/src/algorithm.h): its groups, their step
  // numbers, the cross-node steps' own state and lane. Null: calls run flat.
  std::unique_ptr<detail::TwoLevelLayout> twoLevel_;
  std::string twoLevelWhyNot_ = "no node layout was given (one node)";
  Algorithm defaultAlgorithm_ = Algorithm::kAuto;  // TERSE_ALGO
  struct Chosen {
    Algorithm algorithm = Algorithm::kFlat;
    bool twoLevelWhole = false;  // CollectiveOp::twoLevelWhole
  };
  std::map<std::string, Chosen> chosen_;  // auto's choices, by algorithmChoiceKey
  std::function<double()> clock_;         // setClock; null: steady_clock
  CollectiveStats stats_;
  // The call in flight's bytes sent and codec stages (scatter_reduce.cc, ring.cc); countCall
  // moves the seconds into stats_, bytesSent keeps counting (bytesSent()).
  detail::CallCounters counters_;
  StepLaneFactory laneFactory_;
  size_t directAgreementRanks_;  // TERSE_AGREEMENT_DIRECT_RANKS
  uint32_t seq_ = 0;
  detail::Workspaces workspaces_;                   // grow-only, reused across calls
  std::shared_ptr<ArithmeticHook> arithmeticHook_;  // sim/: charges and skips own arithmetic
};

}  // namespace terse
