// The codecs on CUDA device buffers against the same codecs on host buffers: compress from
// device input (wire in device memory and in pinned host memory), decode into device output,
// decode-accumulate into device accumulators. The kernels share numeric.h with the CPU path, so
// the bytes match exactly, onebit's block scales included (the GPU sums magnitudes in the CPU's
// order). Every test skips without a device.
#include "gpu_test_util.h"

#include "terse/compressors/codec.h"
#include "terse/compressors/error_feedback.h"
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

using gputest::randomInput;

// Device memory holding a copy of a host vector (and copying back).
struct DeviceArray {
  device::DeviceBuffer buf;
  size_t bytes = 0;
  explicit DeviceArray(size_t b) : bytes(b) { EXPECT_TRUE(buf.reserve(b).isOk()); }
  template <typename T>
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size() * sizeof(T)) {
    EXPECT_TRUE(device::copyAsync(buf.data(), host.data(), bytes, nullptr).isOk());
    EXPECT_TRUE(device::synchronize(nullptr).isOk());
  }
  void* data() const { return buf.data(); }
  template <typename T>
  std::vector<T> toHost() const {
    std::vector<T> out(bytes / sizeof(T));
    EXPECT_TRUE(device::copyAsync(out.data(), buf.data(), bytes, nullptr).isOk());
    EXPECT_TRUE(device::synchronize(nullptr).isOk());
    return out;
  }
};

bool sameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (a != a && b != b); }

// Compares two messages of `spec`: identical bytes for every codec.
void expectSameMessage(const std::string&, size_t, const std::vector<uint8_t>& host,
                       const std::vector<uint8_t>& dev) {
  ASSERT_EQ(host.size(), dev.size());
  EXPECT_EQ(host, dev);
}

struct Case {
  std::string spec;
  DataType dt;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.spec << "/" << dataTypeName(c.dt); }

class DeviceCodecTest : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceCodecTest, MatchesTheHostPath) {
  TERSE_REQUIRE_DEVICE();
  const auto& [spec, dt] = GetParam();
  auto codec = makeCodec(spec).value();
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, (size_t{1} << 20) + 3}) {
    for (float scale : {1.0f, 0.25f}) {
      SCOPED_TRACE(spec + " n=" + std::to_string(n) + " scale=" + std::to_string(scale));
      auto in = randomInput(dt, n, n + 17);
      std::vector<float> residual(n);
      for (size_t i = 0; i < n; ++i) residual[i] = 0.01f * static_cast<float>(i % 13) - 0.06f;
      CodecCall hostCall;
      hostCall.scale = scale;
      hostCall.nonce = 42;
      const size_t cap = codec->maxWireBytes(n);
      std::vector<uint8_t> hostWire(cap);
      std::vector<float> hostResidual = residual;
      auto hb =
          codec->compress(in.data(), dt, n, hostResidual.data(), hostWire.data(), cap, hostCall);
      ASSERT_OK(hb);
      hostWire.resize(hb.value());

      DeviceArray dIn(in), dRes(residual), dWire(cap);
      device::PinnedBuffer pinned;
      ASSERT_OK(pinned.reserve(cap));
      CodecCall devCall = hostCall;
      devCall.device = true;
      // Wire in device memory.
      auto db = codec->compress(dIn.data(), dt, n, static_cast<float*>(dRes.data()), dWire.data(),
                                cap, devCall);
      ASSERT_OK(db);
      std::vector<uint8_t> devWire = dWire.toHost<uint8_t>();
      devWire.resize(db.value());
      expectSameMessage(spec, n, hostWire, devWire);
      auto devResidual = dRes.toHost<float>();
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(sameBits(devResidual[i], hostResidual[i])) << "residual " << i;
      // Wire in pinned host memory (what the collectives use), from the original residual.
      DeviceArray dRes2(residual);
      auto pb = codec->compress(dIn.data(), dt, n, static_cast<float*>(dRes2.data()), pinned.data(),
                                cap, devCall);
      ASSERT_OK(pb);
      std::vector<uint8_t> pinnedWire(static_cast<uint8_t*>(pinned.data()),
                                      static_cast<uint8_t*>(pinned.data()) + pb.value());
      expectSameMessage(spec, n, hostWire, pinnedWire);

      // Decoding the device's message: on the host and on the device, bit for bit.
      std::vector<uint8_t> hostOut(n * dataTypeSize(dt));
      ASSERT_OK(codec->decompress(devWire.data(), devWire.size(), hostOut.data(), dt, n));
      DeviceArray dOut(n * dataTypeSize(dt));
      ASSERT_OK(codec->decompress(dWire.data(), devWire.size(), dOut.data(), dt, n, devCall));
      ASSERT_OK(device::synchronize(nullptr));
      EXPECT_EQ(dOut.toHost<uint8_t>(), hostOut);
      ASSERT_OK(codec->decompress(pinned.data(), pinnedWire.size(), dOut.data(), dt, n, devCall));
      std::vector<uint8_t> hostOutPinned(n * dataTypeSize(dt));
      ASSERT_OK(
          codec->decompress(pinnedWire.data(), pinnedWire.size(), hostOutPinned.data(), dt, n));
      EXPECT_EQ(dOut.toHost<uint8_t>(), hostOutPinned);

      std::vector<float> acc(n, 0.5f);
      DeviceArray dAcc(acc);
      ASSERT_OK(codec->decompressAccumulate(devWire.data(), devWire.size(), acc.data(), n));
      ASSERT_OK(codec->decompressAccumulate(dWire.data(), devWire.size(),
                                            static_cast<float*>(dAcc.data()), n, devCall));
      auto devAcc = dAcc.toHost<float>();
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(sameBits(devAcc[i], acc[i])) << "acc " << i;
    }
  }
}

