// terse-netplugin-bench: one-way bandwidth through the built libnccl-net-terse.so, driven the way
// NCCL's proxy drives it (window of isend/irecv, NULL retries, test until done), between two
// forked processes. The transport comes from the UCX_* environment, so the same settings can be
// handed to `ucx_perftest -t tag_bw` for a baseline (scripts/bench-netplugin.sh does both).
// `--rank R --exchange DIR` runs one rank only, so the two can live in different network
// namespaces (scripts/bench-netplugin-lossless.sh); `--payload` picks what the messages hold,
// which matters once TERSE_NET_LOSSLESS=1 compresses them.
//
// Output, one line per size:  netplugin size=<bytes> iters=<n> window=<w> MBps=<MiB/s>
// (MiB of message bytes per second, whatever went on the wire), and with TERSE_NET_LOSSLESS=1 the
// sender's count at the end:  netplugin lossless: C of E sends ... (<raw/wire>x)
#include "../../tests/plugin/net_harness.h"

#include <cmath>
#include <cstdarg>
#include <deque>
#include <random>
#include <string>

namespace {

using terse::harness::Exchange;
using terse::harness::NetApi;

struct Options {
  std::vector<size_t> sizes = {1u << 20, 4u << 20, 16u << 20};
  size_t bytesPerSize = 2ull << 30;  // iterations = this / size, clamped
  int window = 32;
  int version = 11;
  int warmup = 16;
  std::string plugin = TERSE_PLUGIN_PATH;  // --plugin: compare another build of the library
  std::string payload = "ones";
  int rank = -1;         // --rank: run only this rank (0 sends, 1 receives)
  std::string exchange;  // --exchange: directory both ranks see, with --rank
};

// Page-aligned like NCCL's buffers (cudaHostAlloc) and ucx_perftest's, so copies compare alike.
template <typename T>
struct PageAllocator {
  using value_type = T;
  PageAllocator() = default;
  template <typename U>
  PageAllocator(const PageAllocator<U>&) {}
  T* allocate(size_t n) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, std::max<size_t>(n, 1) * sizeof(T)) != 0) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const PageAllocator&) const { return true; }
  bool operator!=(const PageAllocator&) const { return false; }
};
using Bytes = std::vector<uint8_t, PageAllocator<uint8_t>>;

const char* const kPayloads[] = {"ones", "random", "fp32", "fp16", "bf16", "sparse90"};

uint16_t fp16Bits(float f) {
  // Round-to-nearest conversion of normal values; smaller ones flush to zero (gradients of
  // 1e-3 scale are normal in fp16 down to 6e-5).
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  if ((mant & 0x1fff) > 0x1000 || ((mant & 0x1fff) == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(h);
}

// Message contents: `ones` (every byte the same: the best case), `random` bytes, gradients drawn
// from N(0, 1e-3) as fp32, fp16 or bf16, and `sparse90`: fp32 with 90% exact zeros (ReLU
// activations, embedding gradients).
void fillPayload(Bytes& buf, const std::string& kind, int rank) {
  std::mt19937_64 rng(12345 + rank);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  if (kind == "ones") {
    std::fill(buf.begin(), buf.end(), static_cast<uint8_t>(rank + 1));
  } else if (kind == "random") {
    for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
      uint64_t v = rng();
      std::memcpy(&buf[i], &v, 8);
    }
  } else if (kind == "fp32" || kind == "sparse90") {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (size_t i = 0; i + 4 <= buf.size(); i += 4) {
      float v = kind == "sparse90" && u(rng) < 0.9f ? 0.0f : normal(rng);
      std::memcpy(&buf[i], &v, 4);
    }
  } else {  // fp16, bf16
    for (size_t i = 0; i + 2 <= buf.size(); i += 2) {
      float f = normal(rng);
      uint32_t x;
      std::memcpy(&x, &f, 4);
      uint16_t h = kind == "fp16" ? fp16Bits(f) : static_cast<uint16_t>(x >> 16);
      std::memcpy(&buf[i], &h, 2);
    }
  }
}

// The sender's plugin logs its lossless count when the comm closes; keep that line.
std::string& losslessLine() {
  static std::string line;
  return line;
}

void benchLogger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::string text = buf;
  size_t at = text.find("lossless: ");
  if (at != std::string::npos) losslessLine() = text.substr(at);
  if (level == NCCL_LOG_WARN) std::fprintf(stderr, "%s\n", buf);
}

size_t parseSize(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end;
  if (unit == "k" || unit == "K")
    v *= 1 << 10;
  else if (unit == "m" || unit == "M")
    v *= 1 << 20;
  else if (unit == "g" || unit == "G")
    v *= 1 << 30;
  else if (!unit.empty())
    throw std::runtime_error("bad size '" + s + "' (use 4096, 64k, 1M)");
  return static_cast<size_t>(v);
}

void usage() {
  std::printf(
      "usage: terse-netplugin-bench [--sizes 1M,4M,16M] [--bytes 2G] [--window 32] [--warmup 16]\n"
      "                             [--version 11|10|9|8] [--plugin path/to/libnccl-net-terse.so]\n"
      "                             [--payload ones|random|fp32|fp16|bf16|sparse90]\n"
      "                             [--rank 0|1 --exchange DIR]\n"
      "Runs two processes on this host (set UCX_TLS and UCX_NET_DEVICES=lo first), or with --rank\n"
      "one of them: start rank 0 (sender) and rank 1 with the same --exchange directory.\n");
}

void* post(NetApi& api, bool send, void* comm, void* buf, size_t size, void* mh) {
  void* req = nullptr;
  int tag = 0;
  while (req == nullptr) {
    if (send) {
      NCCL_OK(api.isend(comm, buf, size, tag, mh, &req));
    } else {
      NCCL_OK(api.irecv(comm, 1, &buf, &size, &tag, &mh, &req));
    }
  }
  return req;
}

