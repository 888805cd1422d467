#include "terse/collectives/reference.h"

#include "typed.h"

#include "terse/collectives/partition.h"

#include <algorithm>

namespace terse {

namespace {

// The engine doubles its segment until every chunk's segment count fits the tag index.
size_t segmentFor(size_t segment, size_t maxChunk) {
  size_t segs = segmentCount(maxChunk, segment);
  while (segs > (size_t{1} << 18) - 1) {
    segment *= 2;
    segs = (segs + 1) / 2;
  }
  return segment;
}

}  // namespace

Result<std::vector<std::vector<uint8_t>>> simulateCompressedCollective(
    CollectiveKind kind, const std::vector<const void*>& inputs, size_t count, DataType dtype,
    ReduceOp op, const Codec& codec, size_t segmentElements, SimulatedResiduals* residuals) {
  const int n = static_cast<int>(inputs.size());
  if (n < 1 || segmentElements == 0)
    return errorInvalidArgument("simulateCompressedCollective: no ranks or no segment");
  const size_t es = dataTypeSize(dtype);
  const bool feedback = residuals != nullptr && !residuals->worker.empty();
  if (feedback && static_cast<int>(residuals->worker.size()) != n)
    return errorInvalidArgument("simulateCompressedCollective: residuals for %zu ranks, not %d",
                                residuals->worker.size(), n);
  if (feedback && residuals->server.size() != residuals->worker.size())
    residuals->server.resize(residuals->worker.size());
  const bool allreduce = kind == CollectiveKind::kAllReduce;
  auto chunkOf = [&](int j) {
    return allreduce ? allreduceChunkRange(count, n, j) : chunkRange(count, n, j);
  };
  size_t maxChunk = 0;
  for (int j = 0; j < n; ++j) maxChunk = std::max(maxChunk, chunkOf(j).length);
  const size_t seg = segmentFor(segmentElements, maxChunk);
  const float scale = op == ReduceOp::kAvg ? 1.0f / static_cast<float>(n) : 1.0f;
  std::vector<uint8_t> wire(codec.maxWireBytes(seg));
  std::vector<float> acc(seg);

  std::vector<std::vector<uint8_t>> out(n);
  if (kind == CollectiveKind::kAllGather) {
    std::vector<uint8_t> all(count * es);
    for (int i = 0; i < n; ++i) {
      Range part = chunkRange(count, n, i);
      float* worker = feedback ? residuals->worker[i].data() : nullptr;
      if (feedback && residuals->worker[i].size() != part.length)
        return errorInvalidArgument(
            "simulateCompressedCollective: rank %d's residual is not its "
            "part",
            i);
      const auto* in = static_cast<const uint8_t*>(inputs[i]);
      for (size_t g = 0; g < segmentCount(part.length, seg); ++g) {
        Range s = segmentRange(part.length, seg, g);
        TERSE_ASSIGN_OR_RETURN(size_t bytes, codec.compress(in + s.begin * es, dtype, s.length,
                                                            worker ? worker + s.begin : nullptr,
                                                            wire.data(), wire.size()));
        TERSE_RETURN_IF_ERROR(codec.decompress(
            wire.data(), bytes, all.data() + (part.begin + s.begin) * es, dtype, s.length));
      }
    }
    for (auto& o : out) o = all;
    return out;
  }

  std::vector<uint8_t> all(count * es);
  for (int j = 0; j < n; ++j) {
    Range chunk = chunkOf(j);
    if (feedback && allreduce && residuals->server[j].size() != chunk.length)
      residuals->server[j].assign(chunk.length, 0.0f);
    for (size_t g = 0; g < segmentCount(chunk.length, seg); ++g) {
      Range s = segmentRange(chunk.length, seg, g);
      const size_t off = chunk.begin + s.begin;
      std::fill(acc.begin(), acc.begin() + s.length, 0.0f);
      for (int i = 0; i < n; ++i) {  // contributions in rank order, as the owner reduces them
        if (feedback && residuals->worker[i].size() != count)
          return errorInvalidArgument(
              "simulateCompressedCollective: rank %d's residual is not "
              "the tensor's",
              i);
        float* worker = feedback ? residuals->worker[i].data() + off : nullptr;
        TERSE_ASSIGN_OR_RETURN(
            size_t bytes, codec.compress(static_cast<const uint8_t*>(inputs[i]) + off * es, dtype,
                                         s.length, worker, wire.data(), wire.size()));
        TERSE_RETURN_IF_ERROR(codec.decompressAccumulate(wire.data(), bytes, acc.data(), s.length));
      }
      uint8_t* dst = all.data() + off * es;
      if (!allreduce) {
        detail::fromFloat(acc.data(), scale, dtype, dst, s.length);
        continue;
      }
      CodecCall call;
      call.scale = scale;
      float* server = feedback ? residuals->server[j].data() + s.begin : nullptr;
      TERSE_ASSIGN_OR_RETURN(size_t bytes, codec.compress(acc.data(), DataType::kFloat32, s.length,
                                                          server, wire.data(), wire.size(), call));
      TERSE_RETURN_IF_ERROR(codec.decompress(wire.data(), bytes, dst, dtype, s.length));
    }
  }
  for (int r = 0; r < n; ++r) {
    if (allreduce) {
      out[r] = all;
    } else {
      Range part = chunkRange(count, n, r);
      out[r].assign(all.begin() + part.begin * es, all.begin() + part.end() * es);
    }
  }
  return out;
}

}  // namespace terse
