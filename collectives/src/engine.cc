#include "terse/collectives/engine.h"
#include "terse/collectives/measure.h"

#include "algorithm.h"
#include "algorithm_choice.h"
#include "descriptor.h"
#include "requests.h"

#include "terse/common/env.h"
#include "terse/common/logging.h"
#include "terse/kernels/element_type.h"
#include "terse/transport/give_up.h"
#include "terse/transport/group.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

namespace terse {

// The engine's settings (terse/common/env.h). It never reads them: its communicator, or the
// tool that builds it, passes their values in EngineSettings.
const EnvSetting kSegmentBytesSetting{
    {"TERSE_SEGMENT_BYTES", "int", "1048576",
     "Pipeline segment of the collectives, in bytes of float32 (rounded to a multiple of 65536 "
     "elements): compression, transfer and reduction of different segments overlap.",
     int64_t{1} << 18, int64_t{1} << 30},
    EnvAgreement::kEveryRank};
const EnvSetting kTwoLevelSegmentBytesSetting{
    {"TERSE_TWOLEVEL_SEGMENT_BYTES", "int", "16777216",
     "Two-level allreduce's pipeline segment, in bytes of float32 (rounded down to a multiple of "
     "65536 elements per rank of a node): one segment crosses between nodes while the next is "
     "summed inside the node. The segments decide the order of the node's sums and the size of "
     "each message.",
     int64_t{1} << 18, int64_t{1} << 40},
    EnvAgreement::kEveryRank};
const EnvSetting kSmallBytesSetting{
    {"TERSE_SMALL_BYTES", "int", "65536",
     "Uncompressed allreduces of at most this many float32 bytes use recursive doubling "
     "(latency-bound) instead of the ring (bandwidth-bound).",
     0, int64_t{1} << 30},
    EnvAgreement::kEveryRank};
const EnvSetting kAgreementDirectRanksSetting{
    {"TERSE_AGREEMENT_DIRECT_RANKS", "int", "32",
     "Worlds of at most this many ranks agree on each call by an all-to-all of call "
     "descriptors (one message time, n-1 messages per rank); larger worlds by a dissemination "
     "of 208-byte summaries in ceil(log2 n) rounds (one message per rank per round).",
     1, int64_t{1} << 30},
    EnvAgreement::kEveryRank};
const EnvSetting kPipelineDepthSetting{
    {"TERSE_PIPELINE_DEPTH", "int", "1",
     "Compressed collectives: how many segment rounds a rank compresses and sends ahead of "
     "the segment it reduces (1-8). Deeper keeps a slow link busier while ranks wait on each "
     "other, at the cost of a longer drain.",
     1, 8}};
const EnvSetting kAlgoSetting{
    {"TERSE_ALGO", "enum", "auto",
     "How allreduce, reduce-scatter and allgather cross the ranks: twolevel (exact reduction "
     "inside each node, the codec across nodes on each local rank's slice, allgather inside the "
     "node), flat (every rank a peer of every other) or auto (where there are several nodes "
     "with the same number of ranks, more than one each, the faster of the two as timed at the "
     "call's size once per collective, codec, type and size class; else flat). twolevel "
     "on a world whose nodes cannot run it fails communicator creation; split communicators "
     "follow it where they can.",
     0, 0, "auto,flat,twolevel"},
    EnvAgreement::kEveryRank};

using detail::CallDescriptor;
using detail::makeTag;
using detail::RequestList;

namespace {

// [begin, end) of a buffer's bytes, for the overlap check.
struct ByteSpan {
  uintptr_t begin, end;
  bool overlaps(const ByteSpan& o) const { return begin < o.end && o.begin < end; }
};

}  // namespace

EngineSettings EngineSettings::defaults() {
  // An empty snapshot answers every setting with its registered default.
  return from(AgreedSettings(),
              static_cast<size_t>(AgreedSettings().number(kPipelineDepthSetting)));
}

EngineSettings EngineSettings::from(const AgreedSettings& agreed, size_t pipelineDepth) {
  EngineSettings out;
  out.segmentBytes = static_cast<size_t>(agreed.number(kSegmentBytesSetting));
  out.twoLevelSegmentBytes = static_cast<size_t>(agreed.number(kTwoLevelSegmentBytesSetting));
  out.smallBytes = static_cast<size_t>(agreed.number(kSmallBytesSetting));
  out.directAgreementRanks = static_cast<size_t>(agreed.number(kAgreementDirectRanksSetting));
  out.pipelineDepth = pipelineDepth;
  // The snapshot holds a choice of the declaration's, which parseAlgorithm knows.
  auto parsed = parseAlgorithm(agreed.text(kAlgoSetting));
  if (parsed.isOk()) out.algorithm = parsed.value();
  return out;
}

CollectiveEngine::CollectiveEngine(Transport& transport, std::chrono::milliseconds timeout,
                                   const EngineSettings& settings)
    : transport_(transport) {
  unit_.timeout = timeout;
  setSegmentBytes(settings.segmentBytes);
  setTwoLevelSegmentBytes(settings.twoLevelSegmentBytes);
  unit_.smallBytes = settings.smallBytes;
  directAgreementRanks_ = settings.directAgreementRanks;
  setPipelineDepth(settings.pipelineDepth);
  defaultAlgorithm_ = settings.algorithm;
}

uint32_t CollectiveEngine::nextSeq() {
  // The calls' numbers stay below the two-level steps' flag (requests.h, makeTag), wrapping
  // alike on every rank.
  return seq_++ & ~detail::kStepSeqFlag;
}

void CollectiveEngine::setSegmentBytes(size_t bytes) {
  // Segments are whole multiples of 65536 elements: every block size a codec accepts divides
  // that, so a segment boundary never cuts a block. Capped so tag indices stay in range.
  constexpr size_t kUnit = 65536;
  size_t elems = bytes / sizeof(float);
  unit_.segmentElements = std::max(kUnit, elems / kUnit * kUnit);
}

void CollectiveEngine::setSmallBytes(size_t bytes) { unit_.smallBytes = bytes; }

void CollectiveEngine::setPipelineDepth(size_t depth) {
  unit_.pipelineDepth = std::min<size_t>(8, std::max<size_t>(1, depth));
}

void CollectiveEngine::setTimeout(std::chrono::milliseconds timeout) { unit_.timeout = timeout; }

Status CollectiveEngine::enableTwoLevel(const std::vector<int>& nodeOfRank, uint32_t localSpace,
                                        uint32_t crossSpace) {
  TERSE_ASSIGN_OR_RETURN(
      auto layout, detail::TwoLevelLayout::make(transport_, nodeOfRank, localSpace, crossSpace,
                                                &twoLevelWhyNot_));
  if (layout) layout->crossWorkspaces.setProvider(workspaces_.provider());
  twoLevel_ = std::move(layout);
  return Status::ok();
}

CollectiveEngine::~CollectiveEngine() = default;

Result<Algorithm> CollectiveEngine::resolveAlgorithm(const CollectiveOp& op) const {
  const bool perCall = op.algorithm != Algorithm::kAuto;
  const Algorithm want = perCall ? op.algorithm : defaultAlgorithm_;
  if (want == Algorithm::kFlat) return Algorithm::kFlat;
  if (want == Algorithm::kTwoLevel) {
    // TERSE_ALGO is checked against the world's layout when its communicator is created
    // (Communicator); communicators split from it follow it where they can. A call that asks
    // for two-level itself is told.
    if (!perCall && !twoLevel_) return Algorithm::kFlat;
    if (!twoLevel_)
      return errorInvalidUsage("%s: two-level was asked for, but %s", collectiveName(op.kind),
                               twoLevelWhyNot_.c_str());
    return Algorithm::kTwoLevel;
  }
  if (!twoLevel_) return Algorithm::kFlat;
  if (op.codec) {
    auto it = chosen_.find(detail::algorithmChoiceKey(
        op.kind, op.codec->spec(), op.dtype, sizeClassOfBytes(op.count * dataTypeSize(op.dtype))));
    if (it != chosen_.end()) return it->second.algorithm;
  }
  return Algorithm::kTwoLevel;
}

bool CollectiveEngine::choosesByMeasurement(const CollectiveOp& requested) const {
  return requested.algorithm == Algorithm::kAuto && defaultAlgorithm_ == Algorithm::kAuto &&
         twoLevel_ && !requested.device && !requested.policyWork && requested.codec &&
         requested.count > 0;
}

Status CollectiveEngine::chooseAlgorithm(CollectiveOp* op) {
  const std::string key =
      detail::algorithmChoiceKey(op->kind, op->codec->spec(), op->dtype,
                                 sizeClassOfBytes(op->count * dataTypeSize(op->dtype)));
  auto known = chosen_.find(key);
  if (known != chosen_.end()) {
    op->algorithm = known->second.algorithm;
    op->twoLevelWhole = known->second.twoLevelWhole;
    return Status::ok();
  }
  // Flat, two-level and, for an allreduce that pipelines, two-level in one segment (the
  // pipeline's second thread can cost more than its overlap saves where the ranks outnumber the
  // cores), at the call's own size (measure.h caps it). Every rank decides alike whether the
  // third runs (same count, settings and layout).
  const size_t count = std::min(op->count, kMaxMeasuredElements);
  Measurement m;
  m.what = "auto algorithm choice";
  m.feedback = op->feedback != nullptr;
  // The ranks agree on the call first: ranks that disagree on it (another size, say) must hear
  // of it from this call, not find themselves timing different trials.
  m.agree = [&]() -> Status {
    CollectiveOp asked = *op;
    asked.algorithm = Algorithm::kAuto;
    const uint32_t seq = nextSeq();
    Status agreed = exchangeDescriptors(asked, seq);
    if (agreed.isOk() || agreed.code() == StatusCode::kInvalidUsage) return agreed;
    return giveUp(asked, seq, std::move(agreed));
  };
  auto candidate = [&](Algorithm algorithm, bool whole, const char* name) {
    CollectiveOp trial;
    trial.kind = op->kind;
    trial.count = op->count;
    trial.dtype = op->dtype;
    trial.op = op->op;
    trial.codec = op->codec;
    trial.requested = op->requested;
    trial.algorithm = algorithm;
    trial.twoLevelWhole = whole;
    m.candidates.push_back(trial);
    m.names.push_back(name);
  };
  candidate(Algorithm::kFlat, false, "flat");
  candidate(Algorithm::kTwoLevel, false, "twolevel");
  if (op->kind == CollectiveKind::kAllReduce &&
      detail::twoLevelPipelines(unit_.twoLevelSegmentElements, twoLevel_->localTransport->size(),
                                count))
    candidate(Algorithm::kTwoLevel, true, "twolevel in one segment");
  TERSE_ASSIGN_OR_RETURN(std::vector<double> worst, measureCandidates(*this, m));
  const detail::AlgorithmChoice choice =
      detail::chooseByTime(worst[0], worst[1], count, worst.size() == 3 ? worst[2] : -1.0);
  chosen_[key] = Chosen{choice.algorithm, choice.twoLevelWhole};
  const std::string chosen = std::string(algorithmName(choice.algorithm)) +
                             (choice.twoLevelWhole ? " in one segment" : "");
  stats_.algorithmChoices[key] = chosen + ": " + choice.reason;
  TERSE_INFO(kSubsysColl, "auto algorithm for %s: %s (%s)", key.c_str(), chosen.c_str(),
             choice.reason.c_str());
  op->algorithm = choice.algorithm;
  op->twoLevelWhole = choice.twoLevelWhole;
  return Status::ok();
}

double CollectiveEngine::now() const {
  if (clock_) return clock_();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void CollectiveEngine::setWorkspaceProvider(std::shared_ptr<WorkspaceProvider> provider) {
  if (twoLevel_) twoLevel_->crossWorkspaces.setProvider(provider);
  workspaces_.setProvider(std::move(provider));
}

void CollectiveEngine::setArithmeticHook(std::shared_ptr<ArithmeticHook> hook) {
  arithmeticHook_ = std::move(hook);
}

detail::AlgorithmContext CollectiveEngine::context() {
  return detail::AlgorithmContext(transport_, unit_, workspaces_, counters_, arithmeticHook_.get());
}

Status CollectiveEngine::validate(const CollectiveOp& op, bool needCodec) const {
  const int n = transport_.size(), r = transport_.rank();
  if (op.kind != CollectiveKind::kAllReduce && op.kind != CollectiveKind::kReduceScatter &&
      op.kind != CollectiveKind::kAllGather)
    return errorInvalidArgument("collective kind %d is not allreduce, reducescatter or allgather",
                                static_cast<int>(op.kind));
  if (needCodec && op.codec == nullptr)
    return errorInvalidArgument("%s: no codec given", collectiveName(op.kind));
  if (op.dtype != DataType::kFloat32 && op.dtype != DataType::kFloat16 &&
      op.dtype != DataType::kBFloat16)
    return errorInvalidArgument("%s: element type %d is not one of float32, float16, bfloat16",
                                collectiveName(op.kind), static_cast<int>(op.dtype));
  // Every size below is count times at most 4 bytes (the float32 accumulators), and chunk and
  // segment arithmetic adds at most a few chunks more: a count whose bytes overflow size_t (or
  // come near it) would wrap to a small size and reduce a few elements "successfully".
  if (op.count > kMaxElements)
    return errorInvalidArgument(
        "%s: count %zu is too large: at most %zu elements (the bytes of the tensor's float32 "
        "workspace must fit in memory's address range)",
        collectiveName(op.kind), op.count, kMaxElements);
  size_t sendCount = op.count, recvCount = op.count;
  if (op.kind == CollectiveKind::kReduceScatter) recvCount = chunkRange(op.count, n, r).length;
  if (op.kind == CollectiveKind::kAllGather) sendCount = chunkRange(op.count, n, r).length;
  if (sendCount > 0 && op.send == nullptr)
    return errorInvalidArgument("%s: send buffer is null but %zu elements are to be sent",
                                collectiveName(op.kind), sendCount);
  if (recvCount > 0 && op.recv == nullptr)
    return errorInvalidArgument("%s: receive buffer is null but %zu elements are to be received",
                                collectiveName(op.kind), recvCount);
  if (op.op != ReduceOp::kSum && op.op != ReduceOp::kAvg)
    return errorInvalidArgument("%s: reduction %d is not sum or avg", collectiveName(op.kind),
                                static_cast<int>(op.op));
  // Device calls need both buffers where kernels reach them; host calls must not get device
  // memory (the host algorithms would fault on it).
  auto kindOf = [](const void* p, size_t elems) {
    return elems > 0 ? device::memoryKind(p) : device::MemoryKind::kHost;
  };
  device::MemoryKind sendKind = kindOf(op.send, sendCount), recvKind = kindOf(op.recv, recvCount);
  if (op.device) {
    if (!device::available())
      return errorUnsupported("%s: device buffers need a CUDA build of terse and a usable device",
                              collectiveName(op.kind));
    if ((sendCount > 0 && !device::isKernelAccessible(sendKind)) ||
        (recvCount > 0 && !device::isKernelAccessible(recvKind)))
      return errorInvalidArgument(
          "%s: one buffer is CUDA device memory and the other pageable host memory; pass both "
          "on the device or both on the host",
          collectiveName(op.kind));
  } else if (sendKind == device::MemoryKind::kDevice || recvKind == device::MemoryKind::kDevice) {
    return errorInvalidArgument(
        "%s: a buffer is CUDA device memory but the call was made for host buffers (set "
        "CollectiveOp::device)",
        collectiveName(op.kind));
  }
  // The buffers must not overlap, except in the two in-place forms the algorithms are written
  // for: allreduce with send == recv, and allgather with send at this rank's part of recv (as
  // NCCL's in-place allgather). Elsewhere they read parts of send after writing parts of recv,
  // so any other overlap would return wrong elements.
  const bool inPlace = (op.kind == CollectiveKind::kAllReduce && op.send == op.recv) ||
                       (op.kind == CollectiveKind::kAllGather && op.recv != nullptr &&
                        op.send == static_cast<const uint8_t*>(op.recv) +
                                       chunkRange(op.count, n, r).begin * dataTypeSize(op.dtype));
  if (sendCount > 0 && recvCount > 0 && !inPlace) {
    const size_t es = dataTypeSize(op.dtype);
    const auto at = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
    ByteSpan sendSpan{at(op.send), at(op.send) + sendCount * es};
    ByteSpan recvSpan{at(op.recv), at(op.recv) + recvCount * es};
    if (sendSpan.overlaps(recvSpan))
      return errorInvalidArgument(
          "%s: the send buffer (%zu bytes at %p) and the receive buffer (%zu bytes at %p) "
          "overlap; pass separate buffers%s",
          collectiveName(op.kind), sendCount * es, op.send, recvCount * es, op.recv,
          op.kind == CollectiveKind::kAllReduce   ? ", or the same pointer for in place"
          : op.kind == CollectiveKind::kAllGather ? ", or send at this rank's part of recv for in "
                                                    "place"
                                                  : " (reduce-scatter has no in-place form)");
  }
  if (op.feedback && op.codec) {
    size_t efCount = op.kind == CollectiveKind::kAllGather ? sendCount : op.count;
    TERSE_RETURN_IF_ERROR(op.feedback->checkCompatible(op.codec->spec(), efCount)
                              .withContext(std::string(collectiveName(op.kind)) +
                                           ": error-feedback object does not fit this call"));
  }
  return Status::ok();
}

Status CollectiveEngine::exchangeDescriptors(const CollectiveOp& op, uint32_t seq, bool rejected) {
  const int n = transport_.size(), r = transport_.rank();
  if (n == 1) return Status::ok();
  CallDescriptor mine = detail::makeDescriptor(op, seq, static_cast<uint32_t>(n));
  if (rejected) mine.kind = detail::kRejectedKind;
  if (static_cast<size_t>(n) > directAgreementRanks_)
    return disseminateDescriptor(op.kind, mine, seq, rejected);
  auto* theirs = reinterpret_cast<CallDescriptor*>(
      scratch(Workspace::kDescriptors, sizeof(CallDescriptor) * n));
  RequestList reqs(transport_, unit_.timeout, &counters_.bytesSent);
  std::vector<size_t> recvSlot(n, 0);
  const uint64_t tag = makeTag(seq, detail::kPhaseDescriptor, 0);
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    TERSE_RETURN_IF_ERROR(reqs.recv(i, tag, &theirs[i], sizeof(CallDescriptor), &recvSlot[i]));
  }
  size_t unused;
  for (int k = 1; k < n; ++k)
    TERSE_RETURN_IF_ERROR(reqs.send((r + k) % n, tag, &mine, sizeof(CallDescriptor), &unused));
  for (int i = 0; i < n; ++i) {
    if (i == r) continue;
    size_t got = 0;
    TERSE_RETURN_IF_ERROR(reqs.wait(recvSlot[i], &got));
    TERSE_RETURN_IF_ERROR(detail::checkReceivedDescriptor(op.kind, i, theirs[i], got));
  }
  TERSE_RETURN_IF_ERROR(reqs.waitAll());
  return detail::checkDescriptorsAgree(mine, theirs, n, r, seq, rejected);
}

Status CollectiveEngine::disseminateDescriptor(CollectiveKind kind, const CallDescriptor& mine,
                                               uint32_t seq, bool rejected) {
  // Round k: send what this rank knows to rank r + 2^k and merge what rank r - 2^k knows. After
  // it, this rank knows the calls of ranks r - 2^(k+1) + 1 .. r (mod n); the rounds wrap round
  // the world, and merging a rank twice is harmless (detail::CallSummary). Every rank's verdict
  // thus depends on every rank having entered: this is also the barrier's dissemination.
  const int n = transport_.size(), r = transport_.rank();
  detail::CallSummary known = detail::summarizeCall(r, mine), outgoing{}, heard{};
  int round = 0;
  // One request list for all rounds: each round ends with waitAll, which empties it.
  RequestList reqs(transport_, unit_.timeout, &counters_.bytesSent);
  // 64-bit: doubling an int past 2^30 ranks would overflow.
  for (int64_t distance = 1; distance < n; distance *= 2, ++round) {
    const int to = static_cast<int>((r + distance) % n);
    const int from = static_cast<int>((r - distance % n + n) % n);
    const uint64_t tag = makeTag(seq, detail::kPhaseDescriptor, static_cast<size_t>(round));
    size_t recvSlot = 0, sendSlot = 0, got = 0;
    outgoing = known;  // `known` changes below while the send may still read its buffer
    TERSE_RETURN_IF_ERROR(reqs.recv(from, tag, &heard, sizeof heard, &recvSlot));
    TERSE_RETURN_IF_ERROR(reqs.send(to, tag, &outgoing, sizeof outgoing, &sendSlot));
    TERSE_RETURN_IF_ERROR(reqs.wait(recvSlot, &got));
    TERSE_RETURN_IF_ERROR(detail::checkReceivedSummary(kind, from, n, heard, got));
    TERSE_RETURN_IF_ERROR(reqs.waitAll());
    detail::mergeSummaries(&known, heard);
  }
  return detail::checkAgreement(mine, r, known, seq, rejected);
}

Status CollectiveEngine::reject(const CollectiveOp& op, Status why) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t before = counters_.bytesSent;
  Status s = rejectNow(op, std::move(why));
  countCall(op, s, start, before);
  return s;
}

