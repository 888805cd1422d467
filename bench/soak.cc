// terse-bench soak: thousands of random collectives on random worlds, every result checked.
//
//   terse-bench soak --seconds 30            # what ctest runs (Soak.ThirtySeconds)
//   terse-bench soak --minutes 30 --seed 42  # on demand; the seed replays a run
//
// Each world has a random size (1..--max-ranks), transport (in-process, or UCX with every rank
// a thread of this process), pipeline segment and small-message threshold. It runs rounds of
// one to three calls in flight per rank (allreduce, reduce-scatter, allgather with random
// codec, count, element type and op; now and then a barrier), plus two tensors with error
// feedback called again and again. Every result is checked when its round ends:
//  - every rank succeeded and, where ranks hold the same tensor, holds the same bits;
//  - none: within float32 summation error of the serial sum (allgather: the exact inputs);
//  - deterministic codecs (fp16, bf16, int8 nearest, onebit, topk, with or without carried
//    residuals): bit for bit the single-process model of collectives/reference.h;
//  - fp16, bf16, int8 (also stochastic) and auto: within the codec's error bound of the sum.
// The first failure stops the run with the seed, the world and the call, and exit status 1.
#include "subcommand.h"

#include "terse/api/internal.h"
#include "terse/collectives/reference.h"
#include "terse/common/env.h"
#include "terse/compressors/auto_spec.h"
#include "terse/kernels/element_type.h"
#include "terse/kernels/numeric.h"
#include "terse/rendezvous/store.h"

#include <terse/communicator.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace terse::bench {

// Settings read in this file (terse/common/env.h: declared next to their readers).
const EnvSetting kTestSeedSetting{
    {"TERSE_TEST_SEED", "int", "",
     "Tests and terse-bench soak: seed of the randomized fault-injection and soak runs. Unset: "
     "a fresh seed per run, printed so a failure can be replayed.",
     0, std::numeric_limits<int64_t>::max()}};

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  double seconds = 30;
  uint64_t seed = 0;
  bool seedGiven = false;
  int maxRanks = 6;
  std::string transport = "both";  // inproc | ucx | both
  size_t maxCount = 300000;
};

void usage() {
  std::printf(
      "usage: terse-bench soak [options]\n"
      "  --seconds S        run for S seconds [30]\n"
      "  --minutes M        run for M minutes\n"
      "  --seed N           replay a run (default: TERSE_TEST_SEED, else a fresh seed)\n"
      "  --max-ranks N      largest world, ranks as threads [6]\n"
      "  --transport T      inproc | ucx | both [both]\n"
      "  --max-count N      largest tensor in elements [300000]\n");
}

enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBarrier };
const char* kindName(Kind k) {
  switch (k) {
    case Kind::kAllReduce: return "allreduce";
    case Kind::kReduceScatter: return "reducescatter";
    case Kind::kAllGather: return "allgather";
    case Kind::kBarrier: return "barrier";
  }
  return "?";
}

const char* kCodecs[] = {"none",
                         "fp16",
                         "bf16",
                         "int8",
                         "int8:block=64",
                         "int8:round=stochastic,seed=7",
                         "onebit",
                         "onebit:block=256",
                         "topk:ratio=0.05",
                         "topk",
                         "auto:max=int8"};
// Error-feedback tensors use codecs the model reproduces bit for bit.
const char* kFeedbackCodecs[] = {"onebit", "topk:ratio=0.05", "int8"};

struct Call {
  Kind kind = Kind::kAllReduce;
  std::string codec = "none";
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int slot = -1;    // error-feedback tensor, or -1
  uint64_t id = 0;  // seeds the inputs
  std::string describe() const {
    return formatString("%s codec %s, %zu x %s, %s%s", kindName(kind), codec.c_str(), count,
                        dataTypeName(dtype), reduceOpName(op),
                        slot >= 0 ? formatString(", feedback tensor %d", slot).c_str() : "");
  }
};

struct World {
  int n = 1;
  bool ucx = false;
  size_t segmentBytes = 0, smallBytes = 0;
  std::string describe() const {
    return formatString("%d ranks over %s, TERSE_SEGMENT_BYTES=%zu, TERSE_SMALL_BYTES=%zu", n,
                        ucx ? "UCX (threads)" : "inproc", segmentBytes, smallBytes);
  }
};

