// terse-bench allreduce | reducescatter | allgather: nccl-tests' flags and table, run under
// terse-run (or mpirun/srun/torchrun), one line per size and codec:
//
//   terse-run -n 4 terse-bench allreduce -b 1M -e 64M -f 4 --codec none --codec onebit
//
// time is the slowest rank's average per call; algbw = uncompressed bytes / time; busbw applies
// nccl-tests' factor (2(n-1)/n for allreduce, (n-1)/n for the others), so `none` is comparable with
// nccl-tests and MPI. wire is the bytes this rank sent per call (descriptor included), ratio the
// uncompressed algorithm's bytes over that, and maxrelerr max|got - exact| / max|exact| (-c 1),
// the exact result recomputed from every rank's deterministic input (--seed picks another one).
// The JSON rows also carry rmsrelerr, the root mean square of got - exact over max|exact|: the
// maximum is one element's, the RMS what the codec does on average, and algorithms can differ in
// one and not the other (docs/benchmarks.md, "Accuracy: two-level against flat").
//
// --device cuda puts send and recv in device memory (cudaMalloc), so the communicator takes its
// device path (codecs on the GPU, docs/cuda.md); the input is the same values copied there, and
// the check copies the result back outside the timed span. The JSON rows then also say
// "buffers": "cuda", and carry compress_us / reduce_us: the codec parts of a call as the
// communicator's statistics count them (for CUDA buffers the time to run the compress kernels,
// which synchronize, and to queue the decoders), the slowest rank's, beside time_us.
#include "subcommand.h"

#include "terse/api/internal.h"
#include "terse/collectives/engine.h"
#include "terse/common/env.h"
#include "terse/compressors/auto_spec.h"
#include "terse/kernels/device.h"
#include "terse/kernels/element_type.h"
#include "terse/kernels/numeric.h"

#include <terse/communicator.h>

#include <algorithm>
#include <map>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace terse::bench {
namespace {

// The deterministic input every rank draws (and every rank can recompute).
struct Input {
  // uniform: signed, magnitude up to 0.5-1.5 (light tails, what every earlier figure used);
  // normal and laplace: unit scale, the second heavy-tailed as gradients often are. Which one
  // matters for comparing algorithms: a block-scaled codec's error follows its block's largest
  // value, and how that grows when values are summed before compression depends on the tails.
  enum class Shape { kUniform, kNormal, kLaplace } shape = Shape::kUniform;
  uint64_t seed = 0;  // 0 is the input every earlier figure was made with
};

const char* shapeName(Input::Shape s) {
  switch (s) {
    case Input::Shape::kNormal: return "normal";
    case Input::Shape::kLaplace: return "laplace";
    case Input::Shape::kUniform: break;
  }
  return "uniform";
}

struct Options {
  size_t minBytes = 32 << 20, maxBytes = 32 << 20;
  double factor = 2;
  int iters = 20, warmup = 5;
  bool check = true;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::vector<std::string> codecs;
  std::vector<std::string> algos;  // allreduce's algorithm (--algo), each with every codec
  std::string json;
  bool interleave = false;
  bool cudaBuffers = false;  // --device cuda
  Input input;
};

bool parseSize(const char* text, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || v < 0) return false;
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      ++end;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      ++end;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      ++end;
      break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v);
  return true;
}

const char* kAllCodecs[] = {"none",  "fp16",  "bf16", "int8",   "fp8",
                            "mxfp8", "mxfp4", "int4", "onebit", "topk"};

