// Optional lossless compression of the net plugin's large messages (TERSE_NET_LOSSLESS=1).
//
// A send of at least TERSE_NET_LOSSLESS_MIN_BYTES is compressed with zstd (level 1) into a
// plugin-owned buffer and goes out as one frame: a 16-byte FrameHeader (magic, codec, raw size)
// followed by the zstd frame, with kCompressedTagBit set in its UCX tag. When the frame would not
// be smaller than the message (random or already-compressed data) the message goes out raw, tag
// bit clear, so a message never costs more than it did without compression. The receiver learns
// which kind arrived from the tag (ucp_tag_probe_nb) before choosing where the bytes land.
//
// Both ends of a connection must agree on TERSE_NET_LOSSLESS; connect/accept compare the two and
// fail with an error naming the variable when they differ (net_ucx.cc).
#pragma once

#include "terse/common/status.h"

#include <cstddef>
#include <cstdint>
#include <memory>

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace terse::plugin {

// Set in the UCX tag of a compressed frame. Receive comm ids stay below 2^31 so the bit is free.
constexpr uint64_t kCompressedTagBit = uint64_t{1} << 63;

// Size of the header in front of every compressed frame (magic, codec, raw size).
constexpr size_t kFrameHeaderBytes = 16;

// Whether a compressed frame of `frameBytes` (its size as UCX announces it, chosen by the peer)
// may be received for a receive of `capacity` bytes. compress() only sends a frame smaller than
// its message, and a message never exceeds the receive, so a frame larger than the capacity plus
// its header is refused before any staging buffer is sized from it: otherwise a corrupt or
// hostile peer could make the receiver allocate anything up to what UCX accepts.
// Errors: kInvalidUsage (the sender's message is larger than the receive, or the frame is bogus;
// the message is dropped and the connection stays usable, as for a raw message that is too big).
Status checkFrameSize(size_t frameBytes, size_t capacity);

struct LosslessConfig {
  bool enabled = false;
  size_t minBytes = 64 << 10;
};

// Reads TERSE_NET_LOSSLESS and TERSE_NET_LOSSLESS_MIN_BYTES; malformed values are errors.
Result<LosslessConfig> readLosslessConfig();

// Grow-only byte buffer without zero-filling (a staging buffer is always overwritten first).
class StagingBuffer {
 public:
  uint8_t* data() { return data_.get(); }
  size_t capacity() const { return capacity_; }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    data_.reset(new uint8_t[n]);
    capacity_ = n;
  }
  void release() {
    data_.reset();
    capacity_ = 0;
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
};

// One zstd compression and decompression context, used under the NetContext's mutex.
class LosslessCodec {
 public:
  LosslessCodec();
  ~LosslessCodec();
  LosslessCodec(const LosslessCodec&) = delete;
  LosslessCodec& operator=(const LosslessCodec&) = delete;

  // Writes header + compressed bytes of src[0, n) into `out`. Returns the frame's size, or 0
  // when it would not be smaller than n: the caller then sends the message raw. Works in
  // slices of kSliceBytes and calls between(arg) after each but the last, so the caller can
  // keep the link busy while a large message compresses (one-shot compression of a 4 MiB bf16
  // message held a 1 Gbit/s link idle long enough to lose the gain); gives up after the first
  // slice when that one did not shrink by 3% (random data then costs one slice of CPU).
  static constexpr size_t kSliceBytes = 256 << 10;
  size_t compress(const void* src, size_t n, StagingBuffer* out, void (*between)(void*) = nullptr,
                  void* arg = nullptr);

  // Decodes a frame into dst (room for `capacity` bytes) and returns the message's raw size.
  // The bytes are decoded into a scratch buffer first and then copied: zstd writes ahead of its
  // output position and fixes those bytes up later, and NCCL's LL/LL128 receivers poll flags in
  // the destination while it fills, so only final bytes may ever appear there.
  // Errors: kInvalidUsage when the message is larger than the receive, kCorrupt for a bad frame.
  Result<size_t> decompress(const uint8_t* frame, size_t frameBytes, void* dst, size_t capacity);

 private:
  ZSTD_CCtx_s* cctx_ = nullptr;
  ZSTD_DCtx_s* dctx_ = nullptr;
  StagingBuffer scratch_;
};

}  // namespace terse::plugin