size_t partLength(size_t count, int n, int r) {
  return count / n + (static_cast<size_t>(r) < count % n ? 1 : 0);
}

float inputValue(uint64_t id, int rank, size_t i) {
  uint64_t h = num::mix64((id << 24) ^ (uint64_t(rank) << 52) ^ (i * 0x9e3779b97f4a7c15ull));
  float u = static_cast<float>(h >> 40) / 16777216.0f;  // [0, 1)
  // Mostly in [-1, 1], now and then a larger value so block scales differ.
  return (2.0f * u - 1.0f) * ((h & 0xff) == 0 ? 8.0f : 1.0f);
}

std::vector<uint8_t> makeInput(const Call& c, int rank, int n) {
  size_t elems = c.kind == Kind::kAllGather ? partLength(c.count, n, rank) : c.count;
  if (c.kind == Kind::kBarrier) elems = 0;
  std::vector<uint8_t> out(elems * dataTypeSize(c.dtype));
  for (size_t i = 0; i < elems; ++i)
    storeElement(c.dtype, out.data(), i, inputValue(c.id, rank, i));
  return out;
}

float loadAt(const std::vector<uint8_t>& buf, DataType dt, size_t i) {
  return loadElement(dt, buf.data(), i);
}

double unitRoundoff(DataType dt) {
  return dt == DataType::kFloat32 ? 0x1p-24 : dt == DataType::kFloat16 ? 0x1p-11 : 0x1p-8;
}

// One error-feedback tensor of a world: a fixed call shape, each rank's residuals, and the
// model's copy of them.
struct FeedbackSlot {
  Call shape;
  std::vector<ErrorFeedback> ef;
  SimulatedResiduals model;
};

struct Soak {
  Options opt;
  std::mt19937_64 rng;
  uint64_t nextId = 1;
  long long worlds = 0, calls = 0, checkedBitwise = 0, checkedBound = 0;
  std::map<std::string, long long> perCodec;

  size_t drawCount() {
    switch (rng() % 8) {
      case 0: return rng() % 65;  // 0 included
      case 1:
      case 2:
      case 3: return 65 + rng() % 8128;
      default: return 8193 + rng() % (opt.maxCount > 8193 ? opt.maxCount - 8192 : 1);
    }
  }
  DataType drawType() {
    const DataType t[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};
    return t[rng() % 3];
  }
  Call drawCall() {
    Call c;
    const unsigned k = rng() % 20;
    c.kind = k < 10   ? Kind::kAllReduce
             : k < 14 ? Kind::kReduceScatter
             : k < 19 ? Kind::kAllGather
                      : Kind::kBarrier;
    c.codec = kCodecs[rng() % std::size(kCodecs)];
    c.count = drawCount();
    c.dtype = drawType();
    c.op = rng() % 2 ? ReduceOp::kSum : ReduceOp::kAvg;
    c.id = nextId++;
    return c;
  }

  int fail(const World& w, const Call& c, const std::string& what) {
    std::fprintf(stderr,
                 "terse-bench soak: FAILED after %lld worlds and %lld collectives (seed %llu)\n"
                 "  world: %s\n  call:  %s\n  %s\n",
                 worlds, calls, static_cast<unsigned long long>(opt.seed), w.describe().c_str(),
                 c.describe().c_str(), what.c_str());
    return 1;
  }

