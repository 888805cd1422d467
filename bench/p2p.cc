// terse-bench p2p: point-to-point bandwidth of terse's transport between ranks 0 and 1, measured
// like `ucx_perftest -t tag_bw` (rank 0 streams tagged messages with up to W outstanding, rank 1
// receives them), so scripts/bench-p2p.sh can print the two side by side. Run it with two ranks:
//   terse-run -n 2 terse-bench p2p -b 1M -e 64M
#include "subcommand.h"
#include "terse/api/internal.h"
#include "terse/communicator.h"
#include "terse/transport/transport.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace terse::bench {
namespace {

struct P2pOptions {
  size_t minBytes = 1024;
  size_t maxBytes = size_t{64} << 20;
  double factor = 2;
  long iters = 0;  // 0: sized so each point moves about 1 GiB (at least 20 messages)
  long warmup = 10;
  int window = 8;
  bool check = false;
};

void p2pUsage(FILE* out) {
  std::fprintf(out,
               "usage: terse-run -n 2 terse-bench p2p [-b min] [-e max] [-f factor] [-n iters]\n"
               "                                      [-w warmup] [-W window] [-c]\n"
               "  -b/-e  message sizes (K/M/G suffixes), default 1K..64M\n"
               "  -f     size factor, default 2\n"
               "  -n     timed messages per size (default: about 1 GiB per size, at least 20)\n"
               "  -w     warm-up messages per size (10)\n"
               "  -W     outstanding sends/receives (8), as ucx_perftest -O\n"
               "  -c     check every received byte (slows the receiver)\n"
               "Rank 0 sends, rank 1 receives; bandwidth = bytes / (time until rank 1's final\n"
               "acknowledgement). MB/s are 2^20 bytes per second, as ucx_perftest prints them.\n");
}

bool parseSize(const char* text, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || v < 0) return false;
  double mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024.0, ++end;
  else if (*end == 'M' || *end == 'm')
    mult = 1024.0 * 1024, ++end;
  else if (*end == 'G' || *end == 'g')
    mult = 1024.0 * 1024 * 1024, ++end;
  if (*end == 'B') ++end;
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

int fail(const char* what, const Status& s) {
  std::fprintf(stderr, "terse-bench p2p: %s: %s\n", what, s.toString().c_str());
  return 1;
}

uint8_t patternAt(size_t i, long msg) { return static_cast<uint8_t>(i * 31 + msg * 7 + 1); }

// Streams `count` messages of `bytes` from rank 0 to rank 1 with `window` outstanding, then waits
// for rank 1's 1-byte acknowledgement. Returns the seconds rank 0 saw.
Result<double> stream(Communicator& comm, std::vector<uint8_t>& buf, size_t bytes, long count,
                      int window, bool check, long* badMessages) {
  Transport& t = transportOf(comm);
  const auto timeout = comm.timeout();
  std::vector<TransportRequest*> slots(window, nullptr);
  const uint64_t kDataTag = 1, kAckTag = 2;
  uint8_t ack = 0;
  auto start = std::chrono::steady_clock::now();
  // With checking on, each message in flight needs its own buffer on both sides.
  std::vector<std::vector<uint8_t>> own;
  if (check) own.assign(window, std::vector<uint8_t>(bytes));
  auto bufferOf = [&](long m) { return check ? own[m % window].data() : buf.data(); };
  if (comm.rank() == 0) {
    for (long m = 0; m < count; ++m) {
      TransportRequest*& slot = slots[m % window];
      if (slot) TERSE_RETURN_IF_ERROR(t.wait(slot, nullptr, timeout));
      uint8_t* data = bufferOf(m);
      if (check)
        for (size_t i = 0; i < bytes; i += 4093) data[i] = patternAt(i, m);
      TERSE_RETURN_IF_ERROR(t.isend(1, kDataTag, data, bytes, &slot));
    }
    for (auto& slot : slots)
      if (slot) TERSE_RETURN_IF_ERROR(t.wait(slot, nullptr, timeout));
    TransportRequest* r;
    TERSE_RETURN_IF_ERROR(t.irecv(1, kAckTag, &ack, 1, &r));
    TERSE_RETURN_IF_ERROR(t.wait(r, nullptr, timeout));
  } else if (comm.rank() == 1) {
    long posted = 0;
    for (; posted < count && posted < window; ++posted)
      TERSE_RETURN_IF_ERROR(t.irecv(0, kDataTag, bufferOf(posted), bytes, &slots[posted]));
    for (long m = 0; m < count; ++m) {
      size_t got = 0;
      TERSE_RETURN_IF_ERROR(t.wait(slots[m % window], &got, timeout));
      slots[m % window] = nullptr;
      if (check) {
        const uint8_t* p = bufferOf(m);
        bool ok = got == bytes;
        for (size_t i = 0; ok && i < bytes; i += 4093) ok = p[i] == patternAt(i, m);
        *badMessages += !ok;
      }
      if (posted < count) {
        TERSE_RETURN_IF_ERROR(
            t.irecv(0, kDataTag, bufferOf(posted), bytes, &slots[posted % window]));
        ++posted;
      }
    }
    TransportRequest* s;
    TERSE_RETURN_IF_ERROR(t.isend(0, kAckTag, &ack, 1, &s));
    TERSE_RETURN_IF_ERROR(t.wait(s, nullptr, timeout));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int p2pMain(int argc, char** argv) {
  P2pOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    bool ok = true;
    if (a == "-h" || a == "--help") {
      p2pUsage(stdout);
      return 0;
    } else if (a == "-c") {
      o.check = true;
    } else if ((a == "-b" || a == "-e") && (v = next())) {
      ok = parseSize(v, a == "-b" ? &o.minBytes : &o.maxBytes);
    } else if (a == "-f" && (v = next())) {
      o.factor = std::atof(v);
      ok = o.factor > 1;
    } else if (a == "-n" && (v = next())) {
      o.iters = std::atol(v);
      ok = o.iters > 0;
    } else if (a == "-w" && (v = next())) {
      o.warmup = std::atol(v);
      ok = o.warmup >= 0;
    } else if (a == "-W" && (v = next())) {
      o.window = std::atoi(v);
      ok = o.window >= 1 && o.window <= 1024;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "terse-bench p2p: bad option or value near '%s'\n\n", a.c_str());
      p2pUsage(stderr);
      return 2;
    }
  }
  if (o.minBytes > o.maxBytes) {
    std::fprintf(stderr, "terse-bench p2p: -b %zu is larger than -e %zu\n", o.minBytes, o.maxBytes);
    return 2;
  }
  auto comm = Communicator::createFromEnv();
  if (!comm.isOk()) return fail("bootstrap", comm.status());
  Communicator& c = **comm;
  if (c.size() != 2) {
    std::fprintf(stderr, "terse-bench p2p: needs exactly 2 ranks, got %d (use terse-run -n 2)\n",
                 c.size());
    return 2;
  }
  std::vector<uint8_t> buf(o.maxBytes, 0x5A);
  if (c.rank() == 0) {
    std::printf("# terse-bench p2p: rank 0 -> rank 1 over %s, window %d\n",
                transportOf(c).describe().c_str(), o.window);
    std::printf("# %12s %10s %12s %12s %10s\n", "bytes", "messages", "time(s)", "MB/s", "GB/s");
  }
  long badTotal = 0;
  for (size_t bytes = o.minBytes;;) {
    long count = o.iters;
    if (count == 0) {
      count = static_cast<long>((size_t{1} << 30) / (bytes ? bytes : 1));
      if (count < 20) count = 20;
      if (count > 100000) count = 100000;
    }
    long bad = 0;
    Status s = c.barrier();
    if (!s.isOk()) return fail("barrier", s);
    auto warm = stream(c, buf, bytes, o.warmup, o.window, false, &bad);
    if (!warm.isOk()) return fail("warm-up", warm.status());
    s = c.barrier();
    if (!s.isOk()) return fail("barrier", s);
    auto secs = stream(c, buf, bytes, count, o.window, o.check, &bad);
    if (!secs.isOk()) return fail("transfer", secs.status());
    badTotal += bad;
    if (c.rank() == 0) {
      double bps = static_cast<double>(bytes) * static_cast<double>(count) / *secs;
      std::printf("  %12zu %10ld %12.6f %12.2f %10.3f\n", bytes, count, *secs,
                  bps / (1024.0 * 1024.0), bps / 1e9);
      std::fflush(stdout);
    }
    if (bytes >= o.maxBytes) break;
    size_t next = static_cast<size_t>(static_cast<double>(bytes) * o.factor);
    bytes = next > bytes ? std::min(next, o.maxBytes) : bytes + 1;
  }
  if (o.check && c.rank() == 1) {
    if (badTotal) {
      std::fprintf(stderr, "terse-bench p2p: %ld messages arrived with wrong bytes\n", badTotal);
      return 1;
    }
    std::printf("# every received message matched its pattern\n");
  }
  Status s = c.barrier();
  return s.isOk() ? 0 : fail("final barrier", s);
}

const RegisterSubcommand kRegisterP2p({"p2p",
                                       "point-to-point bandwidth (2 ranks, as ucx_perftest tag_bw)",
                                       p2pMain});

}  // namespace
}  // namespace terse::bench
