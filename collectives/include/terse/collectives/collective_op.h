// What a collective call is, apart from who runs it: the call (CollectiveOp), its kind, the
// algorithm it asks for, and the hook the caller may hand the host arithmetic to. The engine
// (engine.h) agrees on calls and dispatches them; the algorithm units (collectives/src/
// algorithm.h) run them. Both need these types, so they live here: a unit, its tests and the
// descriptor code compile without the engine.
#pragma once

#include "terse/common/status.h"
#include "terse/compressors/codec.h"
#include "terse/compressors/error_feedback.h"
#include "terse/collectives/partition.h"

#include <terse/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace terse {

// kBarrier is never a CollectiveOp's kind: it names the barrier in descriptors and messages.
enum class CollectiveKind : uint8_t {
  kAllReduce = 1,
  kReduceScatter = 2,
  kAllGather = 3,
  kBarrier = 4
};
const char* collectiveName(CollectiveKind kind);

// How a call crosses the ranks. Flat: one world of peers (the algorithms above). Two-level: the
// ranks of each node reduce-scatter uncompressed (float32) among themselves, each local rank runs
// the call's codec across nodes with the ranks of its local index on its 1/L slice, and each
// node allgathers the results (docs/design.md, "Two-level collectives"). Auto: flat where the
// engine has no node layout for two-level (enableTwoLevel); where it has one, the faster of the
// two as measured at the call's size, once per (collective, codec, type, size class), on every
// rank alike (docs/design.md, "Choosing the algorithm").
enum class Algorithm : uint8_t { kAuto = 0, kFlat = 1, kTwoLevel = 2 };
const char* algorithmName(Algorithm algorithm);
// "auto", "flat" or "twolevel" (TERSE_ALGO's spellings); kInvalidArgument otherwise.
Result<Algorithm> parseAlgorithm(std::string_view name);

struct CollectiveOp {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  // Elements of the whole tensor: allreduce's send and recv; reduce-scatter's send (each rank
  // receives chunkRange(count, size, rank)); allgather's recv (each rank sends its chunkRange).
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  // ignored by allgather
  const Codec* codec = nullptr;  // required; the `none` codec for uncompressed
  // Optional residuals. Allreduce and reduce-scatter: made for `count`; allgather: made for this
  // rank's chunk length.
  ErrorFeedback* feedback = nullptr;
  // send and recv are CUDA device (or managed) memory: codecs run on the GPU on `stream` (a
  // cudaStream_t; nullptr is the legacy default stream), messages are staged through pinned host
  // memory, and run() returns after the stream has finished the call's work. `none` copies the
  // tensor to pinned host memory and reduces on the host.
  bool device = false;
  void* stream = nullptr;
  // The codec spec the caller asked for when it differs from codec->spec() ("auto:max=int8"
  // when auto picked int8): ranks must agree on it too, and messages name it. Must outlive the
  // call (the api layer points it at its cached spec).
  std::string_view requested;
  // A call auto runs for itself (calibration, measurement): its bytes and time go to
  // CollectiveStats::autoPolicy instead of the caller's rows.
  bool policyWork = false;
  // The caller's choice of algorithm; kAuto defers to TERSE_ALGO and then to the engine. Ranks
  // must agree on the algorithm the engine resolves it to.
  Algorithm algorithm = Algorithm::kAuto;
  // Element of `feedback`'s tensor where this op's tensor starts: a two-level call's slice runs
  // across nodes with the residuals of its own positions of the caller's tensor.
  size_t feedbackOffset = 0;
  // Two-level allreduce in one segment instead of the pipeline (auto's measured choice where the
  // pipeline's overlap costs more than it saves; every rank adopts the same choice).
  bool twoLevelWhole = false;
};

// What the algorithm units (collectives/src/algorithm.h) run a call with besides its ranks and
// buffers: one value the engine keeps and lends to each call's context, and tests or the
// simulator fill for contexts of their own.
struct UnitSettings {
  std::chrono::milliseconds timeout{60000};
  // Elements per pipeline segment (a multiple of every codec block size) and how many segment
  // rounds a compressed unit runs ahead (TERSE_SEGMENT_BYTES, TERSE_PIPELINE_DEPTH).
  size_t segmentElements = size_t{1} << 20;
  size_t pipelineDepth = 1;
  // Uncompressed allreduces of at most this many float32 bytes use recursive doubling
  // (TERSE_SMALL_BYTES).
  size_t smallBytes = 0;
  // Elements per segment of the pipelined two-level allreduce (TERSE_TWOLEVEL_SEGMENT_BYTES;
  // two_level.cc rounds it to whole 65536-element blocks per local rank).
  size_t twoLevelSegmentElements = size_t{4} << 20;
};

// Allreduce's internal chunk boundaries are multiples of this many elements.
constexpr size_t kCollectiveChunkAlign = 2048;
// The chunk of a `count`-element flat allreduce that rank `rank` of `size` reduces and
// re-compresses, so the chunk whose server residual its ErrorFeedback keeps. The one statement of
// the rule: the collectives cut with it, and whatever re-lays out server residuals for another
// world (relayoutFeedback, checkpoints loaded at another world size) cuts with it too, through
// Communicator::allreduceChunk or directly.
inline Range allreduceChunkRange(size_t count, int size, int rank) {
  return alignedChunkRange(count, size, rank, kCollectiveChunkAlign);
}
// Most elements in one call: 2^60, so that float32 workspaces of the whole tensor plus a few
// aligned chunks stay far from size_t's wrap (and reads of a smaller buffer than the count
// promises are the caller's, as with memcpy).
constexpr size_t kMaxCollectiveElements = size_t{1} << 60;

// Where the host arithmetic of a call goes: the float32 sums of uncompressed data and the
// conversions between the caller's type and float32, which no codec call covers. By default
// it runs. The simulation's sizing mode hands every engine a hook that charges it to the
// simulated host at modelled rates and skips it (CollectiveEngine::setArithmeticHook; the
// units reach it through their context).
enum class Arithmetic { kReduce, kConvert };
class ArithmeticHook {
 public:
  virtual ~ArithmeticHook() = default;
  // Before `elements` elements are summed into float32 (kReduce) or converted between the
  // caller's type and float32 (kConvert): true when the hook has dealt with them, and the
  // engine or unit skips the work.
  virtual bool take(Arithmetic what, size_t elements) = 0;
};

}  // namespace terse
