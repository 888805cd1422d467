// terse::Communicator: a group of ranks that can exchange bytes, created once per process from
// the launcher's environment (terse-run, mpirun, srun, torchrun) or from explicit parts.
//
// Ownership: a Communicator owns its Transport (UCX or in-process); destroying it closes the
// connections gracefully (messages already completed are delivered) unless it was aborted.
// Its state (transport, collective engine and thread, codec cache) lives behind a pointer
// (api/src/communicator.cc), so this header and the other installed ones need none of terse's
// internal headers. terse's own tests, benchmarks and C API reach the transport and build
// in-process worlds through api/include/terse/api/internal.h, which is not installed.
//
// Thread-safety: one thread at a time drives a Communicator (barrier, collectives, transport
// calls). abort() may be called from any thread, e.g. a watchdog: every pending and later
// operation of this rank then fails with the abort's reason, and the other ranks' operations
// with this rank fail with kRemoteError naming it. A collective or barrier that fails after the
// ranks agreed on it (a dead or silent peer, a corrupt message) aborts this rank the same way,
// with its own error as the reason, so that no peer waits on it until its timeout.
//
// Tags: collectives own tags below kReservedTagBase; the communicator's own traffic (barrier)
// uses the tags from there up to, not including, kFailureNoticeTag (transport.h).
#pragma once

#include <terse/error_feedback.h>
#include <terse/stats.h>
#include <terse/status.h>
#include <terse/topology.h>
#include <terse/types.h>
#include <terse/work.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace terse {

// A key-value store the ranks meet through (terse's rendezvous layer: its TCP store, or a memory
// store for ranks that are threads); only passed through by reference here.
class Store;

// How a collective compresses. The codec spec is parsed once per communicator and cached.
struct CollectiveOptions {
  // "none" (uncompressed), "fp16", "bf16", "int8[:block=N,round=nearest|stochastic,seed=N]",
  // "onebit[:block=N]", "topk[:ratio=R]"; see docs/codecs.md. "auto[:max=NAME]" picks, per
  // call, the codec expected to finish first among those up to NAME (default int8): see
  // collectives/auto_select.h.
  std::string codec = "none";
  // Residuals for codecs that need error feedback (onebit, topk), owned by the caller and made for
  // this tensor: ErrorFeedback::create(codec, count) for allreduce and reduce-scatter, for this
  // rank's part (chunkRange) for allgather. Must not be shared by two calls in flight.
  ErrorFeedback* feedback = nullptr;
  // CUDA builds: when send/recv are device (or managed) memory, the codecs run on the GPU on
  // this stream (a cudaStream_t; nullptr is the legacy default stream), after the work already
  // queued on it, and the call completes once the stream has finished its part. Messages are
  // staged through pinned host memory. Ignored for host buffers.
  void* stream = nullptr;
  // When given, receives the canonical spec of the codec that ran the call: auto's pick for an
  // "auto" spec, the codec itself otherwise. Written on the worker thread before the call
  // completes, so read it after wait() (benchmarks report auto's picks with it).
  std::string* chosen = nullptr;
  // "auto" (TERSE_ALGO, else where the node layout allows two-level the faster of it and flat
  // as measured at the call's size, stats().algorithmChoices), "flat" or "twolevel":
  // how the collective crosses the ranks (docs/design.md, "Two-level collectives"). Every rank
  // must end up with the same; asking for twolevel where it cannot run is an error on every rank.
  std::string algorithm = "auto";
};

class Communicator {
 public:
  static constexpr uint64_t kReservedTagBase = (uint64_t{1} << 40) - (uint64_t{1} << 16);

  // The usual entry point. Reads rank, world size and the store from TERSE_RANK /
  // TERSE_WORLD_SIZE / TERSE_STORE (or the launcher's variables, see docs/env.md), the timeout
  // from TERSE_TIMEOUT_MS and the backend from TERSE_TRANSPORT (ucx), then meets the other
  // ranks: a rank that never arrives is a kTimeout naming it; ranks that disagree on the world
  // size or terse version fail with kInvalidUsage.
  static Result<std::unique_ptr<Communicator>> createFromEnv();