  // Checks the results of one call on every rank. Returns nonzero after reporting a failure.
  int check(const World& w, const Call& c, const std::vector<Status>& status,
            const std::vector<std::vector<uint8_t>>& out, FeedbackSlot* slot) {
    const int n = w.n;
    for (int r = 0; r < n; ++r)
      if (!status[r].isOk())
        return fail(w, c, formatString("rank %d: %s", r, status[r].toString().c_str()));
    if (c.kind == Kind::kBarrier) return 0;
    ++perCodec[c.codec];
    if (c.kind != Kind::kReduceScatter)
      for (int r = 1; r < n; ++r)
        if (out[r] != out[0])
          return fail(w, c, formatString("rank %d holds other bits than rank 0", r));

    std::vector<std::vector<uint8_t>> in(n);
    for (int r = 0; r < n; ++r) in[r] = makeInput(c, r, n);
    const size_t es = dataTypeSize(c.dtype);
    const bool none = c.codec == "none";
    const bool stochastic = c.codec.find("stochastic") != std::string::npos;
    const bool autoSpec = isAutoSpec(c.codec);

    // Bit for bit against the model.
    if (!none && !stochastic && !autoSpec) {
      auto codec = makeCodec(c.codec);
      if (!codec.isOk()) return fail(w, c, codec.status().toString());
      std::vector<const void*> inputs(n);
      for (int r = 0; r < n; ++r) inputs[r] = in[r].data();
      const size_t segment = std::max<size_t>(65536, w.segmentBytes / 4 / 65536 * 65536);
      auto kind = c.kind == Kind::kAllReduce       ? CollectiveKind::kAllReduce
                  : c.kind == Kind::kReduceScatter ? CollectiveKind::kReduceScatter
                                                   : CollectiveKind::kAllGather;
      auto model = simulateCompressedCollective(kind, inputs, c.count, c.dtype, c.op, **codec,
                                                segment, slot ? &slot->model : nullptr);
      if (!model.isOk()) return fail(w, c, "model: " + model.status().toString());
      for (int r = 0; r < n; ++r) {
        if (out[r] == (*model)[r]) continue;
        size_t i = 0;
        while (i * es < out[r].size() && i * es < (*model)[r].size() &&
               std::memcmp(&out[r][i * es], &(*model)[r][i * es], es) == 0)
          ++i;
        return fail(w, c,
                    formatString("rank %d differs from the single-process model at element %zu "
                                 "(%zu vs %zu bytes)",
                                 r, i, out[r].size(), (*model)[r].size()));
      }
      ++checkedBitwise;
      if (c.codec.rfind("onebit", 0) == 0 || c.codec.rfind("topk", 0) == 0) return 0;
    }

    // Against the exact result, within the codec's bound.
    const double outU = unitRoundoff(c.dtype);
    if (c.kind == Kind::kAllGather) {
      for (int r = 0; r < n; ++r) {
        size_t begin = 0;
        for (int q = 0; q < r; ++q) begin += partLength(c.count, n, q);
        const size_t len = partLength(c.count, n, r);
        if (none) {
          if (len && std::memcmp(out[0].data() + begin * es, in[r].data(), len * es) != 0)
            return fail(w, c, formatString("part of rank %d is not its input", r));
          continue;
        }
        for (size_t i = 0; i < len; ++i) {
          double x = loadAt(in[r], c.dtype, i), got = loadAt(out[0], c.dtype, begin + i);
          double tol = c.codec == "fp16"   ? (0x1p-11 + outU) * std::fabs(x)
                       : c.codec == "bf16" ? (0x1p-8 + outU) * std::fabs(x)
                                           : 8.0 / 127 + outU * std::fabs(x);  // int8, auto
          if (std::fabs(got - x) > tol + 1e-7)
            return fail(
                w, c,
                formatString("element %zu of rank %d's part: %.9g, input %.9g", i, r, got, x));
        }
      }
      ++checkedBound;
      return 0;
    }
    const double avg = c.op == ReduceOp::kAvg ? 1.0 / n : 1.0;
    for (size_t i = 0; i < c.count; ++i) {
      int owner = 0;
      size_t local = i;
      if (c.kind == Kind::kReduceScatter) {
        while (local >= partLength(c.count, n, owner)) local -= partLength(c.count, n, owner++);
      }
      double ref = 0, sumAbs = 0, maxAbs = 0;
      for (int r = 0; r < n; ++r) {
        double v = loadAt(in[r], c.dtype, i);
        ref += v;
        sumAbs += std::fabs(v);
        maxAbs = std::max(maxAbs, std::fabs(v));
      }
      ref *= avg;
      sumAbs *= avg;
      const double got = c.kind == Kind::kReduceScatter ? loadAt(out[owner], c.dtype, local)
                                                        : loadAt(out[0], c.dtype, i);
      double tol;
      if (none) {
        tol = (n * 0x1p-23 + n * outU) * sumAbs + outU * std::fabs(ref) + 1e-30;
      } else if (c.codec == "fp16" || c.codec == "bf16") {
        const double u = c.codec == "fp16" ? 0x1p-11 : 0x1p-8;
        tol = 2 * u * (sumAbs + std::fabs(ref)) + outU * std::fabs(ref) + 1e-7;
      } else {
        // int8 and auto (whose loosest choice is int8): each contribution off by up to one
        // step of its block's scale, the owner's recompression once more.
        tol = (n * 8.0 + n * 8.0) / 127 * avg + outU * std::fabs(ref) + 1e-6;
      }
      if (std::fabs(got - ref) > tol)
        return fail(
            w, c, formatString("element %zu: %.9g, exact %.9g (tolerance %.3g)", i, got, ref, tol));
    }
    ++checkedBound;
    return 0;
  }

