// Instructions per element of the CPU codec kernels, for callgrind (docs/codecs.md,
// "Throughput"). Wall-clock figures on a shared machine swing by 2x between runs; an
// instruction count does not. Built as build/bin/codec-instructions; from the repository root:
//   for c in int8 fp8 mxfp8 mxfp4 int4; do for op in compress decode; do
//     for reps in 1 11; do
//       valgrind --tool=callgrind --callgrind-out-file=/dev/null
//         build/bin/codec-instructions $c $op $reps 2>&1 | grep -o 'Collected : [0-9]*'
//     done; done; done
// (the valgrind command is one line).
// instructions per element = (Ir(11) - Ir(1)) / (10 * 65536). The codecs run as terse-bench
// runs them: int8 and fp8 in blocks of 256, mx in 32, int4 in 64; mxfp4 and int4 with an
// error-feedback residual; nearest rounding; decode means decompress-accumulate. 65,536
// elements stay on one thread (kernels split larger buffers over the pool). An optional fourth
// argument, ef or noef, gives every codec a residual or none, to compare like with like.
#include "terse/kernels/kernels.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace terse::kernels;

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr,
                 "usage: codec_instr int8|fp8|mxfp8|mxfp4|int4 compress|decode REPS [ef|noef]\n");
    return 2;
  }
  // -1: as terse-bench's default runs them; 0 or 1: no residual, or one for every codec
  int efArg = argc == 5 ? (std::strcmp(argv[4], "ef") == 0 ? 1 : 0) : -1;
  const char* codec = argv[1];
  bool compress = std::strcmp(argv[2], "compress") == 0;
  int reps = std::atoi(argv[3]);
  const size_t n = 65536;
  // terse-bench's input distribution: normal values times 10^(-2..1)
  std::vector<float> in(n), residual(n, 0.0f), acc(n, 0.0f), scales(n);
  std::vector<uint8_t> codes(n);
  uint64_t s = 88172645463325252ull;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    double u1 = ((s >> 11) + 0.5) / 9007199254740992.0, u2 = ((s & 0xffff) + 0.5) / 65536.0;
    in[i] = static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2) *
                               std::pow(10.0, static_cast<double>(s % 4) - 2.0));
  }
  if (std::strcmp(codec, "int8") == 0) {
    auto* q = reinterpret_cast<int8_t*>(codes.data());
    float* r = efArg == 1 ? residual.data() : nullptr;
    cpu::int8Quantize(in.data(), n, 256, Rounding::kNearest, 1, 0, nullptr, scales.data(), q);
    for (int k = 0; k < reps; ++k) {
      if (compress)
        cpu::int8Quantize(in.data(), n, 256, Rounding::kNearest, 1, 0, r, scales.data(), q);
      else
        cpu::int8DequantizeAccumulate(scales.data(), q, n, 256, acc.data());
    }
  } else {
    LowbitFormat f = LowbitFormat::kInt4;
    size_t block = 64;
    bool ef = true;
    if (std::strcmp(codec, "fp8") == 0) {
      f = LowbitFormat::kFp8E4M3, block = 256, ef = false;
    } else if (std::strcmp(codec, "mxfp8") == 0) {
      f = LowbitFormat::kMxfp8, block = kMxBlock, ef = false;
    } else if (std::strcmp(codec, "mxfp4") == 0) {
      f = LowbitFormat::kMxfp4, block = kMxBlock;
    } else if (std::strcmp(codec, "int4") != 0) {
      std::fprintf(stderr, "codec_instr: unknown codec %s\n", codec);
      return 2;
    }
    if (efArg >= 0) ef = efArg == 1;
    cpu::lowbitQuantize(f, in.data(), n, block, Rounding::kNearest, 1, 0, nullptr, scales.data(),
                        codes.data());
    for (int k = 0; k < reps; ++k) {
      if (compress)
        cpu::lowbitQuantize(f, in.data(), n, block, Rounding::kNearest, 1, 0,
                            ef ? residual.data() : nullptr, scales.data(), codes.data());
      else
        cpu::lowbitDequantizeAccumulate(f, scales.data(), codes.data(), n, block, acc.data());
    }
  }
  std::printf("%g\n", acc[5] + residual[7]);  // keeps the results live
  return 0;
}