std::vector<Case> allCases() {
  std::vector<Case> out;
  for (const char* spec :
       {"none", "fp16", "bf16", "int8", "int8:round=stochastic,seed=5", "onebit", "topk",
        "topk:ratio=0.3", "fp8", "fp8:format=e5m2,block=32", "fp8:round=stochastic,seed=2", "mxfp8",
        "mxfp4", "mxfp4:round=stochastic,seed=3", "int4", "int4:block=1024", "nvfp4",
        "nvfp4:round=stochastic,seed=3"})
    for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16})
      out.push_back({spec, dt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, DeviceCodecTest, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           std::string name = param.param.spec + "_" + dataTypeName(param.param.dt);
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(DeviceCodec, BadDeviceArgumentsAreErrors) {
  TERSE_REQUIRE_DEVICE();
  auto codec = makeCodec("int8").value();
  std::vector<float> host(100, 1.0f);
  DeviceArray dIn(host);
  std::vector<uint8_t> pageableWire(codec->maxWireBytes(100));
  CodecCall dev;
  dev.device = true;
  // A pageable wire buffer cannot be written by kernels.
  auto r = codec->compress(dIn.data(), DataType::kFloat32, 100, nullptr, pageableWire.data(),
                           pageableWire.size(), dev);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("pageable"), std::string::npos) << r.status().message();
  // A corrupt message in device memory is rejected before any kernel runs.
  DeviceArray dWire(codec->maxWireBytes(100));
  ASSERT_OK(codec->compress(dIn.data(), DataType::kFloat32, 100, nullptr, dWire.data(),
                            codec->maxWireBytes(100), dev));
  auto bytes = dWire.toHost<uint8_t>();
  bytes[3] ^= 0x40;  // magic
  DeviceArray corrupt(bytes);
  DeviceArray dOut(400);
  Status s = codec->decompress(corrupt.data(), codec->maxWireBytes(100), dOut.data(),
                               DataType::kFloat32, 100, dev);
  EXPECT_EQ(s.code(), StatusCode::kCorrupt) << s.toString();
}

TEST(DeviceCodec, ErrorFeedbackMovesBetweenHostAndDevice) {
  TERSE_REQUIRE_DEVICE();
  auto ef = ErrorFeedback::create("topk", 1000).value();
  for (size_t i = 0; i < 1000; ++i) ef.worker()[i] = static_cast<float>(i);
  auto before = ef.serialize();
  auto w = ef.deviceWorker(nullptr);
  ASSERT_OK(w);
  EXPECT_TRUE(ef.residualsOnDevice());
  // Change the device copy; host views and checkpoints must see it.
  std::vector<float> ones(1000, 1.0f);
  ASSERT_OK(device::copyAsync(w.value(), ones.data(), 4000, nullptr));
  ASSERT_OK(device::synchronize(nullptr));
  ErrorFeedback copy = ef;  // pulls to the host first
  EXPECT_FALSE(ef.residualsOnDevice());
  EXPECT_EQ(copy.worker()[999], 1.0f);
  EXPECT_EQ(ef.worker()[0], 1.0f);
  EXPECT_NE(ef.serialize(), before);
  // reset() zeroes wherever the residuals are.
  ASSERT_OK(ef.deviceWorker(nullptr));
  ef.reset();
  EXPECT_EQ(ef.worker()[5], 0.0f);
  auto again = ef.deviceWorker(nullptr);
  ASSERT_OK(again);
  std::vector<float> back(1000, 7.0f);
  ASSERT_OK(device::copyAsync(back.data(), again.value(), 4000, nullptr));
  ASSERT_OK(device::synchronize(nullptr));
  EXPECT_EQ(back[5], 0.0f);
}

// relayoutFeedback's pieces on a state whose residuals are on the device: copyServerTo and
// setServerFrom bring them to the host first.
TEST(DeviceCodec, ServerResidualMovesToAnotherWorldFromTheDevice) {
  TERSE_REQUIRE_DEVICE();
  auto ef = ErrorFeedback::create("topk", 1000).value();
  auto s = ef.deviceServer(2, 500, 500, nullptr);
  ASSERT_OK(s);
  std::vector<float> twos(500, 2.0f);
  ASSERT_OK(device::copyAsync(s.value(), twos.data(), 2000, nullptr));
  ASSERT_OK(device::synchronize(nullptr));
  std::vector<float> full(1000, 0.0f);
  ef.copyServerTo(full.data());
  EXPECT_FALSE(ef.residualsOnDevice());
  EXPECT_EQ(full[499], 0.0f);
  EXPECT_EQ(full[500], 2.0f);
  ASSERT_OK(ef.deviceWorker(nullptr));  // back on the device
  ASSERT_OK(ef.setServerFrom(3, 0, 667, full.data()));
  EXPECT_FALSE(ef.residualsOnDevice());
  EXPECT_EQ(ef.server(3, 0, 667)[666], 2.0f);
  EXPECT_EQ(ef.server(3, 0, 667)[499], 0.0f);
}

}  // namespace
}  // namespace terse
