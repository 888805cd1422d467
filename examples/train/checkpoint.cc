// Checkpoint files of the training example (see checkpoint.h).
#include "checkpoint.h"

#include "terse/collectives/collective_op.h"
#include "terse/collectives/partition.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace terse::train {
namespace {

constexpr uint32_t kModelMagic = 0x4c444d54u;     // "TMDL"
constexpr uint32_t kFeedbackMagic = 0x42464554u;  // "TEFB"
constexpr uint32_t kVersion = 1;

uint64_t fnv(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

class Writer {
 public:
  template <typename T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void putBytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
  }
  std::vector<uint8_t> finish() {
    put<uint64_t>(fnv(bytes_.data(), bytes_.size()));
    return std::move(bytes_);
  }

 private:
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  Reader(const std::vector<uint8_t>& bytes, std::string what) : b_(bytes), what_(std::move(what)) {}
  Status verify(uint32_t magic) {
    if (b_.size() < 16) return errorCorrupt("%s is %zu bytes: truncated", what_.c_str(), b_.size());
    uint64_t sum;
    std::memcpy(&sum, b_.data() + b_.size() - 8, 8);
    if (sum != fnv(b_.data(), b_.size() - 8))
      return errorCorrupt("%s: checksum mismatch (corrupt or truncated file)", what_.c_str());
    end_ = b_.size() - 8;
    uint32_t m = 0, v = 0;
    TERSE_RETURN_IF_ERROR(get(&m));
    TERSE_RETURN_IF_ERROR(get(&v));
    if (m != magic) return errorCorrupt("%s: wrong magic 0x%08x", what_.c_str(), m);
    if (v != kVersion)
      return errorCorrupt("%s: format version %u, this build reads %u", what_.c_str(), v, kVersion);
    return Status::ok();
  }
  template <typename T>
  Status get(T* v) {
    return getBytes(v, sizeof(T));
  }
  Status getBytes(void* out, size_t n) {
    if (n > end_ - pos_)
      return errorCorrupt("%s: a field runs past the end of the file", what_.c_str());
    if (n) std::memcpy(out, b_.data() + pos_, n);
    pos_ += n;
    return Status::ok();
  }
  size_t left() const { return end_ - pos_; }

 private:
  const std::vector<uint8_t>& b_;
  std::string what_;
  size_t pos_ = 0, end_ = 0;
};

Status writeFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out)
      return errorSystem(
          "cannot write checkpoint file '%s' (%s): does the directory exist and is it "
          "writable?",
          tmp.c_str(), std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return errorSystem("cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(),
                       std::strerror(errno));
  return Status::ok();
}

Result<std::vector<uint8_t>> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return errorInvalidArgument(
        "cannot open checkpoint file '%s' (%s): is --resume the directory "
        "a run wrote with --checkpoint?",
        path.c_str(), std::strerror(errno));
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string feedbackPath(const std::string& dir, int rank) {
  return dir + "/feedback-" + std::to_string(rank) + ".bin";
}

}  // namespace

std::vector<uint8_t> encodeModel(const ModelState& s) {
  Writer w;
  w.put(kModelMagic);
  w.put(kVersion);
  w.put<uint64_t>(s.step);
  w.put<int32_t>(s.world);
  w.put<uint32_t>(static_cast<uint32_t>(s.codec.size()));
  w.putBytes(s.codec.data(), s.codec.size());
  w.put<uint64_t>(s.params.size());
  w.putBytes(s.params.data(), 4 * s.params.size());
  w.putBytes(s.momentum.data(), 4 * s.momentum.size());
  return w.finish();
}

