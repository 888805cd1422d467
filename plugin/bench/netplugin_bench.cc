// terse-netplugin-bench: one-way bandwidth through the built libnccl-net-terse.so, driven the way
// NCCL's proxy drives it (window of isend/irecv, NULL retries, test until done), between two
// forked processes. The transport comes from the UCX_* environment, so the same settings can be
// handed to `ucx_perftest -t tag_bw` for a baseline (scripts/bench-netplugin.sh does both).
//
// Output, one line per size:  netplugin size=<bytes> iters=<n> window=<w> MBps=<MiB/s>
#include "../../tests/plugin/net_harness.h"

#include <deque>
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
};

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
      "Runs two processes on this host; set UCX_TLS and UCX_NET_DEVICES=lo first.\n");
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
void stream(NetApi& api, int rank, void* comm, std::vector<uint8_t>& buf, void* mh, size_t size,
            int iters, int window) {
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
  NCCL_OK(api.init());
  Exchange ex(dir);
  terse::harness::Link link =
      terse::harness::connectPeers(api, ex, "bench", rank, 1 - rank, 1 - rank);
  size_t maxSize = *std::max_element(o.sizes.begin(), o.sizes.end());
  std::vector<uint8_t> buf(maxSize, static_cast<uint8_t>(rank + 1));
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
    if (rank == 1) {
      HARNESS_CHECK(buf[0] == 1 && buf[size - 1] == 1, "warm-up delivered wrong bytes");
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
