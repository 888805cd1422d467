// Every terse::kernels::cuda function against its terse::kernels::cpu twin on random inputs.
//
// Equality is bitwise wherever each output element depends on one input element (casts,
// accumulation, int8 with its max-based scales, decoders, top-k indices/values/residuals).
// onebit scales are float sums, and the GPU sums in the CPU's order (numeric.h's eight lanes), so
// they are bitwise equal too; residuals and decoded values are checked bitwise as well. NaN
// compares equal to NaN (GPU arithmetic produces the canonical NaN, x86 keeps the payload). Every
// test skips without a device.
#include "gpu_test_util.h"
#include "terse/kernels/cuda.h"
#include "terse/kernels/device.h"
#include "terse/kernels/kernels.h"
#include "terse/kernels/radix_select.h"
#include "terse/kernels/tiling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace terse::kernels {
namespace {

const size_t kSizes[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};

#define ASSERT_CUDA(expr)                                                              \
  do {                                                                                 \
    cudaError_t terse_e_ = (expr);                                                     \
    ASSERT_EQ(terse_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(terse_e_); \
  } while (0)

// ---- element helpers -------------------------------------------------------------------------
const char* typeName(float*) { return "float"; }
const char* typeName(Half*) { return "half"; }
const char* typeName(BFloat16*) { return "bfloat16"; }
template <typename T>
const char* typeName() {
  return typeName(static_cast<T*>(nullptr));
}

bool sameValue(float a, float b) {
  return num::floatBits(a) == num::floatBits(b) || (std::isnan(a) && std::isnan(b));
}
bool sameValue(Half a, Half b) {
  auto nan = [](uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; };
  return a.bits == b.bits || (nan(a.bits) && nan(b.bits));
}
bool sameValue(BFloat16 a, BFloat16 b) {
  auto nan = [](uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; };
  return a.bits == b.bits || (nan(a.bits) && nan(b.bits));
}
bool sameValue(int8_t a, int8_t b) { return a == b; }
bool sameValue(uint8_t a, uint8_t b) { return a == b; }
bool sameValue(uint32_t a, uint32_t b) { return a == b; }

template <typename T>
std::string show(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return "0x" + std::to_string(v.bits) + " (" + std::to_string(num::load(&v, 0)) + ")";
  } else if constexpr (std::is_same_v<T, float>) {
    return std::to_string(v);
  } else {
    return std::to_string(static_cast<long long>(v));
  }
}

// Counts mismatches and names the first, so a failure says where and by how much.
template <typename T>
void expectSame(const std::vector<T>& gpu, const std::vector<T>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (!sameValue(gpu[i], cpu[i])) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << gpu.size() << " differ, first at " << first
                     << ": gpu " << (bad ? show(gpu[first]) : "") << " cpu "
                     << (bad ? show(cpu[first]) : "");
}

// Gaussian values over a wide dynamic range (2^-6..2^6 times N(0,1)), rounded to T.
template <typename T>
std::vector<T> randomValues(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-6, 6);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) num::store(v.data(), i, std::ldexp(normal(rng), exponent(rng)));
  return v;
}

std::vector<float> randomResidual(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(normal(rng), -8);
  return v;
}

