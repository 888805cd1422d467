// Ranks as forked processes, for what threads cannot show: a rank killed with SIGKILL, a rank
// that never starts, per-rank environments. Fork happens before the test creates any thread or
// UCX context; children _exit with a status and the parent waits with a deadline, killing
// whatever is left.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace terse::testing {

struct RankOutcome {
  int rank = -1;
  bool started = false;
  bool exited = false;  // exited normally (code valid)
  int code = -1;
  int signal = 0;               // killed by this signal
  bool killedByParent = false;  // still running at the deadline
  std::string report;           // what the child passed to reportFromChild
};

using EnvMap = std::map<std::string, std::string>;

// Starts world ranks `ranks` (a subset of 0..worldSize-1 models ranks that never start) with
// TERSE_RANK / TERSE_WORLD_SIZE / TERSE_LOCAL_RANK and env(rank) set, runs body(rank) in each and
// exits with its result (1 if a gtest expectation failed in the child). Returns one outcome per
// started rank, in the order of `ranks`.
std::vector<RankOutcome> runProcesses(int worldSize, const std::vector<int>& ranks,
                                      const std::function<EnvMap(int rank)>& env,
                                      const std::function<int(int rank)>& body,
                                      std::chrono::seconds deadline);

// In a child: text the parent finds in RankOutcome::report (the last call wins).
void reportFromChild(const std::string& text);

// A TCP port on 127.0.0.1 that was free a moment ago (for TERSE_STORE).
int freeLoopbackPort();

// A new empty directory under $TMPDIR (for file stores).
std::string makeTempDir();

// "rank 2: exited 0" / "killed by signal 9" ..., for failure messages.
std::string describe(const RankOutcome& o);

// Every one of the `n` ranks started exited 0 (gtest expectations; a wrong count is fatal).
void expectEveryRankPassed(const std::vector<RankOutcome>& outcomes, int n);

// Of `world` ranks, `victim` was SIGKILLed and every other exited 0; their reports are printed.
void expectVictimKilledOthersPassed(const std::vector<RankOutcome>& outcomes, int world,
                                    int victim);

// FNV-1a over the values' bits: what survivors that must hold bit-identical weights report.
uint64_t weightsHash(const std::vector<float>& w);

}  // namespace terse::testing
