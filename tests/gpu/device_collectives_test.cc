// Collectives on CUDA device buffers (ranks as threads, each on its own stream) against the
// same collectives on host buffers: every kind, type and codec, with error feedback for onebit
// and topk. Bitwise equal to the host path (onebit too: the GPU sums its block scales in the
// CPU's order) and bitwise identical across ranks. Skips without a device.
#include "../collectives/world.h"
#include "gpu_test_util.h"

#include "terse/kernels/device.h"
#include "terse/kernels/numeric.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

namespace terse {
namespace {

using testing::runWorld;

using gputest::loadAt;

std::vector<uint8_t> inputFor(DataType dt, int rank, size_t n, int step) {
  return gputest::randomInput(dt, n, rank * 1000003 + step * 7919 + n);
}

struct Outcome {
  std::vector<std::vector<uint8_t>> results;  // per rank, per step concatenated
};

// Runs `steps` collectives of one kind on every rank, on host or device buffers.
Outcome runCollective(bool onDevice, CollectiveKind kind, const std::string& spec, DataType dt,
                      ReduceOp redop, size_t count, int world, int steps,
                      const std::vector<int>* nodeOfRank = nullptr,
                      Algorithm algorithm = Algorithm::kAuto) {
  auto codec = makeCodec(spec).value();
  Outcome out;
  out.results.resize(world);
  auto st = runWorld(
      world,
      [&](int r, CollectiveEngine& e) -> Status {
        Range mine = chunkRange(count, world, r);
        size_t es = dataTypeSize(dt);
        size_t sendCount = kind == CollectiveKind::kAllGather ? mine.length : count;
        size_t recvCount = kind == CollectiveKind::kReduceScatter ? mine.length : count;
        std::unique_ptr<ErrorFeedback> ef;
        if (codec->wantsErrorFeedback())
          ef = std::make_unique<ErrorFeedback>(ErrorFeedback::create(spec, sendCount).value());
        cudaStream_t stream = nullptr;
        if (onDevice && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
          return errorSystem("cudaStreamCreate failed");
        device::DeviceBuffer dSend, dRecv;
        for (int step = 0; step < steps; ++step) {
          auto in = inputFor(dt, r, sendCount, step);
          std::vector<uint8_t> recv(recvCount * es);
          CollectiveOp op;
          op.kind = kind;
          op.count = count;
          op.dtype = dt;
          op.op = redop;
          op.codec = codec.get();
          op.feedback = ef.get();
          op.algorithm = algorithm;
          if (onDevice) {
            TERSE_RETURN_IF_ERROR(dSend.reserve(in.size()).status());
            TERSE_RETURN_IF_ERROR(dRecv.reserve(recv.size()).status());
            TERSE_RETURN_IF_ERROR(device::copyAsync(dSend.data(), in.data(), in.size(), stream));
            op.send = dSend.data();
            op.recv = dRecv.data();
            op.device = true;
            op.stream = stream;
            TERSE_RETURN_IF_ERROR(e.run(op));
            // run() returned after the stream finished: the result is readable at once.
            TERSE_RETURN_IF_ERROR(
                device::copyAsync(recv.data(), dRecv.data(), recv.size(), stream));
            TERSE_RETURN_IF_ERROR(device::synchronize(stream));
          } else {
            op.send = in.data();
            op.recv = recv.data();
            TERSE_RETURN_IF_ERROR(e.run(op));
          }
          out.results[r].insert(out.results[r].end(), recv.begin(), recv.end());
        }
        if (stream) cudaStreamDestroy(stream);
        return Status::ok();
      },
      0, nodeOfRank);
  for (auto& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
  return out;
}

struct Case {
  CollectiveKind kind;
  std::string spec;
  DataType dt;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << collectiveName(c.kind) << "/" << c.spec << "/" << dataTypeName(c.dt);
}

class DeviceCollectiveTest : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceCollectiveTest, MatchesHostBuffers) {
  TERSE_REQUIRE_DEVICE();
  const auto& [kind, spec, dt] = GetParam();
  for (size_t count : {size_t{0}, size_t{7}, size_t{1000}, (size_t{1} << 20) + 3}) {
    for (int world : {1, 3, 4}) {
      SCOPED_TRACE(std::string(collectiveName(kind)) + " " + spec + " " + dataTypeName(dt) +
                   " count=" + std::to_string(count) + " world=" + std::to_string(world));
      const int steps = 3;
      auto host = runCollective(false, kind, spec, dt, ReduceOp::kAvg, count, world, steps);
      auto dev = runCollective(true, kind, spec, dt, ReduceOp::kAvg, count, world, steps);
      for (int r = 0; r < world; ++r) {
        if (kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kAllGather) {
          ASSERT_EQ(dev.results[r], dev.results[0]) << "device results differ across ranks";
        }
        ASSERT_EQ(dev.results[r], host.results[r]) << "rank " << r;
      }
    }
  }
}

std::vector<Case> allCases() {
  std::vector<Case> out;
  for (auto kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather})
    for (const char* spec : {"none", "fp16", "bf16", "int8", "onebit", "topk"})
      for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) out.push_back({kind, spec, dt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, DeviceCollectiveTest, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           std::string name = std::string(collectiveName(param.param.kind)) + "_" +
                                              param.param.spec + "_" + dataTypeName(param.param.dt);
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// Two-level calls (2 nodes x 2 ranks) stage device buffers through host memory and run the host
// steps, so they equal the host buffers' two-level results bit for bit, every codec included.
TEST(DeviceCollective, TwoLevelMatchesHostBuffers) {
  TERSE_REQUIRE_DEVICE();
  const std::vector<int> layout = {0, 0, 1, 1};
  for (auto kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather})
    for (const char* spec : {"none", "bf16", "int8", "onebit", "topk"})
      for (size_t count : {size_t{0}, size_t{1000}, (size_t{1} << 20) + 3}) {
        SCOPED_TRACE(std::string(collectiveName(kind)) + " " + spec +
                     " count=" + std::to_string(count));
        // Both two-level by request: a host call with the default (auto) algorithm times flat
        // against two-level and may take flat, while device calls never run trials (the first
        // GPU check, 2026-11-28, compared a measured flat host call with a two-level device one).
        auto host = runCollective(false, kind, spec, DataType::kBFloat16, ReduceOp::kSum, count, 4,
                                  2, &layout, Algorithm::kTwoLevel);
        auto dev = runCollective(true, kind, spec, DataType::kBFloat16, ReduceOp::kSum, count, 4, 2,
                                 &layout, Algorithm::kTwoLevel);
        for (int r = 0; r < 4; ++r) ASSERT_EQ(dev.results[r], host.results[r]) << "rank " << r;
      }
}

TEST(DeviceCollective, MixedHostAndDeviceBuffersAreRejectedOnEveryRank) {
  TERSE_REQUIRE_DEVICE();
  auto codec = makeCodec("int8").value();
  auto st = runWorld(2, [&](int r, CollectiveEngine& e) {
    device::DeviceBuffer d;
    EXPECT_TRUE(d.reserve(400).isOk());
    std::vector<float> host(100);
    CollectiveOp op;
    op.count = 100;
    op.codec = codec.get();
    op.send = d.data();
    op.recv = host.data();  // pageable
    op.device = true;
    Status s = e.run(op);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
    op.device = false;  // device memory in a host call
    s = e.run(op);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
    op.send = host.data();
    return e.run(op);  // and the engines are still in step
  });
  for (auto& s : st) EXPECT_TRUE(s.isOk()) << s.toString();
}

}  // namespace
}  // namespace terse
