// Compressed collectives: scatter-reduce allreduce and reduce-scatter, and compressed allgather.
//
// Allreduce, for rank r of n, chunk j = allreduceChunkRange(count, n, j), segments of S elements:
//   1. for each segment round g, compress segment g of every chunk j (worker residual) and send it
//      to rank j (own chunk kept locally);
//   2. one round later, reduce own segment g: decompress-accumulate the n contributions in rank
//      order 0..n-1 into float32, compress the sum once (server residual; avg folds in 1/n as the
//      codec's input scale), send it to every peer, and decode it into recv like everyone else;
//   3. two rounds later, decode the peers' results for round g into recv.
// The lags let transfers of one round overlap compression of the next. Reduce-scatter stops after
// step 2 and writes the float32 sum (scaled for avg) of its own chunk instead of recompressing.
#include "algorithm.h"
#include "requests.h"
#include "typed.h"

#include "terse/collectives/partition.h"
#include "terse/kernels/numeric.h"

#include <algorithm>
#include <cstring>

namespace terse::detail {

namespace {

uint64_t nonceFor(uint32_t seq, int rank, int chunk, size_t segment, int phase) {
  uint64_t x = (uint64_t{seq} << 32) ^ (uint64_t(rank) << 20) ^ (uint64_t(chunk) << 4) ^ phase;
  return num::mix64(x ^ num::mix64(segment + 0x51ed270b27b2f6c1ull));
}

// The codec call of one compression or decode: device calls run the codecs on the op's stream.
CodecCall codecCall(const CollectiveOp& op, uint64_t nonce = 0, float scale = 1.0f) {
  CodecCall call;
  call.nonce = nonce;
  call.scale = scale;
  call.device = op.device;
  call.stream = op.stream;
  return call;
}

// The op's residuals where its codecs run: host memory, or the device for device calls.
// Both start at op.feedbackOffset of the caller's tensor (a two-level call's slice).
Result<float*> workerResidual(const CollectiveOp& op) {
  if (!op.feedback) return static_cast<float*>(nullptr);
  if (op.device) {
    TERSE_ASSIGN_OR_RETURN(float* all, op.feedback->deviceWorker(op.stream));
    return all + op.feedbackOffset;
  }
  return op.feedback->worker() + op.feedbackOffset;
}
Result<float*> serverResidual(const CollectiveOp& op, int n, Range mine) {
  if (!op.feedback) return static_cast<float*>(nullptr);
  const size_t begin = op.feedbackOffset + mine.begin;
  if (op.device) return op.feedback->deviceServer(n, begin, mine.length, op.stream);
  return op.feedback->serverChecked(n, begin, mine.length);
}

}  // namespace

Status scatterReduce(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq) {
  const int n = ctx.transport().size(), r = ctx.transport().rank();
  const bool allreduce = op.kind == CollectiveKind::kAllReduce;
  const Codec& codec = *op.codec;
  const size_t es = dataTypeSize(op.dtype);
  auto chunkOf = [&](int j) {
    return allreduce ? allreduceChunkRange(op.count, n, j) : chunkRange(op.count, n, j);
  };
  size_t seg = ctx.segmentElements(), maxSegs = 0, maxChunk = 0;
  for (int j = 0; j < n; ++j) {
    maxSegs = std::max(maxSegs, segmentCount(chunkOf(j).length, seg));
    maxChunk = std::max(maxChunk, chunkOf(j).length);
  }
  while (maxSegs > kMaxTagIndex) {
    seg *= 2;
    maxSegs = (maxSegs + 1) / 2;
  }
  // Slots for the largest segment that occurs: with many ranks the chunks are far shorter than
  // a segment, and slots of a whole segment each would make the workspaces grow with n (3 GB a
  // rank for int8 at 4096 ranks, docs/simulation.md) for no use.
  const size_t slotElems = std::min(seg, maxChunk);
  const size_t stride = (codec.maxWireBytes(slotElems) + 7) / 8 * 8;
  const Range mine = chunkOf(r);
  const size_t mySegs = segmentCount(mine.length, seg);
  const float avgScale = op.op == ReduceOp::kAvg ? 1.0f / static_cast<float>(n) : 1.0f;

  TERSE_ASSIGN_OR_RETURN(uint8_t * sendWire,
                         ctx.wireScratch(op, Workspace::kChunkWire, n * maxSegs * stride));
  TERSE_ASSIGN_OR_RETURN(uint8_t * recvWire,
                         ctx.wireScratch(op, Workspace::kContribWire, n * maxSegs * stride));
  TERSE_ASSIGN_OR_RETURN(uint8_t * resultWire,
                         ctx.wireScratch(op, Workspace::kResultWire, maxSegs * stride));
  uint8_t* gatherWire = nullptr;  // [owner i][g]
  if (allreduce) {
    TERSE_ASSIGN_OR_RETURN(gatherWire,
                           ctx.wireScratch(op, Workspace::kGatherWire, n * maxSegs * stride));
  }
  TERSE_ASSIGN_OR_RETURN(float* acc, ctx.accScratch(op, slotElems));
  std::vector<size_t> ownBytes(maxSegs, 0);
  auto slotPtr = [&](uint8_t* base, int who, size_t g) {
    return base + (who * maxSegs + g) * stride;
  };

  TERSE_ASSIGN_OR_RETURN(float* worker, workerResidual(op));
  float* server = nullptr;
  if (allreduce) {
    TERSE_ASSIGN_OR_RETURN(server, serverResidual(op, n, mine));
  }
  const auto* input = static_cast<const uint8_t*>(op.send);
  auto* output = static_cast<uint8_t*>(op.recv);

  RequestList reqs(ctx.transport(), ctx.timeout(), ctx.bytesSent());
  std::vector<size_t> contribSlot(n * maxSegs, 0), gatherSlot(n * maxSegs, 0);
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    for (size_t g = 0; g < mySegs; ++g)
      TERSE_RETURN_IF_ERROR(reqs.recv(i, makeTag(seq, kPhaseReduce, g), slotPtr(recvWire, i, g),
                                      stride, &contribSlot[i * maxSegs + g]));
    if (!allreduce) continue;
    for (size_t g = 0; g < segmentCount(chunkOf(i).length, seg); ++g)
      TERSE_RETURN_IF_ERROR(reqs.recv(i, makeTag(seq, kPhaseGather, g), slotPtr(gatherWire, i, g),
                                      stride, &gatherSlot[i * maxSegs + g]));
  }

