// ShardedOneBitAdam's state, step and checkpoint (design: sharded_onebit_adam.h, docs/optim.md).
#include "terse/optim/sharded_onebit_adam.h"

#include "adam_common.h"
#include "checkpoint_io.h"
#include "kernels.h"
#include "terse/collectives/partition.h"
#include "terse/kernels/device.h"
#include "terse/optim/adam_math.h"

#include <terse/communicator.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace terse {

namespace {

constexpr uint32_t kMagic = 0x414f5354;  // "TSOA" little-endian
// Version 1 without local momentum; 2 adds its flag and the rank's local momentum. serialize()
// writes 1 whenever it can, so such checkpoints stay byte for byte what they were.
constexpr uint32_t kVersion = 2;
constexpr size_t kMaxSpecBytes = 256;

// 2^e and 2^-e for every exponent the state can hold (index e + 128), so the loops multiply.
struct Pow2Table {
  float up[256];
  float down[256];
  Pow2Table() {
    for (int i = 0; i < 256; ++i) {
      int e = i - 128;
      bool live = e >= -optim::kAdamMaxScaleExp && e <= optim::kAdamMaxScaleExp;
      up[i] = live ? optim::adamPow2(e) : 0.0f;  // the no-gradient sentinel sends and gets 0
      down[i] = live ? optim::adamPow2(-e) : 0.0f;
    }
  }
};
const Pow2Table& pow2() {
  static const Pow2Table t;
  return t;
}

// What every rank's state must hold alike: the element count, the position in training (step
// and freeze) and every option. The warm-up length and local momentum decide which collectives a
// step makes, the codecs and error feedback what they carry, the betas, eps and weight decay the
// arithmetic of each owner's shard; and a checkpoint whose parts differ in any of them is refused
// on reload, so a run with them mixed could not even be resumed. The learning rate is per call
// and is not agreed (docs/optim.md says why). One table serves both the ranks' agreement at the
// first step and the check that a checkpoint's parts are one run's.
enum class FieldKind { kInteger, kFloat, kFlag, kSpec };
struct AgreedField {
  const char* name;  // as the C API and Python spell the option
  FieldKind kind;
};
constexpr AgreedField kAgreed[] = {
    {"count", FieldKind::kInteger},       {"steps", FieldKind::kInteger},
    {"frozen_at", FieldKind::kInteger},   {"warmup_steps", FieldKind::kInteger},
    {"local_momentum", FieldKind::kFlag}, {"error_feedback", FieldKind::kFlag},
    {"codec", FieldKind::kSpec},          {"param_codec", FieldKind::kSpec},
    {"beta1", FieldKind::kFloat},         {"beta2", FieldKind::kFloat},
    {"eps", FieldKind::kFloat},           {"weight_decay", FieldKind::kFloat},
    {"buddy_copy", FieldKind::kFlag},
};

// A spec is a 2-byte length and kMaxSpecBytes bytes, so every state's record has one size.
size_t fieldBytes(FieldKind k) {
  switch (k) {
    case FieldKind::kInteger: return 8;
    case FieldKind::kFloat: return 4;
    case FieldKind::kFlag: return 1;
    case FieldKind::kSpec: return 2 + kMaxSpecBytes;
  }
  return 0;
}

size_t recordBytes() {
  size_t n = 0;
  for (const AgreedField& f : kAgreed) n += fieldBytes(f.kind);
  return n;
}

// The record of one state, kAgreed's fields in order (specs canonical: create() made them so).
std::vector<uint8_t> agreedRecord(uint64_t count, int64_t steps, int64_t frozenAt,
                                  const ShardedOneBitAdamOptions& o) {
  std::vector<uint8_t> out(recordBytes(), 0);
  size_t at = 0;
  auto raw = [&](const void* p, size_t n) {
    std::memcpy(out.data() + at, p, n);
    at += n;
  };
  auto integer = [&](int64_t v) { raw(&v, 8); };
  auto flag = [&](bool v) { out[at++] = v ? 1 : 0; };
  auto spec = [&](const std::string& text) {  // validated: 1..kMaxSpecBytes characters
    const uint16_t len = static_cast<uint16_t>(text.size());
    raw(&len, 2);
    std::memcpy(out.data() + at, text.data(), text.size());
    at += kMaxSpecBytes;
  };
  integer(static_cast<int64_t>(count));
  integer(steps);
  integer(frozenAt);
  integer(o.warmupSteps);
  flag(o.localMomentum);
  flag(o.errorFeedback);
  spec(o.codec);
  spec(o.paramCodec);
  for (float v : {o.beta1, o.beta2, o.eps, o.weightDecay}) raw(&v, 4);
  flag(o.buddyCopy);  // not in checkpoints: a part's is false
  return out;
}

std::string fieldText(FieldKind k, const uint8_t* p) {
  switch (k) {
    case FieldKind::kInteger: {
      int64_t v = 0;
      std::memcpy(&v, p, 8);
      return std::to_string(v);
    }
    case FieldKind::kFloat: {
      float v = 0.0f;
      std::memcpy(&v, p, 4);
      return formatString("%.9g", static_cast<double>(v));
    }
    case FieldKind::kFlag: return *p ? "true" : "false";
    case FieldKind::kSpec: {
      uint16_t len = 0;
      std::memcpy(&len, p, 2);
      return "'" +
             std::string(reinterpret_cast<const char*>(p + 2),
                         std::min<size_t>(len, kMaxSpecBytes)) +
             "'";
    }
  }
  return "";
}

// The first field (kAgreed's order) in which any record differs from the first one, as
// "NAME differs between RANKS: rank A has X, rank B has Y"; empty when all agree. records[i]
// belongs to rank ranks[i]. Every rank that sees the same records says the same.
std::string firstDisagreement(const std::vector<const uint8_t*>& records,
                              const std::vector<int>& ranks, const char* between) {
  size_t at = 0;
  for (const AgreedField& f : kAgreed) {
    const size_t n = fieldBytes(f.kind);
    for (size_t i = 1; i < records.size(); ++i)
      if (std::memcmp(records[0] + at, records[i] + at, n) != 0)
        return formatString("%s differs between %s: rank %d has %s, rank %d has %s", f.name,
                            between, ranks[0], fieldText(f.kind, records[0] + at).c_str(), ranks[i],
                            fieldText(f.kind, records[i] + at).c_str());
    at += n;
  }
  return "";
}

// One rank's checkpoint part, parsed.
struct Part {
  ShardedOneBitAdamOptions o;
  uint64_t count = 0, offset = 0, length = 0;
  int64_t steps = 0, frozenAt = 0;
  int32_t world = 0, rank = 0;
  std::vector<float> m, v, master, localM;
  std::vector<int8_t> exps;
  std::vector<uint8_t> feedback;
};

Result<Part> parsePart(const void* bytes, size_t size) {
  const char* what = "ShardedOneBitAdam checkpoint";
  TERSE_ASSIGN_OR_RETURN(
      optim::CheckpointReader r,
      optim::CheckpointReader::open(bytes, size, kMagic, kVersion, what, "TSOA", 1));
  Part a;
  uint32_t ef = 0, specLen = 0, local = 0;
  const bool v2 = r.version() >= 2;
  bool ok = optim::getAdamHeader(r, &a.count, &a.steps, &a.frozenAt, a.o) && r.get(&ef) &&
            (!v2 || r.get(&local)) && r.get(&specLen) && specLen > 0 && specLen <= kMaxSpecBytes &&
            ef <= 1 && local <= 1;
  if (ok) {
    a.o.errorFeedback = ef == 1;
    a.o.localMomentum = local == 1;
    a.o.codec.resize(specLen);
    uint32_t paramLen = 0;
    ok = r.bytes(a.o.codec.data(), specLen) && r.get(&paramLen) && paramLen > 0 &&
         paramLen <= kMaxSpecBytes;
    if (ok) {
      a.o.paramCodec.resize(paramLen);
      ok = r.bytes(a.o.paramCodec.data(), paramLen) && r.get(&a.world) && r.get(&a.rank) &&
           r.get(&a.offset) && r.get(&a.length);
    }
  }
  if (!ok) return errorCorrupt("%s: its header is truncated or invalid", what);
  Status valid = validateShardedOneBitAdamOptions(a.o);
  if (!valid.isOk()) return errorCorrupt("%s: %s", what, valid.message().c_str());
  if (a.world < 1 || a.rank < 0 || a.rank >= a.world || a.steps < 0 || a.frozenAt < 0 ||
      a.frozenAt > a.steps)
    return errorCorrupt("%s: rank %d of %d, step %lld, frozen at %lld are inconsistent", what,
                        a.rank, a.world, static_cast<long long>(a.steps),
                        static_cast<long long>(a.frozenAt));
  Range want = chunkRange(a.count, a.world, a.rank);
  if (a.offset != want.begin || a.length != want.length || a.length > r.left() / 8)
    return errorCorrupt("%s: shard [%llu, +%llu) is not rank %d's of %llu elements at %d ranks",
                        what, static_cast<unsigned long long>(a.offset),
                        static_cast<unsigned long long>(a.length), a.rank,
                        static_cast<unsigned long long>(a.count), a.world);
  a.m.resize(a.length);
  a.v.resize(a.length);
  uint64_t nExp = 0, nFb = 0, nMaster = 0;
  ok = r.bytes(a.m.data(), 4 * a.length) && r.bytes(a.v.data(), 4 * a.length) && r.get(&nMaster) &&
       (nMaster == 0 || nMaster == a.length) && nMaster <= r.left() / 4;
  if (ok) {
    a.master.resize(nMaster);
    // The exponents exist from the freeze on, over the whole tensor (none at 0 elements).
    ok = r.bytes(a.master.data(), 4 * nMaster) && r.get(&nExp) &&
         nExp == (a.frozenAt > 0 ? a.count : 0) && nExp <= r.left();
  }
  if (ok) {
    a.exps.resize(nExp);
    ok = r.bytes(a.exps.data(), nExp);
  }
  if (ok && v2) {
    // The local momentum exists from the freeze on, over the whole tensor.
    uint64_t nLocal = 0;
    ok = r.get(&nLocal) && nLocal == (a.o.localMomentum && a.frozenAt > 0 ? a.count : 0) &&
         nLocal <= r.left() / 4;
    if (ok) {
      a.localM.resize(nLocal);
      ok = r.bytes(a.localM.data(), 4 * nLocal);
    }
  }
  if (ok) ok = r.get(&nFb) && nFb == r.left();
  if (!ok) return errorCorrupt("%s: moments, scales or residual section truncated", what);
  for (int8_t e : a.exps)
    if (e != optim::kAdamNoGradientExp &&
        (e < -optim::kAdamMaxScaleExp || e > optim::kAdamMaxScaleExp))
      return errorCorrupt("%s: scale exponent %d out of range", what, e);
  a.feedback.resize(nFb);
  r.bytes(a.feedback.data(), nFb);
  return a;
}

// One rank's checkpoint part from its fields (parsePart's inverse): version 1 whenever there is
// no local momentum, so such checkpoints stay byte for byte what they were.
std::vector<uint8_t> writePart(const Part& a) {
  const ShardedOneBitAdamOptions& o = a.o;
  optim::CheckpointWriter w(kMagic, o.localMomentum ? kVersion : 1);
  optim::putAdamHeader(w, a.count, a.steps, a.frozenAt, o);
  w.put<uint32_t>(o.errorFeedback ? 1 : 0);
  if (o.localMomentum) w.put<uint32_t>(1);
  w.put<uint32_t>(static_cast<uint32_t>(o.codec.size()));
  w.bytes(o.codec.data(), o.codec.size());
  w.put<uint32_t>(static_cast<uint32_t>(o.paramCodec.size()));
  w.bytes(o.paramCodec.data(), o.paramCodec.size());
  w.put<int32_t>(a.world);
  w.put<int32_t>(a.rank);
  w.put<uint64_t>(a.offset);
  w.put<uint64_t>(a.m.size());
  w.bytes(a.m.data(), 4 * a.m.size());
  w.bytes(a.v.data(), 4 * a.v.size());
  w.put<uint64_t>(a.master.size());
  w.bytes(a.master.data(), 4 * a.master.size());
  w.put<uint64_t>(a.exps.size());
  w.bytes(a.exps.data(), a.exps.size());
  if (o.localMomentum) {
    w.put<uint64_t>(a.localM.size());
    w.bytes(a.localM.data(), 4 * a.localM.size());
  }
  w.put<uint64_t>(a.feedback.size());
  w.bytes(a.feedback.data(), a.feedback.size());
  return w.finish();
}

}  // namespace

