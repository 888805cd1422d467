// terse-bench codecs: compress and decompress-accumulate throughput of each codec on a float32
// buffer, next to a memcpy of the same buffer measured in the same run (the machine's streaming
// ceiling), so the ratios mean something on any machine.
#include "subcommand.h"

#include "terse/common/parallel.h"
#include "terse/compressors/codec.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace terse::bench {
namespace {

struct Options {
  size_t bytes = size_t{64} << 20;
  std::string json;
  std::vector<std::string> codecs = {"none",  "fp16",  "bf16", "int8",   "fp8",
                                     "mxfp8", "mxfp4", "int4", "onebit", "topk"};
  std::vector<char*> benchmarkArgs;  // passed through to Google Benchmark (--benchmark_*)
  // Which codecs compress with an error-feedback residual: "used" (those whose use wants one),
  // "all" or "none". A residual adds a read and a write of 4 bytes per element, so codecs are
  // compared like with like only under "all" or "none".
  std::string residual = "used";
};

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: terse-bench codecs [--size BYTES] [--json FILE] [--codecs LIST] "
      "[--residual used|all|none] [--benchmark_min_time=S ...]\n"
      "  --size BYTES   float32 input per call (default 67108864 = 64 MiB; K/M/G suffixes)\n"
      "  --json FILE    also write the results as JSON\n"
      "  --codecs LIST  comma-separated codec specs (default none,fp16,bf16,int8,fp8,mxfp8,\n"
      "                 mxfp4,int4,onebit,topk);\n"
      "                 parameters stay with their codec: int8:block=128,round=stochastic,topk\n"
      "  --residual R   which codecs compress with an error-feedback residual: used (default:\n"
      "                 onebit, topk, mxfp4 and int4, how they are used), all or none; the\n"
      "                 residual costs a read and a write of 4 bytes per element, so compare\n"
      "                 codecs with each other under all or none\n"
      "GB/s are of float32 input bytes.\n");
}

bool parseSize(const char* s, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || v <= 0) return false;
  switch (*end) {
    case 'k':
    case 'K':
      v *= 1024;
      ++end;
      break;
    case 'm':
    case 'M':
      v *= 1024 * 1024;
      ++end;
      break;
    case 'g':
    case 'G':
      v *= 1024.0 * 1024 * 1024;
      ++end;
      break;
    default: break;
  }
  if (*end) return false;
  *out = static_cast<size_t>(v);
  return *out >= 4;
}

// "int8:block=128,round=stochastic,topk" -> {"int8:block=128,round=stochastic", "topk"}: a
// key=value item without a codec name belongs to the codec before it.
std::vector<std::string> splitCodecs(const std::string& list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string item =
        list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty()) {
      bool param = item.find('=') != std::string::npos && item.find(':') == std::string::npos;
      if (param && !out.empty())
        out.back() += "," + item;
      else
        out.push_back(item);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// Collects timings instead of printing Google Benchmark's table; ours adds the memcpy ratios.
class Collector : public benchmark::BenchmarkReporter {
 public:
  struct Result {
    std::string name;
    double secondsPerIter = 0;
    bool failed = false;
    std::string error;
  };
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      Result res;
      res.name = r.benchmark_name();
      res.failed = r.error_occurred;
      res.error = r.error_message;
      res.secondsPerIter =
          r.iterations ? r.real_accumulated_time / static_cast<double>(r.iterations) : 0;
      results.push_back(res);
      std::fprintf(stderr, "  %-40s %9.3f ms\n", res.name.c_str(), res.secondsPerIter * 1e3);
    }
  }
  std::vector<Result> results;
  const Result* find(const std::string& name) const {
    for (const auto& r : results)
      if (r.name == name || r.name.rfind(name + "/", 0) == 0) return &r;
    return nullptr;
  }
};