  // Step 1 for round g.
  auto compressRound = [&](size_t g) -> Status {
    for (int k = 0; k < n; ++k) {
      const int j = (r + k) % n;  // own chunk first, then peers in rotated order (spreads incast)
      Range c = chunkOf(j);
      if (g >= segmentCount(c.length, seg)) continue;
      Range sg = segmentRange(c.length, seg, g);
      size_t off = c.begin + sg.begin;
      TERSE_ASSIGN_OR_RETURN(size_t bytes, ctx.compressing([&] {
        return codec.compress(input + off * es, op.dtype, sg.length,
                              worker ? worker + off : nullptr, slotPtr(sendWire, j, g), stride,
                              codecCall(op, nonceFor(seq, r, j, g, 0)));
      }));
      if (j == r) {
        ownBytes[g] = bytes;
      } else {
        size_t slot;
        TERSE_RETURN_IF_ERROR(
            reqs.send(j, makeTag(seq, kPhaseReduce, g), slotPtr(sendWire, j, g), bytes, &slot));
      }
      // Transports such as UCX over TCP move bytes only while progressed: keep the link busy
      // between compressions instead of leaving it idle for a whole round.
      ctx.transport().progress();
    }
    return Status::ok();
  };

  // Step 2 for my segment g.
  auto reduceRound = [&](size_t g) -> Status {
    if (g >= mySegs) return Status::ok();
    Range sg = segmentRange(mine.length, seg, g);
    if (op.device)
      TERSE_RETURN_IF_ERROR(device::zeroAsync(acc, sg.length * sizeof(float), op.stream));
    else
      std::memset(acc, 0, sg.length * sizeof(float));
    for (int i = 0; i < n; ++i) {
      const uint8_t* wire = slotPtr(i == r ? sendWire : recvWire, i, g);
      size_t bytes = ownBytes[g];
      if (i != r) TERSE_RETURN_IF_ERROR(reqs.wait(contribSlot[i * maxSegs + g], &bytes));
      TERSE_RETURN_IF_ERROR(
          ctx.reducing([&] {
               return codec.decompressAccumulate(wire, bytes, acc, sg.length, codecCall(op));
             })
              .withContext(formatString("chunk %d segment %zu from rank %d", r, g, i)));
      ctx.transport().progress();
    }
    uint8_t* out = output + (allreduce ? mine.begin + sg.begin : sg.begin) * es;
    if (!allreduce) {
      if (op.device)
        return device::convertAsync(acc, DataType::kFloat32, out, op.dtype, sg.length, avgScale,
                                    op.stream);
      ctx.arithmetic(Arithmetic::kConvert, sg.length,
                     [&] { fromFloat(acc, avgScale, op.dtype, out, sg.length); });
      return Status::ok();
    }
    const CodecCall call = codecCall(op, nonceFor(seq, r, r, g, 1), avgScale);
    uint8_t* result = resultWire + g * stride;
    TERSE_ASSIGN_OR_RETURN(size_t bytes, ctx.compressing([&] {
      return codec.compress(acc, DataType::kFloat32, sg.length,
                            server ? server + sg.begin : nullptr, result, stride, call);
    }));
    for (int k = 1; k < n; ++k) {
      size_t slot;
      TERSE_RETURN_IF_ERROR(
          reqs.send((r + k) % n, makeTag(seq, kPhaseGather, g), result, bytes, &slot));
    }
    // The owner keeps what it broadcast, not its exact sum: all ranks end bit-identical.
    return ctx.reducing(
        [&] { return codec.decompress(result, bytes, out, op.dtype, sg.length, codecCall(op)); });
  };