  // The same over a store the caller opened (the NCCL plugin, the PyTorch package, tests with
  // ranks as threads over a memory store). `store` is only used during the call. `scope`
  // prefixes the keys: every rank of one communicator passes the same, and communicators that
  // share a store use different ones.
  static Result<std::unique_ptr<Communicator>> createUcx(int rank, int size, Store& store,
                                                         std::chrono::milliseconds timeout,
                                                         const std::string& scope = "comm");

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // Which ranks share this rank's node (include/terse/topology.h): learned when the
  // communicator is created, from every rank's node key (TERSE_NODE, or the host).
  const Topology& topology() const;
  int localRank() const { return topology().localRank; }
  int localSize() const { return topology().localSize; }
  // Whether allreduce runs two-level by default here ("" when it does), or why not: one node,
  // one rank per node, nodes of different sizes (docs/design.md).
  std::string twoLevelUnavailable() const;

  // Returns once every rank has entered it; kTimeout / kRemoteError name the peer that did not
  // answer.
  Status barrier();

  // Sub-communicators (MPI_Comm_split / ncclCommSplit): collective over this communicator;
  // ranks that pass the same `color` form a new communicator, ordered by `key` (ties by rank).
  // A negative color takes part but joins none: the result is then null. The new communicator
  // shares this one's connections, in a tag space of its own so calls on different
  // communicators never match, and has a collective thread of its own (docs/api.md, "the
  // ordering rule"); either may be destroyed first (the connections live while one uses them). A
  // rank that dies fails the calls of every communicator containing it, and a failure that makes
  // one of them give up aborts the shared connections, so the others fail too. At most 62 splits
  // per world (tag spaces).
  Result<std::unique_ptr<Communicator>> split(int color, int key);
  // split(color, key) made once and shared, for code that needs one sub-communicator in many
  // places (one ShardedOneBitAdam per FSDP unit, each refreshing its buddy copy over the same
  // pair): one split, one tag space, one collective thread in all, not one per caller. The first
  // call with a given color and key is split(color, key), collective under its rules (every rank
  // makes its first call at the same point of its split sequence); each later call with the same
  // color and key returns that same communicator at once, without communicating. This
  // communicator keeps it (null for a negative color) until it is destroyed, so a new or shrunk
  // world never hands out another world's; callers may hold theirs longer. A failed split is not
  // kept: the next call splits again. Its callers share its ordering rule: every rank makes
  // their calls on it in the same order.
  Result<std::shared_ptr<Communicator>> splitOnce(int color, int key);

  // After a failure (or on request, naming live ranks in `exclude`): the ranks still running
  // agree, through the store, on who is gone and form a new communicator without them, ranks
  // renumbered densely in the old order (docs/reliability.md, "Shrinking after a failure"). Every
  // survivor calls it, on the world communicator (not on a split), with the same or no
  // `exclude`; a rank being left out does not call it (if it does, it gets kRemoteError saying it
  // was left out). Ranks whose process is seen to have ended on this host are known gone at
  // once; any other rank that has not called shrink within the timeout is left out by every
  // survivor alike. Survivors that cannot all confirm the same world all fail. Needs a store
  // that outlives the dead ranks and was kept by the communicator: createFromEnv's (a TCP store
  // served by rank 0 ends with rank 0). `gone`, when given, receives the old ranks left out.
  // This communicator is left as it is (destroy it); the new one has its own connections.
  Result<std::unique_ptr<Communicator>> shrink(const std::vector<int>& exclude = {},
                                               std::vector<int>* gone = nullptr);
  // For a communicator that shrink() made: {this rank's rank, the size} in the communicator it
  // was shrunk from, which relayoutFeedback and the optimizers' shrink need and which a state
  // reloaded from a checkpoint no longer knows. {-1, 0} for any other communicator.
  std::pair<int, int> shrunkFrom() const;

  // See the thread-safety note above. `why` becomes this rank's error for every operation.
  void abort(const Status& why);

  // For code above this class (OneBitAdam; bindings, through terse_comm_reject) that finds the
  // arguments of its next collective invalid before making the call: the refusal takes that
  // call's place in the ranks' sequence, so the peers fail their matching call at once, naming
  // this rank, instead of pairing it with this rank's next call. Completes with `why`.
  Work reject(const Status& why);

  // The per-operation timeout (TERSE_TIMEOUT_MS unless given): every wait on the transport and
  // every collective step is bounded by it.
  std::chrono::milliseconds timeout() const;
  // Not while collectives are in flight. kInvalidArgument outside 1 ms .. a year.
  Status setTimeout(std::chrono::milliseconds timeout);