Status CollectiveEngine::rejectNow(const CollectiveOp& op, Status why) {
  // Still take part in the descriptor exchange, so the other ranks fail this call now (and
  // everyone's sequence stays in step) rather than time out waiting for this rank's data.
  Status heard =
      exchangeDescriptors(op, nextSeq(), /*rejected=*/true);  // our own error is the news
  // A transport failure during it leaves the ranks out of step like any other: drop the
  // connections so nobody waits on this rank. Disagreement (kInvalidUsage) is expected here.
  if (!heard.isOk() && heard.code() != StatusCode::kInvalidUsage) {
    (void)giveUpOnWorld(transport_, std::move(heard));
  }
  return why;
}

Status CollectiveEngine::agree(const CollectiveOp& requested) {
  Status valid = validate(requested, /*needCodec=*/false);
  if (!valid.isOk()) return reject(requested, std::move(valid));  // counted as the caller's call
  auto algorithm = resolveAlgorithm(requested);
  if (!algorithm.isOk()) return reject(requested, algorithm.status());
  CollectiveOp op = requested;
  op.algorithm = algorithm.value();
  const auto start = std::chrono::steady_clock::now();
  const uint64_t before = counters_.bytesSent;
  const uint32_t seq = nextSeq();
  Status agreed = exchangeDescriptors(op, seq);
  if (agreed.isOk()) return agreed;  // the call itself is counted by run()
  if (agreed.code() != StatusCode::kInvalidUsage) agreed = giveUp(op, seq, std::move(agreed));
  countCall(op, agreed, start, before);
  return agreed;
}

