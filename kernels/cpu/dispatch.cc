// Runtime choice between the portable loops and the AVX2 + F16C ones.
#include "cpu_common.h"

#include <atomic>

namespace terse::kernels::cpu::detail {
namespace {

bool cpuHasAvx2() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
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
