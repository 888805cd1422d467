// runSimulation (runner.h).
#include "terse/sim/runner.h"

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/ConditionVariable.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Mutex.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <deque>
#include <exception>
#include <new>
#include <memory>
#include <string>
#include <vector>

namespace terse::sim {

namespace sg = simgrid::s4u;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

double simNow() { return sg::Engine::get_clock(); }

void chargeCompute(double seconds) {
  if (!(seconds > 0)) return;
  sg::this_actor::execute(seconds * sg::this_actor::get_host()->get_speed());
}

Result<SimResult> runSimulation(const PlatformSpec& platform, const SimTransportOptions& options,
                                const std::function<void(Transport&)>& fn,
                                const std::vector<std::string>& simgridConfig) {
  TERSE_RETURN_IF_ERROR(validatePlatform(platform));
  static bool ran = false;
  if (ran) return errorInvalidUsage("runSimulation: SimGrid allows one simulation per process");
  ran = true;
  // CM02: the flow model without LV08's correction factors, so links behave as stated;
  // no TCP window limit and no reverse (ACK) traffic. Quiet unless something is wrong.
  std::vector<std::string> args = {"terse-sim", "--cfg=network/model:CM02",
                                   "--cfg=network/TCP-gamma:0", "--cfg=network/crosstraffic:0",
                                   "--log=root.thres:critical"};
  if (kAddressSanitizer) {
    // SimGrid's own contexts switch stacks by hand, and Debian's libsimgrid does not tell ASan
    // (it would need SimGrid built with ASan), so ASan takes an actor's stack for the thread's:
    // the first exception thrown in an actor was a false stack-buffer-overflow. An OS thread per
    // actor (SimGrid still runs one at a time) is what ASan follows, 5-10x slower.
    args.push_back("--cfg=contexts/factory:thread");
  } else {
    // Actors run terse's engine with its real stack depth; 256 KiB is plenty and keeps 4096
    // actors' stacks small. (The thread factory ignores it.)
    args.push_back("--cfg=contexts/stack-size:256");
  }
  for (const auto& c : simgridConfig) {
    if (c.find(':') == std::string::npos)
      return errorInvalidArgument("SimGrid setting '%s' is not name:value", c.c_str());
    args.push_back("--cfg=" + c);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  // SimGrid reports a bad setting by throwing from the constructor.
  std::unique_ptr<sg::Engine> engine;
  try {
    engine = std::make_unique<sg::Engine>(&argc, argv.data());
  } catch (const std::exception& e) {
    return errorInvalidArgument("SimGrid rejected the configuration: %s", e.what());
  }

  std::vector<int> nodes;
  TERSE_ASSIGN_OR_RETURN(std::vector<sg::Host*> hosts, buildPlatform(platform, &nodes));
  std::shared_ptr<SimWorld> world = makeSimWorld(hosts, options);
  setSimNodes(*world, nodes);

  SimResult result;
  result.rankSeconds.assign(platform.worldSize, 0.0);
  Status failed;
  for (int r = 0; r < platform.worldSize; ++r) {
    sg::Actor::create("rank" + std::to_string(r), hosts[r], [&, r] {
      auto t = createSimTransport(world, r);
      if (!t.isOk()) {
        if (failed.isOk()) failed = t.status();
        return;
      }
      fn(**t);
      result.rankSeconds[r] = sg::Engine::get_clock();
    });
  }
  engine->run();
  TERSE_RETURN_IF_ERROR(failed);
  for (double t : result.rankSeconds) result.seconds = std::max(result.seconds, t);
  result.traffic = simTraffic(*world);
  return result;
}

namespace {

class SharedWorkspaces : public CollectiveEngine::WorkspaceProvider {
 public:
  ~SharedWorkspaces() override {
    for (const auto& slot : slots_)
      for (const Mapping& m : slot) ::munmap(m.data, m.bytes);
  }
  uint8_t* workspace(int slot, size_t bytes) override {
    if (slots_.size() <= static_cast<size_t>(slot)) slots_.resize(slot + 1);
    auto& gens = slots_[slot];
    if (!gens.empty() && gens.back().bytes >= bytes) return gens.back().data;
    // A bigger one; the smaller ones stay mapped for whoever still holds them. Doubling keeps
    // the generations few.
    const size_t want = std::max({bytes, size_t{4096}, gens.empty() ? 0 : 2 * gens.back().bytes});
    void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();  // the engine turns it into the call's status
    gens.push_back({static_cast<uint8_t*>(p), want});
    return gens.back().data;
  }

 private:
  struct Mapping {
    uint8_t* data;
    size_t bytes;
  };
  std::vector<std::vector<Mapping>> slots_;
};

class ChargedArithmetic : public CollectiveEngine::ArithmeticHook {
 public:
  ChargedArithmetic(double reduceGBps, double convertGBps)
      : reduceGBps_(reduceGBps), convertGBps_(convertGBps) {}
  bool take(CollectiveEngine::Arithmetic what, size_t elements) override {
    const double gbps = what == CollectiveEngine::Arithmetic::kReduce ? reduceGBps_ : convertGBps_;
    if (gbps > 0) chargeCompute(static_cast<double>(elements) * 4.0 / (gbps * 1e9));
    return true;
  }

 private:
  double reduceGBps_, convertGBps_;
};

// The actor lane's queue, shared by the lane and its actor (which may outlive the lane by a
// wake-up). Every actor runs in one OS thread; the SimGrid mutex only orders the waits.
struct ActorLaneState {
  sg::MutexPtr mutex = sg::Mutex::create();
  sg::ConditionVariablePtr changed = sg::ConditionVariable::create();
  std::deque<std::function<Status()>> queued;
  std::deque<Status> done;
  size_t outstanding = 0;
  bool stop = false;
};

class ActorLane final : public StepLane {
 public:
  ActorLane() : state_(std::make_shared<ActorLaneState>()) {
    auto state = state_;
    actor_ = sg::Actor::create(sg::this_actor::get_name() + "-lane", sg::this_actor::get_host(),
                               [state] {
                                 std::unique_lock<sg::Mutex> lock(*state->mutex);
                                 for (;;) {
                                   while (!state->stop && state->queued.empty())
                                     state->changed->wait(lock);
                                   if (state->queued.empty()) return;
                                   auto job = std::move(state->queued.front());
                                   state->queued.pop_front();
                                   lock.unlock();
                                   Status s = job();
                                   lock.lock();
                                   state->done.push_back(std::move(s));
                                   state->changed->notify_all();
                                 }
                               });
    // The simulation ends when the ranks do, whatever their lanes wait for.
    actor_->daemonize();
  }
  ~ActorLane() override {
    {
      std::unique_lock<sg::Mutex> lock(*state_->mutex);
      state_->stop = true;
      state_->changed->notify_all();
    }
    // Ended here, not killed with the daemons when the ranks are done: a kill unwinds the actor
    // through its lock on the SimGrid mutex, which SimGrid does not allow.
    actor_->join();
  }
  void submit(std::function<Status()> job) override {
    std::unique_lock<sg::Mutex> lock(*state_->mutex);
    state_->queued.push_back(std::move(job));
    ++state_->outstanding;
    state_->changed->notify_all();
  }
  Status collect() override {
    std::unique_lock<sg::Mutex> lock(*state_->mutex);
    if (state_->outstanding == 0)
      return errorInternal("step lane: collect() with nothing outstanding");
    while (state_->done.empty()) state_->changed->wait(lock);
    Status s = std::move(state_->done.front());
    state_->done.pop_front();
    --state_->outstanding;
    return s;
  }

 private:
  std::shared_ptr<ActorLaneState> state_;
  sg::ActorPtr actor_;
};

}  // namespace

std::unique_ptr<StepLane> makeActorLane() { return std::make_unique<ActorLane>(); }

std::shared_ptr<CollectiveEngine::WorkspaceProvider> makeSharedWorkspaces() {
  return std::make_shared<SharedWorkspaces>();
}

std::shared_ptr<CollectiveEngine::ArithmeticHook> makeChargedArithmetic(double reduceGBps,
                                                                        double convertGBps) {
  return std::make_shared<ChargedArithmetic>(reduceGBps, convertGBps);
}

}  // namespace terse::sim
