// The codec table (registry.cc), for the wire header's check of the codec byte.
#pragma once

#include <cstdint>

namespace terse {

// True for every codec id the table has a row for (the ids run 0..count-1).
bool isRegisteredCodec(uint8_t id);

}  // namespace terse
