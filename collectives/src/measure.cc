#include "terse/collectives/measure.h"

#include "terse/collectives/engine.h"
#include "terse/collectives/partition.h"
#include "terse/kernels/element_type.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <utility>

namespace terse {

size_t sizeClassOfBytes(size_t bytes) {
  size_t c = 0;
  while (c < 63 && (size_t{1} << c) < bytes) ++c;
  return c;
}

std::vector<double> slowestOfRanks(const std::vector<float>& all, size_t candidates) {
  std::vector<double> worst(candidates, 0.0);
  if (candidates == 0) return worst;
  for (size_t at = 0; at + candidates <= all.size(); at += candidates)
    for (size_t i = 0; i < candidates; ++i) {
      const double t = all[at + i];
      // NaN compares false, so it is carried explicitly: a candidate with an unusable figure
      // on any rank is unusable on every rank alike.
      if (std::isnan(t) || std::isnan(worst[i]))
        worst[i] = std::nan("");
      else
        worst[i] = std::max(worst[i], t);
    }
  return worst;
}

namespace {

// The codec the figures are gathered with: they must arrive exactly.
const Codec* noneCodec() {
  static const std::shared_ptr<const Codec> none = makeCodec("none").value();
  return none.get();
}

}  // namespace

Result<std::vector<double>> measureCandidates(CollectiveEngine& engine, const Measurement& m) {
  const size_t k = m.candidates.size();
  if (k == 0) return std::vector<double>();
  if (m.agree) TERSE_RETURN_IF_ERROR(m.agree());
  const int n = engine.transport().size(), r = engine.transport().rank();
  const CollectiveKind kind = m.candidates.front().kind;
  const DataType dtype = m.candidates.front().dtype;
  const size_t es = dataTypeSize(dtype);
  for (const CollectiveOp& c : m.candidates)
    if (c.kind != kind || c.dtype != dtype)
      return errorInvalidUsage("%s: candidates of different kinds or element types",
                               m.what.c_str());
  const int rounds = std::max(1, m.rounds);

  // Each trial's own part of the scratch buffers: an allgather sends this rank's chunk, a
  // reduce-scatter receives it.
  std::vector<CollectiveOp> trials = m.candidates;
  size_t sendMax = 1, recvMax = 1;
  std::vector<size_t> sendCounts(k);
  for (size_t c = 0; c < k; ++c) {
    CollectiveOp& t = trials[c];
    t.count = std::min(t.count, kMaxMeasuredElements);
    const Range mine = chunkRange(t.count, n, r);
    sendCounts[c] = kind == CollectiveKind::kAllGather ? mine.length : t.count;
    const size_t recvCount = kind == CollectiveKind::kReduceScatter ? mine.length : t.count;
    sendMax = std::max(sendMax, sendCounts[c]);
    recvMax = std::max(recvMax, recvCount);
  }
  // With a shared workspace provider (the simulation, whose thousands of ranks cannot each hold
  // the tensor twice more and whose times do not depend on the values) the trials use two of its
  // workspaces as they are; real ranks, buffers of their own for the trials only, of smooth
  // varied values, which no codec takes a shortcut on (zeros or a constant would be).
  std::vector<uint8_t> ownSend, ownRecv;
  uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  if (const auto& provider = engine.workspaceProvider()) {
    send = provider->workspace(static_cast<int>(detail::Workspace::kTrialSend), sendMax * es);
    recv = provider->workspace(static_cast<int>(detail::Workspace::kTrialRecv), recvMax * es);
  } else {
    ownSend.resize(sendMax * es);
    ownRecv.resize(recvMax * es);
    send = ownSend.data();
    recv = ownRecv.data();
    for (size_t i = 0; i < sendMax; ++i)
      storeElement(dtype, send, i,
                   std::sin(0.001f * static_cast<float>(i) + static_cast<float>(r)));
  }
  // One error-feedback state per codec and size, shared by the trials that run them.
  std::map<std::pair<std::string, size_t>, std::unique_ptr<ErrorFeedback>> feedback;
  for (size_t c = 0; c < k; ++c) {
    CollectiveOp& t = trials[c];
    t.send = send;
    t.recv = recv;
    t.policyWork = true;
    t.feedback = nullptr;
    if (m.feedback && t.codec) {
      auto& state = feedback[{t.codec->spec(), sendCounts[c]}];
      if (!state) {
        TERSE_ASSIGN_OR_RETURN(ErrorFeedback made,
                               ErrorFeedback::create(t.codec->spec(), sendCounts[c]));
        state = std::make_unique<ErrorFeedback>(std::move(made));
      }
      t.feedback = state.get();
    }
  }

  std::vector<float> best(k, std::numeric_limits<float>::infinity());
  // The trials' barriers are auto's, not the caller's: CollectiveStats::barriers counts the
  // caller's (their bytes count nowhere, as every barrier's).
  const uint64_t callersBarriers = engine.stats().barriers;
  for (int round = 0; round <= rounds; ++round)
    for (size_t c = 0; c < k; ++c) {
      Status entered = engine.barrier();
      engine.mutableStats().barriers = callersBarriers;
      TERSE_RETURN_IF_ERROR(entered.withContext(m.what));
      const std::string name = c < m.names.size() ? m.names[c] : std::to_string(c);
      if (round == 0) {
        TERSE_RETURN_IF_ERROR(engine.run(trials[c]).withContext(m.what + ", trial of " + name));
        continue;
      }
      const double t0 = engine.now();
      TERSE_RETURN_IF_ERROR(engine.run(trials[c]).withContext(m.what + ", trial of " + name));
      best[c] = std::min(best[c], static_cast<float>(engine.now() - t0));
    }

  // Every rank's figures to every rank (a small allgather), so all decide on the same numbers.
  std::vector<float> all(k * static_cast<size_t>(n));
  std::copy(best.begin(), best.end(), all.begin() + k * r);
  CollectiveOp gather;
  gather.kind = CollectiveKind::kAllGather;
  gather.send = all.data() + k * r;
  gather.recv = all.data();
  gather.count = all.size();
  gather.codec = noneCodec();
  gather.algorithm = Algorithm::kFlat;
  gather.policyWork = true;
  TERSE_RETURN_IF_ERROR(engine.run(gather).withContext(m.what + ", gathering the times"));
  return slowestOfRanks(all, k);
}

}  // namespace terse