Status CollectiveEngine::barrier() {
  // The barrier is an agreement with nothing to agree on but itself: every rank hears from
  // every other, directly or by dissemination (so none returns before all entered), and a rank
  // that called a collective at this point in its sequence disagrees visibly instead of waiting
  // on tags nobody sends.
  CollectiveOp op;
  op.kind = CollectiveKind::kBarrier;
  const uint32_t seq = nextSeq();
  ++stats_.barriers;
  Status agreed = exchangeDescriptors(op, seq);
  if (agreed.isOk() || agreed.code() == StatusCode::kInvalidUsage) return agreed;
  return giveUp(
      op, seq,
      agreed.withContext(formatString("barrier (call #%u) on rank %d", seq, transport_.rank())));
}

CollectiveStats::Kind& CollectiveEngine::statsOf(const CollectiveOp& op) {
  if (op.policyWork) return stats_.autoPolicy;
  switch (op.kind) {
    case CollectiveKind::kReduceScatter: return stats_.reduceScatter;
    case CollectiveKind::kAllGather: return stats_.allgather;
    default: return stats_.allreduce;
  }
}

void CollectiveEngine::countCall(const CollectiveOp& op, const Status& status,
                                 std::chrono::steady_clock::time_point start,
                                 uint64_t bytesBefore) {
  CollectiveStats::Kind& k = statsOf(op);
  if (status.isOk()) {
    ++k.calls;
    k.rawBytes += op.count * dataTypeSize(op.dtype);
  } else {
    ++k.failures;
  }
  k.wireBytes += counters_.bytesSent - bytesBefore;
  k.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  k.compressSeconds += counters_.compressSeconds;
  k.reduceSeconds += counters_.reduceSeconds;
  counters_.compressSeconds = counters_.reduceSeconds = 0;
}

