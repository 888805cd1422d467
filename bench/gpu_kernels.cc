// terse-bench gpukernels: time every CUDA codec kernel with CUDA events and report its
// effective bandwidth (nominal bytes read + written per call, divided by time) as a ratio to a
// device-to-device cudaMemcpy of n floats measured in the same run. A ratio near 1 means the
// kernel streams memory as fast as the copy engine path does; the absolute GB/s depend on the GPU.
#include "subcommand.h"

#include "terse/kernels/cuda.h"
#include "terse/kernels/device.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace terse::bench {
namespace {

namespace kc = ::terse::kernels::cuda;

struct Options {
  size_t n = size_t{1} << 24;
  int iters = 20;
};

void printHelp() {
  std::printf(
      "usage: terse-bench gpukernels [--n=ELEMENTS] [--iters=N]\n"
      "  Times each CUDA codec kernel on n elements (default 2^24) and prints its effective\n"
      "  bandwidth and the ratio to a device-to-device copy of n floats in the same run.\n");
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strncmp(a, "--n=", 4)) {
      o->n = std::strtoull(a + 4, nullptr, 10);
    } else if (!std::strncmp(a, "--iters=", 8)) {
      o->iters = std::atoi(a + 8);
    } else {
      std::fprintf(stderr, "terse-bench gpukernels: unknown option '%s' (see --help)\n", a);
      return false;
    }
  }
  if (o->n == 0 || o->iters <= 0) {
    std::fprintf(stderr, "terse-bench gpukernels: --n and --iters must be positive\n");
    return false;
  }
  return true;
}

// Device allocations released on every exit path.
struct DeviceMemory {
  std::vector<void*> blocks;
  ~DeviceMemory() {
    for (void* p : blocks) cudaFree(p);
  }
  template <typename T>
  T* alloc(size_t count, cudaError_t* err) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, count * sizeof(T) + 1);
    if (e != cudaSuccess && *err == cudaSuccess) *err = e;
    if (p) blocks.push_back(p);
    return static_cast<T*>(p);
  }
};

struct Timer {
  cudaEvent_t start = nullptr, stop = nullptr;
  Timer() {
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

// Mean microseconds per call, or a negative value after printing the failing call's error.
double timeCall(const char* name, int iters, cudaStream_t stream,
                const std::function<cudaError_t()>& call) {
  Timer t;
  for (int i = 0; i < 2; ++i) {  // warm-up: first-touch, module load, CUB tuning queries
    cudaError_t e = call();
    if (e != cudaSuccess) {
      std::fprintf(stderr, "%s failed: %s\n", name, cudaGetErrorString(e));
      return -1.0;
    }
  }
  cudaEventRecord(t.start, stream);
  for (int i = 0; i < iters; ++i) {
    cudaError_t e = call();
    if (e != cudaSuccess) {
      std::fprintf(stderr, "%s failed: %s\n", name, cudaGetErrorString(e));
      return -1.0;
    }
  }
  cudaEventRecord(t.stop, stream);
  cudaError_t e = cudaEventSynchronize(t.stop);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s failed: %s\n", name, cudaGetErrorString(e));
    return -1.0;
  }
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, t.start, t.stop);
  return 1000.0 * ms / iters;
}