// Gradient-like input: normal values over a few decades (top-k sees a realistic spread).
void fillInput(std::vector<float>& v) {
  parallelFor(v.size(), 4096, 1 << 16, [&](size_t b, size_t e) {
    uint64_t s = 0x9e3779b97f4a7c15ull * (b + 1);
    for (size_t i = b; i < e; ++i) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      double u1 = ((s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
      double u2 = ((s & 0xffff) + 0.5) / 65536.0;
      v[i] = static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2) *
                                std::pow(10.0, static_cast<double>(s % 4) - 2.0));
    }
  });
}

// Touch every page up front so first-touch faults are not timed.
void prefault(void* p, size_t bytes) { std::memset(p, 0, bytes); }

int run(int argc, char** argv) {
  Options opt;
  opt.benchmarkArgs.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "terse-bench codecs: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else if (a == "--size") {
      const char* v = value("--size");
      if (!parseSize(v, &opt.bytes)) {
        std::fprintf(stderr, "terse-bench codecs: --size %s is not a byte count >= 4 (e.g. 64M)\n",
                     v);
        return 2;
      }
    } else if (a == "--json") {
      opt.json = value("--json");
    } else if (a == "--residual") {
      opt.residual = value("--residual");
      if (opt.residual != "used" && opt.residual != "all" && opt.residual != "none") {
        std::fprintf(stderr, "terse-bench codecs: --residual %s is not used, all or none\n",
                     opt.residual.c_str());
        return 2;
      }
    } else if (a == "--codecs") {
      opt.codecs = splitCodecs(value("--codecs"));
    } else if (a.rfind("--benchmark_", 0) == 0) {
      opt.benchmarkArgs.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "terse-bench codecs: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  std::vector<std::shared_ptr<const Codec>> codecs;
  for (const auto& spec : opt.codecs) {
    auto c = makeCodec(spec);
    if (!c.isOk()) {
      std::fprintf(stderr, "terse-bench codecs: %s\n", c.status().message().c_str());
      return 2;
    }
    codecs.push_back(*c);
  }

  size_t n = opt.bytes / 4;
  size_t bytes = n * 4;
  std::vector<float> input(n), copy(n), acc(n), residual(n);
  prefault(copy.data(), bytes);
  prefault(acc.data(), bytes);
  fillInput(input);
  size_t maxWire = 0;
  for (const auto& c : codecs) maxWire = std::max(maxWire, c->maxWireBytes(n));
  std::vector<uint64_t> wireStore(maxWire / 8 + 1);
  void* wire = wireStore.data();
  prefault(wire, maxWire);
  std::vector<size_t> wireBytes(codecs.size(), 0);

  auto memcpyBench = [&](benchmark::State& st) {
    for (auto _ : st) {
      std::memcpy(copy.data(), input.data(), bytes);
      benchmark::DoNotOptimize(copy.data());
      benchmark::ClobberMemory();
    }
    st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * bytes));
  };
  benchmark::RegisterBenchmark("memcpy/first", memcpyBench)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  for (size_t ci = 0; ci < codecs.size(); ++ci) {
    const Codec* c = codecs[ci].get();
    std::string spec = c->spec();
    bool ef = opt.residual == "all" || (opt.residual == "used" && c->wantsErrorFeedback());
    benchmark::RegisterBenchmark(
        ("compress/" + spec).c_str(),
        [&, c, ci, ef](benchmark::State& st) {
          std::fill(residual.begin(), residual.end(), 0.0f);
          uint64_t nonce = 0;
          for (auto _ : st) {
            CodecCall call;
            call.nonce = nonce++;
            auto r = c->compress(input.data(), DataType::kFloat32, n,
                                 ef ? residual.data() : nullptr, wire, maxWire, call);
            if (!r.isOk()) {
              st.SkipWithError(r.status().toString().c_str());
              break;
            }
            wireBytes[ci] = *r;
          }
          st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * bytes));
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(
        ("decompressAccumulate/" + spec).c_str(),
        [&, c](benchmark::State& st) {
          auto r = c->compress(input.data(), DataType::kFloat32, n, nullptr, wire, maxWire);
          if (!r.isOk()) {
            st.SkipWithError(r.status().toString().c_str());
            return;
          }
          size_t len = *r;
          for (auto _ : st) {
            Status s = c->decompressAccumulate(wire, len, acc.data(), n);
            if (!s.isOk()) {
              st.SkipWithError(s.toString().c_str());
              break;
            }
            benchmark::ClobberMemory();
          }
          st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * bytes));
        })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("memcpy/last", memcpyBench)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  int bargc = static_cast<int>(opt.benchmarkArgs.size());
  benchmark::Initialize(&bargc, opt.benchmarkArgs.data());
  std::fprintf(stderr, "terse-bench codecs: %zu float32 elements (%.1f MiB), %zu threads\n", n,
               bytes / 1048576.0, parallelThreads());
  Collector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::Shutdown();

  auto gbps = [&](const Collector::Result* r) {
    return r && !r->failed && r->secondsPerIter > 0 ? bytes / r->secondsPerIter / 1e9 : 0.0;
  };
  double m1 = gbps(collector.find("memcpy/first")), m2 = gbps(collector.find("memcpy/last"));
  double memcpyGbps = std::max(m1, m2);  // the better of the two: ratios are conservative
  std::printf(
      "\nterse-bench codecs: %.1f MiB float32 input, %zu threads, residual: %s; memcpy %.2f GB/s "
      "(first %.2f, last %.2f)\n",
      bytes / 1048576.0, parallelThreads(), opt.residual.c_str(), memcpyGbps, m1, m2);
  std::printf("%-36s %10s %12s %9s %12s %9s\n", "codec", "wire ratio", "compress", "x memcpy",
              "decomp+acc", "x memcpy");
  std::string jsonRows;
  int failures = 0;
  for (size_t ci = 0; ci < codecs.size(); ++ci) {
    std::string spec = codecs[ci]->spec();
    const auto* cr = collector.find("compress/" + spec);
    const auto* dr = collector.find("decompressAccumulate/" + spec);
    for (const auto* r : {cr, dr})
      if (!r || r->failed) {
        ++failures;
        std::fprintf(stderr, "terse-bench codecs: %s failed: %s\n", spec.c_str(),
                     r ? r->error.c_str() : "not run");
      }
    double c = gbps(cr), d = gbps(dr);
    double ratio = wireBytes[ci] ? static_cast<double>(bytes) / wireBytes[ci] : 0;
    std::printf("%-36s %9.1fx %9.2f GB/s %8.2fx %9.2f GB/s %8.2fx\n", spec.c_str(), ratio, c,
                c / memcpyGbps, d, d / memcpyGbps);
    char row[512];
    std::snprintf(
        row, sizeof(row),
        "%s    {\"codec\": \"%s\", \"wire_bytes\": %zu, \"compression_ratio\": %.4f, "
        "\"compress_gbps\": %.4f, \"compress_vs_memcpy\": %.4f, "
        "\"decompress_accumulate_gbps\": %.4f, \"decompress_accumulate_vs_memcpy\": %.4f}",
        jsonRows.empty() ? "" : ",\n", spec.c_str(), wireBytes[ci], ratio, c, c / memcpyGbps, d,
        d / memcpyGbps);
    jsonRows += row;
  }
  if (!opt.json.empty()) {
    FILE* f = std::fopen(opt.json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "terse-bench codecs: cannot write %s\n", opt.json.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\n  \"benchmark\": \"codecs\",\n  \"input_bytes\": %zu,\n  \"elements\": %zu,\n"
                 "  \"threads\": %zu,\n  \"residual\": \"%s\",\n  \"memcpy_gbps\": %.4f,\n  "
                 "\"memcpy_first_gbps\": %.4f,\n"
                 "  \"memcpy_last_gbps\": %.4f,\n  \"results\": [\n%s\n  ]\n}\n",
                 bytes, n, parallelThreads(), opt.residual.c_str(), memcpyGbps, m1, m2,
                 jsonRows.c_str());
    std::fclose(f);
  }
  return failures ? 1 : 0;
}

const RegisterSubcommand kRegister{
    {"codecs", "codec compress / decompress-accumulate GB/s next to memcpy", run}};

}  // namespace
}  // namespace terse::bench
