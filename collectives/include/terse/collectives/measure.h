// auto's one way of timing candidates for a call, behind both of its choices: the codec
// (AutoSelector's calibration and refinement, auto_select.h) and the algorithm (flat or
// two-level, CollectiveEngine::chooseAlgorithm). Both ask the same question, which of a few
// collectives is fastest on this communicator by the slowest rank's figures, and every rank must
// answer it alike, so they share the routine, its size classes, its trial sizes and its clock
// (the engine's: steady_clock, or the simulator's simulated time, CollectiveEngine::setClock).
// docs/design.md, "Measuring for auto".
#pragma once

#include "terse/collectives/collective_op.h"
#include "terse/common/status.h"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace terse {

class CollectiveEngine;

// Calls of (2^(c-1), 2^c] bytes share size class c (a call of 0 or 1 byte is class 0): auto
// measures once per class, and keeps what it found under the class.
size_t sizeClassOfBytes(size_t bytes);

// Trials stop at this many elements: past it every codec and algorithm is deep in its
// bandwidth-bound regime, where time grows linearly, and larger scratch buffers would only cost
// memory.
constexpr size_t kMaxMeasuredElements = size_t{1} << 24;

// Each rank's candidate timings, rank after rank (`all[r * candidates + i]`), in; each
// candidate's slowest rank out. A rank's NaN makes the candidate's figure NaN. Every rank
// computes the same from the same gathered figures.
std::vector<double> slowestOfRanks(const std::vector<float>& all, size_t candidates);

struct Measurement {
  // Collective, run first when set: the ranks agree on the caller's call, so a rank that made
  // another call hears of it from that call and not from a trial.
  std::function<Status()> agree;
  // The collectives to time. Their send and recv are ignored: every trial runs on scratch
  // buffers (the caller's may be in place, and its error feedback must not see trials). Counts
  // above kMaxMeasuredElements are cut to it; all share kind and element type.
  std::vector<CollectiveOp> candidates;
  // For error messages: the candidates' names ("flat", a codec spec) and the whole measurement's
  // ("auto algorithm choice").
  std::vector<std::string> names;
  std::string what = "auto measurement";
  // Each trial gets an error-feedback state of its codec, as the caller's call has one.
  bool feedback = false;
  // Timed rounds after the untimed warm-up round; a candidate's figure is its best round.
  int rounds = 2;
};

// Times the candidates on `engine`, every rank alike (collective: every rank calls it with the
// same measurement): agree, then one untimed round of every candidate and `rounds` timed rounds
// alternating them (a load that drifts hits all alike), each trial after a barrier so that none
// pays for the ranks' skew from the one before, on the engine's clock; then an allgather of every
// rank's best times. Returns each candidate's slowest-rank seconds, the same on every rank. The
// trials count as auto's own work (policyWork), their barriers as no caller's.
Result<std::vector<double>> measureCandidates(CollectiveEngine& engine, const Measurement& m);

}  // namespace terse