// Moves `iters` messages of `size` bytes from rank 0 to rank 1 with `window` in flight.
void stream(NetApi& api, int rank, void* comm, Bytes& buf, void* mh, size_t size, int iters,
            int window) {
  std::deque<void*> inFlight;
  int posted = 0;
  while (posted < iters || !inFlight.empty()) {
    while (posted < iters && static_cast<int>(inFlight.size()) < window) {
      inFlight.push_back(post(api, rank == 0, comm, buf.data(), size, mh));
      ++posted;
    }
    int done = 0;
    NCCL_OK(api.test(inFlight.front(), &done, nullptr));
    if (done) inFlight.pop_front();
  }
}

void runRank(const Options& o, const std::string& dir, int rank) {
  NetApi api(o.plugin.c_str(), o.version);
  NCCL_OK(api.init(benchLogger));
  Exchange ex(dir);
  terse::harness::Link link =
      terse::harness::connectPeers(api, ex, "bench", rank, 1 - rank, 1 - rank);
  size_t maxSize = *std::max_element(o.sizes.begin(), o.sizes.end());
  Bytes buf(maxSize);
  fillPayload(buf, o.payload, rank);
  void* mh = nullptr;
  void* dataComm = rank == 0 ? link.sendComm : link.recvComm;
  void* ackComm = rank == 0 ? link.recvComm : link.sendComm;
  NCCL_OK(api.regMr(dataComm, buf.data(), buf.size(), NCCL_PTR_HOST, &mh));
  uint8_t ack = 0;
  void* ackMh = nullptr;
  NCCL_OK(api.regMr(ackComm, &ack, 1, NCCL_PTR_HOST, &ackMh));
  for (size_t size : o.sizes) {
    int iters = static_cast<int>(
        std::clamp<size_t>(o.bytesPerSize / std::max<size_t>(size, 1), 20, 100000));
    stream(api, rank, dataComm, buf, mh, size, o.warmup, o.window);
    // The sender's bytes, exactly: rank 1 regenerates what rank 0 filled in.
    if (rank == 1) {
      Bytes want(maxSize);
      fillPayload(want, o.payload, 0);
      HARNESS_CHECK(std::memcmp(buf.data(), want.data(), size) == 0,
                    "warm-up delivered wrong bytes");
    }
    ex.barrier("size" + std::to_string(size), rank, 2);
    auto t0 = std::chrono::steady_clock::now();
    stream(api, rank, dataComm, buf, mh, size, iters, o.window);
    // The receiver's zero-byte ack closes the timed interval on the sender.
    void* req = post(api, rank == 1, ackComm, &ack, 0, ackMh);
    NCCL_OK(terse::harness::waitRequest(api, req, nullptr));
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rank == 0) {
      std::printf("netplugin size=%zu iters=%d window=%d MBps=%.1f\n", size, iters, o.window,
                  static_cast<double>(size) * iters / sec / (1 << 20));
      std::fflush(stdout);
    }
  }
  NCCL_OK(api.deregMr(dataComm, mh));
  NCCL_OK(api.deregMr(ackComm, ackMh));
  ex.barrier("end", rank, 2);
  terse::harness::closeLink(api, link);
  if (rank == 0 && !losslessLine().empty()) {
    std::printf("netplugin %s\n", losslessLine().c_str());
    std::fflush(stdout);
  }
  NCCL_OK(api.finalize());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--sizes") {
        o.sizes.clear();
        std::stringstream ss(next());
        std::string item;
        while (std::getline(ss, item, ',')) o.sizes.push_back(parseSize(item));
      } else if (a == "--bytes") {
        o.bytesPerSize = parseSize(next());
      } else if (a == "--window") {
        o.window = std::stoi(next());
      } else if (a == "--warmup") {
        o.warmup = std::stoi(next());
      } else if (a == "--plugin") {
        o.plugin = next();
      } else if (a == "--payload") {
        o.payload = next();
        if (std::find(std::begin(kPayloads), std::end(kPayloads), o.payload) == std::end(kPayloads))
          throw std::runtime_error("unknown payload '" + o.payload + "'");
      } else if (a == "--rank") {
        o.rank = std::stoi(next());
        if (o.rank != 0 && o.rank != 1) throw std::runtime_error("--rank is 0 or 1");
      } else if (a == "--exchange") {
        o.exchange = next();
      } else if (a == "--version") {
        o.version = std::stoi(next());
      } else if (a == "-h" || a == "--help") {
        usage();
        return 0;
      } else {
        throw std::runtime_error("unknown option " + a);
      }
    }
    if (o.sizes.empty() || o.window < 1 || o.window > 32)
      throw std::runtime_error("need at least one size and a window of 1..32");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "terse-netplugin-bench: %s\n", e.what());
    usage();
    return 2;
  }
  if ((o.rank >= 0) != !o.exchange.empty()) {
    std::fprintf(stderr, "terse-netplugin-bench: --rank and --exchange go together\n");
    return 2;
  }
  if (o.rank >= 0) {
    try {
      runRank(o, o.exchange, o.rank);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "terse-netplugin-bench: rank %d failed: %s\n", o.rank, e.what());
      return 1;
    }
    return 0;
  }
  std::string dir = terse::harness::makeTempDir();
  auto codes = terse::harness::runRanks(
      2, [&](int rank) { runRank(o, dir, rank); }, 1800);
  terse::harness::removeTree(dir);
  for (int c : codes)
    if (c != 0) {
      std::fprintf(stderr, "terse-netplugin-bench: a rank failed (exit %d)\n", c);
      return 1;
    }
  return 0;
}