Status CollectiveEngine::run(const CollectiveOp& op) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t before = counters_.bytesSent;
  Status s = runCounted(op);
  countCall(op, s, start, before);
  return s;
}

Status CollectiveEngine::runCounted(const CollectiveOp& requested) {
  Status valid = validate(requested);
  if (!valid.isOk()) return rejectNow(requested, std::move(valid));
  auto algorithm = resolveAlgorithm(requested);
  if (!algorithm.isOk()) return rejectNow(requested, algorithm.status());
  CollectiveOp op = requested;
  op.algorithm = algorithm.value();
  if (choosesByMeasurement(requested)) TERSE_RETURN_IF_ERROR(chooseAlgorithm(&op));
  if (op.feedback) op.feedback->prepareFor(op.codec->spec(), op.kind == CollectiveKind::kAllGather);
  const uint32_t seq = nextSeq();
  Status agreed = exchangeDescriptors(op, seq);
  // kInvalidUsage here is the ranks' verdict on the call, which all of them reached alike.
  if (agreed.code() == StatusCode::kInvalidUsage) return agreed;
  if (!agreed.isOk()) return giveUp(op, seq, std::move(agreed));
  // Anything thrown below (std::bad_alloc for a workspace) becomes the call's status, since the
  // peers must hear of it like any other failure. (Here rather than in a wrapper of its own:
  // one frame fewer between the API and the wire.)
  Status s;
  try {
    s = runAgreed(op, seq);
  } catch (const std::bad_alloc&) {
    s = errorSystem("%s: out of memory for the workspaces of %zu elements", collectiveName(op.kind),
                    op.count);
  } catch (const std::exception& e) {
    s = errorInternal("%s: unexpected exception: %s", collectiveName(op.kind), e.what());
  }
  if (s.isOk() && !op.policyWork) ++stats_.algorithmCalls[algorithmName(op.algorithm)];
  return s.isOk() ? s : giveUp(op, seq, std::move(s));
}