Status validateShardedOneBitAdamOptions(const ShardedOneBitAdamOptions& o) {
  TERSE_RETURN_IF_ERROR(optim::validateAdamHyperparameters("ShardedOneBitAdam", o));
  if (o.warmupSteps < 1)
    return errorInvalidArgument(
        "ShardedOneBitAdam: warmup steps %lld must be >= 1 (the automatic warm-up is "
        "OneBitAdam's only)",
        static_cast<long long>(o.warmupSteps));
  if (o.codec.empty() || o.codec.size() > kMaxSpecBytes || o.paramCodec.empty() ||
      o.paramCodec.size() > kMaxSpecBytes)
    return errorInvalidArgument(
        "ShardedOneBitAdam: codec and parameter codec specs must have 1..%zu characters",
        kMaxSpecBytes);
  return Status::ok();
}

// The state's device copy (CUDA builds, device buffers): `current` says it is the state.
struct ShardedOneBitAdam::Device {
  device::DeviceBuffer m, v, exps, x, shard, master, localM;
  bool current = false;
  bool masterCurrent = false;  // the device master shard is the master (lossy all-gather)
};

// The buddy copy. Groups: ranks (2k, 2k + 1), the last three together when the world is odd;
// in a group each member keeps the copy of the member after it (a pair: of each other).
struct ShardedOneBitAdam::Buddy {
  // The group's communicator: Communicator::splitOnce of the world, so every core of this rank
  // that refreshes over that world shares one (one split per world, whatever the number of
  // cores: an FSDP model wrapped per layer has a core per layer, a world 62 splits). Their
  // refreshes on it need no more order than the cores' steps already keep: every rank steps
  // its cores in the same order, so the partners' allgathers on it pair up core by core.
  std::shared_ptr<Communicator> pair;
  std::vector<int> group;  // ranks of this world, ascending
  int holds = -1;          // whose copy this is
  int64_t step = -1;       // the step it is of; -1: none yet
  bool hasV = false;       // v travels only while it changes, and once at the start
  std::vector<float> m, v, master, localM, worker;
  std::vector<float> params;      // its parameter shard, from update() (FSDP: nobody else has it)
  std::vector<float> send, recv;  // scratch
};

