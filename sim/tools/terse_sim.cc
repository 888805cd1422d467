// terse-sim: one collective call of terse's own engine on a simulated cluster (docs/simulation.md).
// Prints the predicted time, algorithm and bus bandwidth in nccl-tests' columns and the bytes
// that crossed the busiest NIC; --json writes the same row.
#include "terse/collectives/engine.h"
#include "terse/common/env.h"
#include "terse/sim/runner.h"
#include "terse/sim/sizing_codec.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace terse;

struct Options {
  sim::PlatformSpec platform;
  size_t bytes = size_t{64} << 20;
  std::string codec = "none";
  std::string op = "allreduce";
  // auto | flat | twolevel (the engine's Algorithm), or ring | rd: flat with none's ring or
  // recursive doubling forced.
  std::string algo = "auto";
  std::string model;  // terse-bench codecs --json file
  double assumeCompress = 0, assumeDecompress = 0;
  double computeShare = 1;  // the fraction of the measured machine each rank gets
  std::string json;
  std::vector<std::string> simgridConfig;
  bool ownWorkspaces = false;  // each rank's engine allocates its own, as a real rank does
  double postUs = 0;           // host time of each send and receive posted
};

void usage() {
  std::fprintf(
      stderr,
      "usage: terse-sim [options]\n"
      "  --world N              ranks (default 8)\n"
      "  --ranks-per-node L     ranks per node (default 8)\n"
      "  --intra-gbps G         intra-node GB/s per rank and direction (default 100)\n"
      "  --intra-lat-us U       intra-node link latency (default 1)\n"
      "  --nic-gbit G           NIC Gbit/s per direction (default 100)\n"
      "  --nic-per-rank         one NIC per rank (default: one per node, shared)\n"
      "  --nic-lat-us U         NIC link latency (default 2.5; a message off the node crosses 2)\n"
      "  --switch-gbit G        switch capacity (default 0: non-blocking)\n"
      "  --switch-lat-us U      switch latency (default 1)\n"
      "  --bytes SIZE           float32 tensor bytes, e.g. 64M, 1G (default 64M)\n"
      "  --codec SPEC           codec spec (default none)\n"
      "  --op allreduce|reducescatter|allgather   (default allreduce)\n"
      "  --algo A               auto (the engine's choice: flat and two-level timed on the\n"
      "                         simulated clock, the faster kept; an untimed first call),\n"
      "                         flat, twolevel, or ring | rd: flat with none's ring or recursive\n"
      "                         doubling forced (flat compressed calls scatter-reduce)\n"
      "  --model FILE           codec compute throughput from terse-bench codecs --json FILE\n"
      "  --assume-gbps C,D      every codec compresses at C and decompress-accumulates at D GB/s\n"
      "                         (an assumption, e.g. for a GPU; default: compute not charged)\n"
      "  --compute-share F      each rank gets this fraction of the compute figures (e.g. 0.25\n"
      "                         when 4 ranks share the machine --model was measured on)\n"
      "  --post-us U            each send and receive costs the posting rank U us of host time\n"
      "                         (software overhead; default 0: not modelled)\n"
      "  --json FILE            also write the result row as JSON\n"
      "  --own-workspaces       each rank's engine allocates its own workspaces, as real ranks\n"
      "                         do (default: one shared set, which the result does not depend\n"
      "                         on; a few hundred ranks fit in memory this way, thousands not)\n"
      "  --simgrid-cfg NAME:VALUE  a SimGrid setting (repeatable), e.g. network/optim:Lazy\n");
}

bool parseSize(const char* s, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || !(v > 0)) return false;
  double mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024, ++end;
  else if (*end == 'M' || *end == 'm')
    mult = 1 << 20, ++end;
  else if (*end == 'G' || *end == 'g')
    mult = 1 << 30, ++end;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v * mult);
  return *out >= 4;
}

bool parseDouble(const char* s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s, &end);
  return end != s && *end == '\0';
}

int parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "terse-sim: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto num = [&](double* d) {
      const char* v = value();
      if (!parseDouble(v, d)) {
        std::fprintf(stderr, "terse-sim: %s %s is not a number\n", a.c_str(), v);
        std::exit(2);
      }
    };
    double d = 0;
    sim::PlatformSpec& p = o->platform;
    if (a == "--help" || a == "-h")
      return usage(), 1;
    else if (a == "--world")
      num(&d), p.worldSize = static_cast<int>(d);
    else if (a == "--ranks-per-node")
      num(&d), p.ranksPerNode = static_cast<int>(d);
    else if (a == "--intra-gbps")
      num(&p.intraGBps);
    else if (a == "--intra-lat-us")
      num(&p.intraLatencyUs);
    else if (a == "--nic-gbit")
      num(&p.nicGbps);
    else if (a == "--nic-per-rank")
      p.nicPerRank = true;
    else if (a == "--own-workspaces")
      o->ownWorkspaces = true;
    else if (a == "--nic-lat-us")
      num(&p.nicLatencyUs);
    else if (a == "--switch-gbit")
      num(&p.switchGbps);
    else if (a == "--switch-lat-us")
      num(&p.switchLatencyUs);
    else if (a == "--bytes") {
      const char* v = value();
      if (!parseSize(v, &o->bytes)) {
        std::fprintf(stderr, "terse-sim: --bytes %s is not a size >= 4 (e.g. 64M)\n", v);
        return 2;
      }
    } else if (a == "--codec")
      o->codec = value();
    else if (a == "--op")
      o->op = value();
    else if (a == "--algo")
      o->algo = value();
    else if (a == "--model")
      o->model = value();
    else if (a == "--assume-gbps") {
      const char* v = value();
      if (std::sscanf(v, "%lf,%lf", &o->assumeCompress, &o->assumeDecompress) != 2 ||
          !(o->assumeCompress > 0) || !(o->assumeDecompress > 0)) {
        std::fprintf(stderr, "terse-sim: --assume-gbps %s is not C,D (two positive GB/s)\n", v);
        return 2;
      }
    } else if (a == "--compute-share") {
      num(&o->computeShare);
      if (!(o->computeShare > 0) || o->computeShare > 1e6) {
        std::fprintf(stderr, "terse-sim: --compute-share must be a positive fraction\n");
        return 2;
      }
    } else if (a == "--simgrid-cfg") {
      o->simgridConfig.push_back(value());
    } else if (a == "--post-us") {
      num(&o->postUs);
      if (!(o->postUs >= 0) || o->postUs > 1e6) {
        std::fprintf(stderr, "terse-sim: --post-us must be between 0 and 1e6\n");
        return 2;
      }
    } else if (a == "--json") {
      o->json = value();
    } else {
      std::fprintf(stderr, "terse-sim: unknown option '%s' (--help lists them)\n", a.c_str());
      return 2;
    }
  }
  if (o->op != "allreduce" && o->op != "reducescatter" && o->op != "allgather") {
    std::fprintf(stderr, "terse-sim: --op %s: use allreduce, reducescatter or allgather\n",
                 o->op.c_str());
    return 2;
  }
  if (o->algo != "auto" && o->algo != "flat" && o->algo != "twolevel" && o->algo != "ring" &&
      o->algo != "rd") {
    std::fprintf(stderr, "terse-sim: --algo %s: use auto, flat, twolevel, ring or rd\n",
                 o->algo.c_str());
    return 2;
  }
  if (!o->model.empty() && o->assumeCompress > 0) {
    std::fprintf(stderr, "terse-sim: --model and --assume-gbps exclude each other\n");
    return 2;
  }
  Status s = sim::validatePlatform(o->platform);
  if (!s.isOk()) {
    std::fprintf(stderr, "terse-sim: %s\n", s.message().c_str());
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = parse(argc, argv, &o)) return rc == 1 ? 0 : rc;
  auto real = makeCodec(o.codec);
  if (!real.isOk()) {
    std::fprintf(stderr, "terse-sim: %s\n", real.status().message().c_str());
    return 2;
  }
  // The engine's settings (TERSE_SEGMENT_BYTES, TERSE_ALGO, ...), read once here: the engine
  // never reads the environment, and every simulated rank runs with the same values, as a
  // communicator's ranks do. A malformed value keeps its default, as it did when the engine
  // read them itself.
  auto agreed = AgreedSettings::fromEnvironment();
  auto depth = kPipelineDepthSetting.readInt();
  const EngineSettings engineSettings = EngineSettings::from(
      agreed.isOk() ? agreed.value() : AgreedSettings::defaults(),
      depth.isOk() ? static_cast<size_t>(depth.value()) : EngineSettings::defaults().pipelineDepth);
  sim::ThroughputModel model = sim::ThroughputModel::uniform(0, 0);
  std::string computeNote = "compute not charged";
  if (!o.model.empty()) {
    auto m = sim::ThroughputModel::fromBenchJson(o.model);
    if (!m.isOk()) {
      std::fprintf(stderr, "terse-sim: %s\n", m.status().message().c_str());
      return 2;
    }
    model = *m;
    computeNote = model.describe();
  } else if (o.assumeCompress > 0) {
    model = sim::ThroughputModel::uniform(o.assumeCompress, o.assumeDecompress);
    computeNote = model.describe();
  }
  const bool compressed = (*real)->id() != CodecId::kNone;
  sim::CodecThroughput tp;
  if (compressed) {
    auto t = model.lookup((*real)->spec());
    if (!t.isOk()) {
      std::fprintf(stderr, "terse-sim: %s\n", t.status().message().c_str());
      return 2;
    }
    tp = *t;
    tp.compressGBps *= o.computeShare;
    tp.decompressAccumulateGBps *= o.computeShare;
    if (o.computeShare != 1) computeNote += formatString(" x %g per rank", o.computeShare);
  }
  // The engine's own float32 sums and conversions (uncompressed steps, two-level's node steps):
  // at `none`'s decompress-accumulate and compress rates.
  sim::CodecThroughput own;
  if (o.assumeCompress > 0 || !o.model.empty()) {
    auto t = model.lookup("none");
    if (!t.isOk()) {
      std::fprintf(stderr,
                   "terse-sim: %s (the engine's own float32 arithmetic is charged at "
                   "none's rates)\n",
                   t.status().message().c_str());
      return 2;
    }
    own = *t;
    own.compressGBps *= o.computeShare;
    own.decompressAccumulateGBps *= o.computeShare;
    if (!compressed && o.computeShare != 1)
      computeNote += formatString(" x %g per rank", o.computeShare);
  }
  auto arithmetic = sim::makeChargedArithmetic(own.decompressAccumulateGBps, own.compressGBps);
  sim::SizingCodec sizing(*real, tp, [](double s) { sim::chargeCompute(s); });
  const Codec* codec = compressed ? static_cast<const Codec*>(&sizing) : real->get();

  // One send and one receive buffer shared by every rank, reserved but not backed: the sizing
  // codecs never touch them; `none` reduces real (meaningless) floats in them.
  const size_t count = o.bytes / 4;
  const size_t bufBytes = count * 4;
  void* send = ::mmap(nullptr, bufBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* recv = ::mmap(nullptr, bufBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (send == MAP_FAILED || recv == MAP_FAILED) {
    std::fprintf(stderr, "terse-sim: cannot reserve %zu bytes of address space\n", bufBytes);
    return 1;
  }

  CollectiveOp op;
  op.kind = o.op == "allreduce"       ? CollectiveKind::kAllReduce
            : o.op == "reducescatter" ? CollectiveKind::kReduceScatter
                                      : CollectiveKind::kAllGather;
  op.send = send;
  op.recv = recv;
  op.count = count;
  op.codec = codec;

  sim::SimTransportOptions topt;
  topt.copyPayload = false;
  topt.postSeconds = o.postUs * 1e-6;
  const int n = o.platform.worldSize;
  std::vector<double> started(n, 0), ended(n, 0);
  Status failed;
  // auto: what the engine chose and why (rank 0's; every rank adopts the same).
  std::string autoChoice;
  auto workspaces = o.ownWorkspaces ? nullptr : sim::makeSharedWorkspaces();
  const auto wallStart = std::chrono::steady_clock::now();
  auto result = sim::runSimulation(
      o.platform, topt,
      [&](Transport& t) {
        CollectiveEngine engine(t, std::chrono::hours(24), engineSettings);  // simulated time
        engine.setWorkspaceProvider(workspaces);
        engine.setArithmeticHook(arithmetic);
        engine.setStepLanes(sim::makeActorLane);
        if (o.algo == "ring") engine.setSmallBytes(0);
        if (o.algo == "rd") engine.setSmallBytes(~size_t{0});
        // The platform's nodes, as the api layer gives them from the rendezvous' host names;
        // group tag spaces 1 and 2 (nothing else uses groups here).
        std::vector<int> nodeOfRank(n);
        for (int r = 0; r < n; ++r) nodeOfRank[r] = r / o.platform.ranksPerNode;
        Status s = engine.enableTwoLevel(nodeOfRank, 1, 2);
        CollectiveOp mine = op;
        mine.algorithm = o.algo == "twolevel" ? Algorithm::kTwoLevel
                         : o.algo == "auto"   ? Algorithm::kAuto
                                              : Algorithm::kFlat;
        if (o.algo == "auto" && s.isOk()) {
          // The engine times flat and two-level on the simulated clock and adopts the faster
          // (CollectiveEngine::chooseAlgorithm); the choice and its trials run in an untimed
          // first call, as a training job's first step pays them.
          engine.setClock(sim::simNow);
          s = engine.run(mine);
          if (s.isOk() && t.rank() == 0) {
            auto chosen = engine.resolveAlgorithm(op);
            const auto& choices = engine.stats().algorithmChoices;
            autoChoice =
                std::string(algorithmName(chosen.isOk() ? chosen.value() : Algorithm::kAuto)) +
                (choices.empty() ? std::string(" (no choice to make: flat)")
                                 : " (" + choices.begin()->second + ")");
          }
        }
        started[t.rank()] = sim::simNow();
        if (s.isOk()) s = engine.run(mine);
        ended[t.rank()] = sim::simNow();
        if (!s.isOk() && failed.isOk()) failed = s.withContext("rank " + std::to_string(t.rank()));
      },
      o.simgridConfig);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wallStart).count();
  if (!result.isOk()) {
    std::fprintf(stderr, "terse-sim: %s\n", result.status().message().c_str());
    return result.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (!failed.isOk()) {
    std::fprintf(stderr, "terse-sim: the collective failed: %s\n", failed.message().c_str());
    return 1;
  }
  double seconds = 0;
  for (int r = 0; r < n; ++r) seconds = std::max(seconds, ended[r] - started[r]);
  // Bytes through the busiest NIC (per direction): a rank's off-node bytes, summed per node
  // when the node shares one NIC.
  std::map<int, uint64_t> nicOut;
  uint64_t totalOut = 0;
  for (int r = 0; r < n; ++r) {
    const int nic = o.platform.nicPerRank ? r : r / o.platform.ranksPerNode;
    nicOut[nic] += result->traffic[r].bytesSentOffNode;
    totalOut += result->traffic[r].bytesSent;
  }
  uint64_t maxNic = 0;
  for (const auto& kv : nicOut) maxNic = std::max(maxNic, kv.second);
  const double busFactor = o.op == "allreduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
  const double algbw = seconds > 0 ? o.bytes / seconds / 1e9 : 0;
  const double timeUs = seconds * 1e6;
  const std::string postNote =
      o.postUs > 0 ? formatString("; %g us of host time per send and receive", o.postUs) : "";
  std::printf("# terse-sim: %s\n# %d ranks, %s %s, codec %s, algo %s; %s%s\n",
              sim::describePlatform(o.platform).c_str(), n, o.op.c_str(), "float32",
              (*real)->spec().c_str(), o.algo.c_str(), computeNote.c_str(), postNote.c_str());
  // The byte columns count the whole simulation: with auto, its trials and first call too.
  if (o.algo == "auto")
    std::printf("# auto chose %s; nic_bytes and wire_bytes include the trials\n",
                autoChoice.c_str());
  std::printf("%12s %12s %6s %6s %12s %8s %8s %14s %12s %10s\n", "size", "count", "type", "redop",
              "time(us)", "algbw", "busbw", "nic_bytes", "wire_bytes", "wall(s)");
  std::printf("%12zu %12zu %6s %6s %12.1f %8.2f %8.2f %14llu %12llu %10.2f\n", o.bytes, count,
              "float", o.op == "allgather" ? "none" : "sum", timeUs, algbw, algbw * busFactor,
              static_cast<unsigned long long>(maxNic), static_cast<unsigned long long>(totalOut),
              wall);
  if (!o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "terse-sim: cannot write %s\n", o.json.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"benchmark\": \"terse-sim\", \"platform\": \"%s\", \"world\": %d, "
                 "\"ranks_per_node\": %d, \"op\": \"%s\", \"codec\": \"%s\", \"algo\": \"%s\", "
                 "\"compute\": \"%s\", \"bytes\": %zu, \"time_us\": %.3f, \"algbw_gbs\": %.6f, "
                 "\"busbw_gbs\": %.6f, \"max_nic_bytes\": %llu, \"wire_bytes\": %llu, "
                 "\"post_us\": %.3f, \"wall_s\": %.3f, \"auto_choice\": \"%s\"}\n",
                 sim::describePlatform(o.platform).c_str(), n, o.platform.ranksPerNode,
                 o.op.c_str(), (*real)->spec().c_str(), o.algo.c_str(), computeNote.c_str(),
                 o.bytes, timeUs, algbw, algbw * busFactor, static_cast<unsigned long long>(maxNic),
                 static_cast<unsigned long long>(totalOut), o.postUs, wall, autoChoice.c_str());
    std::fclose(f);
  }
  return 0;
}
