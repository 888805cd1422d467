// Runs a function on every rank of a simulated world: one SimGrid engine, the platform of
// platform.h, one actor per rank with its SimGrid transport.
//
// SimGrid allows one engine per process, so runSimulation() may be called once per process
// (tests fork for each simulation; terse-sim simulates one call per run).
#pragma once

#include "terse/collectives/engine.h"
#include "terse/sim/platform.h"
#include "terse/sim/sim_transport.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace terse::sim {

struct SimResult {
  double seconds = 0;               // simulated time at which the last rank returned
  std::vector<double> rankSeconds;  // simulated time at which each rank returned
  std::vector<SimTraffic> traffic;  // per rank
};

// fn(transport) runs on each rank's actor. Returns once every actor has finished.
// simgridConfig: extra SimGrid settings as "name:value" (as --cfg=name:value), after terse's.
Result<SimResult> runSimulation(const PlatformSpec& platform, const SimTransportOptions& options,
                                const std::function<void(Transport&)>& fn,
                                const std::vector<std::string>& simgridConfig = {});

// Simulated seconds since the simulation started (callable from inside fn).
double simNow();

// Charges `seconds` of compute to the calling rank's host (as flops at the host's speed, so that
// ranks sharing a host would share its speed). From inside fn only.
void chargeCompute(double seconds);

// Workspaces for every simulated rank's engine at once (CollectiveEngine::setWorkspaceProvider):
// one set of buffers, mapped without reserving memory so that only touched pages count, never
// moved or freed while the provider lives. What runs thousands of ranks in one process.
std::shared_ptr<CollectiveEngine::WorkspaceProvider> makeSharedWorkspaces();

// The engine's own arithmetic in the sizing mode (CollectiveEngine::setArithmeticHook): charged
// to the calling rank's host, float32 sums at reduceGBps and conversions at convertGBps (4 bytes
// an element; 0: free), and skipped. Built from `none`'s row of a throughput model, whose
// decompress-accumulate is exactly a float32 sum pass and whose compress a conversion pass.
std::shared_ptr<CollectiveEngine::ArithmeticHook> makeChargedArithmetic(double reduceGBps,
                                                                        double convertGBps);

// A step lane (CollectiveEngine::setStepLanes) for the calling rank: an actor on the rank's host
// that runs the jobs, so that a pipelined two-level allreduce's cross-node steps overlap its node
// steps in simulated time, and their arithmetic shares the host with the rank's own. From inside
// fn only; the actor ends with the lane (or with the simulation).
std::unique_ptr<StepLane> makeActorLane();

}  // namespace terse::sim