  // Step 3 for round g: decode what the other owners broadcast.
  auto gatherRound = [&](size_t g) -> Status {
    if (!allreduce) return Status::ok();
    for (int i = 0; i < n; ++i) {
      if (i == r) continue;
      Range c = chunkOf(i);
      if (g >= segmentCount(c.length, seg)) continue;
      Range sg = segmentRange(c.length, seg, g);
      size_t bytes = 0;
      TERSE_RETURN_IF_ERROR(reqs.wait(gatherSlot[i * maxSegs + g], &bytes));
      TERSE_RETURN_IF_ERROR(
          ctx.reducing([&] {
               return codec.decompress(slotPtr(gatherWire, i, g), bytes,
                                       output + (c.begin + sg.begin) * es, op.dtype, sg.length,
                                       codecCall(op));
             })
              .withContext(formatString("result of chunk %d segment %zu from rank %d", i, g, i)));
      ctx.transport().progress();
    }
    return Status::ok();
  };

  // Round g compresses segment g, reduces segment g - D and decodes the results of segment
  // g - D - 1 (D = pipeline depth): one round of slack between an owner's reduction and its
  // peers' decoding of it.
  const size_t D = ctx.pipelineDepth();
  for (size_t g = 0; g < maxSegs + D + 1; ++g) {
    if (g < maxSegs) TERSE_RETURN_IF_ERROR(compressRound(g));
    if (g >= D) TERSE_RETURN_IF_ERROR(reduceRound(g - D));
    if (g >= D + 1) TERSE_RETURN_IF_ERROR(gatherRound(g - D - 1));
  }
  return reqs.waitAll();
}

// Each rank compresses its part once (worker residual over its part) and sends it to everyone;
// every rank decodes all parts, its own included, so all hold identical bytes.
Status compressedAllgather(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq) {
  const int n = ctx.transport().size(), r = ctx.transport().rank();
  const Codec& codec = *op.codec;
  const size_t es = dataTypeSize(op.dtype);
  size_t seg = ctx.segmentElements(), maxSegs = 0, maxPart = 0;
  for (int j = 0; j < n; ++j) {
    maxSegs = std::max(maxSegs, segmentCount(chunkRange(op.count, n, j).length, seg));
    maxPart = std::max(maxPart, chunkRange(op.count, n, j).length);
  }
  while (maxSegs > kMaxTagIndex) {
    seg *= 2;
    maxSegs = (maxSegs + 1) / 2;
  }
  const size_t stride = (codec.maxWireBytes(std::min(seg, maxPart)) + 7) / 8 * 8;  // as above
  const Range mine = chunkRange(op.count, n, r);
  TERSE_ASSIGN_OR_RETURN(uint8_t * wire,
                         ctx.wireScratch(op, Workspace::kChunkWire, n * maxSegs * stride));
  auto slotPtr = [&](int who, size_t g) { return wire + (who * maxSegs + g) * stride; };
  TERSE_ASSIGN_OR_RETURN(float* worker, workerResidual(op));
  auto* output = static_cast<uint8_t*>(op.recv);
  const auto* input = static_cast<const uint8_t*>(op.send);

  RequestList reqs(ctx.transport(), ctx.timeout(), ctx.bytesSent());
  std::vector<size_t> slot(n * maxSegs, 0);
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    for (size_t g = 0; g < segmentCount(chunkRange(op.count, n, i).length, seg); ++g)
      TERSE_RETURN_IF_ERROR(reqs.recv(i, makeTag(seq, kPhaseGather, g), slotPtr(i, g), stride,
                                      &slot[i * maxSegs + g]));
  }
  // If recv aliases send (in place), our part must be compressed before anything is decoded.
  std::vector<size_t> ownBytes(maxSegs, 0);
  for (size_t g = 0; g < segmentCount(mine.length, seg); ++g) {
    Range sg = segmentRange(mine.length, seg, g);
    TERSE_ASSIGN_OR_RETURN(ownBytes[g], ctx.compressing([&] {
      return codec.compress(input + sg.begin * es, op.dtype, sg.length,
                            worker ? worker + sg.begin : nullptr, slotPtr(r, g), stride,
                            codecCall(op, nonceFor(seq, r, r, g, 2)));
    }));
    for (int k = 1; k < n; ++k) {
      size_t s;
      TERSE_RETURN_IF_ERROR(
          reqs.send((r + k) % n, makeTag(seq, kPhaseGather, g), slotPtr(r, g), ownBytes[g], &s));
    }
  }
  for (int i = 0; i < n; ++i) {
    Range c = chunkRange(op.count, n, i);
    for (size_t g = 0; g < segmentCount(c.length, seg); ++g) {
      Range sg = segmentRange(c.length, seg, g);
      size_t bytes = ownBytes[g];
      if (i != r) TERSE_RETURN_IF_ERROR(reqs.wait(slot[i * maxSegs + g], &bytes));
      TERSE_RETURN_IF_ERROR(
          ctx.reducing([&] {
               return codec.decompress(slotPtr(i, g), bytes, output + (c.begin + sg.begin) * es,
                                       op.dtype, sg.length, codecCall(op));
             })
              .withContext(formatString("part %d segment %zu from rank %d", i, g, i)));
    }
  }
  return reqs.waitAll();
}

}  // namespace terse::detail
