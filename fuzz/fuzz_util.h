// Helpers shared by the libFuzzer targets: the seed-writing mode and a hard failure that
// libFuzzer records as a crash (with the input that caused it).
#pragma once

#include "terse/common/env.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace terse::fuzz {

// Read by maybeWriteSeeds below (terse/common/env.h: declared next to its reader).
inline const EnvSetting kFuzzWriteSeedsSetting{
    {"TERSE_FUZZ_WRITE_SEEDS", "string", "",
     "Fuzz targets (fuzz/): a directory into which the target writes its seed corpus and exits "
     "instead of fuzzing (scripts/fuzz.sh sets it)."}};

// A property the target checks does not hold: print why and abort so libFuzzer saves the input.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "terse fuzz invariant violated: %s\n", what);
  std::abort();
}

// With TERSE_FUZZ_WRITE_SEEDS=<dir> in the environment, a target writes its seed corpus into
// <dir> (via `write`) and exits instead of fuzzing: seeds come from the code that knows the
// formats, so they stay valid when a format changes.
template <typename WriteSeeds>
void maybeWriteSeeds(WriteSeeds write) {
  const std::string dirText = kFuzzWriteSeedsSetting.readRaw();  // "" when unset
  const char* dir = dirText.c_str();
  if (!*dir) return;
  int count = 0;
  auto put = [&](const std::vector<uint8_t>& bytes) {
    std::string path = std::string(dir) + "/seed-" + std::to_string(count++);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
      std::fprintf(stderr, "cannot write seed %s\n", path.c_str());
      std::exit(1);
    }
    if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  };
  write(put);
  std::fprintf(stderr, "wrote %d seeds to %s\n", count, dir);
  std::exit(0);
}

// FNV-1a over the first 32 bytes of a wire header, as docs/wire-format.md defines its check
// field; the decode target re-stamps it so mutations reach the codecs' own validation.
inline uint32_t wireHeaderCheck(const uint8_t* p) {
  uint32_t h = 2166136261u;
  for (int i = 0; i < 32; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

// FNV-1a over 8-byte little-endian words then the tail: the error-feedback checkpoint's
// trailing checksum (docs/wire-format.md).
inline uint64_t checkpointCheck(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = 0;
    for (int b = 7; b >= 0; --b) w = (w << 8) | p[i + b];
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace terse::fuzz