namespace {

std::string rankList(const std::vector<int>& ranks);

std::vector<int> buddyGroup(int world, int rank) {
  const int groups = world / 2;
  const int g = std::min(rank / 2, groups - 1);
  std::vector<int> members{2 * g, 2 * g + 1};
  if (g == groups - 1 && world % 2 == 1) members.push_back(2 * g + 2);
  return members;
}

// The rank that keeps `rank`'s copy (the member before it in its group).
int buddyHolder(int world, int rank) {
  const std::vector<int> g = buddyGroup(world, rank);
  const size_t i = std::find(g.begin(), g.end(), rank) - g.begin();
  return g[(i + g.size() - 1) % g.size()];
}

// Every rank's bytes to every rank through the exact float all-gather, two bytes a float
// (integers below 2^16 are exact in float32, so any bytes arrive unchanged). `known`: every
// rank's length when the caller knows it is the same everywhere; 0 exchanges the lengths first,
// each of which must be below `limit` (the caller's bound on a sane record).
Status allgatherBytes(Communicator& comm, const std::vector<uint8_t>& mine, size_t known,
                      std::vector<std::vector<uint8_t>>* all,
                      size_t limit = std::numeric_limits<size_t>::max()) {
  const int n = comm.size();
  std::vector<size_t> lengths(n, known);
  if (known == 0) {
    // Three 16-bit words a length.
    float send[3];
    for (int k = 0; k < 3; ++k) send[k] = static_cast<float>((mine.size() >> (16 * k)) & 0xffff);
    std::vector<float> got(3 * static_cast<size_t>(n));
    TERSE_RETURN_IF_ERROR(comm.allgather(send, got.data(), got.size(), DataType::kFloat32));
    // A peer's words are checked before any cast (a NaN or huge float to an integer is undefined)
    // or allocation; every rank sees the same words, so every rank refuses alike.
    std::vector<int> bad;
    for (int r = 0; r < n; ++r) {
      lengths[r] = 0;
      bool ok = true;
      for (int k = 0; k < 3; ++k) {
        const float w = got[3 * r + k];
        if (!(w >= 0.0f && w <= 65535.0f) || w != std::floor(w)) {
          ok = false;
          break;
        }
        lengths[r] |= static_cast<size_t>(w) << (16 * k);
      }
      if (!ok || lengths[r] >= limit) bad.push_back(r);
    }
    if (!bad.empty())
      return errorInvalidArgument(
          "ShardedOneBitAdam: rank(s) %s sent a record length that is not a whole number of bytes "
          "below %zu",
          rankList(bad).c_str(), limit);
  }
  const size_t most = *std::max_element(lengths.begin(), lengths.end());
  const size_t words = (most + 1) / 2;
  std::vector<float> send(words, 0.0f), got(words * static_cast<size_t>(n));
  for (size_t i = 0; i < mine.size(); ++i)
    send[i / 2] += static_cast<float>(mine[i] << (i % 2 ? 8 : 0));
  TERSE_RETURN_IF_ERROR(comm.allgather(send.data(), got.data(), got.size(), DataType::kFloat32));
  all->assign(n, {});
  std::vector<int> bad;
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t>& out = (*all)[r];
    out.resize(lengths[r]);
    for (size_t i = 0; i < lengths[r]; ++i) {
      const float f = got[r * words + i / 2];
      if (!(f >= 0.0f && f <= 65535.0f)) {  // checked before the cast, as the lengths are
        bad.push_back(r);
        break;
      }
      const auto w = static_cast<uint32_t>(f);
      out[i] = static_cast<uint8_t>(i % 2 ? w >> 8 : w & 0xff);
    }
  }
  if (!bad.empty())
    return errorInvalidArgument("ShardedOneBitAdam: rank(s) %s sent words that are not two bytes",
                                rankList(bad).c_str());
  return Status::ok();
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

ShardedOneBitAdam::ShardedOneBitAdam() = default;
ShardedOneBitAdam::ShardedOneBitAdam(ShardedOneBitAdam&&) noexcept = default;
ShardedOneBitAdam& ShardedOneBitAdam::operator=(ShardedOneBitAdam&&) noexcept = default;
ShardedOneBitAdam::~ShardedOneBitAdam() = default;

Result<ShardedOneBitAdam> ShardedOneBitAdam::create(size_t count, int worldSize, int rank,
                                                    const ShardedOneBitAdamOptions& options) {
  TERSE_RETURN_IF_ERROR(validateShardedOneBitAdamOptions(options));
  if (worldSize < 1 || rank < 0 || rank >= worldSize)
    return errorInvalidArgument("ShardedOneBitAdam: rank %d of world size %d is impossible", rank,
                                worldSize);
  // Made even without error feedback: it validates the spec and gives the canonical name.
  auto fb = ErrorFeedback::create(options.codec, options.errorFeedback ? count : 0);
  if (!fb.isOk()) return fb.status().withContext("ShardedOneBitAdam: codec");
  auto pc = ErrorFeedback::create(options.paramCodec, 0);
  if (!pc.isOk()) return pc.status().withContext("ShardedOneBitAdam: parameter codec");
  ShardedOneBitAdam a;
  a.count_ = count;
  a.world_ = worldSize;
  a.rank_ = rank;
  a.options_ = options;
  a.options_.codec = fb->codecSpec();
  a.options_.paramCodec = pc->codecSpec();
  Range r = chunkRange(count, worldSize, rank);
  a.offset_ = r.begin;
  a.m_.assign(r.length, 0.0f);
  a.v_.assign(r.length, 0.0f);
  a.hasFeedback_ = options.errorFeedback;
  a.feedback_ = std::move(fb).value();
  return a;
}

void ShardedOneBitAdam::pullToHost() const {
  if (!device_ || !device_->current) return;
  // Current only after a device step, which synchronized its stream before returning.
  (void)device::copyAsync(m_.data(), device_->m.data(), 4 * m_.size(), nullptr);
  (void)device::copyAsync(v_.data(), device_->v.data(), 4 * v_.size(), nullptr);
  if (device_->masterCurrent)
    (void)device::copyAsync(master_.data(), device_->master.data(), 4 * master_.size(), nullptr);
  if (!localM_.empty())
    (void)device::copyAsync(localM_.data(), device_->localM.data(), 4 * localM_.size(), nullptr);
  (void)device::synchronize(nullptr);
  device_->current = false;
  device_->masterCurrent = false;
}

const std::vector<float>& ShardedOneBitAdam::momentum() const {
  pullToHost();
  return m_;
}
const std::vector<float>& ShardedOneBitAdam::variance() const {
  pullToHost();
  return v_;
}

Status ShardedOneBitAdam::gatherExponents(Communicator& comm, const float* v, float lr, int64_t t) {
  const size_t len = m_.size();
  const optim::AdamStepScalars sc = optim::adamScalars(options_, lr, t, t);
  std::vector<float> mine(len);
  for (size_t i = 0; i < len; ++i) mine[i] = static_cast<float>(optim::adamScaleExponent(v[i], sc));
  scratch_.resize(count_);
  Status g = comm.allgather(mine.data(), scratch_.data(), count_, DataType::kFloat32);
  if (!g.isOk()) return g.withContext("ShardedOneBitAdam: gathering the frozen scales");
  return Status::ok();
}

Status ShardedOneBitAdam::gatherLocalMomentum(Communicator& comm, const float* mShard) {
  // Every rank's local momentum starts as the owners' m (so their average is m), in the units
  // the exponents just gathered into scratch_ give.
  localScratch_.resize(count_);
  Status g = comm.allgather(mShard, localScratch_.data(), count_, DataType::kFloat32);
  if (!g.isOk()) return g.withContext("ShardedOneBitAdam: gathering the momentum at the freeze");
  const Pow2Table& tab = pow2();
  for (size_t i = 0; i < count_; ++i)
    localScratch_[i] *= tab.down[static_cast<int>(scratch_[i]) + 128];  // adamScaleDown
  return Status::ok();
}

void ShardedOneBitAdam::valuesToSend(const float* grads, float* x) const {
  const Pow2Table& tab = pow2();
  const int8_t* e = scaleExp_.data();
  if (!options_.localMomentum) {
    for (size_t i = 0; i < count_; ++i) x[i] = grads[i] * tab.down[e[i] + 128];  // adamScaleDown
    return;
  }
  const float b1 = options_.beta1;
  for (size_t i = 0; i < count_; ++i)  // adamLocalMomentum
    x[i] = optim::adamMomentum(localM_[i], grads[i] * tab.down[e[i] + 128], b1);
}

void ShardedOneBitAdam::warmupShard(const float* gAvg, const float* p, float* mNew, float* vNew,
                                    float* pNew, float lr, int64_t t) const {
  const optim::AdamStepScalars sc = optim::adamScalars(options_, lr, t, t);
  for (size_t i = 0, len = m_.size(); i < len; ++i) {
    const float g = gAvg[i];
    const float m = optim::adamMomentum(m_[i], g, sc.beta1);
    const float v = optim::adamVariance(v_[i], g, sc.beta2);
    pNew[i] = optim::adamParam(p[i], m, v, sc);
    mNew[i] = m;
    vNew[i] = v;
  }
}

void ShardedOneBitAdam::compressedShard(const float* avg, const float* p, float* mNew, float* pNew,
                                        float lr, int64_t t) const {
  const optim::AdamStepScalars sc = optim::adamScalars(options_, lr, t, frozenAt_);
  const Pow2Table& tab = pow2();
  const int8_t* e = scaleExp_.data() + offset_;
  const bool fromAverage = options_.localMomentum;
  for (size_t i = 0, len = m_.size(); i < len; ++i) {
    const float v = v_[i];
    const float a = avg[i] * tab.up[e[i] + 128];  // adamScaleUp
    // adamMomentumFromAverage with local momentum, else the owner's momentum of the average.
    const float m = optim::adamNoGradientYet(v)
                        ? 0.0f
                        : (fromAverage ? a : optim::adamMomentum(m_[i], a, sc.beta1));
    pNew[i] = optim::adamParam(p[i], m, v, sc);
    mNew[i] = m;
  }
}

size_t ShardedOneBitAdam::stateBytes() const {
  return 4 * (m_.size() + v_.size() + master_.size() + localM_.size()) + scaleExp_.size() +
         (hasFeedback_ ? 4 * (feedback_.count() + feedback_.serverLength()) : 0) + buddyBytes();
}

size_t ShardedOneBitAdam::scratchBytes() const {
  return 4 * (scratch_.capacity() + shardScratch_.capacity() +
              (buddy_ ? buddy_->send.capacity() + buddy_->recv.capacity() : 0));
}

size_t ShardedOneBitAdam::buddyBytes() const {
  if (!buddy_) return 0;
  const Buddy& b = *buddy_;
  return 4 * (b.m.size() + b.v.size() + b.master.size() + b.localM.size() + b.worker.size() +
              b.params.size());
}

void ShardedOneBitAdam::setBuddyCopy(bool on) {
  if (on == options_.buddyCopy) return;
  options_.buddyCopy = on;
  buddy_.reset();
  agreed_ = false;  // the next step checks that every rank did the same
}

Status ShardedOneBitAdam::refreshBuddy(Communicator& comm, bool vChanged, const float* paramShard,
                                       bool withParams) {
  if (!options_.buddyCopy || world_ == 1) return Status::ok();
  const char* what = "ShardedOneBitAdam: refreshing the buddy copy (the step itself completed)";
  if (!buddy_) buddy_ = std::make_unique<Buddy>();
  Buddy& b = *buddy_;
  if (!b.pair) {
    // A split of comm at the first refresh of any core over it (the same core and step on every
    // rank: buddyCopy is agreed, the cores step in order), the kept one at every later core's.
    b.group = buddyGroup(world_, rank_);
    auto pair = comm.splitOnce(b.group.front(), rank_);
    if (!pair.isOk()) return pair.status().withContext(what);
    b.pair = std::move(pair).value();
    const size_t i = std::find(b.group.begin(), b.group.end(), rank_) - b.group.begin();
    b.holds = b.group[(i + 1) % b.group.size()];
    b.step = -1;
    b.hasV = false;
  }
  pullToHost();
  // The record every member sends, one size for all: each section padded to the group's
  // longest shard. v only while it changes (and the first time); the rest whenever it exists.
  size_t most = 0;
  for (int r : b.group) most = std::max(most, chunkRange(count_, world_, r).length);
  const bool withV = vChanged || !b.hasV;
  // The master shard exists from the first compressed step on (an empty shard's is empty).
  const bool withMaster = options_.paramCodec != "none" && frozen() && steps_ > frozenAt_;
  const bool withLocal = options_.localMomentum && frozen();
  const bool withWorker = hasFeedback_ && frozen();
  const size_t shardWords =
      most * (1 + (withV ? 1 : 0) + (withMaster ? 1 : 0) + (withParams ? 1 : 0));
  const size_t record = shardWords + count_ * ((withLocal ? 1 : 0) + (withWorker ? 1 : 0));
  const size_t len = m_.size();
  b.send.assign(record, 0.0f);
  float* at = b.send.data();
  auto put = [&](const float* src, size_t n, size_t room) {
    if (n > 0) std::copy(src, src + n, at);
    at += room;
  };
  put(m_.data(), len, most);
  if (withV) put(v_.data(), len, most);
  if (withMaster) put(master_.data(), master_.size(), most);
  if (withLocal) put(localM_.data(), count_, count_);
  if (withWorker) put(feedback_.worker(), count_, count_);
  if (withParams) put(paramShard, len, most);
  b.recv.resize(record * b.group.size());
  Status g = b.pair->allgather(b.send.data(), b.recv.data(), b.recv.size(), DataType::kFloat32);
  if (!g.isOk()) return g.withContext(what);
  const size_t from = std::find(b.group.begin(), b.group.end(), b.holds) - b.group.begin();
  const size_t theirs = chunkRange(count_, world_, b.holds).length;
  const float* in = b.recv.data() + from * record;
  auto take = [&](std::vector<float>& dst, size_t n, size_t room) {
    dst.assign(in, in + n);
    in += room;
  };
  take(b.m, theirs, most);
  if (withV) take(b.v, theirs, most);
  if (withMaster)
    take(b.master, theirs, most);
  else
    b.master.clear();
  if (withLocal)
    take(b.localM, count_, count_);
  else
    b.localM.clear();
  if (withWorker)
    take(b.worker, count_, count_);
  else
    b.worker.clear();
  if (withParams)
    take(b.params, theirs, most);
  else
    b.params.clear();
  b.hasV = true;
  b.step = steps_;
  return Status::ok();
}

Status ShardedOneBitAdam::checkStepArguments(Communicator& comm, Buffer a, Buffer b, float lr,
                                             const char* what, bool talks) {
  Status bad;
  const Buffer* null = a.elements > 0 && !a.data ? &a : (b.elements > 0 && !b.data ? &b : nullptr);
  if (null)
    bad = errorInvalidArgument("ShardedOneBitAdam::%s: %s is null for %zu elements", what,
                               null->name, null->elements);
  else if (!std::isfinite(lr) || lr < 0.0f)
    bad = errorInvalidArgument(
        "ShardedOneBitAdam::%s: learning rate %g must be a finite number >= 0", what, lr);
  else if (comm.size() != world_ || comm.rank() != rank_)
    bad = errorInvalidArgument(
        "ShardedOneBitAdam::%s: state is for rank %d of %d, the communicator is rank %d of %d "
        "(load the checkpoint at the new world size)",
        what, rank_, world_, comm.rank(), comm.size());
  else if (a.data && b.data && device::isDeviceMemory(a.data) != device::isDeviceMemory(b.data))
    bad = errorInvalidArgument(
        "ShardedOneBitAdam::%s: both buffers must be device memory or both host memory", what);
  // The refusal stands in for this rank's part of the collective the call would have run, so
  // the other ranks fail that call at once instead of waiting for it.
  if (!bad.isOk() && talks) (void)comm.reject(bad).wait();
  return bad;
}

Status ShardedOneBitAdam::agree(Communicator& comm) {
  if (agreed_ || world_ == 1) {
    agreed_ = true;
    return Status::ok();
  }
  // Every rank's record has one size.
  const std::vector<uint8_t> mine = agreedRecord(count_, steps_, frozenAt_, options_);
  std::vector<std::vector<uint8_t>> records;
  Status g = allgatherBytes(comm, mine, mine.size(), &records);
  if (!g.isOk())
    return g.withContext("ShardedOneBitAdam: comparing the count and options with the other ranks");
  std::vector<const uint8_t*> recordOf;
  std::vector<int> rankOf;
  for (int r = 0; r < world_; ++r) {
    recordOf.push_back(records[r].data());
    rankOf.push_back(r);
  }
  const std::string differs = firstDisagreement(recordOf, rankOf, "ranks");
  if (!differs.empty())
    return errorInvalidArgument(
        "ShardedOneBitAdam: %s (every rank must create the optimizer with the same count and "
        "options, or load the same checkpoint)",
        differs.c_str());
  agreed_ = true;
  return Status::ok();
}

Status ShardedOneBitAdam::step(Communicator& comm, float* params, const float* grads, float lr,
                               void* stream) {
  TERSE_RETURN_IF_ERROR(checkStepArguments(comm, {params, "params", count_},
                                           {grads, "grads", count_}, lr, "step", true));
  if (reduced_) {
    Status bad = errorInvalidUsage(
        "ShardedOneBitAdam::step: reduce() ran without its update(); finish that step first");
    // As for bad arguments: the refusal takes the place of the step's reduce-scatter, so the
    // peers (which finished their split step) fail their next collective at once instead of
    // waiting out the timeout for it.
    (void)comm.reject(bad).wait();
    return bad;
  }
  TERSE_RETURN_IF_ERROR(agree(comm));
  const bool warm = !frozen();  // v changes in this step
  Status s = device::isDeviceMemory(params) ? stepDevice(comm, params, grads, lr, stream)
                                            : stepHost(comm, params, grads, lr);
  if (!s.isOk()) return s;
  return refreshBuddy(comm, warm, nullptr, false);
}

Status ShardedOneBitAdam::stepHost(Communicator& comm, float* params, const float* grads,
                                   float lr) {
  pullToHost();
  const ShardedOneBitAdamOptions& o = options_;
  const int64_t t = steps_ + 1;
  const size_t n = count_, len = m_.size(), off = offset_;
  // shardScratch_: [0, len) the averaged gradient / new m, [len, 2 len) the new shard of p,
  // [2 len, 3 len) the new v (warm-up).
  shardScratch_.resize(3 * len);
  float* gAvg = shardScratch_.data();
  float* pNew = gAvg + len;
  float* vNew = pNew + len;
  if (!frozen()) {
    Status s = comm.reduceScatter(grads, gAvg, n, DataType::kFloat32, ReduceOp::kAvg);
    if (!s.isOk()) return s.withContext("ShardedOneBitAdam: reduce-scattering the gradients");
    warmupShard(gAvg, params + off, gAvg, vNew, pNew, lr, t);
    const bool freeze = t >= o.warmupSteps;
    // The exponents of the denominator the compressed phase uses (v frozen at step t), as
    // floats through the exact all-gather: once per training run.
    if (freeze) TERSE_RETURN_IF_ERROR(gatherExponents(comm, vNew, lr, t));
    if (freeze && o.localMomentum) TERSE_RETURN_IF_ERROR(gatherLocalMomentum(comm, gAvg));
    // The parameters: the shard goes to everyone, including this rank's own copy.
    Status g = comm.allgather(pNew, params, n, DataType::kFloat32);
    if (!g.isOk()) return g.withContext("ShardedOneBitAdam: gathering the parameters");
    std::copy(gAvg, gAvg + len, m_.begin());
    std::copy(vNew, vNew + len, v_.begin());
    if (freeze) commitFreeze(t);
    steps_ = t;
    return Status::ok();
  }
  // Compressed phase: x = g / 2^e (or the new local momentum) through the compressed
  // reduce-scatter, the owner's update, the parameters' all-gather. m, the local momentum and
  // the master change only after both collectives succeeded (the codec's residual does advance
  // with a successful reduce-scatter).
  scratch_.resize(n);
  float* x = scratch_.data();
  valuesToSend(grads, x);
  CollectiveOptions co;
  co.codec = o.codec;
  co.feedback = hasFeedback_ ? &feedback_ : nullptr;
  Status s = comm.reduceScatter(x, gAvg, n, DataType::kFloat32, ReduceOp::kAvg, co);
  if (!s.isOk()) return s.withContext("ShardedOneBitAdam: reduce-scattering the gradients");
  // The exact shard the step starts from: the master copy when the all-gather is lossy (the
  // replica in params holds decoded values), else params itself.
  const bool lossyGather = o.paramCodec != "none";
  if (lossyGather && master_.empty()) master_.assign(params + off, params + off + len);
  const float* pOld = lossyGather ? master_.data() : params + off;
  compressedShard(gAvg, pOld, gAvg, pNew, lr, t);
  CollectiveOptions ag;
  ag.codec = o.paramCodec;
  Status g = comm.allgather(pNew, params, n, DataType::kFloat32, ag);
  if (!g.isOk()) return g.withContext("ShardedOneBitAdam: gathering the parameters");
  std::copy(gAvg, gAvg + len, m_.begin());
  if (lossyGather) std::copy(pNew, pNew + len, master_.begin());
  if (o.localMomentum) localM_.swap(scratch_);
  steps_ = t;
  return Status::ok();
}

void ShardedOneBitAdam::commitFreeze(int64_t t) {
  scaleExp_.resize(count_);
  for (size_t i = 0; i < count_; ++i) scaleExp_[i] = static_cast<int8_t>(scratch_[i]);
  if (options_.localMomentum) localM_.swap(localScratch_);
  frozenAt_ = t;
}

Status ShardedOneBitAdam::reduce(Communicator& comm, const float* grads, float* reduced) {
  // The full gradient moves in, this rank's shard out.
  TERSE_RETURN_IF_ERROR(checkStepArguments(comm, {grads, "grads", count_},
                                           {reduced, "reduced", m_.size()}, 0.0f, "reduce", true));
  Status bad;
  if (device::isDeviceMemory(grads) || (device_ && device_->current))
    bad = errorUnsupported(
        "ShardedOneBitAdam::reduce: host memory only (step() takes device "
        "buffers)");
  else if (options_.paramCodec != "none")
    bad = errorInvalidArgument(
        "ShardedOneBitAdam::reduce: parameter codec '%s' needs step(), which runs the parameter "
        "all-gather; with reduce() and update() the caller's all-gather compresses",
        options_.paramCodec.c_str());
  else if (reduced_)
    bad = errorInvalidUsage(
        "ShardedOneBitAdam::reduce: called twice without update() between (a second backward "
        "pass before the optimizer step? accumulate gradients without reducing them)");
  if (!bad.isOk()) {
    (void)comm.reject(bad).wait();
    return bad;
  }
  TERSE_RETURN_IF_ERROR(agree(comm));
  const size_t n = count_;
  if (!frozen()) {
    Status s = comm.reduceScatter(grads, reduced, n, DataType::kFloat32, ReduceOp::kAvg);
    if (!s.isOk()) return s.withContext("ShardedOneBitAdam: reduce-scattering the gradients");
  } else {
    scratch_.resize(n);
    valuesToSend(grads, scratch_.data());
    CollectiveOptions co;
    co.codec = options_.codec;
    co.feedback = hasFeedback_ ? &feedback_ : nullptr;
    Status s =
        comm.reduceScatter(scratch_.data(), reduced, n, DataType::kFloat32, ReduceOp::kAvg, co);
    if (!s.isOk()) return s.withContext("ShardedOneBitAdam: reduce-scattering the gradients");
    if (options_.localMomentum) localM_.swap(scratch_);
  }
  reduced_ = true;
  return Status::ok();
}

Status ShardedOneBitAdam::update(Communicator& comm, float* paramShard, const float* reduced,
                                 float lr) {
  const int64_t t = steps_ + 1;
  const bool warm = !frozen();
  // The update that talks: the freeze's, or every one with a buddy copy (its refresh).
  const bool freeze = warm && t >= options_.warmupSteps;
  // A refusal stands in for the one collective the peers are in, and only there: a reject on a
  // communicator waits for every peer's descriptor on it, so refusing where the peers are not
  // (the main communicator while the partners refresh, the pair at the freeze, whose failed
  // exponent gather sends the peers home before their refresh) waits out the timeout.
  const bool refreshOnly = !freeze && options_.buddyCopy && world_ > 1;
  auto refuse = [&](const Status& bad) {
    // The partners' refresh waits on the pair communicator. A core without one yet takes it as
    // the refresh would (splitOnce: the kept one if another core made it, else the split the
    // peers are in), then refuses there. A communicator that is not this state's world (the
    // refused argument) gets the refusal itself: no split on it.
    if (refreshOnly) {
      std::shared_ptr<Communicator> pair = buddy_ ? buddy_->pair : nullptr;
      if (!pair && comm.size() == world_ && comm.rank() == rank_) {
        auto made = comm.splitOnce(buddyGroup(world_, rank_).front(), rank_);
        if (!made.isOk()) return bad;  // the peers' split failed alike
        pair = std::move(made).value();
      }
      (void)(pair ? pair->reject(bad) : comm.reject(bad)).wait();
    }
    return bad;
  };
  // Both hold this rank's shard.
  Status args = checkStepArguments(comm, {paramShard, "paramShard", m_.size()},
                                   {reduced, "reduced", m_.size()}, lr, "update", freeze);
  if (!args.isOk()) return refuse(args);
  if (!reduced_) {
    Status bad = errorInvalidUsage(
        "ShardedOneBitAdam::update: no reduce() before it (every step reduces the gradients "
        "first)");
    if (freeze) (void)comm.reject(bad).wait();
    return refuse(bad);
  }
  const size_t len = m_.size();
  shardScratch_.resize(3 * len);
  float* mNew = shardScratch_.data();
  float* pNew = mNew + len;
  float* vNew = pNew + len;
  if (!frozen()) {
    warmupShard(reduced, paramShard, mNew, vNew, pNew, lr, t);
    if (freeze) TERSE_RETURN_IF_ERROR(gatherExponents(comm, vNew, lr, t));
    if (freeze && options_.localMomentum) TERSE_RETURN_IF_ERROR(gatherLocalMomentum(comm, mNew));
    std::copy(vNew, vNew + len, v_.begin());
    if (freeze) commitFreeze(t);
  } else {
    compressedShard(reduced, paramShard, mNew, pNew, lr, t);
  }
  std::copy(mNew, mNew + len, m_.begin());
  std::copy(pNew, pNew + len, paramShard);
  steps_ = t;
  reduced_ = false;
  return refreshBuddy(comm, warm, paramShard, true);
}

// The device path: the same steps with the state in device memory. The moments change in place
// on the device before the parameter all-gather (a failed all-gather leaves them advanced).
Status ShardedOneBitAdam::stepDevice(Communicator& comm, float* params, const float* grads,
                                     float lr, void* stream) {
  const ShardedOneBitAdamOptions& o = options_;
  const int64_t t = steps_ + 1;
  const size_t n = count_, len = m_.size(), off = offset_;
  if (!device_) device_ = std::make_unique<Device>();
  Device& d = *device_;
  if (!d.current) {
    TERSE_RETURN_IF_ERROR(d.m.reserve(4 * len).status());
    TERSE_RETURN_IF_ERROR(d.v.reserve(4 * len).status());
    TERSE_RETURN_IF_ERROR(device::copyAsync(d.m.data(), m_.data(), 4 * len, stream));
    TERSE_RETURN_IF_ERROR(device::copyAsync(d.v.data(), v_.data(), 4 * len, stream));
    if (!scaleExp_.empty()) {
      TERSE_RETURN_IF_ERROR(d.exps.reserve(n).status());
      TERSE_RETURN_IF_ERROR(device::copyAsync(d.exps.data(), scaleExp_.data(), n, stream));
    }
    if (!localM_.empty()) {
      TERSE_RETURN_IF_ERROR(d.localM.reserve(4 * n).status());
      TERSE_RETURN_IF_ERROR(device::copyAsync(d.localM.data(), localM_.data(), 4 * n, stream));
    }
    d.current = true;
  }
  TERSE_RETURN_IF_ERROR(d.shard.reserve(4 * 2 * len).status());
  auto* dm = static_cast<float*>(d.m.data());
  auto* dv = static_cast<float*>(d.v.data());
  auto* gAvg = static_cast<float*>(d.shard.data());
  float* pNew = gAvg + len;
  CollectiveOptions co;
  co.stream = stream;
  if (!frozen()) {
    Status s = comm.reduceScatter(grads, gAvg, n, DataType::kFloat32, ReduceOp::kAvg, co);
    if (!s.isOk()) return s.withContext("ShardedOneBitAdam: reduce-scattering the gradients");
    const optim::AdamStepScalars sc = optim::adamScalars(o, lr, t, t);
    TERSE_RETURN_IF_ERROR(device::copyAsync(pNew, params + off, 4 * len, stream));
    TERSE_RETURN_IF_ERROR(optim::cuda::adamWarmup(pNew, gAvg, dm, dv, len, sc, stream));
    const bool freeze = t >= o.warmupSteps;
    if (freeze) {
      // The freeze's gathers run from host memory: the shard's v, then (local momentum) its m.
      std::vector<float> hostShard(len);
      TERSE_RETURN_IF_ERROR(device::copyAsync(hostShard.data(), dv, 4 * len, stream));
      TERSE_RETURN_IF_ERROR(device::synchronize(stream));
      TERSE_RETURN_IF_ERROR(gatherExponents(comm, hostShard.data(), lr, t));
      if (o.localMomentum) {
        TERSE_RETURN_IF_ERROR(device::copyAsync(hostShard.data(), dm, 4 * len, stream));
        TERSE_RETURN_IF_ERROR(device::synchronize(stream));
        TERSE_RETURN_IF_ERROR(gatherLocalMomentum(comm, hostShard.data()));
      }
    }
    Status g = comm.allgather(pNew, params, n, DataType::kFloat32, co);
    if (!g.isOk()) return g.withContext("ShardedOneBitAdam: gathering the parameters");
    TERSE_RETURN_IF_ERROR(device::synchronize(stream));
    if (freeze) {
      commitFreeze(t);
      TERSE_RETURN_IF_ERROR(d.exps.reserve(n).status());
      TERSE_RETURN_IF_ERROR(device::copyAsync(d.exps.data(), scaleExp_.data(), n, nullptr));
      if (o.localMomentum) {
        TERSE_RETURN_IF_ERROR(d.localM.reserve(4 * n).status());
        TERSE_RETURN_IF_ERROR(device::copyAsync(d.localM.data(), localM_.data(), 4 * n, nullptr));
      }
      TERSE_RETURN_IF_ERROR(device::synchronize(nullptr));
    }
    steps_ = t;
    return Status::ok();
  }
  TERSE_RETURN_IF_ERROR(d.x.reserve(4 * n).status());
  auto* x = static_cast<float*>(d.x.data());
  const auto* e = static_cast<const int8_t*>(d.exps.data());
  if (o.localMomentum)
    TERSE_RETURN_IF_ERROR(optim::cuda::localMomentum(x, static_cast<const float*>(d.localM.data()),
                                                     grads, e, n, o.beta1, stream));
  else
    TERSE_RETURN_IF_ERROR(optim::cuda::scaleGradient(x, grads, e, n, stream));
  co.codec = o.codec;
  co.feedback = hasFeedback_ ? &feedback_ : nullptr;
  Status s = comm.reduceScatter(x, gAvg, n, DataType::kFloat32, ReduceOp::kAvg, co);
  if (!s.isOk()) return s.withContext("ShardedOneBitAdam: reduce-scattering the gradients");
  const optim::AdamStepScalars sc = optim::adamScalars(o, lr, t, frozenAt_);
  const bool lossyGather = o.paramCodec != "none";
  if (lossyGather && !d.masterCurrent) {
    TERSE_RETURN_IF_ERROR(d.master.reserve(4 * len).status());
    const float* from = master_.empty() ? params + off : master_.data();
    TERSE_RETURN_IF_ERROR(device::copyAsync(d.master.data(), from, 4 * len, stream));
    master_.resize(len);  // the host copy is filled by pullToHost
    d.masterCurrent = true;
  }
  // With a lossy all-gather the update runs in place on the device master shard.
  float* pOut = lossyGather ? static_cast<float*>(d.master.data()) : pNew;
  const float* pIn = lossyGather ? pOut : params + off;
  TERSE_RETURN_IF_ERROR(
      optim::cuda::shardUpdate(pOut, dm, gAvg, pIn, dv, e + off, len, sc, o.localMomentum, stream));
  CollectiveOptions ag;
  ag.stream = stream;
  ag.codec = o.paramCodec;
  pNew = pOut;
  Status g = comm.allgather(pNew, params, n, DataType::kFloat32, ag);
  if (!g.isOk()) return g.withContext("ShardedOneBitAdam: gathering the parameters");
  TERSE_RETURN_IF_ERROR(device::synchronize(stream));
  if (o.localMomentum) std::swap(d.x, d.localM);  // the new local momentum is now the state
  steps_ = t;
  return Status::ok();
}

std::vector<uint8_t> ShardedOneBitAdam::serialize() const {
  pullToHost();
  Part a;
  a.o = options_;
  a.count = count_;
  a.offset = offset_;
  a.length = m_.size();
  a.steps = steps_;
  a.frozenAt = frozenAt_;
  a.world = world_;
  a.rank = rank_;
  a.m = m_;
  a.v = v_;
  a.master = master_;
  a.localM = localM_;
  a.exps = scaleExp_;
  if (hasFeedback_) a.feedback = feedback_.serialize();
  return writePart(a);
}

namespace {

// Whether the saving run kept master shards (a lossy parameter all-gather after its first
// compressed step): then every part with elements has one.
bool hasMaster(const std::vector<Part>& parts) {
  for (const Part& p : parts)
    if (!p.master.empty()) return true;
  return false;
}

// Every saving rank's part, parsed and checked to be one run's (same options, step, scales; each
// rank once), in rank order.
Result<std::vector<Part>> parseRun(const std::vector<std::pair<const void*, size_t>>& parts,
                                   const char* what) {
  if (parts.empty()) return errorInvalidArgument("%s: no parts given", what);
  std::vector<Part> old;
  for (const auto& [bytes, size] : parts) {
    auto p = parsePart(bytes, size);
    if (!p.isOk()) return p.status();
    old.push_back(std::move(p).value());
  }
  const Part& first = old[0];
  const int oldWorld = first.world;
  if (static_cast<size_t>(oldWorld) != old.size())
    return errorInvalidArgument("%s: saved by %d ranks, %zu parts given (pass every rank's)", what,
                                oldWorld, old.size());
  std::vector<std::vector<uint8_t>> records;
  std::vector<const uint8_t*> recordOf;
  std::vector<int> rankOf;
  for (const Part& p : old) {
    records.push_back(agreedRecord(p.count, p.steps, p.frozenAt, p.o));
    rankOf.push_back(p.rank);
  }
  for (const auto& r : records) recordOf.push_back(r.data());
  const std::string differs = firstDisagreement(recordOf, rankOf, "the parts");
  if (!differs.empty())
    return errorInvalidArgument("%s: the parts disagree (not one run's checkpoint): %s", what,
                                differs.c_str());
  // A rank with an empty shard saves an empty master copy whatever the run has.
  const bool master = hasMaster(old);
  std::vector<int> seen(oldWorld, 0);
  for (const Part& p : old) {
    bool same = p.world == oldWorld && p.exps == first.exps &&
                (p.length == 0 || p.master.empty() != master);
    if (!same)
      return errorInvalidArgument("%s: the parts disagree (not one run's checkpoint)", what);
    if (seen[p.rank]++) return errorInvalidArgument("%s: rank %d's part given twice", what, p.rank);
  }
  std::sort(old.begin(), old.end(), [](const Part& x, const Part& y) { return x.rank < y.rank; });
  return old;
}

}  // namespace

Result<ShardedOneBitAdam> ShardedOneBitAdam::deserialize(
    const std::vector<std::pair<const void*, size_t>>& parts, int worldSize, int rank) {
  const char* what = "ShardedOneBitAdam checkpoint";
  TERSE_ASSIGN_OR_RETURN(std::vector<Part> old, parseRun(parts, what));
  const Part& first = old[0];
  const int oldWorld = first.world;
  std::vector<const Part*> byRank;
  for (const Part& p : old) byRank.push_back(&p);
  auto made = create(first.count, worldSize, rank, first.o);
  if (!made.isOk()) return made.status().withContext(what);
  ShardedOneBitAdam a = std::move(made).value();
  a.steps_ = first.steps;
  a.frozenAt_ = first.frozenAt;
  a.scaleExp_ = first.exps;
  // Moments (and the master shard): the new shard's elements from whichever old shards hold them.
  if (hasMaster(old)) a.master_.assign(a.m_.size(), 0.0f);
  for (const Part* p : byRank) {
    size_t lo = std::max<size_t>(p->offset, a.offset_);
    size_t hi = std::min<size_t>(p->offset + p->length, a.offset_ + a.m_.size());
    for (size_t i = lo; i < hi; ++i) {
      a.m_[i - a.offset_] = p->m[i - p->offset];
      a.v_[i - a.offset_] = p->v[i - p->offset];
      if (!a.master_.empty()) a.master_[i - a.offset_] = p->master[i - p->offset];
    }
  }
  if (first.o.localMomentum && first.frozenAt > 0) {
    // Local momenta: what matters is their average (the momentum of the averaged gradient). At
    // the same world size each rank takes its own back (the run continues bit for bit); at
    // another every new rank starts from the old ranks' average.
    if (worldSize == oldWorld) {
      a.localM_ = byRank[rank]->localM;
    } else {
      a.localM_.assign(a.count_, 0.0f);
      for (const Part* p : byRank)
        for (size_t k = 0; k < a.count_; ++k) a.localM_[k] += p->localM[k];
      const float inv = 1.0f / static_cast<float>(oldWorld);
      for (float& x : a.localM_) x *= inv;
    }
  }
  if (a.hasFeedback_) {
    // Worker residuals: what each old rank still owes the average. New rank j takes
    // (new / old world) * sum of old ranks i = j (mod new world), which keeps the owed average.
    std::vector<ErrorFeedback> fbs;
    for (const Part* p : byRank) {
      auto fb = ErrorFeedback::deserialize(p->feedback.data(), p->feedback.size());
      if (!fb.isOk()) return fb.status().withContext(what);
      TERSE_RETURN_IF_ERROR(fb->checkCompatible(first.o.codec, first.count).withContext(what));
      fbs.push_back(std::move(fb).value());
    }
    float* dst = a.feedback_.worker();
    bool any = false;
    const float scale = static_cast<float>(worldSize) / static_cast<float>(oldWorld);
    for (int i = rank; i < oldWorld; i += worldSize) {
      const float* src = fbs[i].worker();
      for (size_t k = 0; k < a.count_; ++k) dst[k] = any ? dst[k] + src[k] : src[k];
      any = true;
    }
    if (any && scale != 1.0f)
      for (size_t k = 0; k < a.count_; ++k) dst[k] *= scale;
  }
  return a;
}

Result<ShardedOneBitAdam> ShardedOneBitAdam::deserializeRemapped(
    const std::vector<std::pair<const void*, size_t>>& parts, int worldSize, int rank, size_t count,
    const int64_t* source) {
  const char* what = "ShardedOneBitAdam checkpoint";
  TERSE_ASSIGN_OR_RETURN(std::vector<Part> old, parseRun(parts, what));
  const Part& first = old[0];
  const size_t oldCount = first.count;
  if (count > 0 && !source) return errorInvalidArgument("%s: null element map", what);
  for (size_t k = 0; k < count; ++k)
    if (source[k] < -1 || source[k] >= static_cast<int64_t>(oldCount))
      return errorInvalidArgument(
          "%s: element %zu maps to %lld, outside the saved tensor's %zu elements (or -1)", what, k,
          static_cast<long long>(source[k]), oldCount);
  auto made = create(count, worldSize, rank, first.o);
  if (!made.isOk()) return made.status().withContext(what);
  ShardedOneBitAdam a = std::move(made).value();
  a.steps_ = first.steps;
  a.frozenAt_ = first.frozenAt;
  // The saved tensor whole (its shards laid end to end), then every new element from its source.
  std::vector<float> m(oldCount), v(oldCount), master(hasMaster(old) ? oldCount : 0);
  for (const Part& p : old) {
    std::copy(p.m.begin(), p.m.end(), m.begin() + p.offset);
    std::copy(p.v.begin(), p.v.end(), v.begin() + p.offset);
    if (!p.master.empty()) std::copy(p.master.begin(), p.master.end(), master.begin() + p.offset);
  }
  if (hasMaster(old)) a.master_.assign(a.m_.size(), 0.0f);
  for (size_t i = 0; i < a.m_.size(); ++i) {
    const int64_t from = source[a.offset_ + i];
    if (from < 0) continue;  // new padding: no gradient yet, zero state
    a.m_[i] = m[from];
    a.v_[i] = v[from];
    if (!master.empty()) a.master_[i] = master[from];
  }
  // Frozen: scales for every new element (the saved tensor may have had none, at 0 elements).
  if (first.frozenAt > 0) {
    a.scaleExp_.resize(count);
    for (size_t k = 0; k < count; ++k)
      a.scaleExp_[k] =
          source[k] < 0 ? static_cast<int8_t>(optim::kAdamNoGradientExp) : first.exps[source[k]];
  }
  // Local momenta and worker residuals: every new rank takes the old ranks' average, which keeps
  // the average the next reduce-scatter injects (their sum over the new ranks, divided by them).
  const float inv = 1.0f / static_cast<float>(old.size());
  auto averaged = [&](auto valuesOf, float* dst) {
    std::vector<float> sum(oldCount, 0.0f);
    for (const Part& p : old) {
      const float* src = valuesOf(p);
      for (size_t k = 0; k < oldCount; ++k) sum[k] += src[k];
    }
    for (size_t k = 0; k < count; ++k) dst[k] = source[k] < 0 ? 0.0f : sum[source[k]] * inv;
  };
  if (first.o.localMomentum && first.frozenAt > 0) {
    a.localM_.assign(count, 0.0f);
    averaged([](const Part& p) { return p.localM.data(); }, a.localM_.data());
  }
  if (a.hasFeedback_) {
    std::vector<ErrorFeedback> fbs;
    for (const Part& p : old) {
      auto fb = ErrorFeedback::deserialize(p.feedback.data(), p.feedback.size());
      if (!fb.isOk()) return fb.status().withContext(what);
      TERSE_RETURN_IF_ERROR(fb->checkCompatible(first.o.codec, oldCount).withContext(what));
      fbs.push_back(std::move(fb).value());
    }
    averaged([&](const Part& p) { return static_cast<const float*>(fbs[p.rank].worker()); },
             a.feedback_.worker());
  }
  return a;
}

Result<ShardedOneBitAdam::ShrunkParts> ShardedOneBitAdam::shrinkParts(
    Communicator& shrunk, const std::vector<std::pair<const void*, size_t>>& lostParts) {
  const char* what = "ShardedOneBitAdam::shrink";
  const int n = shrunk.size();
  if (reduced_) {
    Status bad =
        errorInvalidUsage("%s: reduce() ran without its update(); finish that step first", what);
    (void)shrunk.reject(bad).wait();
    return bad;
  }
  // The survivors' old ranks, in the new order.
  const float me = static_cast<float>(rank_);
  std::vector<float> oldOf(n);
  Status g = shrunk.allgather(&me, oldOf.data(), oldOf.size(), DataType::kFloat32);
  if (!g.isOk()) return g.withContext("ShardedOneBitAdam::shrink: gathering the survivors' ranks");
  std::vector<int> survivors;
  // Checked before the cast (a NaN or huge float to int is undefined): -1 fails the test below.
  for (float r : oldOf)
    survivors.push_back(r >= 0.0f && r < static_cast<float>(world_) && r == std::floor(r)
                            ? static_cast<int>(r)
                            : -1);
  for (int i = 0; i < n; ++i)
    if (survivors[i] < 0 || survivors[i] >= world_ || (i > 0 && survivors[i] <= survivors[i - 1]))
      return errorInvalidArgument(
          "%s: the new communicator's members were ranks %s of the old world, not distinct ranks "
          "of this state's %d in their old order (pass the communicator Communicator::shrink "
          "made from the one this state stepped on)",
          what, rankList(survivors).c_str(), world_);
  std::vector<int> dead;
  for (int r = 0; r < world_; ++r)
    if (!std::binary_search(survivors.begin(), survivors.end(), r)) dead.push_back(r);
  pullToHost();

  // What this rank can give of each dead rank's shard, best first: 3 its current buddy copy, 2 a
  // checkpoint part of this very step, 1 a buddy copy a step behind or an older checkpoint part.
  // Parts of survivors are ignored (a caller may pass a whole checkpoint); a part of another run
  // is an error.
  ShardedOneBitAdamOptions plain = options_;
  plain.buddyCopy = false;
  const std::vector<uint8_t> ours = agreedRecord(count_, steps_, frozenAt_, plain);
  std::vector<const Part*> fromCheckpoint(world_, nullptr);
  std::vector<Part> parsed;
  parsed.reserve(lostParts.size());
  std::string bad;
  for (size_t i = 0; i < lostParts.size(); ++i) {
    const auto& [bytes, size] = lostParts[i];
    if (!bytes) {
      // The C API's NULL arrays come here too, so that every rank refuses them alike.
      bad = formatString("lost part %zu is NULL", i);
      break;
    }
    auto p = parsePart(bytes, size);
    if (!p.isOk()) {
      bad = p.status().message();
      break;
    }
    const Part& q = parsed.emplace_back(std::move(p).value());
    const std::vector<uint8_t> theirs = agreedRecord(q.count, steps_, frozenAt_, q.o);
    const std::string differs =
        firstDisagreement({ours.data(), theirs.data()}, {rank_, q.rank}, "this state and the part");
    if (q.world != world_ || !differs.empty() || q.steps > steps_) {
      bad = formatString(
          "the part of rank %d of %d at step %lld is not of this run's last %d ranks at step <= "
          "%lld%s%s",
          q.rank, q.world, static_cast<long long>(q.steps), world_, static_cast<long long>(steps_),
          differs.empty() ? "" : ": ", differs.c_str());
      break;
    }
    if (std::binary_search(dead.begin(), dead.end(), q.rank)) fromCheckpoint[q.rank] = &q;
  }
  const bool haveBuddy = buddy_ && buddy_->step >= 0 && buddy_->hasV &&
                         std::binary_search(dead.begin(), dead.end(), buddy_->holds);
  const size_t stride = static_cast<size_t>(world_) + 1;
  std::vector<float> offer(stride, 0.0f), offers(stride * n);
  offer[0] = bad.empty() ? 0.0f : 1.0f;
  for (int d : dead)
    if (haveBuddy && buddy_->holds == d)
      offer[1 + d] = buddy_->step == steps_ ? 3.0f : 1.0f;
    else if (fromCheckpoint[d])
      offer[1 + d] = fromCheckpoint[d]->steps == steps_ ? 2.0f : 1.0f;
  g = shrunk.allgather(offer.data(), offers.data(), offers.size(), DataType::kFloat32);
  if (!g.isOk()) return g.withContext("ShardedOneBitAdam::shrink: agreeing on the lost shards");
  std::vector<int> badRanks;
  for (int i = 0; i < n; ++i)
    if (offers[i * stride] != 0.0f) badRanks.push_back(survivors[i]);
  if (!badRanks.empty())
    return errorInvalidArgument("%s: %s", what,
                                bad.empty()
                                    ? formatString("the lost parts given on old rank(s) %s are not "
                                                   "this run's (their error says which)",
                                                   rankList(badRanks).c_str())
                                          .c_str()
                                    : ("lost part: " + bad).c_str());
  // Each dead shard from the survivor with the best offer (the first of equals).
  std::vector<int> supplier(world_, -1), lost;
  for (int d : dead) {
    float best = 0.0f;
    for (int i = 0; i < n; ++i)
      if (offers[i * stride + 1 + d] > best) {
        best = offers[i * stride + 1 + d];
        supplier[d] = i;
      }
    if (supplier[d] < 0) lost.push_back(d);
  }
  if (!lost.empty()) {
    std::string why;
    for (int d : lost) {
      const int holder = buddyHolder(world_, d);
      why += formatString("; rank %d's %s", d,
                          !options_.buddyCopy ? "buddy copy is off"
                          : std::binary_search(dead.begin(), dead.end(), holder)
                              ? formatString("buddy, rank %d, is gone too", holder).c_str()
                              : "buddy copy was never made (no step since the copy began)");
    }
    return errorInvalidArgument(
        "%s: the optimizer state of old rank(s) %s is lost%s; pass their parts of the last "
        "checkpoint (lostParts) to recover them as of that checkpoint",
        what, rankList(lost).c_str(), why.c_str());
  }

  // This rank's share: its own part, and each dead shard it supplies with the state's present
  // header (step, scales, options) around the copy's moments.
  auto adopt = [&](Part src, const float* worker) -> Result<Part> {
    Part a;
    a.o = plain;
    a.count = count_;
    a.steps = steps_;
    a.frozenAt = frozenAt_;
    a.world = world_;
    a.rank = src.rank;
    const Range r = chunkRange(count_, world_, src.rank);
    a.offset = r.begin;
    a.length = r.length;
    a.m = std::move(src.m);
    a.v = std::move(src.v);
    a.exps = scaleExp_;
    const bool needMaster = options_.paramCodec != "none" && frozen() && steps_ > frozenAt_;
    const bool needLocal = options_.localMomentum && frozen();
    if ((needMaster && r.length > 0 && src.master.size() != r.length) ||
        (needLocal && src.localM.size() != count_))
      return errorInvalidArgument(
          "%s: the copy of old rank %d's state is of step %lld, before the %s existed; it cannot "
          "be recovered from it",
          what, src.rank, static_cast<long long>(src.steps),
          needLocal ? "local momentum" : "master shard");
    if (needMaster) a.master = std::move(src.master);
    if (needLocal) a.localM = std::move(src.localM);
    if (hasFeedback_) {
      // A residual of an older step is stale (the rank kept sending after it): dropped.
      auto fb = ErrorFeedback::create(options_.codec, count_);
      if (!fb.isOk()) return fb.status();
      if (worker && src.steps == steps_) std::copy(worker, worker + count_, fb->worker());
      a.feedback = fb->serialize();
    }
    return a;
  };
  std::vector<std::vector<uint8_t>> mine{serialize()};
  Status failed;
  for (int d : dead) {
    if (survivors[supplier[d]] != rank_) continue;
    Result<Part> made = errorInternal("unset");
    if (haveBuddy && buddy_->holds == d) {
      Part src;
      src.rank = d;
      src.steps = buddy_->step;
      src.m = buddy_->m;
      src.v = buddy_->v;
      src.master = buddy_->master;
      src.localM = buddy_->localM;
      made = adopt(std::move(src), buddy_->worker.empty() ? nullptr : buddy_->worker.data());
    } else {
      const Part& c = *fromCheckpoint[d];
      std::vector<float> worker;
      if (!c.feedback.empty()) {
        auto fb = ErrorFeedback::deserialize(c.feedback.data(), c.feedback.size());
        if (fb.isOk()) worker.assign(fb->worker(), fb->worker() + fb->count());
      }
      made = adopt(c, worker.size() == count_ ? worker.data() : nullptr);
    }
    if (!made.isOk()) {
      failed = made.status();
      break;
    }
    mine.push_back(writePart(*made));
  }
  // One blob per survivor: [entry count, then per entry (kind << 32 | old rank), length, bytes;
  // 8 bytes each] with kind 0 a rank's part and 1 a dead rank's parameter shard (floats). A rank
  // that could not make its share sends no entries, which every rank then refuses.
  std::vector<uint8_t> blob;
  auto putU64 = [&](uint64_t v) {
    for (int k = 0; k < 8; ++k) blob.push_back(static_cast<uint8_t>(v >> (8 * k)));
  };
  auto putEntry = [&](uint64_t kind, int oldRank, const void* bytes, size_t size) {
    putU64(kind << 32 | static_cast<uint32_t>(oldRank));
    putU64(size);
    const auto* p = static_cast<const uint8_t*>(bytes);
    blob.insert(blob.end(), p, p + size);
  };
  std::vector<int> paramsOf;  // the dead ranks whose parameter shards this rank gives
  // Only a copy of this very step: the survivors' own shards are of it, and weights mixing it
  // with the step before would claim no rollback. Every rank reads the same blobs, so a shard not
  // given is lost on every rank alike.
  if (failed.isOk() && haveBuddy && !buddy_->params.empty() && buddy_->step == steps_ &&
      survivors[supplier[buddy_->holds]] == rank_)
    paramsOf.push_back(buddy_->holds);
  putU64(failed.isOk() ? mine.size() + paramsOf.size() : 0);
  if (failed.isOk()) {
    putEntry(0, rank_, mine[0].data(), mine[0].size());
    size_t k = 1;
    for (int d : dead)
      if (survivors[supplier[d]] == rank_) {
        putEntry(0, d, mine[k].data(), mine[k].size());
        ++k;
      }
    for (int d : paramsOf) putEntry(1, d, buddy_->params.data(), 4 * buddy_->params.size());
  }
  std::vector<std::vector<uint8_t>> blobs;
  // A sane blob: every old rank's part (each about this rank's size; the replicated sections are
  // the same everywhere) and a parameter shard, with room to spare.
  const size_t saneBlob =
      64 + 4 * (static_cast<size_t>(world_) + 1) * (mine[0].size() + 4 * (m_.size() + 1) + 64);
  g = allgatherBytes(shrunk, blob, 0, &blobs, saneBlob);
  if (!g.isOk()) return g.withContext("ShardedOneBitAdam::shrink: gathering the shards");
  if (!failed.isOk()) return failed;
  ShrunkParts out;
  out.parts.resize(world_);
  out.params.resize(world_);
  std::vector<int> emptyFrom;
  for (int i = 0; i < n; ++i) {
    const std::vector<uint8_t>& b = blobs[i];
    auto getU64 = [&](size_t at) {
      uint64_t v = 0;
      for (int k = 0; k < 8 && at + k < b.size(); ++k)
        v |= static_cast<uint64_t>(b[at + k]) << (8 * k);
      return v;
    };
    const uint64_t entries = getU64(0);
    if (entries == 0) emptyFrom.push_back(survivors[i]);
    size_t at = 8;
    for (uint64_t k = 0; k < entries && at + 16 <= b.size(); ++k) {
      const uint64_t tag = getU64(at), len = getU64(at + 8);
      at += 16;
      const int oldRank = static_cast<int>(tag & 0xffffffffu);
      if (len > b.size() - at || oldRank < 0 || oldRank >= world_) break;
      if (tag >> 32 == 0) {
        out.parts[oldRank].assign(b.begin() + at, b.begin() + at + len);
      } else {
        out.params[oldRank].resize(len / 4);
        std::memcpy(out.params[oldRank].data(), b.data() + at, len / 4 * 4);
      }
      at += len;
    }
  }
  if (!emptyFrom.empty())
    return errorInvalidArgument(
        "%s: old rank(s) %s could not give the shards they hold (their error says why)", what,
        rankList(emptyFrom).c_str());
  return out;
}

Status ShardedOneBitAdam::shrink(Communicator& shrunk,
                                 const std::vector<std::pair<const void*, size_t>>& lostParts) {
  TERSE_ASSIGN_OR_RETURN(ShrunkParts got, shrinkParts(shrunk, lostParts));
  std::vector<std::pair<const void*, size_t>> parts;
  for (const auto& p : got.parts) parts.emplace_back(p.data(), p.size());
  auto next = deserialize(parts, shrunk.size(), shrunk.rank());
  if (!next.isOk()) return next.status().withContext("ShardedOneBitAdam::shrink");
  const bool buddyCopy = options_.buddyCopy;
  *this = std::move(next).value();
  options_.buddyCopy = buddyCopy;  // rebuilt on the new world at the next step
  return Status::ok();
}

}  // namespace terse