Result<ModelState> decodeModel(const std::vector<uint8_t>& bytes, const std::string& what) {
  Reader r(bytes, what);
  TERSE_RETURN_IF_ERROR(r.verify(kModelMagic));
  ModelState s;
  uint32_t codecLen = 0;
  uint64_t count = 0;
  TERSE_RETURN_IF_ERROR(r.get(&s.step));
  TERSE_RETURN_IF_ERROR(r.get(&s.world));
  TERSE_RETURN_IF_ERROR(r.get(&codecLen));
  if (codecLen > r.left()) return errorCorrupt("%s: codec name runs past the end", what.c_str());
  s.codec.resize(codecLen);
  TERSE_RETURN_IF_ERROR(r.getBytes(s.codec.data(), codecLen));
  TERSE_RETURN_IF_ERROR(r.get(&count));
  if (s.world <= 0 || count > r.left() / 8 || 8 * count != r.left())
    return errorCorrupt("%s: world %d / %llu parameters do not match its size", what.c_str(),
                        s.world, static_cast<unsigned long long>(count));
  s.params.resize(count);
  s.momentum.resize(count);
  TERSE_RETURN_IF_ERROR(r.getBytes(s.params.data(), 4 * count));
  TERSE_RETURN_IF_ERROR(r.getBytes(s.momentum.data(), 4 * count));
  return s;
}

Status saveModel(const std::string& dir, const ModelState& s) {
  return writeFile(dir + "/model.bin", encodeModel(s));
}

Result<ModelState> loadModel(const std::string& dir) {
  std::string path = dir + "/model.bin";
  TERSE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFile(path));
  return decodeModel(bytes, path);
}

std::vector<uint8_t> encodeFeedback(int rank, const std::vector<ErrorFeedback>& feedback) {
  Writer w;
  w.put(kFeedbackMagic);
  w.put(kVersion);
  w.put<int32_t>(rank);
  w.put<uint32_t>(static_cast<uint32_t>(feedback.size()));
  for (const ErrorFeedback& ef : feedback) {
    std::vector<uint8_t> one = ef.serialize();
    w.put<uint64_t>(one.size());
    w.putBytes(one.data(), one.size());
  }
  return w.finish();
}

Result<std::vector<ErrorFeedback>> decodeFeedback(const std::vector<uint8_t>& bytes,
                                                  const std::string& what, int rank) {
  Reader r(bytes, what);
  TERSE_RETURN_IF_ERROR(r.verify(kFeedbackMagic));
  int32_t savedRank = -1;
  uint32_t n = 0;
  TERSE_RETURN_IF_ERROR(r.get(&savedRank));
  TERSE_RETURN_IF_ERROR(r.get(&n));
  if (savedRank != rank)
    return errorCorrupt("%s says it belongs to rank %d", what.c_str(), savedRank);
  std::vector<ErrorFeedback> out;
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t size = 0;
    TERSE_RETURN_IF_ERROR(r.get(&size));
    if (size > r.left()) return errorCorrupt("%s: entry %u runs past the end", what.c_str(), i);
    std::vector<uint8_t> one(size);
    TERSE_RETURN_IF_ERROR(r.getBytes(one.data(), size));
    auto ef = ErrorFeedback::deserialize(one.data(), one.size());
    if (!ef.isOk()) return ef.status().withContext(what + " entry " + std::to_string(i));
    out.push_back(std::move(ef).value());
  }
  if (r.left()) return errorCorrupt("%s: %zu trailing bytes", what.c_str(), r.left());
  return out;
}

Status saveFeedback(const std::string& dir, int rank, const std::vector<ErrorFeedback>& feedback) {
  return writeFile(feedbackPath(dir, rank), encodeFeedback(rank, feedback));
}

Result<std::vector<ErrorFeedback>> loadFeedbackFile(const std::string& dir, int rank) {
  std::string path = feedbackPath(dir, rank);
  TERSE_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFile(path));
  return decodeFeedback(bytes, path, rank);
}