  // ---- collectives ------------------------------------------------------------------------
  // Every rank must make the same calls, in the same order, with the same count, type, op and
  // codec; a rank that disagrees makes the call fail on every rank (kInvalidUsage), never hang.
  // The *Async forms return at once; the calls run in submission order on the communicator's
  // worker thread, and buffers must stay valid (and send unmodified) until Work::wait() returns.
  // The blocking forms run on the caller's thread when nothing is queued or running (no
  // hand-off to the worker thread and back), else in turn like the others.
  // Results of compressed collectives are bit-identical on every rank.
  //
  // allreduce: send and recv hold `count` elements (recv == send is in place).
  Work allreduceAsync(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                      const CollectiveOptions& options = {});
  Status allreduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                   const CollectiveOptions& options = {});
  // reduce-scatter: send holds `count` elements; recv gets this rank's part,
  // partOf(count) = chunkRange(count, size(), rank()) (the first count % size ranks get one more).
  Work reduceScatterAsync(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                          const CollectiveOptions& options = {});
  Status reduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                       const CollectiveOptions& options = {});
  // allgather: send holds this rank's part (partOf(count)), recv gets all `count` elements.
  Work allgatherAsync(const void* send, void* recv, size_t count, DataType type,
                      const CollectiveOptions& options = {});
  Status allgather(const void* send, void* recv, size_t count, DataType type,
                   const CollectiveOptions& options = {});
  // {offset, length} of this rank's part of a `count`-element tensor in reduce-scatter/allgather.
  std::pair<size_t, size_t> partOf(size_t count) const;
  // {offset, length} of the chunk of a `count`-element tensor that rank `rank` of `size` owns in
  // the flat allreduce: the chunk whose sum it makes and re-compresses, so the chunk whose
  // server residual its ErrorFeedback keeps. Boundaries fall on multiples of a codec block (2048
  // elements), the last rank taking what is left; not partOf's balanced split. The one place
  // outside the collectives that knows this rule (relayoutFeedback, checkpoints).
  static std::pair<size_t, size_t> allreduceChunk(size_t count, int size, int rank);
  // Bytes this rank has handed to the transport for collectives so far (for benchmark tables;
  // read it after the collectives of interest completed).
  uint64_t bytesSent() const;
  // Calls, failures, bytes and time per collective kind, and auto's picks, since creation. Runs
  // in order on the collective thread, so it waits for the calls submitted before it. Logged at
  // INFO when the communicator is destroyed.
  CollectiveStats stats();

 private:
  // Everything else a communicator holds (api/src/communicator.cc).
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  // terse's internal entry points (api/include/terse/api/internal.h).
  friend struct CommunicatorAccess;
  std::unique_ptr<Impl> impl_;
};

// After a shrink: lays out the error-feedback states of this survivor's tensors (made for
// allreduce or reduce-scatter over the old world) for the shrunk world, in one exchange
// (docs/reliability.md, "Residuals after a shrink"). Collective over `shrunk`: every survivor
// calls it, with its rank in the old world (`oldRank`), the old world's size and its states in
// the same order and number as the others (codec and count alike per position).
//  - The worker residual stays as it is: it is this process's own untransmitted gradient, and
//    in the new world that gradient is averaged with weight 1/n_new, its residual along with it.
//  - The server residuals (each the residual of the chunk of the averaged result that the rank
//    owned in the old world) are gathered into a view of the whole tensor in which the dead
//    ranks' chunks are zero (lost with their process), and each survivor keeps the chunk of that
//    view it owns in the new world's flat allreduce (Communicator::allreduceChunk).
// Device residuals are brought to the host first. A state an allgather has used is sized for
// one rank's part, which changes with the world: kInvalidArgument naming it (make a new state).
// Server residuals of another partition (the two-level allreduce keeps them per cross-node
// lane, a world of as many ranks as nodes) are not moved: those elements restart from zero.
// States that differ between survivors (codec, count, number), an old rank out of range or
// given twice, or a null state fail on every survivor alike (kInvalidArgument, naming the rank
// and state), never one alone, and change nothing. A failure of the exchange itself (a second
// death) fails the call; its last step may then have re-laid out some survivors' states and not
// others', which the relayout after the next shrink takes as it finds them (a state laid out
// for another world contributes zeros).
Status relayoutFeedback(Communicator& shrunk, int oldRank, int oldWorld,
                        const std::vector<ErrorFeedback*>& feedback);

}  // namespace terse