  Result<std::vector<std::unique_ptr<Communicator>>> makeWorld(const World& w) {
    setenv("TERSE_SEGMENT_BYTES", std::to_string(w.segmentBytes).c_str(), 1);
    setenv("TERSE_SMALL_BYTES", std::to_string(w.smallBytes).c_str(), 1);
    const auto timeout = std::chrono::milliseconds(120000);
    if (!w.ucx) return createInProcWorld(w.n, timeout);
    auto store = createMemoryStore();
    std::vector<std::unique_ptr<Communicator>> comms(w.n);
    std::vector<Status> status(w.n);
    std::vector<std::thread> threads;
    for (int r = 0; r < w.n; ++r)
      threads.emplace_back([&, r] {
        auto c = Communicator::createUcx(r, w.n, *store, timeout, "soak" + std::to_string(worlds));
        if (c.isOk())
          comms[r] = std::move(c).value();
        else
          status[r] = c.status();
      });
    for (auto& t : threads) t.join();
    for (auto& s : status) TERSE_RETURN_IF_ERROR(s);
    return comms;
  }

  int runWorld(const World& w, Clock::time_point end) {
    auto made = makeWorld(w);
    if (!made.isOk()) return fail(w, Call{}, "creating the world: " + made.status().toString());
    std::vector<std::unique_ptr<Communicator>> comms = std::move(made).value();
    ++worlds;
    const int n = w.n;
    // Two error-feedback tensors, called in most rounds.
    std::vector<FeedbackSlot> slots(2);
    for (size_t s = 0; s < slots.size(); ++s) {
      Call& shape = slots[s].shape;
      shape.kind = rng() % 3 ? Kind::kAllReduce : Kind::kReduceScatter;
      shape.codec = kFeedbackCodecs[rng() % std::size(kFeedbackCodecs)];
      shape.count = drawCount();
      shape.dtype = drawType();
      shape.op = rng() % 2 ? ReduceOp::kSum : ReduceOp::kAvg;
      shape.slot = static_cast<int>(s);
      for (int r = 0; r < n; ++r) {
        auto ef = ErrorFeedback::create(shape.codec, shape.count);
        if (!ef.isOk()) return fail(w, shape, ef.status().toString());
        slots[s].ef.push_back(std::move(ef).value());
        slots[s].model.worker.emplace_back(shape.count, 0.0f);
      }
    }
    const int rounds = 4 + static_cast<int>(rng() % 12);
    for (int round = 0; round < rounds && Clock::now() < end; ++round) {
      std::vector<Call> round_calls;
      const int fresh = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < fresh; ++k) round_calls.push_back(drawCall());
      for (auto& slot : slots)
        if (rng() % 4) {
          Call c = slot.shape;
          c.id = nextId++;
          round_calls.insert(round_calls.begin() + rng() % (round_calls.size() + 1), c);
        }
      const size_t m = round_calls.size();
      std::vector<std::vector<Status>> status(m, std::vector<Status>(n));
      std::vector<std::vector<std::vector<uint8_t>>> out(m, std::vector<std::vector<uint8_t>>(n));
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          Communicator& comm = *comms[r];
          std::vector<std::vector<uint8_t>> in(m);
          std::vector<Work> work(m);
          for (size_t k = 0; k < m; ++k) {
            const Call& c = round_calls[k];
            if (c.kind == Kind::kBarrier) {
              // The barrier is blocking; it runs in order with the queued calls.
              for (size_t j = 0; j < k; ++j) status[j][r] = work[j].wait();
              status[k][r] = comm.barrier();
              continue;
            }
            in[k] = makeInput(c, r, n);
            const size_t es = dataTypeSize(c.dtype);
            out[k][r].assign(
                (c.kind == Kind::kReduceScatter ? partLength(c.count, n, r) : c.count) * es, 0xA5);
            CollectiveOptions o{c.codec, c.slot >= 0 ? &slots[c.slot].ef[r] : nullptr};
            switch (c.kind) {
              case Kind::kAllReduce:
                work[k] =
                    comm.allreduceAsync(in[k].data(), out[k][r].data(), c.count, c.dtype, c.op, o);
                break;
              case Kind::kReduceScatter:
                work[k] = comm.reduceScatterAsync(in[k].data(), out[k][r].data(), c.count, c.dtype,
                                                  c.op, o);
                break;
              case Kind::kAllGather:
                work[k] = comm.allgatherAsync(in[k].data(), out[k][r].data(), c.count, c.dtype, o);
                break;
              case Kind::kBarrier: break;
            }
          }
          for (size_t k = 0; k < m; ++k)
            if (round_calls[k].kind != Kind::kBarrier) status[k][r] = work[k].wait();
        });
      for (auto& t : threads) t.join();
      for (size_t k = 0; k < m; ++k) {
        ++calls;
        const Call& c = round_calls[k];
        if (int rc = check(w, c, status[k], out[k], c.slot >= 0 ? &slots[c.slot] : nullptr))
          return rc;
      }
    }
    // UCX teardown progresses the closing connections: each rank closes on its own thread.
    std::vector<std::thread> closers;
    for (auto& c : comms) closers.emplace_back([&c] { c.reset(); });
    for (auto& t : closers) t.join();
    return 0;
  }

  int run() {
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(opt.seconds));
    std::printf("terse-bench soak: seed %llu (replay with --seed), %.0f s, up to %d ranks, %s\n",
                static_cast<unsigned long long>(opt.seed), opt.seconds, opt.maxRanks,
                opt.transport.c_str());
    std::fflush(stdout);
    while (Clock::now() < end) {
      World w;
      w.n = 1 + static_cast<int>(rng() % opt.maxRanks);
      w.ucx = opt.transport == "ucx" || (opt.transport == "both" && rng() % 3 == 0);
      w.segmentBytes = size_t{262144} << (rng() % 3);
      w.smallBytes = rng() % 2 ? 65536 : 4096;
      if (int rc = runWorld(w, end)) return rc;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf(
        "terse-bench soak: OK: %lld worlds, %lld collectives in %.1f s (%lld checked bit "
        "for bit against the model, %lld against the exact result's bound)\n",
        worlds, calls, secs, checkedBitwise, checkedBound);
    for (const auto& [codec, count] : perCodec)
      std::printf("  %-30s %lld calls\n", codec.c_str(), count);
    return 0;
  }
};

