// Runtime choice between the portable loops and the AVX2 + F16C ones.
#include "cpu_common.h"

#include <atomic>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

namespace terse::kernels::cpu::detail {
namespace {

// CPUID directly (older clang has no "f16c" for __builtin_cpu_supports): AVX and F16C in
// leaf 1, the OS saving YMM state (XGETBV), and AVX2 in leaf 7.
bool cpuHasAvx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!(osxsave && avx && f16c)) return false;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0x6u) != 0x6u) return false;  // XMM and YMM state enabled by the OS
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  return b & (1u << 5);
#else
  return false;
#endif
}

std::atomic<bool> gEnabled{true};

}  // namespace

bool useAvx2() {
  static const bool kHave = cpuHasAvx2();
  return kHave && gEnabled.load(std::memory_order_relaxed);
}

void setAvx2Enabled(bool enabled) { gEnabled.store(enabled); }

}  // namespace terse::kernels::cpu::detail