Status CollectiveEngine::giveUp(const CollectiveOp& op, uint32_t seq, Status why) {
  // The peers may be waiting for this rank's messages of this call (or, as in a ring, for a
  // neighbour that waits for them): without the abort they would learn only at their timeout.
  why = giveUpOnWorld(transport_, std::move(why));
  // WARN: the peers' errors only say that this rank went away; this line says why.
  TERSE_WARN(kSubsysColl, "%s: %s #%u failed, aborted the transport so the peers fail now: %s",
             rankName(transport_, transport_.rank()).c_str(), collectiveName(op.kind), seq,
             why.message().c_str());
  return why;
}

Status CollectiveEngine::runAgreed(const CollectiveOp& op, uint32_t seq) {
  TERSE_TRACE(kSubsysColl, "%s #%u: %zu x %s, %s, codec %s%s", collectiveName(op.kind), seq,
              op.count, dataTypeName(op.dtype), reduceOpName(op.op), op.codec->spec().c_str(),
              op.device ? ", device buffers" : "");
  if (!op.device) return dispatch(op, seq);
  // Two-level calls stage device buffers through host memory as a whole (their steps run the
  // host algorithms; a device form of the steps is future work, docs/design.md).
  const bool onHost = op.codec->id() == CodecId::kNone || op.algorithm == Algorithm::kTwoLevel;
  Status s = onHost ? stagedOnHost(op, seq) : dispatch(op, seq);
  // Even after an error, kernels queued on the stream may still read the pinned workspaces:
  // let them finish before the next call reuses them.
  Status drained = device::synchronize(op.stream);
  return s.isOk() ? drained : s;
}