Result<ErrorFeedback> repartitionFeedback(const std::vector<const ErrorFeedback*>& saved,
                                          int newWorld, int newRank) {
  if (saved.empty() || newWorld <= 0 || newRank < 0 || newRank >= newWorld)
    return errorInvalidArgument("repartitionFeedback: %zu saved states, rank %d of %d",
                                saved.size(), newRank, newWorld);
  const ErrorFeedback& first = *saved[0];
  const size_t count = first.count();
  const int oldWorld = static_cast<int>(saved.size());
  std::vector<float> server(count, 0.0f), worker(count, 0.0f);
  std::vector<char> covered(count, 0);
  for (int i = 0; i < oldWorld; ++i) {
    const ErrorFeedback& ef = *saved[static_cast<size_t>(i)];
    TERSE_RETURN_IF_ERROR(ef.checkCompatible(first.codecSpec(), count)
                              .withContext("state saved by rank " + std::to_string(i)));
    Range want = allreduceChunkRange(count, oldWorld, i);
    // A rank that never ran a collective has no server chunk yet (world 0): it owes nothing.
    if (ef.serverWorldSize() != 0 &&
        (ef.serverWorldSize() != oldWorld || ef.serverOffset() != want.begin ||
         ef.serverLength() != want.length))
      return errorInvalidArgument(
          "state saved by rank %d holds server chunk [%zu, +%zu) of a world of %d, but rank %d of "
          "%d owns [%zu, +%zu): the checkpoint's files do not belong together",
          i, ef.serverOffset(), ef.serverLength(), ef.serverWorldSize(), i, oldWorld, want.begin,
          want.length);
    const float* w = ef.worker();
    for (size_t k = 0; k < count; ++k) worker[k] += w[k];
    if (ef.serverWorldSize() == 0) continue;
    // server() on a const object is not available; serialize() form would be heavier, so read
    // through a copy that keeps the same partition (same arguments: no reset).
    ErrorFeedback copy = ef;
    const float* s = copy.server(oldWorld, want.begin, want.length);
    for (size_t k = 0; k < want.length; ++k) {
      server[want.begin + k] = s[k];
      covered[want.begin + k] = 1;
    }
  }
  const float inv = 1.0f / static_cast<float>(oldWorld);
  for (float& v : worker) v *= inv;

  TERSE_ASSIGN_OR_RETURN(ErrorFeedback out, ErrorFeedback::create(first.codecSpec(), count));
  std::copy(worker.begin(), worker.end(), out.worker());
  Range mine = allreduceChunkRange(count, newWorld, newRank);
  // Selecting the new partition starts a zero residual of the right size; fill it from the view.
  float* s = out.server(newWorld, mine.begin, mine.length);
  if (mine.length && !s)
    return errorInternal("server chunk [%zu, +%zu) rejected", mine.begin, mine.length);
  for (size_t k = 0; k < mine.length; ++k) s[k] = server[mine.begin + k];
  return out;
}

Result<std::vector<ErrorFeedback>> loadFeedback(const std::string& dir, int savedWorld, int world,
                                                int rank) {
  if (savedWorld == world) return loadFeedbackFile(dir, rank);
  std::vector<std::vector<ErrorFeedback>> all;
  for (int i = 0; i < savedWorld; ++i) {
    TERSE_ASSIGN_OR_RETURN(std::vector<ErrorFeedback> one, loadFeedbackFile(dir, i));
    if (!all.empty() && one.size() != all[0].size())
      return errorCorrupt("%s: rank %d saved %zu tensors, rank 0 saved %zu", dir.c_str(), i,
                          one.size(), all[0].size());
    all.push_back(std::move(one));
  }
  std::vector<ErrorFeedback> out;
  for (size_t t = 0; t < all[0].size(); ++t) {
    std::vector<const ErrorFeedback*> parts;
    for (auto& r : all) parts.push_back(&r[t]);
    auto ef = repartitionFeedback(parts, world, rank);
    if (!ef.isOk()) return ef.status().withContext("tensor " + std::to_string(t));
    out.push_back(std::move(ef).value());
  }
  return out;
}

}  // namespace terse::train
