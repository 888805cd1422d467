// Runs one function on every rank of a world, ranks as threads, over any transport backend, so
// the same conformance tests check each backend.
#pragma once

#include "terse/transport/settings.h"
#include "terse/transport/transport.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace terse::testing {

// Backends the conformance suite runs on. UCX ones pin UCX_TLS and UCX_NET_DEVICES=lo.
enum class Backend { kInProc, kUcxTcp, kUcxShm };
const char* backendName(Backend b);
std::vector<Backend> allBackends();

// Sets UCX_TLS / UCX_NET_DEVICES=lo for a UCX backend (before any UCX context exists).
void setUcxEnvironment(Backend b);

// The worker-address exchange for ranks that are threads of this process.
class MemoryAllGather {
 public:
  explicit MemoryAllGather(int size) : values_(size) {}
  Result<std::vector<std::string>> operator()(int rank, const std::string& mine);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> values_;
  int arrived_ = 0;
};

// Creates the world's transports (one per thread), runs fn(transport) on each, then meets at a
// barrier before tearing down so no rank sees a peer leave early. Failures inside fn are gtest
// failures of the calling test. `settings` go to the backend's factory (fault rules, ...).
void runThreads(Backend backend, int worldSize, const std::function<void(Transport&)>& fn,
                const TransportSettings& settings = TransportSettings());

// The byte the pattern puts at `index` of message `seq` from `src` to `dst`: an independent
// reference that makes misordered, misrouted or truncated messages visible.
inline uint8_t patternByte(int src, int dst, uint64_t seq, size_t index) {
  uint64_t x = (index + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(src) << 48) ^
               (static_cast<uint64_t>(dst) << 32) ^ (seq * 0xD1B54A32D192ED03ull);
  x ^= x >> 29;
  return static_cast<uint8_t>(x ^ (x >> 8));
}
void fillPattern(std::vector<uint8_t>& buf, int src, int dst, uint64_t seq);
// Index of the first byte that differs from the pattern, or -1.
long long firstMismatch(const std::vector<uint8_t>& buf, size_t bytes, int src, int dst,
                        uint64_t seq);

constexpr std::chrono::milliseconds kTestTimeout{60000};

// Blocks until `r` completes and expects success, returning the received byte count.
size_t waitOk(Transport& t, TransportRequest* r);

}  // namespace terse::testing