Status CollectiveEngine::dispatch(const CollectiveOp& op, uint32_t seq) {
  const detail::AlgorithmContext ctx = context();
  if (op.algorithm != Algorithm::kTwoLevel) return detail::runFlat(ctx, op, seq);
  // Two-level: units over child contexts on the node's and the cross-node group's transports.
  // The node steps share this engine's workspaces and counters; the cross-node steps have their
  // own, since a pipelined allreduce runs them on the lane at the same time.
  detail::TwoLevelLayout& g = *twoLevel_;
  detail::AlgorithmContext::Settings settings = ctx.settings();
  if (op.twoLevelWhole) settings.twoLevelSegmentElements = ~size_t{0};
  if (!g.lane && laneFactory_ && op.kind == CollectiveKind::kAllReduce &&
      detail::twoLevelPipelines(settings.twoLevelSegmentElements, g.localTransport->size(),
                                op.count))
    g.lane = laneFactory_();
  const detail::TwoLevelContext t = g.context(detail::AlgorithmContext(
      transport_, settings, workspaces_, counters_, arithmeticHook_.get()));
  Status s = errorInvalidArgument("unknown collective kind %d", static_cast<int>(op.kind));
  switch (op.kind) {
    case CollectiveKind::kAllReduce: s = detail::twoLevelAllreduce(t, op); break;
    case CollectiveKind::kReduceScatter: s = detail::twoLevelReduceScatter(t, op); break;
    case CollectiveKind::kAllGather: s = detail::twoLevelAllgather(t, op); break;
    case CollectiveKind::kBarrier: break;  // validate() refuses it before this point
  }
  counters_ += g.takeCrossCounters();
  return s;
}

