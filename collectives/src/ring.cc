// Uncompressed collectives: ring reduce-scatter and allgather (bandwidth-optimal for large
// messages) and recursive doubling (latency-optimal for small ones). Reductions run in float32;
// the wire carries the caller's element type, as in NCCL.
#include "algorithm.h"
#include "requests.h"
#include "typed.h"

#include "terse/collectives/partition.h"

#include <algorithm>
#include <cstring>

namespace terse::detail {

namespace {
inline int mod(int a, int n) { return ((a % n) + n) % n; }

size_t ringSegment(const AlgorithmContext& ctx, size_t count) {
  return ringSegmentElements(ctx.segmentElements(), ctx.transport().size(), count);
}
}  // namespace

size_t ringSegmentElements(size_t configured, int n, size_t count) {
  // A ring step overlaps its hops only as far as a chunk has segments: each hop forwards a
  // segment once it has reduced it. With one or two segments a chunk, each hop waits for most
  // of the previous hop's chunk (the simulation's jump at 512 ranks, 1 GiB: 2 MiB chunks of
  // 1 MiB segments took 80 ms, 512 KiB segments 47 ms; docs/simulation.md). So the segment is
  // cut to about a quarter of a chunk, never below 64 Ki elements (more, smaller messages cost
  // more than they overlap) nor above the configured segment (TERSE_SEGMENT_BYTES).
  constexpr size_t kSegmentsPerChunk = 4, kMinSegment = size_t{1} << 16, kRound = 4096;
  const size_t maxChunk = chunkRange(count, n, 0).length;
  size_t seg = configured;
  if (maxChunk > 0) {
    const size_t quarter = (maxChunk + kSegmentsPerChunk - 1) / kSegmentsPerChunk;
    const size_t rounded = (quarter + kRound - 1) / kRound * kRound;
    seg = std::min(configured, std::max(kMinSegment, rounded));
  }
  while (static_cast<size_t>(n) * segmentCount(maxChunk, seg) > kMaxTagIndex) seg *= 2;
  return seg;
}

// Rank r at step s sends chunk r-s-1 to the right and receives chunk r-s-2 from the left, adding
// it to its own; after n-1 steps chunk r holds everyone's sum. Segments of a step are forwarded
// as soon as they are reduced, so the steps overlap.
Status ringReduceScatterCore(const AlgorithmContext& ctx, float* work, size_t count, DataType wire,
                             uint32_t seq) {
  const int n = ctx.transport().size(), r = ctx.transport().rank();
  if (n == 1 || count == 0) return Status::ok();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const size_t es = dataTypeSize(wire);
  const size_t seg = ringSegment(ctx, count);
  const size_t maxSegs = segmentCount(chunkRange(count, n, 0).length, seg);
  // Wire staging (full tensor in the wire type, indexed by element offset): one slot per element
  // is enough because every chunk is sent once and received once during the reduce-scatter.
  uint8_t* sendStage =
      wire == DataType::kFloat32 ? nullptr : ctx.scratch(Workspace::kRingSendStage, count * es);
  uint8_t* recvStage = ctx.scratch(Workspace::kRingRecvStage, count * es);

  RequestList reqs(ctx.transport(), ctx.timeout(), ctx.bytesSent());
  reqs.reserve(2 * (n - 1) * maxSegs);
  std::vector<size_t> recvSlot((n - 1) * maxSegs);
  for (int s = 0; s < n - 1; ++s) {
    Range c = chunkRange(count, n, mod(r - s - 2, n));
    for (size_t g = 0; g < segmentCount(c.length, seg); ++g) {
      Range sg = segmentRange(c.length, seg, g);
      size_t off = c.begin + sg.begin;
      TERSE_RETURN_IF_ERROR(reqs.recvExact(left, makeTag(seq, kPhaseReduce, s * maxSegs + g),
                                           recvStage + off * es, sg.length * es,
                                           &recvSlot[s * maxSegs + g]));
    }
  }
  auto sendSegment = [&](int step, Range c, size_t g) -> Status {
    Range sg = segmentRange(c.length, seg, g);
    size_t off = c.begin + sg.begin;
    const void* src = work + off;
    if (sendStage) {
      ctx.arithmetic(Arithmetic::kConvert, sg.length,
                     [&] { fromFloat(work + off, 1.0f, wire, sendStage + off * es, sg.length); });
      src = sendStage + off * es;
    }
    size_t slot;
    return reqs.send(right, makeTag(seq, kPhaseReduce, step * maxSegs + g), src, sg.length * es,
                     &slot);
  };
  Range first = chunkRange(count, n, mod(r - 1, n));
  for (size_t g = 0; g < segmentCount(first.length, seg); ++g)
    TERSE_RETURN_IF_ERROR(sendSegment(0, first, g));
  for (int s = 0; s < n - 1; ++s) {
    Range c = chunkRange(count, n, mod(r - s - 2, n));
    for (size_t g = 0; g < segmentCount(c.length, seg); ++g) {
      Range sg = segmentRange(c.length, seg, g);
      size_t off = c.begin + sg.begin;
      TERSE_RETURN_IF_ERROR(reqs.wait(recvSlot[s * maxSegs + g]));
      ctx.arithmetic(Arithmetic::kReduce, sg.length,
                     [&] { accumulateTyped(recvStage + off * es, wire, work + off, sg.length); });
      if (s + 1 < n - 1) TERSE_RETURN_IF_ERROR(sendSegment(s + 1, c, g));
      ctx.transport().progress();  // keep transfers moving while this rank computes
    }
  }
  return reqs.waitAll();
}

// Rank r at step s sends chunk r-s to the right and receives chunk r-s-1 from the left,
// directly in the caller's buffer; received segments are forwarded at once.
Status ringAllgatherCore(const AlgorithmContext& ctx, void* buffer, size_t count, DataType dtype,
                         uint32_t seq) {
  const int n = ctx.transport().size(), r = ctx.transport().rank();
  if (n == 1 || count == 0) return Status::ok();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const size_t es = dataTypeSize(dtype);
  auto* base = static_cast<uint8_t*>(buffer);
  const size_t seg = ringSegment(ctx, count);
  const size_t maxSegs = segmentCount(chunkRange(count, n, 0).length, seg);

  RequestList reqs(ctx.transport(), ctx.timeout(), ctx.bytesSent());
  reqs.reserve(2 * (n - 1) * maxSegs);
  std::vector<size_t> recvSlot((n - 1) * maxSegs);
  for (int s = 0; s < n - 1; ++s) {
    Range c = chunkRange(count, n, mod(r - s - 1, n));
    for (size_t g = 0; g < segmentCount(c.length, seg); ++g) {
      Range sg = segmentRange(c.length, seg, g);
      TERSE_RETURN_IF_ERROR(reqs.recvExact(left, makeTag(seq, kPhaseGather, s * maxSegs + g),
                                           base + (c.begin + sg.begin) * es, sg.length * es,
                                           &recvSlot[s * maxSegs + g]));
    }
  }
  auto sendSegment = [&](int step, Range c, size_t g) -> Status {
    Range sg = segmentRange(c.length, seg, g);
    size_t slot;
    return reqs.send(right, makeTag(seq, kPhaseGather, step * maxSegs + g),
                     base + (c.begin + sg.begin) * es, sg.length * es, &slot);
  };
  Range own = chunkRange(count, n, r);
  for (size_t g = 0; g < segmentCount(own.length, seg); ++g)
    TERSE_RETURN_IF_ERROR(sendSegment(0, own, g));
  for (int s = 0; s < n - 1; ++s) {
    Range c = chunkRange(count, n, mod(r - s - 1, n));
    for (size_t g = 0; g < segmentCount(c.length, seg); ++g) {
      TERSE_RETURN_IF_ERROR(reqs.wait(recvSlot[s * maxSegs + g]));
      if (s + 1 < n - 1) TERSE_RETURN_IF_ERROR(sendSegment(s + 1, c, g));
    }
  }
  return reqs.waitAll();
}

Status ringAllreduce(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq) {
  const int n = ctx.transport().size(), r = ctx.transport().rank();
  float* work =
      op.dtype == DataType::kFloat32
          ? static_cast<float*>(op.recv)
          : reinterpret_cast<float*>(ctx.scratch(Workspace::kFloatWork, op.count * sizeof(float)));
  ctx.arithmetic(Arithmetic::kConvert, op.count,
                 [&] { toFloat(op.send, op.dtype, work, op.count); });
  TERSE_RETURN_IF_ERROR(ringReduceScatterCore(ctx, work, op.count, op.dtype, seq));
  Range own = chunkRange(op.count, n, r);
  float scale = op.op == ReduceOp::kAvg ? 1.0f / static_cast<float>(n) : 1.0f;
  ctx.arithmetic(Arithmetic::kConvert, own.length, [&] {
    fromFloat(work + own.begin, scale, op.dtype,
              static_cast<uint8_t*>(op.recv) + own.begin * dataTypeSize(op.dtype), own.length);
  });
  return ringAllgatherCore(ctx, op.recv, op.count, op.dtype, seq);
}

Status ringReduceScatter(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq) {
  const int n = ctx.transport().size(), r = ctx.transport().rank();
  float* work =
      reinterpret_cast<float*>(ctx.scratch(Workspace::kFloatWork, op.count * sizeof(float)));
  ctx.arithmetic(Arithmetic::kConvert, op.count,
                 [&] { toFloat(op.send, op.dtype, work, op.count); });
  TERSE_RETURN_IF_ERROR(ringReduceScatterCore(ctx, work, op.count, op.dtype, seq));
  Range own = chunkRange(op.count, n, r);
  float scale = op.op == ReduceOp::kAvg ? 1.0f / static_cast<float>(n) : 1.0f;
  ctx.arithmetic(Arithmetic::kConvert, own.length,
                 [&] { fromFloat(work + own.begin, scale, op.dtype, op.recv, own.length); });
  return Status::ok();
}

Status ringAllgather(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq) {
  const int n = ctx.transport().size(), r = ctx.transport().rank();
  Range own = chunkRange(op.count, n, r);
  const size_t es = dataTypeSize(op.dtype);
  uint8_t* dst = static_cast<uint8_t*>(op.recv) + own.begin * es;
  if (own.length && op.send != dst) std::memmove(dst, op.send, own.length * es);
  return ringAllgatherCore(ctx, op.recv, op.count, op.dtype, seq);
}

// Recursive doubling on float32 partial sums. With p the largest power of two <= n, the first
// 2(n-p) ranks pair up first so that p ranks remain. Floating-point addition is commutative, so
// partners compute bit-identical sums and every rank ends with the same bits.
Status recursiveDoublingAllreduce(const AlgorithmContext& ctx, const CollectiveOp& op,
                                  uint32_t seq) {
  const int n = ctx.transport().size(), r = ctx.transport().rank();
  const size_t bytes = op.count * sizeof(float);
  float* work = reinterpret_cast<float*>(ctx.scratch(Workspace::kFloatWork, bytes));
  float* incoming = reinterpret_cast<float*>(ctx.scratch(Workspace::kPartnerFloats, bytes));
  ctx.arithmetic(Arithmetic::kConvert, op.count,
                 [&] { toFloat(op.send, op.dtype, work, op.count); });
  auto addIncoming = [&] {
    ctx.arithmetic(Arithmetic::kReduce, op.count, [&] {
      for (size_t i = 0; i < op.count; ++i) work[i] = incoming[i] + work[i];
    });
  };

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  RequestList reqs(ctx.transport(), ctx.timeout(), ctx.bytesSent());
  size_t step = 0;
  auto exchange = [&](int peer, bool sendIt, bool recvIt) -> Status {
    size_t rs = 0, ss = 0;
    uint64_t tag = makeTag(seq, kPhaseReduce, step++);
    if (recvIt) TERSE_RETURN_IF_ERROR(reqs.recvExact(peer, tag, incoming, bytes, &rs));
    if (sendIt) TERSE_RETURN_IF_ERROR(reqs.send(peer, tag, work, bytes, &ss));
    if (recvIt) TERSE_RETURN_IF_ERROR(reqs.wait(rs));
    if (sendIt) TERSE_RETURN_IF_ERROR(reqs.wait(ss));
    return Status::ok();
  };
  int vrank = -1;  // rank among the p survivors, or -1 for a rank that sat out
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      TERSE_RETURN_IF_ERROR(exchange(r + 1, true, false));
    } else {
      TERSE_RETURN_IF_ERROR(exchange(r - 1, false, true));
      addIncoming();
      vrank = r / 2;
    }
  } else {
    vrank = r - extra;
    step++;  // keep step numbering aligned with the folding ranks
  }
  auto realRank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  if (vrank >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      TERSE_RETURN_IF_ERROR(exchange(realRank(vrank ^ mask), true, true));
      addIncoming();
    }
  } else {
    for (int mask = 1; mask < p; mask <<= 1) step++;
  }
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      TERSE_RETURN_IF_ERROR(exchange(r + 1, false, true));
      if (bytes) std::memcpy(work, incoming, bytes);  // both are null for count 0
    } else {
      TERSE_RETURN_IF_ERROR(exchange(r - 1, true, false));
    }
  }
  float scale = op.op == ReduceOp::kAvg ? 1.0f / static_cast<float>(n) : 1.0f;
  ctx.arithmetic(Arithmetic::kConvert, op.count,
                 [&] { fromFloat(work, scale, op.dtype, op.recv, op.count); });
  return Status::ok();
}

}  // namespace terse::detail
