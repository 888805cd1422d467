// The codec table (registry.cc): what a spec sets, handed to a codec's factory, and the wire
// header's check of the codec byte.
#pragma once

#include "terse/kernels/kernels.h"

#include <cstdint>

namespace terse {

// What a spec sets; a row's defaults, overwritten by the options given.
struct CodecOptions {
  uint32_t block = 0;
  kernels::Rounding rounding = kernels::Rounding::kNearest;
  uint64_t seed = 0;
  double ratio = 0;
  uint32_t format = 0;  // fp8: 0 e4m3, 1 e5m2
};

// True for every codec id the table has a row for (the ids run 0..count-1).
bool isRegisteredCodec(uint8_t id);

}  // namespace terse