int gpuKernelsMain(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      printHelp();
      return 0;
    }
  }
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  if (!terse::device::available()) {
    std::fprintf(stderr, "terse-bench gpukernels: no CUDA device found; nothing to measure\n");
    return 0;
  }
  const size_t n = o.n, int8Block = 256, onebitBlock = 2048, k = n / 100 + 1;
  cudaError_t err = cudaSuccess;
  DeviceMemory mem;
  float* in = mem.alloc<float>(n, &err);
  float* out = mem.alloc<float>(n, &err);
  float* residual = mem.alloc<float>(n, &err);
  float* acc = mem.alloc<float>(n, &err);
  Half* half = mem.alloc<Half>(n, &err);
  BFloat16* bf16 = mem.alloc<BFloat16>(n, &err);
  uint8_t* codes = mem.alloc<uint8_t>(n, &err);  // low-bit codes (one byte or a nibble each)
  int8_t* q = mem.alloc<int8_t>(n, &err);
  float* scales = mem.alloc<float>(n / 32 + 1, &err);
  uint32_t* bits = mem.alloc<uint32_t>(n / 32 + 1, &err);
  uint32_t* indices = mem.alloc<uint32_t>(k, &err);
  float* values = mem.alloc<float>(k, &err);
  size_t scratchBytes = kc::topkScratchBytes(n);
  void* scratch = mem.alloc<char>(scratchBytes, &err);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "terse-bench gpukernels: allocating buffers for n=%zu failed: %s\n", n,
                 cudaGetErrorString(err));
    return 1;
  }
  {
    std::vector<float> host(n);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (auto& x : host) x = normal(rng);
    cudaMemcpy(in, host.data(), n * 4, cudaMemcpyHostToDevice);
    for (auto& x : host) x *= 1e-3f;
    cudaMemcpy(residual, host.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(acc, host.data(), n * 4, cudaMemcpyHostToDevice);
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    std::fprintf(stderr, "terse-bench gpukernels: cudaStreamCreate failed\n");
    return 1;
  }
  kc::convert(in, half, n, 1.0f, nullptr, stream);  // a valid fp16 input for the decoders
  kc::convert(in, bf16, n, 1.0f, nullptr, stream);  // and bf16

  struct Case {
    const char* name;
    double bytesPerElement;  // nominal: every array read once and written once
    std::function<cudaError_t()> call;
  };
  size_t kOut = 0;
  bool valid = false;
  std::vector<Case> cases = {
      {"memcpy f32 (baseline)", 8,
       [&] { return cudaMemcpyAsync(out, in, n * 4, cudaMemcpyDeviceToDevice, stream); }},
      {"convert f32->f16", 6, [&] { return kc::convert(in, half, n, 1.0f, nullptr, stream); }},
      {"convert f32->f16 +residual", 14,
       [&] { return kc::convert(in, half, n, 0.5f, residual, stream); }},
      {"convert f16->f32", 6, [&] { return kc::convert(half, out, n, 1.0f, nullptr, stream); }},
      {"accumulate f16", 10, [&] { return kc::accumulate(half, acc, n, stream); }},
      {"scaleInPlace", 8, [&] { return kc::scaleInPlace(acc, n, 1.0f, stream); }},
      {"int8Quantize f32 +residual", 13,
       [&] {
         return kc::int8Quantize(in, n, int8Block, kernels::Rounding::kNearest, 0, 0, residual,
                                 scales, q, stream);
       }},
      {"int8Quantize f32", 5,
       [&] {
         return kc::int8Quantize(in, n, int8Block, kernels::Rounding::kNearest, 0, 0, nullptr,
                                 scales, q, stream);
       }},
      {"int8Quantize f32 stochastic", 5,
       [&] {
         return kc::int8Quantize(in, n, int8Block, kernels::Rounding::kStochastic, 1, 0, nullptr,
                                 scales, q, stream);
       }},
      {"int8Quantize f32 stoch +residual", 13,
       [&] {
         return kc::int8Quantize(in, n, int8Block, kernels::Rounding::kStochastic, 1, 0, residual,
                                 scales, q, stream);
       }},
      {"int8Dequantize f32", 5,
       [&] { return kc::int8Dequantize(scales, q, n, int8Block, out, stream); }},
      {"int8DequantizeAccumulate", 9,
       [&] { return kc::int8DequantizeAccumulate(scales, q, n, int8Block, acc, stream); }},
      {"onebitCompress f32 +residual", 12.125,
       [&] { return kc::onebitCompress(in, n, onebitBlock, residual, scales, bits, stream); }},
      {"onebitCompress f32", 4.125,
       [&] { return kc::onebitCompress(in, n, onebitBlock, nullptr, scales, bits, stream); }},
      {"onebitDecompress f32", 4.125,
       [&] { return kc::onebitDecompress(scales, bits, n, onebitBlock, out, stream); }},
      {"onebitDecompressAccumulate", 8.125,
       [&] { return kc::onebitDecompressAccumulate(scales, bits, n, onebitBlock, acc, stream); }},
      {"convert f32->bf16", 6, [&] { return kc::convert(in, bf16, n, 1.0f, nullptr, stream); }},
      {"convert f32->bf16 +residual", 14,
       [&] { return kc::convert(in, bf16, n, 0.5f, residual, stream); }},
      {"convert bf16->f32", 6, [&] { return kc::convert(bf16, out, n, 1.0f, nullptr, stream); }},
      {"accumulate bf16", 10, [&] { return kc::accumulate(bf16, acc, n, stream); }},
  };
  // The low-bit formats at their codecs' default blocks (fp8 256, int4 64, mx 32): quantize with
  // a residual (as the error-feedback codecs call it) and without, dequantize, and the
  // accumulating decoder. Bytes: 4 in (+8 residual), the codes, one scale per block.
  struct LowbitCase {
    const char* name;
    kc::LowbitFormat format;
    size_t block;
  };
  const LowbitCase lowbits[] = {{"fp8", kc::LowbitFormat::kFp8E4M3, 256},
                                {"fp8e5m2", kc::LowbitFormat::kFp8E5M2, 256},
                                {"mxfp8", kc::LowbitFormat::kMxfp8, kernels::kMxBlock},
                                {"mxfp4", kc::LowbitFormat::kMxfp4, kernels::kMxBlock},
                                {"int4", kc::LowbitFormat::kInt4, 64}};
  std::vector<std::string> names;  // the cases keep pointers to these
  names.reserve(5 * 6);
  for (const LowbitCase& l : lowbits) {
    const double code = kernels::lowbitIsNibbles(l.format) ? 0.5 : 1.0;
    const double scale = static_cast<double>(kernels::lowbitScaleBytes(l.format)) / l.block;
    const kc::LowbitFormat f = l.format;
    const size_t block = l.block;
    names.push_back(std::string(l.name) + "Quantize f32");
    cases.push_back({names.back().c_str(), 4 + code + scale, [&, f, block] {
                       return kc::lowbitQuantize(f, in, n, block, kernels::Rounding::kNearest, 0, 0,
                                                 nullptr, scales, codes, stream);
                     }});
    names.push_back(std::string(l.name) + "Quantize f32 +residual");
    cases.push_back({names.back().c_str(), 12 + code + scale, [&, f, block] {
                       return kc::lowbitQuantize(f, in, n, block, kernels::Rounding::kNearest, 0, 0,
                                                 residual, scales, codes, stream);
                     }});
    names.push_back(std::string(l.name) + "Quantize f32 stochastic");
    cases.push_back({names.back().c_str(), 4 + code + scale, [&, f, block] {
                       return kc::lowbitQuantize(f, in, n, block, kernels::Rounding::kStochastic, 1,
                                                 0, nullptr, scales, codes, stream);
                     }});
    names.push_back(std::string(l.name) + "Quantize f32 stoch +residual");
    cases.push_back({names.back().c_str(), 12 + code + scale, [&, f, block] {
                       return kc::lowbitQuantize(f, in, n, block, kernels::Rounding::kStochastic, 1,
                                                 0, residual, scales, codes, stream);
                     }});
    names.push_back(std::string(l.name) + "Dequantize f32");
    cases.push_back({names.back().c_str(), 4 + code + scale, [&, f, block] {
                       return kc::lowbitDequantize(f, scales, codes, n, block, out, stream);
                     }});
    names.push_back(std::string(l.name) + "DequantizeAccumulate");
    cases.push_back({names.back().c_str(), 8 + code + scale, [&, f, block] {
                       return kc::lowbitDequantizeAccumulate(f, scales, codes, n, block, acc,
                                                             stream);
                     }});
  }
  // Last: top-k synchronizes inside (its k is read on the host).
  const std::vector<Case> topk = {
      {"topkCompress f32 1% +residual", 12,
       [&] {
         return kc::topkCompress(in, n, k, residual, scratch, scratchBytes, indices, values, &kOut,
                                 stream);
       }},
      {"topkDecompress f32 1%", 4,
       [&] { return kc::topkDecompress(indices, values, kOut, n, out, &valid, stream); }},
      {"topkDecompressAccumulate 1%", 0.16,
       [&] { return kc::topkDecompressAccumulate(indices, values, kOut, n, acc, &valid, stream); }},
  };
  cases.insert(cases.end(), topk.begin(), topk.end());

  cudaDeviceProp prop{};
  int device = 0;
  cudaGetDevice(&device);
  cudaGetDeviceProperties(&prop, device);
  std::printf("device: %s; n = %zu elements; %d timed iterations each\n", prop.name, n, o.iters);
  std::printf("%-32s %12s %12s %12s\n", "kernel", "us/call", "GB/s", "vs memcpy");
  double baseline = 0.0;
  int status = 0;
  for (const auto& c : cases) {
    double us = timeCall(c.name, o.iters, stream, c.call);
    if (us < 0) {
      status = 1;
      continue;
    }
    double gbs = c.bytesPerElement * static_cast<double>(n) / (us * 1e3);
    if (baseline == 0.0) baseline = gbs;
    std::printf("%-32s %12.1f %12.1f %12.2f\n", c.name, us, gbs, gbs / baseline);
  }
  if (!valid && kOut > 0) {
    std::fprintf(stderr, "topk decoders rejected the payload topkCompress produced\n");
    status = 1;
  }
  cudaStreamDestroy(stream);
  return status;
}

RegisterSubcommand registerGpuKernels({"gpukernels",
                                       "time the CUDA codec kernels against a device memcpy",
                                       gpuKernelsMain});

}  // namespace
}  // namespace terse::bench