int soakMain(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "terse-bench soak: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&](const char* text) {
      char* endp = nullptr;
      double v = std::strtod(text, &endp);
      if (endp == text || *endp != '\0' || !(v >= 0)) {
        std::fprintf(stderr, "terse-bench soak: %s '%s' is not a number\n", a.c_str(), text);
        std::exit(2);
      }
      return v;
    };
    if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else if (a == "--seconds") {
      opt.seconds = number(next());
    } else if (a == "--minutes") {
      opt.seconds = 60 * number(next());
    } else if (a == "--seed") {
      opt.seed = static_cast<uint64_t>(std::strtoull(next(), nullptr, 10));
      opt.seedGiven = true;
    } else if (a == "--max-ranks") {
      opt.maxRanks = static_cast<int>(number(next()));
      if (opt.maxRanks < 1 || opt.maxRanks > 64) {
        std::fprintf(stderr, "terse-bench soak: --max-ranks must be 1..64\n");
        return 2;
      }
    } else if (a == "--transport") {
      opt.transport = next();
      if (opt.transport != "inproc" && opt.transport != "ucx" && opt.transport != "both") {
        std::fprintf(stderr, "terse-bench soak: --transport is inproc, ucx or both\n");
        return 2;
      }
    } else if (a == "--max-count") {
      opt.maxCount = static_cast<size_t>(number(next()));
    } else {
      std::fprintf(stderr, "terse-bench soak: unknown option '%s'\n", a.c_str());
      usage();
      return 2;
    }
  }
  if (!opt.seedGiven) {
    auto fixed = kTestSeedSetting.readInt();
    if (fixed.isOk()) {
      opt.seed = static_cast<uint64_t>(fixed.value());
    } else {
      opt.seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
    }
  }
  Soak soak;
  soak.opt = opt;
  soak.rng.seed(opt.seed);
  return soak.run();
}

const RegisterSubcommand kRegisterSoak({"soak",
                                        "random collectives on random worlds, every result "
                                        "checked (robustness)",
                                        soakMain});

}  // namespace
}  // namespace terse::bench