// ---- device memory -------------------------------------------------------------------------
// A device array of n elements; `shift` elements of headroom let a test hand out a pointer
// that is not 16-byte aligned, which forces the scalar kernels.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n, size_t shift = 0) : n_(n), shift_(shift) {
    void* p = nullptr;
    err_ = cudaMalloc(&p, std::max<size_t>(1, (n + shift) * sizeof(T)));
    base_ = static_cast<T*>(p);
  }
  ~DeviceArray() {
    if (base_) cudaFree(base_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  cudaError_t status() const { return err_; }
  T* get() const { return base_ + shift_; }
  cudaError_t upload(const std::vector<T>& v) {
    if (v.size() != n_) return cudaErrorInvalidValue;
    return cudaMemcpy(get(), v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    if (cudaMemcpy(v.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
      ADD_FAILURE() << "cudaMemcpy to host failed";
    return v;
  }

 private:
  size_t n_;
  size_t shift_;
  cudaError_t err_ = cudaSuccess;
  T* base_ = nullptr;
};

template <typename T>
std::vector<float> asFloats(const std::vector<T>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = num::load(v.data(), i);
  return f;
}

template <typename T>
class GpuKernels : public ::testing::Test {};
using ElementTypes = ::testing::Types<float, Half, BFloat16>;
TYPED_TEST_SUITE(GpuKernels, ElementTypes);

// ---- device queries ------------------------------------------------------------------------
TEST(GpuDevice, PointerKinds) {
  TERSE_REQUIRE_DEVICE();
  DeviceArray<float> d(16);
  ASSERT_CUDA(d.status());
  std::vector<float> host(16);
  EXPECT_EQ(device::memoryKind(d.get()), device::MemoryKind::kDevice);
  EXPECT_EQ(device::memoryKind(host.data()), device::MemoryKind::kHost);
  EXPECT_EQ(device::memoryKind(nullptr), device::MemoryKind::kHost);
}

// ---- the kernels' split of the work, emulated on the CPU (no device needed) --------------------
// blockcodec.cuh's kernels take their index math from tiling.h; running the same functions
// over every (warp, step, lane, chunk) of a small grid shows that each element of each codec
// block is read and written by exactly one lane, that one lane writes each scale, and that
// vector accesses only ever cover whole, aligned chunks inside one codec block.
void emulateQuantizeSplit(size_t n, size_t block, size_t warps) {
  SCOPED_TRACE("n=" + std::to_string(n) + " block=" + std::to_string(block) +
               " warps=" + std::to_string(warps));
  const tiling::QuantShape shape = tiling::quantShapeFor(block);
  ASSERT_NE(shape.lanes, 0u);
  ASSERT_EQ(tiling::kWarp % shape.lanes, 0u);
  ASSERT_GE(size_t{shape.lanes} * shape.chunks * tiling::kChunk, block) << "block must fit";
  const size_t blocks = tiling::blockCount(n, block);
  std::vector<int> seen(n, 0), scaleWriters(blocks, 0);
  for (size_t warp = 0; warp < warps; ++warp) {
    size_t steps = 0;
    for (size_t step = 0; tiling::codecBlockOf(warp, warps, step, 0, shape.lanes) < blocks;
         ++step) {
      ASSERT_LT(++steps, n + 2) << "the step loop must end";
      for (unsigned laneInWarp = 0; laneInWarp < tiling::kWarp; ++laneInWarp) {
        const unsigned lane = laneInWarp % shape.lanes;
        const size_t b = tiling::codecBlockOf(warp, warps, step, laneInWarp, shape.lanes);
        if (b < blocks && lane == 0) ++scaleWriters[b];
        for (unsigned j = 0; j < shape.chunks; ++j) {
          const tiling::Range r = tiling::chunkRange(n, block, b, shape.lanes, lane, j);
          ASSERT_LE(r.first, r.last);
          ASSERT_LE(r.last - r.first, tiling::kChunk);
          if (r.first == r.last) continue;
          ASSERT_LT(b, blocks);
          ASSERT_GE(r.first, b * block);
          ASSERT_LE(r.last, std::min(n, (b + 1) * block)) << "a chunk stays in its codec block";
          // The kernels' vector path: block % kChunk == 0 and a full chunk.
          if (block % tiling::kChunk == 0 && r.last - r.first == tiling::kChunk) {
            ASSERT_EQ(r.first % tiling::kChunk, 0u);
          }
          if (block % tiling::kChunk == 0 && r.last - r.first < tiling::kChunk) {
            ASSERT_EQ(r.last, n) << "only the array's tail is a partial chunk";
          }
          // Nibble codes pair elements 2p, 2p + 1 in one chunk: chunks start even for even blocks.
          if (block % 2 == 0) {
            ASSERT_EQ(r.first % 2, 0u);
          }
          for (size_t i = r.first; i < r.last; ++i) ++seen[i];
        }
      }
    }
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "element " << i;
  for (size_t b = 0; b < blocks; ++b) ASSERT_EQ(scaleWriters[b], 1) << "scale " << b;
}

TEST(GpuTiling, QuantizeSplitCoversEveryElementOnce) {
  const size_t blocksUnderTest[] = {1,   2,   3,   4,   7,   8,   30,  32,  34,  60,   64,  66,
                                    100, 128, 130, 250, 256, 260, 500, 512, 516, 1000, 1024};
  for (size_t block : blocksUnderTest)
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{31}, size_t{33}, block - 1, block,
                     block + 1, 3 * block + 5, size_t{1000}, size_t{4099}})
      for (size_t warps : {1, 3, 64}) emulateQuantizeSplit(n, block, warps);
  EXPECT_EQ(tiling::quantShapeFor(tiling::kMaxRegisterBlock + 1).lanes, 0u);
  EXPECT_EQ(tiling::quantShapeFor(0).lanes, 0u);
}

TEST(GpuTiling, DecodeSplitCoversEveryElementOnce) {
  for (size_t n : {0, 1, 15, 16, 17, 1000, 4099}) {
    std::vector<int> seen(n, 0);
    for (size_t g = 0; g < tiling::decodeGroups(n); ++g) {
      const tiling::Range r = tiling::decodeRange(n, g);
      ASSERT_EQ(r.first % tiling::kDecodeGroup, 0u);
      ASSERT_LT(r.first, r.last);
      ASSERT_LE(r.last - r.first, tiling::kDecodeGroup);
      for (size_t i = r.first; i < r.last; ++i) ++seen[i];
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "n=" << n << " element " << i;
  }
}

// The decoders find each element's scale with tiling::ScaleWalk (one division per group, a step
// at each block boundary); on the CPU it lands on i / block for every element.
TEST(GpuTiling, DecodeScaleWalkMatchesDivision) {
  for (size_t block : {1, 2, 3, 5, 16, 17, 32, 100, 256, 4096})
    for (size_t n : {1, 15, 16, 17, 1000, 4099}) {
      for (size_t g = 0; g < tiling::decodeGroups(n); ++g) {
        const tiling::Range r = tiling::decodeRange(n, g);
        tiling::ScaleWalk walk(r.first, block);
        for (size_t k = 0; k < tiling::kDecodeGroup; ++k) {
          const size_t i = r.first + k;
          if (i < r.last) walk.advance(i);
          if (i < r.last) {
            ASSERT_EQ(walk.index, i / block) << "block=" << block << " n=" << n << " i=" << i;
          }
        }
      }
    }
}

// ---- convert / accumulate / scale ----------------------------------------------------------
template <typename In, typename Out>
void checkConvert(size_t n, float scale, bool withResidual, size_t shift) {
  SCOPED_TRACE(std::string(typeName<In>()) + "->" + typeName<Out>() + " n=" + std::to_string(n) +
               " scale=" + std::to_string(scale) + " residual=" + std::to_string(withResidual) +
               " shift=" + std::to_string(shift));
  auto in = randomValues<In>(n, 11 + n);
  auto residual = randomResidual(n, 12 + n);
  std::vector<Out> cpuOut(n);
  std::vector<float> cpuResidual = residual;
  cpu::convert(in.data(), cpuOut.data(), n, scale, withResidual ? cpuResidual.data() : nullptr);

  DeviceArray<In> dIn(n, shift);
  DeviceArray<Out> dOut(n, shift);
  DeviceArray<float> dResidual(n, shift);
  ASSERT_CUDA(dIn.status());
  ASSERT_CUDA(dOut.status());
  ASSERT_CUDA(dResidual.status());
  ASSERT_CUDA(dIn.upload(in));
  ASSERT_CUDA(dResidual.upload(residual));
  ASSERT_CUDA(cuda::convert(dIn.get(), dOut.get(), n, scale,
                            withResidual ? dResidual.get() : nullptr, nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  expectSame(dOut.download(), cpuOut, "convert output");
  expectSame(dResidual.download(), withResidual ? cpuResidual : residual, "convert residual");
}

template <typename In, typename Out>
void checkConvertAll() {
  for (size_t n : kSizes)
    for (float scale : {1.0f, 0.125f, 3.0f})
      for (bool withResidual : {false, true})
        for (size_t shift : {0, 1}) checkConvert<In, Out>(n, scale, withResidual, shift);
}

TYPED_TEST(GpuKernels, ConvertMatchesCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  checkConvertAll<TypeParam, float>();
  checkConvertAll<TypeParam, Half>();
  checkConvertAll<TypeParam, BFloat16>();
}

TYPED_TEST(GpuKernels, ConvertSpecialValuesMatchCpu) {
  TERSE_REQUIRE_DEVICE();
  using T = TypeParam;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> raw = {0.0f,   -0.0f,  inf,      -inf,    nan,  65504.0f, 65520.0f,
                            -1e30f, 1e-30f, 5.96e-8f, 3.0e-8f, 1.0f, -2.5f};
  std::vector<T> in(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) num::store(in.data(), i, raw[i]);
  std::vector<float> residual(raw.size(), 0.25f);
  size_t n = in.size();
  auto run = [&](auto outTag) {
    using Out = decltype(outTag);
    std::vector<Out> cpuOut(n);
    std::vector<float> cpuResidual = residual;
    cpu::convert(in.data(), cpuOut.data(), n, 1.0f, cpuResidual.data());
    DeviceArray<T> dIn(n);
    DeviceArray<Out> dOut(n);
    DeviceArray<float> dResidual(n);
    ASSERT_CUDA(dIn.upload(in));
    ASSERT_CUDA(dResidual.upload(residual));
    ASSERT_CUDA(cuda::convert(dIn.get(), dOut.get(), n, 1.0f, dResidual.get(), nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    expectSame(dOut.download(), cpuOut, std::string("special convert to ") + typeName<Out>());
    expectSame(dResidual.download(), cpuResidual, "special convert residual");
  };
  run(float{});
  run(Half{});
  run(BFloat16{});
}

TYPED_TEST(GpuKernels, AccumulateMatchesCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  using T = TypeParam;
  for (size_t n : kSizes) {
    for (size_t shift : {0, 1}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " shift=" + std::to_string(shift));
      auto in = randomValues<T>(n, 21 + n);
      auto acc = randomResidual(n, 22 + n);
      std::vector<float> cpuAcc = acc;
      cpu::accumulate(in.data(), cpuAcc.data(), n);
      DeviceArray<T> dIn(n, shift);
      DeviceArray<float> dAcc(n, shift);
      ASSERT_CUDA(dIn.upload(in));
      ASSERT_CUDA(dAcc.upload(acc));
      ASSERT_CUDA(cuda::accumulate(dIn.get(), dAcc.get(), n, nullptr));
      ASSERT_CUDA(cudaDeviceSynchronize());
      expectSame(dAcc.download(), cpuAcc, "accumulate");
    }
  }
}

TEST(GpuKernelsFloat, ScaleInPlaceMatchesCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  for (size_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto acc = randomValues<float>(n, 31 + n);
    std::vector<float> cpuAcc = acc;
    cpu::scaleInPlace(cpuAcc.data(), n, 1.0f / 3.0f);
    DeviceArray<float> dAcc(n);
    ASSERT_CUDA(dAcc.upload(acc));
    ASSERT_CUDA(cuda::scaleInPlace(dAcc.get(), n, 1.0f / 3.0f, nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    expectSame(dAcc.download(), cpuAcc, "scaleInPlace");
  }
}

// ---- int8 ------------------------------------------------------------------------------------
template <typename In>
void checkInt8(const std::vector<In>& in, size_t block, Rounding rounding, bool withResidual,
               size_t shift = 0, size_t codeShift = 0) {
  size_t n = in.size();
  SCOPED_TRACE(std::string(typeName<In>()) + " n=" + std::to_string(n) +
               " block=" + std::to_string(block) +
               " stochastic=" + std::to_string(rounding == Rounding::kStochastic) +
               " residual=" + std::to_string(withResidual) + " shift=" + std::to_string(shift) +
               " codeShift=" + std::to_string(codeShift));
  size_t blocks = (n + block - 1) / block;
  const uint64_t seed = 0x5eed, offset = 977;
  auto residual = randomResidual(n, 41 + n);
  std::vector<float> cpuResidual = residual, cpuScales(blocks);
  std::vector<int8_t> cpuQ(n);
  cpu::int8Quantize(in.data(), n, block, rounding, seed, offset,
                    withResidual ? cpuResidual.data() : nullptr, cpuScales.data(), cpuQ.data());

  // shift > 0: pointers off their vector alignment, so the kernels take their scalar accesses.
  DeviceArray<In> dIn(n, shift);
  DeviceArray<float> dResidual(n, shift), dScales(blocks);
  // codeShift: the codes alone moved, as inside a message (4-byte aligned after the header and
  // the padded scales) while the decoders' outputs stay aligned.
  DeviceArray<int8_t> dQ(n, shift + codeShift);
  ASSERT_CUDA(dIn.upload(in));
  ASSERT_CUDA(dResidual.upload(residual));
  ASSERT_CUDA(cuda::int8Quantize(dIn.get(), n, block, rounding, seed, offset,
                                 withResidual ? dResidual.get() : nullptr, dScales.get(), dQ.get(),
                                 nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  // Scales are a max of exact keys: bitwise equal, so q and residuals are too.
  expectSame(dScales.download(), cpuScales, "int8 scales");
  expectSame(dQ.download(), cpuQ, "int8 q");
  expectSame(dResidual.download(), withResidual ? cpuResidual : residual, "int8 residual");

  // Decoders on the same payload, into every element type and accumulating.
  auto decode = [&](auto outTag) {
    using Out = decltype(outTag);
    std::vector<Out> cpuOut(n);
    cpu::int8Dequantize(cpuScales.data(), cpuQ.data(), n, block, cpuOut.data());
    DeviceArray<Out> dOut(n, shift);
    ASSERT_CUDA(cuda::int8Dequantize(dScales.get(), dQ.get(), n, block, dOut.get(), nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    expectSame(dOut.download(), cpuOut, std::string("int8 dequantize to ") + typeName<Out>());
  };
  decode(float{});
  decode(Half{});
  decode(BFloat16{});
  auto acc = randomResidual(n, 43 + n);
  std::vector<float> cpuAcc = acc;
  cpu::int8DequantizeAccumulate(cpuScales.data(), cpuQ.data(), n, block, cpuAcc.data());
  DeviceArray<float> dAcc(n, shift);
  ASSERT_CUDA(dAcc.upload(acc));
  ASSERT_CUDA(
      cuda::int8DequantizeAccumulate(dScales.get(), dQ.get(), n, block, dAcc.get(), nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  expectSame(dAcc.download(), cpuAcc, "int8 dequantize-accumulate");
}

TYPED_TEST(GpuKernels, Int8MatchesCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  for (size_t n : kSizes)
    // 30: not a multiple of the 4-element chunk; 1000, 1024: the largest register shape; 4096:
    // the CUDA-block-per-codec-block kernel.
    for (size_t block : {256, 100, 30, 1000, 1024, 4096})
      for (Rounding r : {Rounding::kNearest, Rounding::kStochastic})
        for (bool withResidual : {false, true})
          checkInt8(randomValues<TypeParam>(n, 40 + n), block, r, withResidual);
}

TYPED_TEST(GpuKernels, Int8MisalignedPointersMatchCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  for (size_t n : kSizes)
    for (size_t block : {256, 32})
      for (bool withResidual : {false, true})
        checkInt8(randomValues<TypeParam>(n, 44 + n), block, Rounding::kStochastic, withResidual,
                  1);
}

TYPED_TEST(GpuKernels, Int8CodesAtMessageAlignmentMatchCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  // Codes 4 or 8 bytes past a 16-byte boundary take the decoders' 32-bit-word loads; 1 byte
  // past, the byte loads; the outputs stay aligned either way.
  for (size_t n : kSizes)
    for (size_t codeShift : {4, 8, 1})
      checkInt8(randomValues<TypeParam>(n, 46 + n), 256, Rounding::kNearest, true, 0, codeShift);
}

TEST(GpuKernelsFloat, Int8BeyondOneGridPassMatchesCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  // More elements than one pass of the capped grids covers (8192 CUDA blocks): the quantizer's
  // and the decoders' grid-stride loops run more than once.
  const size_t n = (size_t{1} << 25) + 19;
  for (size_t block : {32, 256})
    checkInt8(randomValues<float>(n, 47), block, Rounding::kStochastic, true);
}

// ---- low-bit formats (fp8, mxfp8, mxfp4, int4) -------------------------------------------------
template <typename In>
void checkLowbit(const std::vector<In>& in, kernels::LowbitFormat f, size_t block,
                 Rounding rounding, bool withResidual, size_t shift = 0) {
  size_t n = in.size();
  SCOPED_TRACE(std::string(typeName<In>()) + " n=" + std::to_string(n) + " format=" +
               std::to_string(static_cast<int>(f)) + " block=" + std::to_string(block) +
               " stochastic=" + std::to_string(rounding == Rounding::kStochastic) +
               " residual=" + std::to_string(withResidual) + " shift=" + std::to_string(shift));
  size_t scaleBytes = ((n + block - 1) / block) * kernels::lowbitScaleBytes(f);
  size_t codeBytes = kernels::lowbitCodeBytes(f, n);
  const uint64_t seed = 0x5eed, offset = 978;  // even: nibble formats start on a byte
  auto residual = randomResidual(n, 51 + n);
  std::vector<float> cpuResidual = residual;
  std::vector<uint8_t> cpuScales(scaleBytes), cpuCodes(codeBytes);
  cpu::lowbitQuantize(f, in.data(), n, block, rounding, seed, offset,
                      withResidual ? cpuResidual.data() : nullptr, cpuScales.data(),
                      cpuCodes.data());
  DeviceArray<In> dIn(n, shift);
  DeviceArray<float> dResidual(n, shift);
  DeviceArray<uint8_t> dScales(scaleBytes), dCodes(codeBytes, shift);
  ASSERT_CUDA(dIn.upload(in));
  ASSERT_CUDA(dResidual.upload(residual));
  ASSERT_CUDA(cuda::lowbitQuantize(f, dIn.get(), n, block, rounding, seed, offset,
                                   withResidual ? dResidual.get() : nullptr, dScales.get(),
                                   dCodes.get(), nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  expectSame(dScales.download(), cpuScales, "lowbit scales");
  expectSame(dCodes.download(), cpuCodes, "lowbit codes");
  expectSame(dResidual.download(), withResidual ? cpuResidual : residual, "lowbit residual");
  auto decode = [&](auto outTag) {
    using Out = decltype(outTag);
    std::vector<Out> cpuOut(n);
    cpu::lowbitDequantize(f, cpuScales.data(), cpuCodes.data(), n, block, cpuOut.data());
    DeviceArray<Out> dOut(n, shift);
    ASSERT_CUDA(
        cuda::lowbitDequantize(f, dScales.get(), dCodes.get(), n, block, dOut.get(), nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    expectSame(dOut.download(), cpuOut, std::string("lowbit dequantize to ") + typeName<Out>());
  };
  decode(float{});
  decode(Half{});
  decode(BFloat16{});
  auto acc = randomResidual(n, 53 + n);
  std::vector<float> cpuAcc = acc;
  cpu::lowbitDequantizeAccumulate(f, cpuScales.data(), cpuCodes.data(), n, block, cpuAcc.data());
  DeviceArray<float> dAcc(n, shift);
  ASSERT_CUDA(dAcc.upload(acc));
  ASSERT_CUDA(cuda::lowbitDequantizeAccumulate(f, dScales.get(), dCodes.get(), n, block, dAcc.get(),
                                               nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  expectSame(dAcc.download(), cpuAcc, "lowbit dequantize-accumulate");
}

TYPED_TEST(GpuKernels, LowbitMatchesCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  using kernels::LowbitFormat;
  struct F {
    LowbitFormat f;
    size_t block;
  };
  for (F c :
       {F{LowbitFormat::kFp8E4M3, 256}, F{LowbitFormat::kFp8E5M2, 32}, F{LowbitFormat::kMxfp8, 32},
        F{LowbitFormat::kMxfp4, 32}, F{LowbitFormat::kInt4, 64}, F{LowbitFormat::kInt4, 4096},
        F{LowbitFormat::kFp8E4M3, 34}, F{LowbitFormat::kInt4, 66}, F{LowbitFormat::kFp8E5M2, 1024}})
    for (size_t n : kSizes)
      for (Rounding r : {Rounding::kNearest, Rounding::kStochastic})
        for (bool withResidual : {false, true}) {
          auto in = randomValues<TypeParam>(n, 60 + n);
          if (n > 700) {  // a NaN block, an Inf block and an all-zero block
            num::store(in.data(), 3, std::numeric_limits<float>::quiet_NaN());
            num::store(in.data(), 300, -std::numeric_limits<float>::infinity());
            for (size_t i = 512; i < 640; ++i) num::store(in.data(), i, 0.0f);
          }
          checkLowbit(in, c.f, c.block, r, withResidual);
        }
}

TYPED_TEST(GpuKernels, LowbitMisalignedPointersMatchCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  using kernels::LowbitFormat;
  for (LowbitFormat f : {LowbitFormat::kFp8E4M3, LowbitFormat::kMxfp4, LowbitFormat::kInt4})
    for (size_t n : kSizes)
      for (bool withResidual : {false, true})
        checkLowbit(randomValues<TypeParam>(n, 64 + n), f, f == LowbitFormat::kFp8E4M3 ? 256 : 32,
                    Rounding::kStochastic, withResidual, 1);
}

TYPED_TEST(GpuKernels, Int8NonFiniteBlocksMatchCpu) {
  TERSE_REQUIRE_DEVICE();
  auto in = randomValues<TypeParam>(1000, 45);
  num::store(in.data(), 3, std::numeric_limits<float>::quiet_NaN());
  num::store(in.data(), 300, std::numeric_limits<float>::infinity());
  num::store(in.data(), 600, -std::numeric_limits<float>::infinity());
  for (size_t i = 768; i < 1000; ++i) num::store(in.data(), i, 0.0f);  // all-zero last block
  checkInt8(in, 256, Rounding::kNearest, true);
  checkInt8(in, 256, Rounding::kStochastic, false);
}

// ---- onebit ----------------------------------------------------------------------------------
template <typename In>
void checkOnebit(const std::vector<In>& in, size_t block, bool withResidual, size_t shift = 0) {
  size_t n = in.size();
  SCOPED_TRACE(std::string(typeName<In>()) + " n=" + std::to_string(n) +
               " block=" + std::to_string(block) + " residual=" + std::to_string(withResidual) +
               " shift=" + std::to_string(shift));
  size_t blocks = (n + block - 1) / block, words = (n + 31) / 32;
  auto residual = randomResidual(n, 51 + n);
  std::vector<float> cpuResidual = residual, cpuScales(blocks);
  std::vector<uint32_t> cpuBits(words);
  cpu::onebitCompress(in.data(), n, block, withResidual ? cpuResidual.data() : nullptr,
                      cpuScales.data(), cpuBits.data());

  DeviceArray<In> dIn(n, shift);
  DeviceArray<float> dResidual(n, shift), dScales(blocks);
  DeviceArray<uint32_t> dBits(words);
  ASSERT_CUDA(dIn.upload(in));
  ASSERT_CUDA(dResidual.upload(residual));
  ASSERT_CUDA(cuda::onebitCompress(dIn.get(), n, block, withResidual ? dResidual.get() : nullptr,
                                   dScales.get(), dBits.get(), nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  auto gpuScales = dScales.download();
  auto gpuBits = dBits.download();
  expectSame(gpuBits, cpuBits, "onebit bits");
  // The sum in numeric.h's lane order: the CPU's scales to the bit (before 2026-11-28 the GPU
  // summed in CUB's tree order and only agreed within 1e-4).
  expectSame(gpuScales, cpuScales, "onebit scales");
  // Residuals follow bitwise from the GPU's own scales through numeric.h.
  std::vector<float> expected = residual;
  if (withResidual) {
    for (size_t i = 0; i < n; ++i) {
      float v = num::load(in.data(), i) + residual[i];
      bool bit = (gpuBits[i / 32] >> (i % 32)) & 1u;
      expected[i] = num::residualOf(v, num::onebitDecode(bit, gpuScales[i / block]));
    }
  }
  expectSame(dResidual.download(), expected, "onebit residual");

  auto decode = [&](auto outTag) {
    using Out = decltype(outTag);
    std::vector<Out> cpuOut(n);
    cpu::onebitDecompress(gpuScales.data(), gpuBits.data(), n, block, cpuOut.data());
    DeviceArray<Out> dOut(n, shift);
    ASSERT_CUDA(cuda::onebitDecompress(dScales.get(), dBits.get(), n, block, dOut.get(), nullptr));
    ASSERT_CUDA(cudaDeviceSynchronize());
    expectSame(dOut.download(), cpuOut, std::string("onebit decompress to ") + typeName<Out>());
  };
  decode(float{});
  decode(Half{});
  decode(BFloat16{});
  auto acc = randomResidual(n, 53 + n);
  std::vector<float> cpuAcc = acc;
  cpu::onebitDecompressAccumulate(gpuScales.data(), gpuBits.data(), n, block, cpuAcc.data());
  DeviceArray<float> dAcc(n, shift);
  ASSERT_CUDA(dAcc.upload(acc));
  ASSERT_CUDA(
      cuda::onebitDecompressAccumulate(dScales.get(), dBits.get(), n, block, dAcc.get(), nullptr));
  ASSERT_CUDA(cudaDeviceSynchronize());
  expectSame(dAcc.download(), cpuAcc, "onebit decompress-accumulate");
}

TYPED_TEST(GpuKernels, OnebitMatchesCpu) {
  TERSE_REQUIRE_DEVICE();
  // The CPU path supports blocks that are multiples of 32 (the codec uses powers of two). 32 to
  // 2048 take the one-pass tile kernel (96: tiles of 21 blocks, 2016 elements); 4096 the
  // two-kernel path.
  for (size_t n : kSizes)
    for (size_t block : {32, 96, 2048, 4096})
      for (bool withResidual : {false, true}) {
        checkOnebit(randomValues<TypeParam>(n, 50 + n), block, withResidual);
        if (block == 2048) checkOnebit(randomValues<TypeParam>(n, 50 + n), block, withResidual, 1);
      }
}

TYPED_TEST(GpuKernels, OnebitZerosAndNonFiniteMatchCpu) {
  TERSE_REQUIRE_DEVICE();
  auto in = randomValues<TypeParam>(4096 + 5, 55);
  for (size_t i = 0; i < 40; ++i) num::store(in.data(), i, i % 2 ? -0.0f : 0.0f);
  num::store(in.data(), 2100, std::numeric_limits<float>::quiet_NaN());
  for (size_t i = 4096; i < in.size(); ++i) num::store(in.data(), i, 0.0f);
  checkOnebit(in, 2048, true);
  checkOnebit(in, 32, false);
}

// ---- topk ------------------------------------------------------------------------------------
template <typename In>
void checkTopk(const std::vector<In>& in, size_t k, bool withResidual, size_t shift = 0) {
  size_t n = in.size();
  SCOPED_TRACE(std::string(typeName<In>()) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " residual=" + std::to_string(withResidual) + " shift=" + std::to_string(shift));
  size_t kk = std::min(k, n);
  auto residual = randomResidual(n, 61 + n);
  std::vector<float> cpuResidual = residual, cpuValues(kk);
  std::vector<uint32_t> cpuIndices(kk);
  std::vector<char> cpuScratch(cpu::topkScratchBytes(n));
  size_t cpuK = cpu::topkCompress(in.data(), n, k, withResidual ? cpuResidual.data() : nullptr,
                                  cpuScratch.data(), cpuIndices.data(), cpuValues.data());
  ASSERT_EQ(cpuK, kk);

  size_t scratchBytes = cuda::topkScratchBytes(n);
  if (n > 0) {
    ASSERT_GT(scratchBytes, 0u);
  }
  DeviceArray<char> dScratch(scratchBytes);
  DeviceArray<In> dIn(n, shift);
  DeviceArray<float> dResidual(n, shift), dValues(kk);
  DeviceArray<uint32_t> dIndices(kk);
  ASSERT_CUDA(dScratch.status());
  ASSERT_CUDA(dIn.upload(in));
  ASSERT_CUDA(dResidual.upload(residual));
  size_t gpuK = 12345;
  ASSERT_CUDA(cuda::topkCompress(dIn.get(), n, k, withResidual ? dResidual.get() : nullptr,
                                 dScratch.get(), scratchBytes, dIndices.get(), dValues.get(), &gpuK,
                                 nullptr));
  EXPECT_EQ(gpuK, kk);
  expectSame(dIndices.download(), cpuIndices, "topk indices");
  expectSame(dValues.download(), cpuValues, "topk values");
  expectSame(dResidual.download(), withResidual ? cpuResidual : residual, "topk residual");
}

// Few distinct magnitudes with random signs: most of the selection is decided by the tie rule.
template <typename T>
std::vector<T> tiedValues(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> level(0, 4);
  std::vector<T> v(n);
  const float levels[] = {0.0f, 0.5f, 1.0f, 2.0f, 4.0f};
  for (size_t i = 0; i < n; ++i)
    num::store(v.data(), i, (rng() & 1 ? -1.0f : 1.0f) * levels[level(rng)]);
  return v;
}

TYPED_TEST(GpuKernels, TopkMatchesCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  for (size_t n : kSizes) {
    for (size_t k : {size_t{0}, size_t{1}, n / 100 + 1, n / 2, n, n + 5}) {
      for (bool withResidual : {false, true}) {
        checkTopk(randomValues<TypeParam>(n, 60 + n), k, withResidual);
        checkTopk(tiedValues<TypeParam>(n, 62 + n), k, withResidual);
      }
    }
  }
}

// Pointers off the 16-byte grid take the selection's one-element loads; a large message whose
// threshold falls among many equal magnitudes makes level 1 keep a large candidate list and the
// index digits decide (the emulation in GpuTopkSelect checks the same on the CPU).
TYPED_TEST(GpuKernels, TopkMisalignedAndHeavilyTiedMatchCpuBitwise) {
  TERSE_REQUIRE_DEVICE();
  for (size_t shift : {1, 3})
    for (bool withResidual : {false, true})
      checkTopk(randomValues<TypeParam>(100003, 66), 1001, withResidual, shift);
  const size_t n = (size_t{1} << 22) + 9;
  auto tied = tiedValues<TypeParam>(n, 67);
  for (size_t k : {size_t{1}, n / 100 + 1, n / 3, n - 1}) checkTopk(tied, k, true);
}

TYPED_TEST(GpuKernels, TopkSelectsNaNAndInfFirst) {
  TERSE_REQUIRE_DEVICE();
  auto in = randomValues<TypeParam>(5000, 65);
  num::store(in.data(), 4000, std::numeric_limits<float>::quiet_NaN());
  num::store(in.data(), 17, -std::numeric_limits<float>::infinity());
  checkTopk(in, 1, false);
  checkTopk(in, 2, false);
  checkTopk(in, 50, true);
}

// The CUDA top-k's selection run on the CPU with the kernels' own arithmetic
// (radix_select.h): the six histogram levels, the candidates kept at level 1 (in a scrambled
// order, since the kernels append them with atomics), the bucket search split into the picking
// block's slices, and the final predicate rank >= T in index order. No device needed; what this
// cannot see (atomics, the last-block handoff, CUB's compaction) the device tests above check.
struct EmulatedTopk {
  std::vector<uint32_t> indices;
  std::vector<float> values;
  int levels = 0;  // histogram levels run before T was known
};

// keepCap: level 1 keeps candidates only when level 0's bucket is at most this many ranks
// (topkCompress uses n / 8 + 1024); otherwise levels 2-5 count over every element again.
template <typename In>
EmulatedTopk emulateGpuTopk(const std::vector<In>& in, size_t k, std::vector<float>* residual,
                            size_t keepCap) {
  const size_t n = in.size();
  k = std::min(k, n);
  EmulatedTopk out;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = num::load(in.data(), i);
    if (residual) v[i] = num::feedbackSum(v[i], (*residual)[i]);
  }
  if (residual) *residual = v;
  if (k == 0) return out;
  auto rankAt = [&](size_t i) {
    return radix::rankOf(num::magnitudeKey(v[i]), static_cast<uint32_t>(i));
  };
  radix::SelectState state{};
  std::vector<uint64_t> candidates;
  bool keep = false;
  constexpr uint32_t kSlices = 256, kWidth = radix::kMaxDigits / kSlices;
  while (!state.done) {
    const int level = static_cast<int>(state.level);
    std::vector<uint32_t> hist(radix::kMaxDigits, 0);
    if (level <= 1 || !keep) {
      for (size_t i = 0; i < n; ++i) {
        const uint64_t rank = rankAt(i);
        if (!radix::matchesPrefix(rank, state)) continue;
        ++hist[radix::digitOf(rank, level)];
        if (level == 1 && keep) candidates.push_back(rank);
      }
      std::reverse(candidates.begin(), candidates.end());
    } else {
      for (uint64_t rank : candidates)
        if (radix::matchesPrefix(rank, state)) ++hist[radix::digitOf(rank, level)];
    }
    radix::SelectState s = state;
    if (level == 0) s.remaining = k;
    const uint32_t digits = radix::digitCount(level);
    uint64_t aboveSlice = 0;
    int found = 0;
    for (uint32_t t = 0; t < kSlices; ++t) {
      const uint32_t sliceTop = digits > t * kWidth ? digits - t * kWidth : 0;
      uint32_t digit = 0;
      uint64_t above = 0, inBucket = 0;
      if (radix::findBucketInSlice(hist.data(), sliceTop, kWidth, aboveSlice, s.remaining, &digit,
                                   &above, &inBucket)) {
        ++found;
        radix::SelectState chosen = s;
        radix::decide(&chosen, digit, above, inBucket);
        state = chosen;
        if (level == 0) keep = inBucket <= keepCap;
      }
      for (uint32_t j = 0; j < kWidth && j < sliceTop; ++j) aboveSlice += hist[sliceTop - 1 - j];
    }
    EXPECT_EQ(found, 1) << "level " << level << ": exactly one slice holds the bucket";
    if (found != 1) return out;
    out.levels = level + 1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (rankAt(i) < state.prefix) continue;
    out.indices.push_back(static_cast<uint32_t>(i));
    out.values.push_back(v[i]);
    if (residual) (*residual)[i] = 0.0f;
  }
  return out;
}

template <typename In>
void checkEmulatedTopk(const std::vector<In>& in, size_t k, bool withResidual,
                       int* levelsSeen = nullptr, bool zeroResidual = false) {
  const size_t n = in.size(), kk = std::min(k, n);
  SCOPED_TRACE(std::string(typeName<In>()) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " residual=" + std::to_string(withResidual));
  const auto residual = zeroResidual ? std::vector<float>(n, 0.0f) : randomResidual(n, 61 + n);
  std::vector<float> cpuResidual = residual, cpuValues(kk);
  std::vector<uint32_t> cpuIndices(kk);
  std::vector<char> cpuScratch(cpu::topkScratchBytes(n));
  ASSERT_EQ(cpu::topkCompress(in.data(), n, k, withResidual ? cpuResidual.data() : nullptr,
                              cpuScratch.data(), cpuIndices.data(), cpuValues.data()),
            kk);
  // With candidates (topkCompress's cap) and without (every level over every element).
  for (size_t keepCap : {n / 8 + 1024, size_t{0}}) {
    std::vector<float> gpuResidual = residual;
    EmulatedTopk gpu = emulateGpuTopk(in, k, withResidual ? &gpuResidual : nullptr, keepCap);
    expectSame(gpu.indices, cpuIndices, "emulated topk indices");
    expectSame(gpu.values, cpuValues, "emulated topk values");
    if (withResidual) expectSame(gpuResidual, cpuResidual, "emulated topk residual");
    if (levelsSeen) *levelsSeen = std::max(*levelsSeen, gpu.levels);
  }
}

TEST(GpuTopkSelect, RadixSelectChoosesTheCpuTopk) {
  int deepest = 0;
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{70001}}) {
    for (size_t k : {size_t{1}, size_t{2}, n / 100 + 1, n / 2, n - 1, n, n + 5}) {
      for (bool withResidual : {false, true}) {
        checkEmulatedTopk(randomValues<float>(n, 60 + n), k, withResidual, &deepest);
        checkEmulatedTopk(tiedValues<float>(n, 62 + n), k, withResidual, &deepest);
        checkEmulatedTopk(randomValues<Half>(n, 63 + n), k, withResidual, &deepest);
        checkEmulatedTopk(tiedValues<BFloat16>(n, 64 + n), k, withResidual, &deepest);
      }
    }
  }
  // Ties at the threshold are settled by the index digits, so the emulation must have reached
  // the last level somewhere; distinct magnitudes stop after the key's digits.
  EXPECT_EQ(deepest, radix::kLevels);
}

TEST(GpuTopkSelect, RadixSelectHandlesNonFiniteAndEqualValues) {
  auto in = randomValues<float>(5000, 65);
  in[4000] = std::numeric_limits<float>::quiet_NaN();
  in[17] = -std::numeric_limits<float>::infinity();
  in[18] = std::numeric_limits<float>::infinity();
  in[19] = -0.0f;
  for (size_t k : {1, 2, 3, 50, 4999, 5000}) {
    checkEmulatedTopk(in, k, false);
    checkEmulatedTopk(in, k, true);
  }
  // Every magnitude equal: the selection is the first k indices, found by the index digits.
  std::vector<float> same(3000, 0.25f);
  for (size_t i = 0; i < same.size(); i += 2) same[i] = -0.25f;
  for (size_t k : {1, 2, 1000, 2047, 2048, 2049, 2999, 3000}) checkEmulatedTopk(same, k, false);
  std::vector<float> zeros(100, 0.0f);
  checkEmulatedTopk(zeros, 10, false);
  // A mostly-zero gradient (43 nonzeros of 20000): for k above 43 the threshold is among the
  // zeros, level 0's bucket holds nearly every element and (at topkCompress's cap) no
  // candidates are kept. A zero residual keeps it sparse with error feedback on.
  std::vector<float> sparse(20000, 0.0f);
  for (size_t i = 0; i < sparse.size(); i += 397) sparse[i] = 0.001f * static_cast<float>(i % 7);
  ASSERT_EQ(std::count_if(sparse.begin(), sparse.end(), [](float x) { return x != 0.0f; }), 43);
  for (size_t k : {10, 51, 200, 19999}) {
    checkEmulatedTopk(sparse, k, false);
    checkEmulatedTopk(sparse, k, true, nullptr, true);
    checkEmulatedTopk(sparse, k, true);
  }
}

// Ranks order elements as the CPU does: larger magnitude first, then lower index.
TEST(GpuTopkSelect, RankOrdersByMagnitudeThenLowerIndex) {
  using radix::rankOf;
  EXPECT_GT(rankOf(num::magnitudeKey(2.0f), 9), rankOf(num::magnitudeKey(-1.0f), 0));
  EXPECT_GT(rankOf(num::magnitudeKey(1.0f), 3), rankOf(num::magnitudeKey(-1.0f), 4));
  EXPECT_GT(rankOf(num::magnitudeKey(std::numeric_limits<float>::quiet_NaN()), 5),
            rankOf(num::magnitudeKey(std::numeric_limits<float>::infinity()), 0));
  EXPECT_EQ(radix::indexOfRank(rankOf(123, 0xfffffffeu)), 0xfffffffeu);
  // The six digits tile the 63 bits of a rank with no gap and no overlap.
  uint64_t covered = 0;
  for (int level = 0; level < radix::kLevels; ++level) {
    const uint64_t bits = uint64_t{radix::digitCount(level) - 1} << radix::digitShift(level);
    EXPECT_EQ(covered & bits, 0u) << "level " << level;
    covered |= bits;
  }
  EXPECT_EQ(covered, (uint64_t{1} << 63) - 1);
}

TEST(GpuKernelsFloat, TopkRejectsSmallScratch) {
  TERSE_REQUIRE_DEVICE();
  size_t n = 1000;
  size_t bytes = cuda::topkScratchBytes(n);
  ASSERT_GT(bytes, 0u);
  DeviceArray<char> scratch(bytes);
  DeviceArray<float> in(n), values(10);
  DeviceArray<uint32_t> indices(10);
  size_t k = 99;
  EXPECT_EQ(cuda::topkCompress(in.get(), n, 10, nullptr, scratch.get(), bytes / 4, indices.get(),
                               values.get(), &k, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(k, 0u);
}

template <typename Out>
void checkTopkDecode(const std::vector<uint32_t>& indices, const std::vector<float>& values,
                     size_t n, bool expectValid, size_t shift = 0) {
  size_t k = indices.size();
  SCOPED_TRACE(std::string(typeName<Out>()) + " n=" + std::to_string(n) +
               " k=" + std::to_string(k) + " shift=" + std::to_string(shift));
  // Sentinel contents show whether anything was written.
  std::vector<Out> before(n);
  for (size_t i = 0; i < n; ++i) num::store(before.data(), i, 7.0f + static_cast<float>(i % 5));
  std::vector<Out> cpuOut = before;
  bool cpuValid = cpu::topkDecompress(indices.data(), values.data(), k, n, cpuOut.data());
  ASSERT_EQ(cpuValid, expectValid);

  DeviceArray<uint32_t> dIndices(k);
  DeviceArray<float> dValues(k);
  DeviceArray<Out> dOut(n, shift);  // a shift puts the zero fill's 16-byte stores off the grid
  ASSERT_CUDA(dIndices.upload(indices));
  ASSERT_CUDA(dValues.upload(values));
  ASSERT_CUDA(dOut.upload(before));
  bool valid = !expectValid;
  ASSERT_CUDA(
      cuda::topkDecompress(dIndices.get(), dValues.get(), k, n, dOut.get(), &valid, nullptr));
  EXPECT_EQ(valid, expectValid);
  expectSame(dOut.download(), cpuOut, "topk decompress");

  std::vector<float> acc = asFloats(before);
  std::vector<float> cpuAcc = acc;
  bool cpuAccValid =
      cpu::topkDecompressAccumulate(indices.data(), values.data(), k, n, cpuAcc.data());
  ASSERT_EQ(cpuAccValid, expectValid);
  DeviceArray<float> dAcc(n);
  ASSERT_CUDA(dAcc.upload(acc));
  valid = !expectValid;
  ASSERT_CUDA(cuda::topkDecompressAccumulate(dIndices.get(), dValues.get(), k, n, dAcc.get(),
                                             &valid, nullptr));
  EXPECT_EQ(valid, expectValid);
  expectSame(dAcc.download(), cpuAcc, "topk decompress-accumulate");
}

template <typename Out>
void checkTopkDecodeCases() {
  for (size_t n : kSizes) {
    // Valid payloads: a random ascending subset.
    std::mt19937_64 rng(70 + n);
    std::vector<uint32_t> indices;
    for (size_t i = 0; i < n; ++i)
      if (rng() % 13 == 0) indices.push_back(static_cast<uint32_t>(i));
    auto values = randomResidual(indices.size(), 71 + n);
    checkTopkDecode<Out>(indices, values, n, true);
    checkTopkDecode<Out>(indices, values, n, true, 3);
    checkTopkDecode<Out>({}, {}, n, true);
    // Corrupt payloads: out of range, duplicate, descending, more pairs than elements.
    checkTopkDecode<Out>({static_cast<uint32_t>(n)}, {1.0f}, n, false);
    if (n >= 2) {
      checkTopkDecode<Out>({0, 1, 1}, {1.0f, 2.0f, 3.0f}, n, false);
      checkTopkDecode<Out>({1, 0}, {1.0f, 2.0f}, n, false);
      std::vector<uint32_t> tooMany(n + 1);
      for (size_t i = 0; i < tooMany.size(); ++i) tooMany[i] = static_cast<uint32_t>(i);
      checkTopkDecode<Out>(tooMany, std::vector<float>(n + 1, 1.0f), n, false);
    }
    if (!indices.empty()) {
      auto bad = indices;
      bad.back() = 0xffffffffu;  // valid except the last pair
      checkTopkDecode<Out>(bad, values, n, false);
    }
  }
}

TYPED_TEST(GpuKernels, TopkDecodersMatchCpuAndRejectCorruptIndices) {
  TERSE_REQUIRE_DEVICE();
  checkTopkDecodeCases<TypeParam>();
}

}  // namespace
}  // namespace terse::kernels
