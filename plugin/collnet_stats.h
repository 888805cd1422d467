// What a CollNet communicator did, as it is logged at closeColl (docs/nccl-plugin.md,
// "Statistics"). The collectives' own figures (calls, failures, raw and wire bytes, time, auto's
// picks) are terse's CollectiveStats, read from the communicator's engine: the same type and
// counts a direct user gets from Communicator::stats() / terse_comm_stats(). This file adds only
// what the plugin alone sees: calls it refused before they reached terse, and how error
// feedback followed the training steps.
//
// Pure formatting (no logging or I/O here): collnet_comm.cc counts and writes the lines.
#pragma once

#include "terse/stats.h"

#include <cstdint>
#include <string>
#include <vector>

namespace terse::plugin::collnet {

struct CollNetCounters {
  // iallreduce / ireducescatter / iallgather calls that returned an error before terse ran them
  // (a datatype or op reduceSupport declined, a window terse cannot run, a NULL buffer, a device
  // buffer without the device path). NCCL sees the error at once; the engine never sees them.
  uint64_t declined = 0;
  // Error feedback only (onebit, topk, auto allowing them), reduce calls with count > 0:
  uint64_t withResidual = 0;     // ran the codec with their position's residual
  uint64_t withoutResidual = 0;  // ran the no-residual form (warm-up, or no period found)
  uint64_t periodsLearned = 0;   // learned periods (a re-learn after a change counts again)
  uint64_t resets = 0;           // changed sequences: every residual dropped
};

// What the lines say about the communicator itself.
struct StatsContext {
  int rank = 0, nranks = 1;
  std::string codec;  // TERSE_COLLNET_CODEC after fallbacks
  bool errorFeedback = false;
  std::string warmupCodec;  // what calls without a residual ran
  // "2 (TERSE_COLLNET_EF_PERIOD)", "2 (learned)", "not learned yet" or "not found"
  std::string period;
};

// The INFO lines of closeColl, without the "CollNet/terse : " prefix. The first is always
// there, the others only for what happened (docs/nccl-plugin.md shows them):
// - "rank R of N stats: codec C, K calls, RAW bytes -> WIRE on the wire (raw/wire X.XX),
//   F failed, D declined": K and F count the caller's calls, RAW their bytes, WIRE this rank's
//   sends for them and for auto's own calls. raw/wire is not a codec ratio: uncompressed, an
//   allreduce on N ranks sends about 2(N-1)/N of its bytes from each rank.
// - one line per kind that ran (allreduce, reduce-scatter, allgather, and auto's own calibration
//   and measurement): "K calls (F failed), RAW bytes -> WIRE on the wire, T ms (compress T ms,
//   reduce T ms)", the time of the calls on the collective thread and its codec parts;
// - "auto picked SPEC for K calls", one per codec;
// - with error feedback: "error feedback: K calls with residuals, K without (ran W), period P,
//   L learned, T resets".
std::vector<std::string> describeStats(const StatsContext& context, const CollectiveStats& stats,
                                       const CollNetCounters& counters);

}  // namespace terse::plugin::collnet
