#include "net_lossless.h"

#include "terse/common/env.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace terse::plugin {

// Settings read in this file (terse/common/env.h: declared next to their readers).
const EnvSetting kNetLosslessSetting{
    {"TERSE_NET_LOSSLESS", "bool", "0",
     "NCCL net plugin: compress sends of at least TERSE_NET_LOSSLESS_MIN_BYTES with zstd "
     "(lossless; incompressible messages go raw). Must be the same on every rank: connections "
     "between ranks that differ fail. Pays only on slow links with compressible data (see "
     "docs/nccl-plugin.md)."}};
const EnvSetting kNetLosslessMinBytesSetting{
    {"TERSE_NET_LOSSLESS_MIN_BYTES", "int", "65536",
     "NCCL net plugin: smallest send that TERSE_NET_LOSSLESS compresses, 256..2^30 bytes.", 256,
     int64_t{1} << 30}};

namespace {

constexpr uint32_t kFrameMagic = 0x315a4c54;  // "TLZ1"
constexpr uint32_t kCodecZstd = 1;
// zstd's fastest level with entropy coding: the negative levels skip Huffman coding of literals,
// which is where fp16/bf16/fp32 gradients gain anything at all (their exponent bytes).
constexpr int kZstdLevel = 1;
constexpr size_t kKeepScratchBytes = 16u << 20;

struct FrameHeader {
  uint32_t magic;
  uint32_t codec;
  uint64_t rawSize;
};
static_assert(sizeof(FrameHeader) == kFrameHeaderBytes,
              "the frame header is part of the wire format");

}  // namespace

Status checkFrameSize(size_t frameBytes, size_t capacity) {
  // capacity can be anything NCCL posts (up to 1 GiB): the sum cannot wrap, but stay exact anyway.
  if (frameBytes <= kFrameHeaderBytes || frameBytes - kFrameHeaderBytes <= capacity)
    return Status::ok();
  return errorInvalidUsage(
      "a compressed frame of %zu bytes arrived for a receive of %zu: a frame is never larger than "
      "the receive plus its %zu-byte header, so either the sender's message is larger than the "
      "receive (receives may be larger than sends, never smaller) or the frame is corrupt; it "
      "was dropped unread",
      frameBytes, capacity, kFrameHeaderBytes);
}

Result<LosslessConfig> readLosslessConfig() {
  LosslessConfig c;
  TERSE_ASSIGN_OR_RETURN(c.enabled, kNetLosslessSetting.readBool());
  TERSE_ASSIGN_OR_RETURN(int64_t minBytes, kNetLosslessMinBytesSetting.readInt());
  // Below a few hundred bytes the header and zstd's own framing eat any gain.
  if (minBytes < 256 || minBytes > (int64_t{1} << 30))
    return errorInvalidArgument(
        "TERSE_NET_LOSSLESS_MIN_BYTES=%lld is out of range: use 256..1073741824 (bytes)",
        static_cast<long long>(minBytes));
  c.minBytes = static_cast<size_t>(minBytes);
  return c;
}

LosslessCodec::LosslessCodec() : cctx_(ZSTD_createCCtx()), dctx_(ZSTD_createDCtx()) {
  if (cctx_ == nullptr || dctx_ == nullptr) {
    ZSTD_freeCCtx(cctx_);
    ZSTD_freeDCtx(dctx_);
    throw std::bad_alloc();
  }
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, kZstdLevel);
  // The raw size travels in our header; zstd's copy of it and its checksum would only cost.
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_contentSizeFlag, 0);
  ZSTD_CCtx_setParameter(cctx_, ZSTD_c_checksumFlag, 0);
}

LosslessCodec::~LosslessCodec() {
  ZSTD_freeCCtx(cctx_);
  ZSTD_freeDCtx(dctx_);
}

size_t LosslessCodec::compress(const void* src, size_t n, StagingBuffer* out,
                               void (*between)(void*), void* arg) {
  if (n <= sizeof(FrameHeader) + 1) return 0;
  // Room for a frame strictly smaller than the message: running out of it means "send it raw",
  // without ever allocating compressBound(n).
  const size_t room = n - sizeof(FrameHeader) - 1;
  out->reserve(sizeof(FrameHeader) + room);
  uint8_t* dst = out->data() + sizeof(FrameHeader);
  const auto* p = static_cast<const uint8_t*>(src);
  // Each slice is a zstd frame of its own (zstd decodes concatenated frames in one call): as
  // fast as one-shot compression of the whole message and as small on gradient data, where
  // zstd's streaming API, which would keep one frame across slices, was 10-15% slower on
  // zero-heavy data (it copies its input into an internal window first).
  size_t used = 0;
  for (size_t done = 0; done < n;) {
    const size_t take = std::min(kSliceBytes, n - done);
    size_t c = ZSTD_compress2(cctx_, dst + used, room - used, p + done, take);
    if (ZSTD_isError(c)) return 0;  // dstSize_tooSmall: not smaller than the message
    used += c;
    done += take;
    if (done == n) break;
    if (done == take && used * 100 >= done * 97) return 0;
    if (between != nullptr) between(arg);
  }
  FrameHeader h{kFrameMagic, kCodecZstd, n};
  std::memcpy(out->data(), &h, sizeof(h));
  return sizeof(FrameHeader) + used;
}

Result<size_t> LosslessCodec::decompress(const uint8_t* frame, size_t frameBytes, void* dst,
                                         size_t capacity) {
  FrameHeader h{};
  if (frameBytes < sizeof(h))
    return errorCorrupt("lossless frame of %zu bytes is shorter than its header", frameBytes);
  std::memcpy(&h, frame, sizeof(h));
  if (h.magic != kFrameMagic || h.codec != kCodecZstd)
    return errorCorrupt("lossless frame has magic %#x codec %u, want %#x codec %u", h.magic,
                        h.codec, kFrameMagic, kCodecZstd);
  if (h.rawSize > capacity)
    return errorInvalidUsage(
        "a message of %llu bytes arrived for a receive of %zu (receives may be larger than "
        "sends, never smaller)",
        static_cast<unsigned long long>(h.rawSize), capacity);
  const size_t raw = static_cast<size_t>(h.rawSize);
  scratch_.reserve(raw);
  size_t got =
      ZSTD_decompressDCtx(dctx_, scratch_.data(), raw, frame + sizeof(h), frameBytes - sizeof(h));
  if (ZSTD_isError(got))
    return errorCorrupt("lossless frame does not decode: %s", ZSTD_getErrorName(got));
  if (got != raw)
    return errorCorrupt("lossless frame decoded to %zu bytes, its header says %zu", got, raw);
  if (raw > 0) std::memcpy(dst, scratch_.data(), raw);
  // One huge message (up to NCCL's 1 GiB) must not pin its scratch for the context's life.
  if (scratch_.capacity() > kKeepScratchBytes) scratch_.release();
  return raw;
}

}  // namespace terse::plugin