void usage(const char* name) {
  std::printf(
      "usage: terse-bench %s [options]\n"
      "  -b, --minbytes SIZE   smallest message (uncompressed bytes; K/M/G suffixes) [32M]\n"
      "  -e, --maxbytes SIZE   largest message [32M]\n"
      "  -f, --stepfactor F    multiply the size by F each step [2]\n"
      "  -n, --iters N         timed calls per size [20]\n"
      "  -w, --warmup_iters N  untimed calls first [5]\n"
      "  -c, --check 0|1       compute maxrelerr against the exact result [1]\n"
      "      --input SHAPE     uniform | normal | laplace: the values' distribution [uniform]\n"
      "      --seed S          another deterministic input (each rank's values drawn anew) [0]\n"
      "  -d, --datatype T      float | half | bfloat16 [float]\n"
      "  -o, --op OP           sum | avg [sum]\n"
      "  -J, --json FILE       also write the rows as JSON\n"
      "      --codec SPEC      codec spec (repeatable; 'all' = every codec) [none]\n"
      "      --algo A          auto | flat | twolevel (repeatable; each with every codec) [auto]\n"
      "      --interleave      time the codecs call by call in turn (one call of each, then\n"
      "                        again), so a load that drifts during the run hits all alike\n"
      "      --device D        host | cuda: where send and recv live; cuda exits 77 (skip)\n"
      "                        when this build or machine has no usable CUDA device [host]\n"
      "Ranks come from terse-run, mpirun, srun or torchrun (see docs/env.md).\n",
      name);
}

int parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "terse-bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto bad = [&](const char* v) {
      std::fprintf(stderr, "terse-bench: bad value '%s' for %s\n", v, a.c_str());
      return 2;
    };
    if (a == "-h" || a == "--help") {
      usage(argv[0]);
      return 1;
    } else if (a == "-b" || a == "--minbytes") {
      const char* v = value();
      if (!parseSize(v, &o->minBytes)) return bad(v);
    } else if (a == "-e" || a == "--maxbytes") {
      const char* v = value();
      if (!parseSize(v, &o->maxBytes)) return bad(v);
    } else if (a == "-f" || a == "--stepfactor") {
      o->factor = std::atof(value());
      if (o->factor <= 1.0) return bad(argv[i]);
    } else if (a == "-n" || a == "--iters") {
      o->iters = std::atoi(value());
      if (o->iters < 1) return bad(argv[i]);
    } else if (a == "-w" || a == "--warmup_iters") {
      o->warmup = std::atoi(value());
      if (o->warmup < 0) return bad(argv[i]);
    } else if (a == "-c" || a == "--check") {
      o->check = std::atoi(value()) != 0;
    } else if (a == "--seed") {
      const char* v = value();
      char* end = nullptr;
      o->input.seed = std::strtoull(v, &end, 0);
      if (end == v || *end != '\0' || *v == '-') return bad(v);
    } else if (a == "--input") {
      std::string v = value();
      if (v == "uniform")
        o->input.shape = Input::Shape::kUniform;
      else if (v == "normal")
        o->input.shape = Input::Shape::kNormal;
      else if (v == "laplace")
        o->input.shape = Input::Shape::kLaplace;
      else
        return bad(v.c_str());
    } else if (a == "-d" || a == "--datatype") {
      std::string v = value();
      if (v == "float" || v == "float32")
        o->dtype = DataType::kFloat32;
      else if (v == "half" || v == "float16")
        o->dtype = DataType::kFloat16;
      else if (v == "bfloat16")
        o->dtype = DataType::kBFloat16;
      else
        return bad(v.c_str());
    } else if (a == "-o" || a == "--op") {
      std::string v = value();
      if (v == "sum")
        o->op = ReduceOp::kSum;
      else if (v == "avg")
        o->op = ReduceOp::kAvg;
      else
        return bad(v.c_str());
    } else if (a == "-J" || a == "--json") {
      o->json = value();
    } else if (a == "--algo") {
      std::string v = value();
      if (!parseAlgorithm(v).isOk()) return bad(v.c_str());
      o->algos.push_back(v);
    } else if (a == "--interleave") {
      o->interleave = true;
    } else if (a == "--device") {
      std::string v = value();
      if (v == "host")
        o->cudaBuffers = false;
      else if (v == "cuda")
        o->cudaBuffers = true;
      else
        return bad(v.c_str());
    } else if (a == "--codec") {
      std::string v = value();
      if (v == "all")
        o->codecs.insert(o->codecs.end(), std::begin(kAllCodecs), std::end(kAllCodecs));
      else
        o->codecs.push_back(v);
    } else {
      std::fprintf(stderr, "terse-bench: unknown option '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (o->codecs.empty()) o->codecs.push_back("none");
  if (o->algos.empty()) o->algos.push_back("auto");
  if (o->maxBytes < o->minBytes) o->maxBytes = o->minBytes;
  return 0;
}

// Deterministic gradient-like input of `rank`, so every rank can recompute the exact result.
// Seed 0 leaves the hash's argument as it always was, so earlier figures stay reproducible.
float inputValue(const Input& in, int rank, size_t i) {
  uint64_t h = num::mix64((uint64_t(rank + 1) << 40) ^ (i * 0x9e3779b97f4a7c15ull) ^
                          (in.seed ? num::mix64(in.seed) : 0));
  // The top 24 bits as a uniform in (0, 1), kept off zero for the logarithms below.
  const double open = (static_cast<double>(h >> 40) + 0.5) / 16777216.0;
  switch (in.shape) {
    case Input::Shape::kUniform: break;
    case Input::Shape::kNormal: {
      // Box-Muller with a second 24-bit uniform from the next bits.
      double u2 = static_cast<double>((h >> 16) & 0xffffff) / 16777216.0;
      return static_cast<float>(std::sqrt(-2.0 * std::log(open)) *
                                std::cos(6.283185307179586 * u2));
    }
    case Input::Shape::kLaplace:  // inverse CDF: an exponential magnitude with a random sign
      return static_cast<float>(((h >> 16) & 1 ? -1.0 : 1.0) * -std::log(open));
  }
  const float u = static_cast<float>(h >> 40) / 16777216.0f;  // [0, 1): the original formula
  return (2.0f * u - 1.0f) * (0.5f + static_cast<float>((h >> 8) & 0xff) / 256.0f);
}

void fill(std::vector<uint8_t>& buf, DataType dt, const Input& in, int rank, size_t begin,
          size_t n) {
  buf.resize(n * dataTypeSize(dt));
  for (size_t i = 0; i < n; ++i) storeElement(dt, buf.data(), i, inputValue(in, rank, begin + i));
}

float loadAt(const uint8_t* p, DataType dt, size_t i) { return loadElement(dt, p, i); }

// The exact result this rank should hold (double), recomputed from every rank's input.
std::vector<double> exactResult(CollectiveKind kind, DataType dt, ReduceOp op, const Input& in,
                                int n, size_t count, Range mine) {
  std::vector<uint8_t> tmp;
  std::vector<double> ref;
  if (kind == CollectiveKind::kAllGather) {
    ref.resize(count);
    for (int owner = 0; owner < n; ++owner) {
      Range c = chunkRange(count, n, owner);
      fill(tmp, dt, in, owner, c.begin, c.length);
      for (size_t i = 0; i < c.length; ++i) ref[c.begin + i] = loadAt(tmp.data(), dt, i);
    }
    return ref;
  }
  Range out = kind == CollectiveKind::kReduceScatter ? mine : Range{0, count};
  ref.assign(out.length, 0.0);
  for (int r = 0; r < n; ++r) {
    fill(tmp, dt, in, r, out.begin, out.length);
    for (size_t i = 0; i < out.length; ++i) ref[i] += loadAt(tmp.data(), dt, i);
  }
  if (op == ReduceOp::kAvg)
    for (double& v : ref) v /= n;
  return ref;
}

int runKind(CollectiveKind kind, int argc, char** argv) {
  Options o;
  if (int rc = parse(argc, argv, &o)) return rc == 1 ? 0 : rc;
  // Before the communicator, so that every rank skips alike and no peer waits for one that left.
  if (o.cudaBuffers && !device::available()) {
    std::printf("SKIP: terse-bench %s --device cuda: %s\n", collectiveName(kind),
                device::built() ? "no usable CUDA device on this machine"
                                : "this build has no CUDA (TERSE_HAVE_CUDA off)");
    return 77;
  }
  auto created = Communicator::createFromEnv();
  if (!created.isOk()) {
    std::fprintf(stderr, "terse-bench: %s\n", created.status().toString().c_str());
    return 1;
  }
  Communicator& comm = *created.value();
  const int n = comm.size(), rank = comm.rank();
  const size_t es = dataTypeSize(o.dtype);
  const double busFactor =
      kind == CollectiveKind::kAllReduce ? 2.0 * (n - 1) / n : double(n - 1) / n;

  FILE* json = nullptr;
  if (rank == 0) {
    std::printf("# terse-bench %s: %d ranks over %s, %s, %s, %d warmup + %d timed calls%s\n",
                collectiveName(kind), n, transportOf(comm).describe().c_str(),
                dataTypeName(o.dtype), reduceOpName(o.op), o.warmup, o.iters,
                o.cudaBuffers ? ", CUDA buffers" : "");
    if (o.input.shape != Input::Shape::kUniform || o.input.seed != 0)
      std::printf("# input: %s, seed %llu\n", shapeName(o.input.shape),
                  static_cast<unsigned long long>(o.input.seed));
    std::printf(
        "# nodes: %s; two-level: %s\n", comm.topology().describe().c_str(),
        comm.twoLevelUnavailable().empty() ? "available" : comm.twoLevelUnavailable().c_str());
    std::printf("#%11s %12s %8s %6s %-36s %-8s %10s %8s %8s %12s %7s %10s\n", "size(B)", "count",
                "type", "redop", "codec", "algo", "time(us)", "algbw", "busbw", "wire(B)", "ratio",
                "maxrelerr");
    if (!o.json.empty() && !(json = std::fopen(o.json.c_str(), "w"))) {
      std::fprintf(stderr, "terse-bench: cannot write %s\n", o.json.c_str());
      return 1;
    }
    if (json) std::fprintf(json, "[\n");
  }
  // Each codec (or auto policy) once: its label and whether it wants residuals.
  struct Plan {
    std::string spec, label;
    bool wantsFeedback = false;
    std::string algo, algoLabel;  // as asked, and what runs (auto's resolution)
  };
  std::vector<Plan> plans;
  for (const std::string& algo : o.algos)
    for (const std::string& spec : o.codecs) {
      Plan p{spec, "", false, algo, algo};
      // What auto can run: flat without a two-level layout or with TERSE_ALGO=flat; otherwise
      // the engine measures both and the row names what its timed calls ran (Run::ran).
      if (algo == "auto") {
        const bool flat = engineOf(comm).defaultAlgorithm() == Algorithm::kFlat;
        p.algoLabel = !flat && comm.twoLevelUnavailable().empty() ? "twolevel" : "flat";
      }
      if (isAutoSpec(spec)) {
        // The auto policy's pick is logged with TERSE_DEBUG=INFO.
        auto parsed = parseAutoSpec(spec);
        if (!parsed.isOk()) {
          if (rank == 0)
            std::fprintf(stderr, "terse-bench: %s\n", parsed.status().toString().c_str());
          return 2;
        }
        p.label = parsed.value().canonical;
        for (const auto& c : parsed.value().candidates)
          p.wantsFeedback |= makeCodec(c).value()->wantsErrorFeedback();
      } else {
        auto codec = makeCodec(spec);
        if (!codec.isOk()) {
          if (rank == 0)
            std::fprintf(stderr, "terse-bench: %s\n", codec.status().toString().c_str());
          return 2;
        }
        p.label = codec.value()->spec();
        p.wantsFeedback = codec.value()->wantsErrorFeedback();
      }
      plans.push_back(p);
    }

  bool firstRow = true;
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(bytes * o.factor))) {
    const size_t count = bytes / es;
    Range mine = chunkRange(count, n, rank);
    size_t sendCount = kind == CollectiveKind::kAllGather ? mine.length : count;
    size_t recvCount = kind == CollectiveKind::kReduceScatter ? mine.length : count;
    std::vector<uint8_t> send;
    fill(send, o.dtype, o.input, rank, kind == CollectiveKind::kAllGather ? mine.begin : 0,
         sendCount);
    // One output for every codec: each call overwrites it, and the accuracy check below makes a
    // fresh call before it reads it. One per codec cost 64 MiB a plan at 64 MiB (1.2 GB a rank
    // for bench-network.sh's ten codecs and two algorithms, 8 ranks of which filled this machine).
    std::vector<uint8_t> recv(recvCount * es, 0);
    // --device cuda: the same input in device memory; the calls read and write only these.
    device::DeviceBuffer dsend, drecv;
    const void* sendPtr = send.data();
    void* recvPtr = recv.data();
    auto deviceFail = [&](const Status& st) {
      std::fprintf(stderr, "[rank %d] terse-bench: device buffers: %s\n", rank,
                   st.toString().c_str());
      return 1;
    };
    if (o.cudaBuffers) {
      // reserve(0) may hand back no memory: one byte keeps the pointers device pointers.
      auto s = dsend.reserve(std::max<size_t>(send.size(), 1));
      if (!s.isOk()) return deviceFail(s.status());
      auto d = drecv.reserve(std::max<size_t>(recv.size(), 1));
      if (!d.isOk()) return deviceFail(d.status());
      Status st = device::copyAsync(dsend.data(), send.data(), send.size(), nullptr);
      if (st.isOk()) st = device::zeroAsync(drecv.data(), recv.size(), nullptr);
      if (st.isOk()) st = device::synchronize(nullptr);
      if (!st.isOk()) return deviceFail(st);
      sendPtr = dsend.data();
      recvPtr = drecv.data();
    }
    // Per codec: residuals, options, and what its timed calls took and sent.
    struct Run {
      std::unique_ptr<ErrorFeedback> ef;
      CollectiveOptions opts;
      double seconds = 0;
      double compressSeconds = 0, reduceSeconds = 0;  // the statistics' codec parts
      uint64_t wire = 0;
      std::string chosen;  // the codec that ran the last call (auto's pick)
      std::string ran;     // the algorithm that ran the last timed call (auto's choice)
    };
    std::vector<Run> runs(plans.size());
    for (size_t c = 0; c < plans.size(); ++c) {
      if (plans[c].wantsFeedback)
        runs[c].ef = std::make_unique<ErrorFeedback>(
            ErrorFeedback::create(plans[c].label, sendCount).value());
      runs[c].opts.codec = plans[c].spec;
      runs[c].opts.algorithm = plans[c].algo;
      runs[c].opts.feedback = runs[c].ef.get();
      runs[c].opts.chosen = &runs[c].chosen;
    }
    auto call = [&](size_t c) {
      Run& run = runs[c];
      switch (kind) {
        case CollectiveKind::kAllReduce:
          return comm.allreduce(sendPtr, recvPtr, count, o.dtype, o.op, run.opts);
        case CollectiveKind::kReduceScatter:
          return comm.reduceScatter(sendPtr, recvPtr, count, o.dtype, o.op, run.opts);
        case CollectiveKind::kAllGather:
          return comm.allgather(sendPtr, recvPtr, count, o.dtype, run.opts);
        case CollectiveKind::kBarrier: break;  // not a benchmarked collective
      }
      return Status::ok();
    };
    // This kind's statistics (their codec parts are read around each timed call).
    auto kindStats = [&] {
      CollectiveStats s = comm.stats();
      return kind == CollectiveKind::kAllReduce       ? s.allreduce
             : kind == CollectiveKind::kReduceScatter ? s.reduceScatter
                                                      : s.allgather;
    };
    auto timed = [&](size_t c) {
      // Which algorithm the call ran, from the statistics' count per algorithm (read outside
      // the timed span).
      std::map<std::string, uint64_t> algoCalls;
      if (plans[c].algo == "auto") algoCalls = comm.stats().algorithmCalls;
      uint64_t sentBefore = comm.bytesSent();
      const CollectiveStats::Kind before = kindStats();
      auto t0 = std::chrono::steady_clock::now();
      Status st = call(c);
      runs[c].seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      runs[c].wire += comm.bytesSent() - sentBefore;
      const CollectiveStats::Kind after = kindStats();
      runs[c].compressSeconds += after.compressSeconds - before.compressSeconds;
      runs[c].reduceSeconds += after.reduceSeconds - before.reduceSeconds;
      if (plans[c].algo == "auto" && st.isOk())
        for (const auto& [name, calls] : comm.stats().algorithmCalls)
          if (calls > algoCalls[name]) runs[c].ran = name;
      return st;
    };
    auto fail = [&](const Status& st) {
      std::fprintf(stderr, "[rank %d] terse-bench: %s\n", rank, st.toString().c_str());
      return 1;
    };
    Status st;
    if (o.interleave) {
      for (size_t c = 0; c < plans.size(); ++c)
        for (int i = 0; i < o.warmup && st.isOk(); ++i) st = call(c);
      if (st.isOk()) st = comm.barrier();
      // A barrier before every timed call: ranks leave a collective at different moments, and
      // without one the next call's clock on an early rank also counts the wait for the
      // previous call's last rank, so each codec paid for the one before it (the call after
      // `none` was 5-8% slower at 1 Gbit/s than the same codec placed after another).
      for (int i = 0; i < o.iters && st.isOk(); ++i)
        for (size_t c = 0; c < plans.size() && st.isOk(); ++c) {
          st = comm.barrier();
          if (st.isOk()) st = timed(c);
        }
      if (!st.isOk()) return fail(st);
    } else {
      for (size_t c = 0; c < plans.size() && st.isOk(); ++c) {
        for (int i = 0; i < o.warmup && st.isOk(); ++i) st = call(c);
        if (st.isOk()) st = comm.barrier();
        for (int i = 0; i < o.iters && st.isOk(); ++i) st = timed(c);
      }
      if (!st.isOk()) return fail(st);
    }
    for (size_t c = 0; c < plans.size(); ++c) {
      Run& run = runs[c];
      double us = run.seconds * 1e6 / o.iters;
      double wire = double(run.wire) / o.iters;
      // The accuracy figure is one call's, from fresh residuals (what a first training step sees).
      if (run.ef) run.ef->reset();
      if (o.check) st = call(c);
      if (!st.isOk()) return fail(st);
      if (o.check && o.cudaBuffers) {  // the result back to the host, outside the timed span
        st = device::copyAsync(recv.data(), drecv.data(), recv.size(), nullptr);
        if (st.isOk()) st = device::synchronize(nullptr);
        if (!st.isOk()) return deviceFail(st);
      }
      // Slowest rank's time, and the largest error anywhere, via an uncompressed allgather.
      double err = 0, maxRef = 0, squares = 0;
      if (o.check && count > 0) {
        auto ref = exactResult(kind, o.dtype, o.op, o.input, n, count, mine);
        for (size_t i = 0; i < recvCount; ++i) {
          double e = std::fabs(loadAt(recv.data(), o.dtype, i) - ref[i]);
          err = std::max(err, e);
          squares += e * e;
          maxRef = std::max(maxRef, std::fabs(ref[i]));
        }
      }
      // Time, largest error, largest |exact|, mean squared error of this rank's elements, and
      // the codec parts of the time (compress, reduce).
      constexpr int kStats = 6;
      std::vector<float> stats(kStats * n, 0.0f),
          mineStats = {float(us),
                       float(err),
                       float(maxRef),
                       float(recvCount ? squares / double(recvCount) : 0.0),
                       float(run.compressSeconds * 1e6 / o.iters),
                       float(run.reduceSeconds * 1e6 / o.iters)};
      // Every rank sends exactly kStats values: the balanced split of kStats * n gives each that.
      st = comm.allgather(mineStats.data(), stats.data(), kStats * n, DataType::kFloat32);
      if (!st.isOk()) return fail(st);
      double tmax = 0, emax = 0, rmax = 0, meanSquares = 0, compressUs = 0, reduceUs = 0;
      for (int r = 0; r < n; ++r) {
        tmax = std::max<double>(tmax, stats[kStats * r]);
        compressUs = std::max<double>(compressUs, stats[kStats * r + 4]);
        reduceUs = std::max<double>(reduceUs, stats[kStats * r + 5]);
        emax = std::max<double>(emax, stats[kStats * r + 1]);
        rmax = std::max<double>(rmax, stats[kStats * r + 2]);
        // Weighted by how many elements rank r holds (reduce-scatter's parts differ by one).
        size_t held =
            kind == CollectiveKind::kReduceScatter ? chunkRange(count, n, r).length : count;
        size_t total = kind == CollectiveKind::kReduceScatter ? count : count * n;
        if (total > 0) meanSquares += stats[kStats * r + 3] * (double(held) / double(total));
      }
      double rel = rmax > 0 ? emax / rmax : 0;
      double rms = rmax > 0 ? std::sqrt(meanSquares) / rmax : 0;
      double algbw = double(count * es) / tmax / 1e3;  // bytes/us -> GB/s
      double plain = busFactor * double(count * es);
      const char* label = plans[c].label.c_str();
      // auto's rows name what ran; next to forced algorithms as "auto-<that>", so that they stay
      // rows of their own (bench-network.sh --algos "flat twolevel auto").
      if (!run.ran.empty()) plans[c].algoLabel = o.algos.size() > 1 ? "auto-" + run.ran : run.ran;
      if (rank == 0) {
        char relText[32] = "-";
        if (o.check) std::snprintf(relText, sizeof relText, "%.2e", rel);
        std::printf("%12zu %12zu %8s %6s %-36s %-8s %10.1f %8.3f %8.3f %12.0f %7.2f %10s\n",
                    count * es, count, dataTypeName(o.dtype), reduceOpName(o.op), label,
                    plans[c].algoLabel.c_str(), tmax, algbw, algbw * busFactor, wire,
                    wire > 0 ? plain / wire : 0.0, relText);
        if (isAutoSpec(plans[c].spec))
          std::printf("# %s picked %s at %zu bytes\n", label, run.chosen.c_str(), count * es);
        std::fflush(stdout);
        if (json)
          std::fprintf(
              json,
              "%s  {\"collective\": \"%s\", \"ranks\": %d, \"transport\": \"%s\", "
              "\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
              "\"codec\": \"%s\", \"algorithm\": \"%s\", \"time_us\": %.3f, "
              "\"algbw_gbs\": %.6f, "
              "\"busbw_gbs\": %.6f, \"wire_bytes\": %.0f, \"ratio\": %.4f, "
              "\"maxrelerr\": %.6e, \"rmsrelerr\": %.6e, \"input\": \"%s\", \"seed\": %llu, "
              "\"chosen\": \"%s\", \"buffers\": \"%s\", \"compress_us\": %.3f, "
              "\"reduce_us\": %.3f}",
              firstRow ? "" : ",\n", collectiveName(kind), n, transportOf(comm).describe().c_str(),
              count * es, count, dataTypeName(o.dtype), reduceOpName(o.op), label,
              plans[c].algoLabel.c_str(), tmax, algbw, algbw * busFactor, wire,
              wire > 0 ? plain / wire : 0.0, o.check ? rel : 0.0, o.check ? rms : 0.0,
              shapeName(o.input.shape), static_cast<unsigned long long>(o.input.seed),
              run.chosen.c_str(), o.cudaBuffers ? "cuda" : "host", compressUs, reduceUs);
      }
      firstRow = false;
    }
  }
  // auto's algorithm choices with what was measured (every rank holds the same).
  if (rank == 0)
    for (const auto& [key, choice] : comm.stats().algorithmChoices)
      std::printf("# auto algorithm for %s: %s\n", key.c_str(), choice.c_str());
  if (json) {
    std::fprintf(json, "\n]\n");
    std::fclose(json);
  }
  return 0;
}

RegisterSubcommand allreduceCmd({"allreduce", "compressed allreduce, nccl-tests' table",
                                 [](int c, char** v) {
                                   return runKind(CollectiveKind::kAllReduce, c, v);
                                 }});
RegisterSubcommand reducescatterCmd(
    {"reducescatter", "compressed reduce-scatter, nccl-tests' table",
     [](int c, char** v) { return runKind(CollectiveKind::kReduceScatter, c, v); }});
RegisterSubcommand allgatherCmd({"allgather", "compressed allgather, nccl-tests' table",
                                 [](int c, char** v) {
                                   return runKind(CollectiveKind::kAllGather, c, v);
                                 }});

}  // namespace
}  // namespace terse::bench
