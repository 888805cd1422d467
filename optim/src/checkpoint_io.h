// The optimizers' checkpoint framing, shared by OneBitAdam and ShardedOneBitAdam: little-endian
// fields (terse runs on little-endian hosts only, as docs/wire-format.md says; memcpy keeps it
// free of alignment assumptions), a 4-byte magic and version first and an FNV-1a (64-bit, byte
// by byte) of everything before it last.
#pragma once

#include "terse/common/status.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace terse::optim {

inline uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

class CheckpointWriter {
 public:
  CheckpointWriter(uint32_t magic, uint32_t version) {
    put(magic);
    put(version);
  }
  template <typename T>
  void put(T v) {
    bytes(&v, sizeof(T));
  }
  void bytes(const void* p, size_t n) {
    size_t at = out_.size();
    out_.resize(at + n);
    if (n) std::memcpy(out_.data() + at, p, n);
  }
  // A length, then the values.
  void floats(const std::vector<float>& v) {
    put<uint64_t>(v.size());
    bytes(v.data(), 4 * v.size());
  }
  // The bytes with their checksum appended.
  std::vector<uint8_t> finish() {
    put<uint64_t>(fnv1a64(out_.data(), out_.size()));
    return std::move(out_);
  }

 private:
  std::vector<uint8_t> out_;
};

class CheckpointReader {
 public:
  // The body of a checkpoint (between the version and the checksum), once its magic, version
  // and checksum are right; kCorrupt naming `what` otherwise. `magicName` is the magic's bytes
  // as text, for the message.
  // Versions oldest..version are accepted (oldest 0: only `version`); version() says which.
  static Result<CheckpointReader> open(const void* bytes, size_t size, uint32_t magic,
                                       uint32_t version, const char* what, const char* magicName,
                                       uint32_t oldest = 0) {
    if (!bytes && size) return errorInvalidArgument("%s: null buffer", what);
    const auto* p = static_cast<const uint8_t*>(bytes);
    if (size < 16) return errorCorrupt("%s of %zu bytes is truncated", what, size);
    uint32_t got = 0, gotVersion = 0;
    std::memcpy(&got, p, 4);
    std::memcpy(&gotVersion, p + 4, 4);
    if (got != magic)
      return errorCorrupt("%s: bad magic 0x%08x (expected \"%s\")", what, got, magicName);
    if (gotVersion > version || gotVersion < (oldest ? oldest : version))
      return errorCorrupt("%s has format version %u; this build reads versions %u to %u", what,
                          gotVersion, oldest ? oldest : version, version);
    uint64_t sum = 0;
    std::memcpy(&sum, p + size - 8, 8);
    if (sum != fnv1a64(p, size - 8))
      return errorCorrupt("%s checksum mismatch: the data is corrupt or truncated", what);
    return CheckpointReader(p + 8, size - 16, gotVersion);
  }
  uint32_t version() const { return version_; }

  template <typename T>
  bool get(T* v) {
    return bytes(v, sizeof(T));
  }
  bool bytes(void* dst, size_t n) {
    if (n_ - at_ < n) return false;
    if (n) std::memcpy(dst, p_ + at_, n);
    at_ += n;
    return true;
  }
  // A length that must be `expect`, then the values.
  bool floats(std::vector<float>* v, uint64_t expect) {
    uint64_t n = 0;
    if (!get(&n) || n != expect || (n_ - at_) / 4 < n) return false;
    v->resize(n);
    return bytes(v->data(), 4 * n);
  }
  const uint8_t* here() const { return p_ + at_; }
  bool skip(size_t n) {
    if (n_ - at_ < n) return false;
    at_ += n;
    return true;
  }
  size_t left() const { return n_ - at_; }

 private:
  CheckpointReader(const uint8_t* p, size_t n, uint32_t version)
      : p_(p), n_(n), version_(version) {}
  const uint8_t* p_;
  size_t n_;
  uint32_t version_;
  size_t at_ = 0;
};

}  // namespace terse::optim
