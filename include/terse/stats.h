// What a communicator's collectives did: per kind, calls and failures, the caller's bytes and
// the bytes handed to the transport, and where the time went. Communicator::stats() returns it;
// the C API's terse_comm_stats() fills the same figures into terse_stats_t.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace terse {

struct CollectiveStats {
  struct Kind {
    uint64_t calls = 0;     // completed successfully
    uint64_t failures = 0;  // returned an error (refused, disagreed, or failed on the way)
    // The tensors' bytes as the caller holds them (count x element size), for successful calls.
    uint64_t rawBytes = 0;
    // Bytes this rank handed to the transport for these calls, the call descriptors included:
    // what crossed the network from this rank.
    uint64_t wireBytes = 0;
    // Wall time of the calls on the collective thread, and the parts of it spent in codec work:
    // compressing, and decoding / reducing. The rest is transfer: waiting for the network and
    // the peers. For CUDA buffers the codec parts count the time to queue the kernels.
    double seconds = 0, compressSeconds = 0, reduceSeconds = 0;
  };
  Kind allreduce, reduceScatter, allgather;
  // The collectives `auto` ran for itself: its calibration on first use and its measurements of
  // close contenders at a new size class (docs/codecs.md).
  Kind autoPolicy;
  uint64_t barriers = 0;
  // `auto` specs: the codec each call ran with, by canonical spec, and how many calls.
  std::map<std::string, uint64_t> autoPicks;
  // The algorithm auto chose where the node layout allows two-level, with its reason (the
  // measured times), by "collective codec type 2^c B" size class; its trials count in
  // autoPolicy. And how many callers' calls each algorithm ran ("flat", "twolevel").
  std::map<std::string, std::string> algorithmChoices;
  std::map<std::string, uint64_t> algorithmCalls;
};

}  // namespace terse
