// ErrorFeedback: residual state and its checkpoint form (docs/wire-format.md).
#include "terse/compressors/error_feedback.h"

#include "terse/common/logging.h"
#include "terse/compressors/auto_spec.h"
#include "terse/compressors/codec.h"
#include "terse/kernels/device.h"

#include <algorithm>
#include <string>
#include <utility>
#include <limits>
#include <new>
#include <stdexcept>
#include <cstring>

namespace terse {
namespace {

constexpr uint32_t kMagic = 0x46455254u;  // bytes "TREF"
constexpr uint32_t kVersion = 1;          // one server chunk
constexpr uint32_t kVersionRegions = 2;   // several server chunks (written only then)
constexpr size_t kFixedBytes = 40;        // fields before the spec
constexpr size_t kCheckBytes = 8;         // trailing checksum
constexpr size_t kMaxSpecBytes = 256;

size_t pad4(size_t n) { return (n + 3) & ~size_t{3}; }

// FNV-1a over 8-byte words (then the tail bytes): cheap enough for checkpoints of large
// tensors, and any flipped bit changes it.
uint64_t checksum(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

template <typename T>
void put(std::vector<uint8_t>& out, size_t off, T v) {
  std::memcpy(out.data() + off, &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

// Canonical form of a codec spec or of an auto policy spec.
Result<std::string> canonicalSpec(const std::string& spec) {
  if (isAutoSpec(spec)) {
    TERSE_ASSIGN_OR_RETURN(AutoSpec a, parseAutoSpec(spec));
    return a.canonical;
  }
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<const Codec> codec, makeCodec(spec));
  return codec->spec();
}

}  // namespace

// The device copies: current means they hold the residuals and worker_/server_ are stale.
struct ErrorFeedback::DeviceResiduals {
  device::DeviceBuffer worker;
  device::DeviceBuffer server;
  bool current = false;
};

ErrorFeedback::ErrorFeedback() = default;
ErrorFeedback::~ErrorFeedback() = default;
ErrorFeedback::ErrorFeedback(ErrorFeedback&&) noexcept = default;
ErrorFeedback& ErrorFeedback::operator=(ErrorFeedback&&) noexcept = default;

ErrorFeedback::ErrorFeedback(const ErrorFeedback& other) { *this = other; }

ErrorFeedback& ErrorFeedback::operator=(const ErrorFeedback& other) {
  if (this == &other) return *this;
  other.pullToHost();  // a copy starts on the host; device memory is never shared
  spec_ = other.spec_;
  activeSpec_ = other.activeSpec_;
  worker_ = other.worker_;
  regions_ = other.regions_;
  serverWorld_ = other.serverWorld_;
  usedForPart_ = other.usedForPart_;
  device_.reset();
  return *this;
}

bool ErrorFeedback::residualsOnDevice() const { return device_ && device_->current; }

void ErrorFeedback::pullToHost() const {
  if (!residualsOnDevice()) return;
  // Synchronous (legacy default stream, then a full wait): callers finished their own stream.
  Status s = device::copyAsync(worker_.data(), device_->worker.data(), 4 * worker_.size(), nullptr);
  size_t at = 0;  // the regions lie one after another in the device copy
  for (Region& region : regions_) {
    if (!s.isOk()) break;
    s = device::copyAsync(region.values.data(), static_cast<float*>(device_->server.data()) + at,
                          4 * region.values.size(), nullptr);
    at += region.values.size();
  }
  if (s.isOk()) s = device::synchronize(nullptr);
  if (!s.isOk()) {
    // The device copy is unreadable (a sticky CUDA fault): zero residuals are a valid, if
    // weaker, state; stale or garbage ones would silently bias the gradients.
    TERSE_WARN(kSubsysCodec,
               "error feedback: reading residuals from the device failed (%s); "
               "they restart from zero",
               s.toString().c_str());
    std::fill(worker_.begin(), worker_.end(), 0.0f);
    for (Region& region : regions_) std::fill(region.values.begin(), region.values.end(), 0.0f);
  }
  device_->current = false;
}

Status ErrorFeedback::pushToDevice(void* stream) {
  if (residualsOnDevice()) return Status::ok();
  if (!device::available())
    return errorUnsupported("error feedback: device residuals need %s",
                            device::built() ? "a usable CUDA device, and none was found"
                                            : "CUDA, and this terse was built without it");
  if (!device_) device_ = std::make_unique<DeviceResiduals>();
  TERSE_RETURN_IF_ERROR(device_->worker.reserve(4 * worker_.size()).status());
  TERSE_RETURN_IF_ERROR(device_->server.reserve(4 * serverLength()).status());
  TERSE_RETURN_IF_ERROR(
      device::copyAsync(device_->worker.data(), worker_.data(), 4 * worker_.size(), stream));
  size_t at = 0;
  for (const Region& region : regions_) {
    TERSE_RETURN_IF_ERROR(device::copyAsync(static_cast<float*>(device_->server.data()) + at,
                                            region.values.data(), 4 * region.values.size(),
                                            stream));
    at += region.values.size();
  }
  device_->current = true;
  return Status::ok();
}

Result<float*> ErrorFeedback::deviceWorker(void* stream) {
  TERSE_RETURN_IF_ERROR(pushToDevice(stream));
  return static_cast<float*>(device_->worker.data());
}

Result<float*> ErrorFeedback::deviceServer(int worldSize, size_t offset, size_t length,
                                           void* stream) {
  // Where the chunk's region lies in the device copy (the regions one after another).
  auto placed = [&]() -> std::pair<bool, size_t> {
    size_t at = 0;
    if (worldSize == serverWorld_)
      for (const Region& region : regions_) {
        if (region.offset == offset && region.values.size() == length) return {true, at};
        at += region.values.size();
      }
    return {false, 0};
  };
  auto where = placed();
  if (!where.first && length > 0) {
    // A new partition is rare (world or tensor changed): make it on the host, then move up.
    // (Not server()'s pointer: an empty chunk, a short tensor's last ranks, has none.)
    TERSE_RETURN_IF_ERROR(serverChecked(worldSize, offset, length).status());
    where = placed();
  }
  TERSE_RETURN_IF_ERROR(pushToDevice(stream));
  return static_cast<float*>(device_->server.data()) + where.second;
}

Result<ErrorFeedback> ErrorFeedback::create(const std::string& codecSpec, size_t count) {
  auto canonical = canonicalSpec(codecSpec);
  if (!canonical.isOk()) return canonical.status().withContext("creating error-feedback state");
  // The residual is count float32 values: a count whose bytes do not fit the address range is
  // the caller's mistake, and one that fits but not in memory is the system's answer.
  if (count > std::numeric_limits<size_t>::max() / (2 * sizeof(float)))
    return errorInvalidArgument(
        "error-feedback state for %zu elements: its float32 residuals would not fit in the "
        "address range",
        count);
  ErrorFeedback ef;
  ef.spec_ = canonical.value();
  try {
    ef.worker_.assign(count, 0.0f);
  } catch (const std::bad_alloc&) {
    return errorSystem(
        "error-feedback state for %zu elements: out of memory for %zu bytes of "
        "residuals",
        count, count * sizeof(float));
  } catch (const std::length_error&) {
    return errorInvalidArgument("error-feedback state for %zu elements: too many elements", count);
  }
  return ef;
}

void ErrorFeedback::prepareFor(const std::string& codecSpec, bool part) {
  usedForPart_ |= part;
  if (codecSpec == activeSpec_) return;
  if (!activeSpec_.empty() && isAutoSpec(spec_))
    TERSE_INFO(kSubsysCodec, "error feedback: %s switched from %s to %s; residuals reset",
               spec_.c_str(), activeSpec_.c_str(), codecSpec.c_str());
  if (!activeSpec_.empty()) reset();
  activeSpec_ = codecSpec;
}

Status ErrorFeedback::checkCompatible(const std::string& codecSpec, size_t count) const {
  // The collectives pass canonical specs: the common case needs no parsing.
  if (count == worker_.size() && (codecSpec == spec_ || codecSpec == activeSpec_))
    return Status::ok();
  auto canonicalResult = canonicalSpec(codecSpec);
  if (!canonicalResult.isOk()) return canonicalResult.status();
  std::string canonical = canonicalResult.value();
  bool specOk = canonical == spec_;
  if (!specOk && isAutoSpec(spec_)) {
    auto a = parseAutoSpec(spec_);
    for (const auto& c : a.isOk() ? a.value().candidates : std::vector<std::string>{})
      specOk |= c == canonical;
  }
  if (!specOk || count != worker_.size())
    return errorInvalidArgument(
        "error-feedback state was made for codec '%s' and %zu elements but is used with codec "
        "'%s' and %zu elements: create (or load) one state per tensor and codec",
        spec_.c_str(), worker_.size(), canonical.c_str(), count);
  return Status::ok();
}

Result<float*> ErrorFeedback::serverChecked(int worldSize, size_t offset, size_t length) {
  pullToHost();
  if (worldSize <= 0 || offset > worker_.size() || length > worker_.size() - offset)
    return errorInvalidArgument(
        "error feedback: server chunk [%zu, +%zu) of world %d does not fit a tensor of %zu "
        "elements",
        offset, length, worldSize, worker_.size());
  if (worldSize != serverWorld_) {
    // Another world: every kept residual belongs to another partition.
    regions_.clear();
    serverWorld_ = worldSize;
  }
  auto at = std::lower_bound(regions_.begin(), regions_.end(), offset,
                             [](const Region& r, size_t o) { return r.offset < o; });
  if (at != regions_.end() && at->offset == offset && at->values.size() == length)
    return at->values.data();
  if (length == 0) {
    // An empty chunk keeps nothing and overlaps nothing. Alone it is still the rank's partition
    // (serverOffset() says where, as a checkpoint of a rank that owns nothing records it).
    if (regions_.empty() || (regions_.size() == 1 && regions_[0].values.empty()))
      regions_.assign(1, Region{offset, {}});
    return nullptr;
  }
  // Another partition of these elements: the residuals it overlaps belong to other chunks, so
  // they go and this chunk starts from zero. Disjoint ones (other segments') stay.
  auto overlaps = [&](const Region& r) {
    return r.values.empty() || (r.offset < offset + length && offset < r.offset + r.values.size());
  };
  regions_.erase(std::remove_if(regions_.begin(), regions_.end(), overlaps), regions_.end());
  at = std::lower_bound(regions_.begin(), regions_.end(), offset,
                        [](const Region& r, size_t o) { return r.offset < o; });
  at = regions_.insert(at, Region{offset, std::vector<float>(length, 0.0f)});
  return at->values.data();
}

size_t ErrorFeedback::serverLength() const {
  size_t total = 0;
  for (const Region& region : regions_) total += region.values.size();
  return total;
}

void ErrorFeedback::copyServerTo(float* full) const {
  pullToHost();
  for (const Region& region : regions_)
    std::copy(region.values.begin(), region.values.end(), full + region.offset);
}

Status ErrorFeedback::setServerFrom(int worldSize, size_t offset, size_t length,
                                    const float* full) {
  pullToHost();
  if (worldSize <= 0 || offset > worker_.size() || length > worker_.size() - offset)
    return errorInvalidArgument(
        "error feedback: server chunk [%zu, +%zu) of world %d does not fit a tensor of %zu "
        "elements",
        offset, length, worldSize, worker_.size());
  Region region{offset, std::vector<float>(length, 0.0f)};
  if (full) std::copy(full + offset, full + offset + length, region.values.begin());
  // Kept even when empty: a rank that owns nothing records where its partition is, as
  // serverChecked does for an empty chunk asked for alone.
  regions_.assign(1, std::move(region));
  serverWorld_ = worldSize;
  return Status::ok();
}

float* ErrorFeedback::server(int worldSize, size_t offset, size_t length) {
  auto s = serverChecked(worldSize, offset, length);
  if (!s.isOk()) {
    TERSE_WARN(kSubsysCodec, "%s", s.status().message().c_str());
    return nullptr;
  }
  return s.value();
}

void ErrorFeedback::reset() {
  if (device_) device_->current = false;  // the zeroed host copy is the state now
  std::fill(worker_.begin(), worker_.end(), 0.0f);
  for (Region& region : regions_) std::fill(region.values.begin(), region.values.end(), 0.0f);
}

// Version 1 has one server chunk: offset and length in the header. Version 2, written only
// when a rank keeps several chunks, has the number of chunks and their total length there, and
// a table of (offset, length) after the worker residual.
std::vector<uint8_t> ErrorFeedback::serialize() const {
  pullToHost();
  const bool several = regions_.size() > 1;
  const size_t specBytes = pad4(spec_.size());
  const size_t serverTotal = serverLength();
  const size_t tableBytes = several ? 16 * regions_.size() : 0;
  size_t total =
      kFixedBytes + specBytes + 4 * worker_.size() + tableBytes + 4 * serverTotal + kCheckBytes;
  std::vector<uint8_t> out(total, 0);
  put<uint32_t>(out, 0, kMagic);
  put<uint32_t>(out, 4, several ? kVersionRegions : kVersion);
  put<uint32_t>(out, 8, static_cast<uint32_t>(spec_.size()));
  put<int32_t>(out, 12, serverWorld_);
  put<uint64_t>(out, 16, worker_.size());
  put<uint64_t>(out, 24, several ? regions_.size() : serverOffset());
  put<uint64_t>(out, 32, serverTotal);
  std::memcpy(out.data() + kFixedBytes, spec_.data(), spec_.size());
  size_t off = kFixedBytes + specBytes;
  if (!worker_.empty()) std::memcpy(out.data() + off, worker_.data(), 4 * worker_.size());
  off += 4 * worker_.size();
  if (several)
    for (const Region& region : regions_) {
      put<uint64_t>(out, off, region.offset);
      put<uint64_t>(out, off + 8, region.values.size());
      off += 16;
    }
  for (const Region& region : regions_) {
    if (!region.values.empty())
      std::memcpy(out.data() + off, region.values.data(), 4 * region.values.size());
    off += 4 * region.values.size();
  }
  put<uint64_t>(out, off, checksum(out.data(), off));
  return out;
}

Result<ErrorFeedback> ErrorFeedback::deserialize(const void* bytes, size_t size) {
  const char* what = "error-feedback checkpoint";
  if (!bytes && size) return errorInvalidArgument("%s: null buffer", what);
  if (size < kFixedBytes + kCheckBytes)
    return errorCorrupt("%s of %zu bytes is shorter than its %zu-byte minimum (truncated?)", what,
                        size, kFixedBytes + kCheckBytes);
  const auto* p = static_cast<const uint8_t*>(bytes);
  if (get<uint32_t>(p, 0) != kMagic)
    return errorCorrupt(
        "%s: bad magic 0x%08x (expected \"TREF\"): not an error-feedback "
        "checkpoint",
        what, get<uint32_t>(p, 0));
  uint32_t version = get<uint32_t>(p, 4);
  if (version != kVersion && version != kVersionRegions)
    return errorCorrupt("%s has format version %u; this build reads versions %u and %u", what,
                        version, kVersion, kVersionRegions);
  const bool several = version == kVersionRegions;
  if (get<uint64_t>(p, size - kCheckBytes) != checksum(p, size - kCheckBytes))
    return errorCorrupt("%s checksum mismatch: the data is corrupt or truncated", what);
  uint32_t specLen = get<uint32_t>(p, 8);
  int32_t world = get<int32_t>(p, 12);
  uint64_t count = get<uint64_t>(p, 16);
  uint64_t field24 = get<uint64_t>(p, 24);  // version 1: the offset; 2: the number of chunks
  uint64_t serverLength = get<uint64_t>(p, 32);
  if (specLen == 0 || specLen > kMaxSpecBytes)
    return errorCorrupt("%s: codec spec length %u is outside 1..%zu", what, specLen, kMaxSpecBytes);
  size_t body = size - kFixedBytes - kCheckBytes;
  size_t specBytes = pad4(specLen);
  // Version 2's table: 16 bytes a chunk, at most one chunk per element.
  const uint64_t tableBytes = several && field24 <= count ? 16 * field24 : 0;
  if ((several && (field24 < 2 || field24 > count)) || specBytes > body ||
      count > (body - specBytes) / 4 || tableBytes > body - specBytes - 4 * count ||
      serverLength > (body - specBytes - 4 * count - tableBytes) / 4 ||
      specBytes + 4 * (count + serverLength) + tableBytes != body)
    return errorCorrupt(
        "%s: its lengths (spec %u, count %llu, server %llu%s) do not add up to its "
        "%zu bytes",
        what, specLen, static_cast<unsigned long long>(count),
        static_cast<unsigned long long>(serverLength),
        several ? (" in " + std::to_string(field24) + " chunks").c_str() : "", size);
  std::string spec(reinterpret_cast<const char*>(p + kFixedBytes), specLen);
  auto canonical = canonicalSpec(spec);
  if (!canonical.isOk())
    return errorCorrupt("%s names an invalid codec spec: %s", what,
                        canonical.status().message().c_str());
  if (canonical.value() != spec)
    return errorCorrupt("%s: codec spec '%s' is not in canonical form", what, spec.c_str());
  for (size_t i = specLen; i < specBytes; ++i)
    if (p[kFixedBytes + i] != 0) return errorCorrupt("%s: nonzero spec padding", what);

  ErrorFeedback ef;
  ef.spec_ = spec;
  ef.worker_.resize(count);
  size_t off = kFixedBytes + specBytes;
  if (count) std::memcpy(ef.worker_.data(), p + off, 4 * count);
  off += 4 * count;
  // The chunks: version 1's one (none when its length is 0), or version 2's table, which must
  // be in order, disjoint, non-empty, inside the tensor and add up to the server length.
  std::vector<std::pair<uint64_t, uint64_t>> chunks;
  if (!several) {
    if (serverLength > 0 || field24 > 0) chunks.emplace_back(field24, serverLength);
  } else {
    for (uint64_t i = 0; i < field24; ++i, off += 16)
      chunks.emplace_back(get<uint64_t>(p, off), get<uint64_t>(p, off + 8));
  }
  uint64_t end = 0, sum = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const uint64_t o = chunks[i].first, l = chunks[i].second;
    const bool valid =
        world > 0 && o <= count && l <= count - o && (!several || (l > 0 && (i == 0 || o >= end)));
    if (!valid)
      return errorCorrupt(
          "%s: server chunk [%llu, +%llu) of world %d is invalid for %llu elements%s", what,
          static_cast<unsigned long long>(o), static_cast<unsigned long long>(l), world,
          static_cast<unsigned long long>(count),
          several ? " (chunks must be non-empty, in order and disjoint)" : "");
    end = o + l;
    sum += l;
  }
  if (world < 0 || sum != serverLength)
    return errorCorrupt("%s: server chunks of world %d add up to %llu, not %llu elements", what,
                        world, static_cast<unsigned long long>(sum),
                        static_cast<unsigned long long>(serverLength));
  for (const auto& chunk : chunks) {
    Region region;
    region.offset = chunk.first;
    region.values.resize(chunk.second);
    if (chunk.second) std::memcpy(region.values.data(), p + off, 4 * chunk.second);
    off += 4 * chunk.second;
    ef.regions_.push_back(std::move(region));  // version 1's may be empty: its offset is kept
  }
  ef.serverWorld_ = world;
  return ef;
}

}  // namespace terse
