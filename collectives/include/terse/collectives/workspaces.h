// The memory an algorithm unit works in, by name, and the counters of the call in flight: the
// two things an AlgorithmContext (collectives/src/algorithm.h) borrows besides a transport.
// The engine owns one Workspaces and one CallCounters; a test or the simulator may own their
// own and build a context over them without any engine.
#pragma once

#include "terse/common/status.h"
#include "terse/kernels/device.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace terse {
struct CollectiveOp;  // collective_op.h

namespace detail {

// The workspaces, by name. One unit runs at a time on a context, so the flat units share slot
// numbers (a ring and a scatter-reduce never run in one call). The two-level slots differ from
// every flat one: a two-level call holds them while its steps run flat units, and with a shared
// provider (sim/) those steps draw from the same slots.
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
  kNodeInput = 7,    // the input widened to float32 (allreduce) or packed by slice (the others);
                     // step 1's ring sums in place in it, so it then holds the node's sums
  kNodeStaged = 9,   // reduce-scatter: the cross step's input or result
  kNodeResult = 10,  // reduce-scatter, uncompressed: the cross step's result
  // auto's algorithm trials with a shared provider (CollectiveEngine::chooseAlgorithm): held
  // while the trial calls run, so distinct from every slot above
  kTrialSend = 11,
  kTrialRecv = 12
};

// What one call has done so far: bytes handed to the transport (RequestList adds each send's)
// and seconds in codec work and in reductions. The engine folds them into its statistics.
struct CallCounters {
  uint64_t bytesSent = 0;
  double compressSeconds = 0;
  double reduceSeconds = 0;

  // Another context's counts of the same call (two-level's cross-node steps), added in.
  CallCounters& operator+=(const CallCounters& other) {
    bytesSent += other.bytesSent;
    compressSeconds += other.compressSeconds;
    reduceSeconds += other.reduceSeconds;
    return *this;
  }
};

// Grow-only buffers by slot, reused across calls: host memory for host calls, pinned host memory
// (wire) and device memory (accumulators) for device calls. A provider, when set, hands out the
// host slots instead (the simulator's thousands of ranks share one set; the values it computes
// do not change simulated time), except the descriptors, which each rank reads back.
class Workspaces {
 public:
  class Provider {
   public:
    virtual ~Provider() = default;
    virtual uint8_t* workspace(int slot, size_t bytes) = 0;
  };

  void setProvider(std::shared_ptr<Provider> provider) { provider_ = std::move(provider); }
  const std::shared_ptr<Provider>& provider() const { return provider_; }

  // Host memory of at least `bytes` for `slot`.
  uint8_t* host(Workspace slot, size_t bytes);
  // Where op's codecs write messages: host memory, or pinned host memory for device calls.
  Result<uint8_t*> wire(const CollectiveOp& op, Workspace slot, size_t bytes);
  // float32 accumulators: host memory, or device memory for device calls.
  Result<float*> accumulators(const CollectiveOp& op, size_t elems);

 private:
  std::vector<std::vector<uint8_t>> host_;
  std::shared_ptr<Provider> provider_;
  std::vector<device::PinnedBuffer> pinned_;
  device::DeviceBuffer deviceAcc_;
};

}  // namespace detail
}  // namespace terse