namespace detail {

Status runFlat(const AlgorithmContext& ctx, const CollectiveOp& op, uint32_t seq) {
  const bool uncompressed = op.codec->id() == CodecId::kNone;
  switch (op.kind) {
    case CollectiveKind::kAllReduce:
      if (!uncompressed) return scatterReduce(ctx, op, seq);
      if (op.count * sizeof(float) <= ctx.smallBytes() || ctx.transport().size() == 1)
        return recursiveDoublingAllreduce(ctx, op, seq);
      return ringAllreduce(ctx, op, seq);
    case CollectiveKind::kReduceScatter:
      if (!uncompressed) return scatterReduce(ctx, op, seq);
      return ringReduceScatter(ctx, op, seq);
    case CollectiveKind::kAllGather:
      if (!uncompressed) return compressedAllgather(ctx, op, seq);
      return ringAllgather(ctx, op, seq);
    case CollectiveKind::kBarrier: break;  // validate() refuses it before this point
  }
  return errorInvalidArgument("unknown collective kind %d", static_cast<int>(op.kind));
}

}  // namespace detail

Status CollectiveEngine::stagedOnHost(const CollectiveOp& op, uint32_t seq) {
  const int n = transport_.size(), r = transport_.rank();
  const size_t es = dataTypeSize(op.dtype);
  size_t sendCount = op.count, recvCount = op.count, recvOffset = 0;
  if (op.kind == CollectiveKind::kReduceScatter) recvCount = chunkRange(op.count, n, r).length;
  if (op.kind == CollectiveKind::kAllGather) {
    Range mine = chunkRange(op.count, n, r);
    sendCount = mine.length;
    recvOffset = mine.begin;  // allgather's host algorithm reads our part in place from recv
  }
  // One pinned buffer of the larger side: the host algorithms all work in place.
  size_t bytes = std::max(sendCount, recvCount) * es;
  TERSE_ASSIGN_OR_RETURN(uint8_t * stage, workspaces_.wire(op, Workspace::kDeviceStage, bytes));
  CollectiveOp host = op;
  host.device = false;
  host.stream = nullptr;
  if (op.kind == CollectiveKind::kAllGather) {
    TERSE_RETURN_IF_ERROR(
        device::copyAsync(stage + recvOffset * es, op.send, sendCount * es, op.stream));
    host.send = stage + recvOffset * es;
  } else {
    TERSE_RETURN_IF_ERROR(device::copyAsync(stage, op.send, sendCount * es, op.stream));
    host.send = stage;
  }
  host.recv = stage;
  TERSE_RETURN_IF_ERROR(device::synchronize(op.stream));
  TERSE_RETURN_IF_ERROR(dispatch(host, seq));
  return device::copyAsync(op.recv, stage, recvCount * es, op.stream);
}

}  // namespace terse
