// fuzz_lossless: the NCCL net plugin's lossless frames (plugin/net_lossless.h), which a receiver
// decodes from bytes a peer sent.
//
// The first input byte picks the mode. Decode: the rest is taken as a received frame and decoded
// into a receive of `capacity` bytes (from the second byte); it must fail with kCorrupt or
// kInvalidUsage, or return at most `capacity` bytes, never crash, overrun or allocate from an
// unchecked size beyond the capacity. Round trip: the rest is a message; compress() either
// declines (0) or returns a frame smaller than the message that decodes to exactly the message,
// and that checkFrameSize (the receiver's check of a frame's announced size) accepts.
//
// Checked under ASan/UBSan: no crash, no out-of-bounds access, no UB, no leak.
#include "fuzz_util.h"
#include "net_lossless.h"

#include <cstring>
#include <functional>
#include <vector>

namespace {

using terse::plugin::LosslessCodec;
using terse::plugin::StagingBuffer;

void writeSeeds(const std::function<void(const std::vector<uint8_t>&)>& put) {
  LosslessCodec codec;
  // Round-trip seeds: zero-heavy data (compresses), a ramp, and bytes that do not compress.
  std::vector<uint8_t> sparse(70000, 0), ramp(3000), noise(5000);
  for (size_t i = 0; i < sparse.size(); i += 37) sparse[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<uint8_t>(i / 7);
  uint32_t x = 12345;
  for (auto& b : noise) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  for (const auto* m : {&sparse, &ramp, &noise}) {
    std::vector<uint8_t> seed = {1};
    seed.insert(seed.end(), m->begin(), m->end());
    put(seed);
    // Decode seeds: the frame of each compressible message, with a large enough capacity byte.
    StagingBuffer frame;
    size_t n = codec.compress(m->data(), m->size(), &frame);
    if (n == 0) continue;
    std::vector<uint8_t> dec = {0, 255};
    dec.insert(dec.end(), frame.data(), frame.data() + n);
    put(dec);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  terse::fuzz::maybeWriteSeeds(writeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static LosslessCodec codec;  // reused like a NetContext's: state must not leak between calls
  if (size < 2) return 0;
  if (data[0] % 2 == 0) {
    // Capacity up to 255 KiB in 1 KiB steps, so headers that claim more are refused.
    const size_t capacity = static_cast<size_t>(data[1]) << 10;
    std::vector<uint8_t> dst(capacity + 16, 0xA5);
    auto got = codec.decompress(data + 2, size - 2, dst.data(), capacity);
    if (got.isOk()) {
      if (got.value() > capacity) terse::fuzz::fail("decoded more than the receive's capacity");
    } else if (got.status().code() != terse::StatusCode::kCorrupt &&
               got.status().code() != terse::StatusCode::kInvalidUsage) {
      terse::fuzz::fail("decode failed with a code other than kCorrupt/kInvalidUsage");
    }
    for (size_t i = capacity; i < dst.size(); ++i)
      if (dst[i] != 0xA5) terse::fuzz::fail("decode wrote past the receive's capacity");
    return 0;
  }
  const uint8_t* msg = data + 1;
  const size_t n = size - 1;
  StagingBuffer frame;
  const size_t f = codec.compress(msg, n, &frame);
  if (f == 0) return 0;
  if (f >= n) terse::fuzz::fail("compress returned a frame that is not smaller than the message");
  // The receiver refuses frames by size before reading them: it must never refuse a real one.
  if (!terse::plugin::checkFrameSize(f, n).isOk())
    terse::fuzz::fail("checkFrameSize refused a frame compress() made for a receive of its size");
  std::vector<uint8_t> out(n);
  auto got = codec.decompress(frame.data(), f, out.data(), n);
  if (!got.isOk()) terse::fuzz::fail("a frame compress() made does not decode");
  if (got.value() != n || std::memcmp(out.data(), msg, n) != 0)
    terse::fuzz::fail("round trip changed the message");
  return 0;
}
