// Drives the built libnccl-net-terse.so the way NCCL does, from forked processes (see
// net_harness.h). Every check compares delivered bytes and sizes with an independent pattern
// generator or reference sum, so a plugin that drops, reorders, truncates or corrupts fails.
#include "net_harness.h"

#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <cstdarg>
#include <deque>
#include <numeric>

namespace terse::harness {
namespace {

constexpr const char* kPluginPath = TERSE_PLUGIN_PATH;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Deterministic bytes for message `seed`; byte i depends on (seed, i) only.
void fillPattern(uint8_t* p, size_t n, uint64_t seed) {
  size_t words = n / 8;
  for (size_t w = 0; w < words; ++w) {
    uint64_t v = mix(seed * 0x100000001b3ull + w);
    std::memcpy(p + 8 * w, &v, 8);
  }
  uint64_t v = mix(seed * 0x100000001b3ull + words);
  for (size_t i = words * 8; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * (i % 8)));
}

// Index of the first byte that differs from the pattern, or n.
size_t checkPattern(const uint8_t* p, size_t n, uint64_t seed) {
  std::vector<uint8_t> want(n);
  fillPattern(want.data(), n, seed);
  for (size_t i = 0; i < n; ++i)
    if (p[i] != want[i]) return i;
  return n;
}

void useLoopback(const std::string& tls) {
  setenv("UCX_NET_DEVICES", "lo", 1);
  setenv("UCX_TLS", tls.c_str(), 1);
  setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
}

// TERSE_NET_LOSSLESS for this rank; a low threshold so small (eager) messages are compressed too.
void useLossless(bool on, size_t minBytes = 4096) {
  setenv("TERSE_NET_LOSSLESS", on ? "1" : "0", 1);
  setenv("TERSE_NET_LOSSLESS_MIN_BYTES", std::to_string(minBytes).c_str(), 1);
}

// Posts until the plugin accepts (NULL request = "call again"), as NCCL's proxy does.
void* postSend(NetApi& api, void* comm, void* data, size_t size, int tag, void* mh) {
  void* req = nullptr;
  for (int spins = 0; req == nullptr; ++spins) {
    NCCL_OK(api.isend(comm, data, size, tag, mh, &req));
    HARNESS_CHECK(spins < 50000000, "isend never accepted the request");
  }
  return req;
}

void* postRecv(NetApi& api, void* comm, int n, void** data, const size_t* sizes, int* tags,
               void** mhs) {
  void* req = reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);  // NCCL's LL preset
  void* first = req;
  for (int spins = 0;; ++spins) {
    req = first;
    NCCL_OK(api.irecv(comm, n, data, sizes, tags, mhs, &req));
    if (req != nullptr) break;
    HARNESS_CHECK(spins < 50000000, "irecv never accepted the request");
  }
  HARNESS_CHECK(req != first, "irecv kept NCCL's optional-completion marker as the request");
  return req;
}

std::string ranksSummary(const std::vector<int>& codes) {
  std::string s;
  for (size_t r = 0; r < codes.size(); ++r)
    s += "rank " + std::to_string(r) + " exit " + std::to_string(codes[r]) + "; ";
  return s;
}

void expectAllPassed(const std::vector<int>& codes) {
  for (int c : codes) EXPECT_EQ(c, 0) << ranksSummary(codes);
}

struct Variant {
  int version;
  std::string tls;
  bool lossless = false;  // TERSE_NET_LOSSLESS=1 on both ranks: every receive goes by probe
};
std::string variantName(const testing::TestParamInfo<Variant>& info) {
  return "v" + std::to_string(info.param.version) + "_" + info.param.tls +
         (info.param.lossless ? "_lossless" : "");
}

void useVariant(const Variant& v) {
  useLoopback(v.tls);
  useLossless(v.lossless);
}

class NetPluginTest : public testing::TestWithParam<Variant> {
 protected:
  void SetUp() override { dir_ = makeTempDir(); }
  void TearDown() override { removeTree(dir_); }

  // The frame of these tests: two ranks over the variant, each with its table initialised and
  // connected to the other under `key`; body(rank, api, link, props) runs on each, then both
  // meet at "<key>-done", close the link and finalize.
  void runPair(const std::string& key,
               const std::function<void(int rank, NetApi& api, Link& link,
                                        const ncclNetProperties_v11_t& props)>& body) {
    const Variant v = GetParam();
    auto codes = runRanks(2, [&](int rank) {
      useVariant(v);
      NetApi api(kPluginPath, v.version);
      NCCL_OK(api.init());
      ncclNetProperties_v11_t props;
      NCCL_OK(api.getProperties(0, &props));
      Exchange ex(dir_);
      Link link = connectPeers(api, ex, key, rank, 1 - rank, 1 - rank);
      body(rank, api, link, props);
      ex.barrier(key + "-done", rank, 2);
      closeLink(api, link);
      NCCL_OK(api.finalize());
    });
    expectAllPassed(codes);
  }

  std::string dir_;
};

// Sizes from 0 bytes to 64 MiB both ways at once, each receive larger than its send, with
// registration checks, reported sizes, and untouched bytes past the message.
TEST_P(NetPluginTest, SizesBothWaysReceiveLargerThanSend) {
  runPair("sizes", [&](int rank, NetApi& api, Link& link, const ncclNetProperties_v11_t& props) {
    HARNESS_CHECK(std::string(api.name()) == "terse", "table name is '%s'", api.name());
    int ndev = 0;
    NCCL_OK(api.devices(&ndev));
    HARNESS_CHECK(ndev == 1, "devices reported %d", ndev);
    HARNESS_CHECK((props.ptrSupport & NCCL_PTR_HOST) && !(props.ptrSupport & NCCL_PTR_DMABUF),
                  "ptrSupport %#x", props.ptrSupport);
    HARNESS_CHECK(props.speed > 0 && props.maxComms > 0 && props.maxRecvs >= 1 &&
                      props.maxRecvs <= 8 && props.maxP2pBytes == NCCL_MAX_NET_SIZE_BYTES,
                  "properties speed %d maxComms %d maxRecvs %d maxP2pBytes %zu", props.speed,
                  props.maxComms, props.maxRecvs, props.maxP2pBytes);
    HARNESS_CHECK(std::string(props.name) == "lo", "device name '%s'", props.name);

    int peer = 1 - rank;
    const std::vector<size_t> sizes = {0, 1, 7, 4096, 65537, (1u << 20) + 3, 8u << 20, 64u << 20};
    const size_t extra = 4096 + 13;
    for (size_t k = 0; k < sizes.size(); ++k) {
      size_t n = sizes[k];
      std::vector<uint8_t> sendBuf(n + 1), recvBuf(n + extra, 0xA5);
      fillPattern(sendBuf.data(), n, k * 16 + rank);
      void *smh = nullptr, *rmh = nullptr;
      NCCL_OK(api.regMr(link.sendComm, sendBuf.data(), sendBuf.size(), NCCL_PTR_HOST, &smh));
      NCCL_OK(api.regMr(link.recvComm, recvBuf.data(), recvBuf.size(), NCCL_PTR_HOST, &rmh));
      void* rdata = recvBuf.data();
      size_t cap = recvBuf.size();
      int tag = static_cast<int>(k) + 100;
      void* rreq = postRecv(api, link.recvComm, 1, &rdata, &cap, &tag, &rmh);
      void* sreq = postSend(api, link.sendComm, sendBuf.data(), n, tag, smh);
      int ssize = -1, rsize = -1;
      NCCL_OK(waitRequest(api, sreq, &ssize));
      NCCL_OK(waitRequest(api, rreq, &rsize));
      HARNESS_CHECK(ssize == static_cast<int>(n), "send of %zu reported %d", n, ssize);
      HARNESS_CHECK(rsize == static_cast<int>(n), "receive of %zu reported %d", n, rsize);
      size_t bad = checkPattern(recvBuf.data(), n, k * 16 + peer);
      HARNESS_CHECK(bad == n, "size %zu: byte %zu differs", n, bad);
      for (size_t i = n; i < recvBuf.size(); ++i)
        HARNESS_CHECK(recvBuf[i] == 0xA5, "size %zu: byte %zu past the message was written", n, i);
      void* flushReq = reinterpret_cast<void*>(1);
      NCCL_OK(api.iflush(link.recvComm, 1, &rdata, &rsize, &rmh, &flushReq));
      HARNESS_CHECK(flushReq == nullptr, "host memory needs no flush");
      NCCL_OK(api.deregMr(link.sendComm, smh));
      NCCL_OK(api.deregMr(link.recvComm, rmh));
    }
    // A buffer outside its registration is refused, not sent.
    std::vector<uint8_t> small(64);
    void* mh = nullptr;
    NCCL_OK(api.regMr(link.sendComm, small.data(), 32, NCCL_PTR_HOST, &mh));
    void* req = nullptr;
    HARNESS_CHECK(api.isend(link.sendComm, small.data(), 64, 1, mh, &req) == ncclInvalidArgument,
                  "isend beyond the registered range must fail");
    NCCL_OK(api.deregMr(link.sendComm, mh));
    // CUDA memory is refused exactly when ptrSupport says so.
    if (!(props.ptrSupport & NCCL_PTR_CUDA))
      HARNESS_CHECK(api.regMr(link.sendComm, small.data(), 64, NCCL_PTR_CUDA, &mh) != ncclSuccess,
                    "regMr(CUDA) must fail when ptrSupport lacks NCCL_PTR_CUDA");
  });
}

// Posts post(next), post(next + 1), ... below `limit` until the plugin answers a NULL request
// (its window is full), keeping each (index, request) in `inFlight`; `firstNullAt` (if still
// -1) gets the number in flight at the first NULL.
void postWhileAccepted(int& next, int limit, std::deque<std::pair<int, void*>>& inFlight,
                       int& firstNullAt, const std::function<void*(int)>& post) {
  while (next < limit) {
    void* req = post(next);
    if (req == nullptr) {
      if (firstNullAt < 0) firstNullAt = static_cast<int>(inFlight.size());
      return;
    }
    inFlight.emplace_back(next++, req);
  }
}

// At most 32 receives (and 32 x maxRecvs sends) in flight; the next post gets a NULL request.
// Messages keep their posting order on the tag.
TEST_P(NetPluginTest, BackpressureAndOrdering) {
  runPair("bp", [&](int rank, NetApi& api, Link& link, const ncclNetProperties_v11_t& props) {
    const int kMessages = 700;
    const size_t kCap = 64 << 10;
    auto sizeOf = [](int i) { return static_cast<size_t>((i * 7919) % (64 << 10)); };
    if (rank == 0) {
      std::vector<std::vector<uint8_t>> bufs(kMessages);
      std::deque<std::pair<int, void*>> inFlight;
      int next = 0, firstNullAt = -1;
      while (next < kMessages || !inFlight.empty()) {
        postWhileAccepted(next, kMessages, inFlight, firstNullAt, [&](int i) {
          bufs[i].resize(sizeOf(i));
          fillPattern(bufs[i].data(), bufs[i].size(), i);
          void* req = nullptr;
          NCCL_OK(api.isend(link.sendComm, bufs[i].data(), bufs[i].size(), 7, nullptr, &req));
          return req;
        });
        int done = 0, size = -1;
        NCCL_OK(api.test(inFlight.front().second, &done, &size));
        if (done) {
          HARNESS_CHECK(size == static_cast<int>(sizeOf(inFlight.front().first)), "send size %d",
                        size);
          inFlight.pop_front();
        }
      }
      HARNESS_CHECK(firstNullAt == NCCL_NET_MAX_REQUESTS * props.maxRecvs,
                    "first NULL send after %d requests, expected %d", firstNullAt,
                    NCCL_NET_MAX_REQUESTS * props.maxRecvs);
    } else {
      std::vector<std::vector<uint8_t>> bufs(NCCL_NET_MAX_REQUESTS + 1, std::vector<uint8_t>(kCap));
      std::deque<std::pair<int, void*>> inFlight;
      int posted = 0, received = 0, firstNullAt = -1;
      while (received < kMessages) {
        postWhileAccepted(posted, kMessages, inFlight, firstNullAt, [&](int i) {
          void* data = bufs[i % bufs.size()].data();
          size_t cap = kCap;
          int tag = 7;
          void* req = nullptr;
          NCCL_OK(api.irecv(link.recvComm, 1, &data, &cap, &tag, nullptr, &req));
          return req;
        });
        int done = 0, size = -1;
        NCCL_OK(api.test(inFlight.front().second, &done, &size));
        if (done) {
          int i = inFlight.front().first;
          HARNESS_CHECK(size == static_cast<int>(sizeOf(i)), "message %d: size %d, want %zu", i,
                        size, sizeOf(i));
          size_t bad = checkPattern(bufs[i % bufs.size()].data(), sizeOf(i), i);
          HARNESS_CHECK(bad == sizeOf(i), "message %d: byte %zu differs (out of order?)", i, bad);
          inFlight.pop_front();
          ++received;
        }
      }
      HARNESS_CHECK(firstNullAt == NCCL_NET_MAX_REQUESTS, "first NULL receive after %d requests",
                    firstNullAt);
    }
  });
}

// Grouped receives (n = maxRecvs): the tag picks the buffer, whatever order the sends come in.
TEST_P(NetPluginTest, GroupedReceivesMatchByTag) {
  runPair("grp", [&](int rank, NetApi& api, Link& link, const ncclNetProperties_v11_t& props) {
    const int n = props.maxRecvs;
    HARNESS_CHECK(n > 1, "maxRecvs is %d; grouped receives need > 1", n);
    const int kGroups = 40, kWindow = 4;
    auto sizeOf = [](int g, int t) {
      return static_cast<size_t>(((g * 131 + t * 977) % 97) * 2113);
    };
    auto seedOf = [](int g, int t) { return static_cast<uint64_t>(g * 64 + t); };
    if (rank == 0) {
      std::vector<std::vector<uint8_t>> bufs(static_cast<size_t>(kGroups * n));
      std::deque<void*> inFlight;
      for (int g = 0; g < kGroups; ++g) {
        for (int k = 0; k < n; ++k) {
          int t = (k * 3 + g) % n;  // a different tag order in every group
          if (std::gcd(3, n) != 1) t = (n - 1 - k + g) % n;
          auto& b = bufs[static_cast<size_t>(g * n + t)];
          b.resize(sizeOf(g, t));
          fillPattern(b.data(), b.size(), seedOf(g, t));
          inFlight.push_back(postSend(api, link.sendComm, b.data(), b.size(), 1000 + t, nullptr));
        }
        while (inFlight.size() > static_cast<size_t>(kWindow * n)) {
          NCCL_OK(waitRequest(api, inFlight.front(), nullptr));
          inFlight.pop_front();
        }
      }
      for (void* r : inFlight) NCCL_OK(waitRequest(api, r, nullptr));
    } else {
      // Too many buffers is refused.
      std::vector<void*> d(9, nullptr);
      std::vector<size_t> s(9, 0);
      std::vector<int> tg(9, 0);
      void* bad = nullptr;
      if (n < 8)
        HARNESS_CHECK(api.irecv(link.recvComm, n + 1, d.data(), s.data(), tg.data(), nullptr,
                                &bad) == ncclInvalidArgument,
                      "irecv with n > maxRecvs must fail");
      std::vector<std::vector<uint8_t>> bufs(static_cast<size_t>(kGroups * n));
      std::deque<std::pair<int, void*>> inFlight;
      auto finish = [&](int g, void* req) {
        std::vector<int> sizes(n, -1);
        NCCL_OK(waitRequest(api, req, sizes.data()));
        for (int t = 0; t < n; ++t) {
          HARNESS_CHECK(sizes[t] == static_cast<int>(sizeOf(g, t)),
                        "group %d tag %d: size %d, want %zu", g, t, sizes[t], sizeOf(g, t));
          auto& b = bufs[static_cast<size_t>(g * n + t)];
          size_t at = checkPattern(b.data(), sizeOf(g, t), seedOf(g, t));
          HARNESS_CHECK(at == sizeOf(g, t), "group %d tag %d: byte %zu differs", g, t, at);
        }
      };
      for (int g = 0; g < kGroups; ++g) {
        std::vector<void*> data(n);
        std::vector<size_t> caps(n);
        std::vector<int> tags(n);
        for (int t = 0; t < n; ++t) {
          auto& b = bufs[static_cast<size_t>(g * n + t)];
          b.assign(sizeOf(g, t) + 100, 0);
          data[t] = b.data();
          caps[t] = b.size();
          tags[t] = 1000 + t;
        }
        inFlight.emplace_back(
            g, postRecv(api, link.recvComm, n, data.data(), caps.data(), tags.data(), nullptr));
        if (inFlight.size() > static_cast<size_t>(kWindow)) {
          finish(inFlight.front().first, inFlight.front().second);
          inFlight.pop_front();
        }
      }
      for (auto& [g, r] : inFlight) finish(g, r);
    }
  });
}

// LL (16-byte lines {data, flag, data, flag}) and LL128 (8-byte flag per 128 bytes) buffers,
// reused step after step as NCCL does: every line must carry this step's flag and data.
TEST_P(NetPluginTest, LlShapedBuffersBitExact) {
  runPair("ll", [&](int rank, NetApi& api, Link& link, const ncclNetProperties_v11_t&) {
    const size_t kLines = 4096;
    std::vector<uint32_t> ll(kLines * 4), llIn(kLines * 4, 0);
    std::vector<uint64_t> ll128(kLines * 16), ll128In(kLines * 16, 0);
    void* mh[4];
    NCCL_OK(api.regMr(link.sendComm, ll.data(), ll.size() * 4, NCCL_PTR_HOST, &mh[0]));
    NCCL_OK(api.regMr(link.recvComm, llIn.data(), llIn.size() * 4, NCCL_PTR_HOST, &mh[1]));
    NCCL_OK(api.regMr(link.sendComm, ll128.data(), ll128.size() * 8, NCCL_PTR_HOST, &mh[2]));
    NCCL_OK(api.regMr(link.recvComm, ll128In.data(), ll128In.size() * 8, NCCL_PTR_HOST, &mh[3]));
    int peer = 1 - rank;
    auto word = [](int src, uint32_t step, size_t i) {
      return static_cast<uint32_t>(mix((uint64_t(src) << 48) ^ (uint64_t(step) << 32) ^ i));
    };
    for (uint32_t step = 1; step <= 60; ++step) {
      size_t lines = 1 + (step * 389) % kLines;  // a different fill each step
      for (size_t l = 0; l < lines; ++l) {
        ll[4 * l + 0] = word(rank, step, 2 * l);
        ll[4 * l + 1] = step;
        ll[4 * l + 2] = word(rank, step, 2 * l + 1);
        ll[4 * l + 3] = step;
        for (int k = 0; k < 15; ++k) ll128[16 * l + k] = mix(word(rank, step, 16 * l + k));
        ll128[16 * l + 15] = step;
      }
      void* rdata[2] = {llIn.data(), ll128In.data()};
      size_t caps[2] = {llIn.size() * 4, ll128In.size() * 8};  // whole buffers, like NCCL
      int tags[2] = {0, 1};
      void* r0 = postRecv(api, link.recvComm, 1, &rdata[0], &caps[0], &tags[0], &mh[1]);
      void* r1 = postRecv(api, link.recvComm, 1, &rdata[1], &caps[1], &tags[1], &mh[3]);
      void* s0 = postSend(api, link.sendComm, ll.data(), lines * 16, 0, mh[0]);
      void* s1 = postSend(api, link.sendComm, ll128.data(), lines * 128, 1, mh[2]);
      int sz0 = -1, sz1 = -1;
      NCCL_OK(waitRequest(api, s0, nullptr));
      NCCL_OK(waitRequest(api, s1, nullptr));
      NCCL_OK(waitRequest(api, r0, &sz0));
      NCCL_OK(waitRequest(api, r1, &sz1));
      HARNESS_CHECK(sz0 == static_cast<int>(lines * 16) && sz1 == static_cast<int>(lines * 128),
                    "step %u: sizes %d %d", step, sz0, sz1);
      for (size_t l = 0; l < lines; ++l) {
        HARNESS_CHECK(llIn[4 * l + 1] == step && llIn[4 * l + 3] == step &&
                          llIn[4 * l] == word(peer, step, 2 * l) &&
                          llIn[4 * l + 2] == word(peer, step, 2 * l + 1),
                      "LL step %u line %zu wrong", step, l);
        HARNESS_CHECK(ll128In[16 * l + 15] == step, "LL128 step %u line %zu flag", step, l);
        for (int k = 0; k < 15; ++k)
          HARNESS_CHECK(ll128In[16 * l + k] == mix(word(peer, step, 16 * l + k)),
                        "LL128 step %u line %zu word %d", step, l, k);
      }
    }
    for (int i = 0; i < 4; ++i) NCCL_OK(api.deregMr(i % 2 ? link.recvComm : link.sendComm, mh[i]));
  });
}

// Every table version over tcp; the newest, v11 and v8 also over shared memory.
std::vector<Variant> tableVariants() {
  std::vector<Variant> out;
  for (int v : kAbiVersions) out.push_back({v, "tcp"});
  for (int v : {kNewestAbi, 11, 8}) out.push_back({v, "sm"});
  return out;
}
INSTANTIATE_TEST_SUITE_P(Tables, NetPluginTest, testing::ValuesIn(tableVariants()), variantName);
// The same checks with TERSE_NET_LOSSLESS=1 (threshold 4 KiB): random payloads go raw through the
// probe path, LL/LL128 lines (repeated flags) go as compressed frames.
INSTANTIATE_TEST_SUITE_P(Lossless, NetPluginTest,
                         testing::Values(Variant{11, "tcp", true}, Variant{11, "sm", true},
                                         Variant{8, "tcp", true}),
                         variantName);

// A ring allreduce (reduce-scatter then allgather) built only from isend/irecv, on 2..4
// processes; every rank must end with the exact integer sum.
class NetPluginRingTest : public testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(NetPluginRingTest, RingAllreduceExact) {
  const int nranks = std::get<0>(GetParam());
  const int version = std::get<1>(GetParam());
  std::string dir = makeTempDir();
  auto codes = runRanks(nranks, [&](int rank) {
    useLoopback("tcp");
    NetApi api(kPluginPath, version);
    NCCL_OK(api.init());
    Exchange ex(dir);
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    Link link = connectPeers(api, ex, "ring", rank, next, prev);
    const size_t count = (1u << 20) + 3;
    auto value = [](int r, size_t i) { return static_cast<uint32_t>(mix(r * 1000003ull + i)); };
    std::vector<uint32_t> data(count), tmp(count / nranks + nranks);
    for (size_t i = 0; i < count; ++i) data[i] = value(rank, i);
    auto chunkBegin = [&](int c) { return count * static_cast<size_t>(c) / nranks; };
    auto chunkLen = [&](int c) { return chunkBegin(c + 1) - chunkBegin(c); };
    void *dmh, *tmh;
    NCCL_OK(api.regMr(link.sendComm, data.data(), count * 4, NCCL_PTR_HOST, &dmh));
    NCCL_OK(api.regMr(link.recvComm, tmp.data(), tmp.size() * 4, NCCL_PTR_HOST, &tmh));
    void* dmhRecv;
    NCCL_OK(api.regMr(link.recvComm, data.data(), count * 4, NCCL_PTR_HOST, &dmhRecv));
    for (int s = 0; s < nranks - 1; ++s) {  // reduce-scatter
      int sendC = ((rank - s) % nranks + nranks) % nranks;
      int recvC = ((rank - s - 1) % nranks + nranks) % nranks;
      void* rdata = tmp.data();
      size_t cap = tmp.size() * 4;
      int tag = s;
      void* rr = postRecv(api, link.recvComm, 1, &rdata, &cap, &tag, &tmh);
      void* sr = postSend(api, link.sendComm, data.data() + chunkBegin(sendC), chunkLen(sendC) * 4,
                          s, dmh);
      int got = -1;
      NCCL_OK(waitRequest(api, rr, &got));
      NCCL_OK(waitRequest(api, sr, nullptr));
      HARNESS_CHECK(got == static_cast<int>(chunkLen(recvC) * 4), "step %d got %d bytes", s, got);
      for (size_t i = 0; i < chunkLen(recvC); ++i) data[chunkBegin(recvC) + i] += tmp[i];
    }
    for (int s = 0; s < nranks - 1; ++s) {  // allgather
      int sendC = ((rank + 1 - s) % nranks + nranks) % nranks;
      int recvC = ((rank - s) % nranks + nranks) % nranks;
      void* rdata = data.data() + chunkBegin(recvC);
      size_t cap = chunkLen(recvC) * 4;
      int tag = 100 + s;
      void* rr = postRecv(api, link.recvComm, 1, &rdata, &cap, &tag, &dmhRecv);
      void* sr = postSend(api, link.sendComm, data.data() + chunkBegin(sendC), chunkLen(sendC) * 4,
                          100 + s, dmh);
      NCCL_OK(waitRequest(api, rr, nullptr));
      NCCL_OK(waitRequest(api, sr, nullptr));
    }
    for (size_t i = 0; i < count; ++i) {
      uint32_t want = 0;
      for (int r = 0; r < nranks; ++r) want += value(r, i);
      HARNESS_CHECK(data[i] == want, "element %zu: %u, want %u", i, data[i], want);
    }
    NCCL_OK(api.deregMr(link.sendComm, dmh));
    NCCL_OK(api.deregMr(link.recvComm, tmh));
    NCCL_OK(api.deregMr(link.recvComm, dmhRecv));
    ex.barrier("ring-done", rank, nranks);
    closeLink(api, link);
    NCCL_OK(api.finalize());
  });
  removeTree(dir);
  expectAllPassed(codes);
}

// 2..4 ranks on v11, 3 on every table version.
std::vector<std::tuple<int, int>> ringVariants() {
  std::vector<std::tuple<int, int>> out = {{2, 11}, {4, 11}};
  for (int v : kAbiVersions) out.emplace_back(3, v);
  return out;
}
INSTANTIATE_TEST_SUITE_P(Ranks, NetPluginRingTest, testing::ValuesIn(ringVariants()),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "ranks_v" +
                                  std::to_string(std::get<1>(p.param));
                         });

// Bad arguments are error codes, never crashes or hangs.
TEST(NetPluginErrors, BadArgumentsReturnErrors) {
  auto codes = runRanks(1, [&](int) {
    useLoopback("tcp");
    NetApi api(kPluginPath, 11);
    ncclNetProperties_v11_t props;
    HARNESS_CHECK(api.getProperties(0, &props) == ncclInvalidUsage,
                  "getProperties before init must be ncclInvalidUsage");
    NCCL_OK(api.init());
    HARNESS_CHECK(api.getProperties(1, &props) == ncclInvalidArgument, "device 1 does not exist");
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
    void* comm = nullptr;
    HARNESS_CHECK(api.connect(0, handle, &comm) == ncclInvalidArgument && comm == nullptr,
                  "connect with a zeroed handle must be ncclInvalidArgument");
    void* lc = nullptr;
    HARNESS_CHECK(api.listen(3, handle, &lc) == ncclInvalidArgument, "listen on device 3");
    std::string dir = makeTempDir();
    Exchange ex(dir);
    Link link = connectPeers(api, ex, "bad", 0, 0, 0);
    std::vector<uint8_t> buf(64);
    void* req = nullptr;
    HARNESS_CHECK(api.isend(link.sendComm, buf.data(), (1ull << 30) + 1, 0, nullptr, &req) ==
                      ncclInvalidArgument,
                  "isend above maxP2pBytes");
    HARNESS_CHECK(api.isend(link.recvComm, buf.data(), 8, 0, nullptr, &req) == ncclInvalidArgument,
                  "isend on a receive comm");
    void* data = buf.data();
    size_t size = buf.size();
    int tag = 0;
    HARNESS_CHECK(
        api.irecv(link.recvComm, 0, &data, &size, &tag, nullptr, &req) == ncclInvalidArgument,
        "irecv of 0 buffers");
    HARNESS_CHECK(
        api.irecv(link.sendComm, 1, &data, &size, &tag, nullptr, &req) == ncclInvalidArgument,
        "irecv on a send comm");
    void* nullData = nullptr;
    HARNESS_CHECK(
        api.irecv(link.recvComm, 1, &nullData, &size, &tag, nullptr, &req) == ncclInvalidArgument,
        "irecv into NULL");
    // A send larger than the posted receive fails the receive instead of overrunning it.
    size_t small = 16;
    void* rreq = postRecv(api, link.recvComm, 1, &data, &small, &tag, nullptr);
    void* sreq = postSend(api, link.sendComm, buf.data(), buf.size(), 0, nullptr);
    HARNESS_CHECK(waitRequest(api, rreq, nullptr) == ncclInvalidUsage,
                  "a truncated receive must be ncclInvalidUsage");
    (void)waitRequest(api, sreq, nullptr);
    closeLink(api, link);
    NCCL_OK(api.finalize());
    removeTree(dir);
  });
  EXPECT_EQ(codes[0], 0);
}

// Lines the plugin hands to "NCCL's" logger, as (level, text).
std::vector<std::pair<int, std::string>>& loggedLines() {
  static std::vector<std::pair<int, std::string>> lines;
  return lines;
}

void recordingLogger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt,
                     ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  loggedLines().emplace_back(static_cast<int>(level), buf);
}

// The logger passed to init receives the plugin's lines, prefixed "NET/terse", at NCCL's levels,
// and nothing after the last finalize (NCCL may dlclose the plugin right after it).
TEST(NetPluginLogging, LinesGoToNcclLoggerWithPrefix) {
  for (int version : {kNewestAbi, 11, 9}) {
    auto codes = runRanks(1, [&](int) {
      useLoopback("tcp");
      NetApi api(kPluginPath, version);
      NCCL_OK(api.init(recordingLogger));
      auto& lines = loggedLines();
      bool banner = false;
      for (auto& [level, text] : lines)
        banner |= level == NCCL_LOG_INFO && text.find("NET/terse : Using [0]lo") == 0;
      HARNESS_CHECK(banner, "no INFO 'NET/terse : Using [0]lo' line from init (%zu lines)",
                    lines.size());
      std::string dir = makeTempDir();
      Exchange ex(dir);
      Link link = connectPeers(api, ex, "log", 0, 0, 0);
      char byte = 0;
      void* mh = nullptr;
      size_t before = lines.size();
      HARNESS_CHECK(api.regMr(link.sendComm, &byte, 1, 0x40, &mh) == ncclInvalidArgument,
                    "regMr with an unknown memory type must fail");
      HARNESS_CHECK(lines.size() > before && lines.back().first == NCCL_LOG_WARN &&
                        lines.back().second.find("NET/terse : regMr failed") == 0,
                    "the failure was not logged as WARN 'NET/terse : regMr failed...'");
      closeLink(api, link);
      NCCL_OK(api.finalize());
      removeTree(dir);
      if (version >= 11) {
        before = lines.size();
        int ndev = 0;
        NCCL_OK(api.devices(&ndev));
        void* lc = nullptr;
        char handle[NCCL_NET_HANDLE_MAXSIZE];
        (void)api.listen(0, handle, &lc);  // no ctx any more: fails, but must not log to NCCL
        HARNESS_CHECK(lines.size() == before, "the plugin logged to NCCL after finalize");
      }
    });
    EXPECT_EQ(codes[0], 0) << "version " << version;
  }
}

bool pluginMapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libnccl-net-terse") != std::string::npos) return true;
  return false;
}

// init / connect / traffic / finalize / dlclose, again and again in one process: no thread,
// file descriptor or mapping may outlive a cycle, and every reload must work.
class NetPluginReloadTest : public testing::TestWithParam<int> {};

TEST_P(NetPluginReloadTest, InitFinalizeDlcloseCycles) {
  const int version = GetParam();
  std::string dir = makeTempDir();
  auto codes = runRanks(1, [&](int) {
    useLoopback("tcp,self");
    const int threads0 = countEntries("/proc/self/task");
    const int fds0 = countEntries("/proc/self/fd");
    for (int cycle = 0; cycle < 5; ++cycle) {
      {
        NetApi api(kPluginPath, version);
        NCCL_OK(api.init());
        HARNESS_CHECK(countEntries("/proc/self/task") >= threads0, "thread count");
        Exchange ex(dir);
        std::string key = "cycle" + std::to_string(cycle);
        Link link = connectPeers(api, ex, key, 0, 0, 0);  // to ourselves
        std::vector<uint8_t> out(1 << 20), in((1 << 20) + 64, 0);
        fillPattern(out.data(), out.size(), cycle);
        void* rdata = in.data();
        size_t cap = in.size();
        int tag = cycle;
        void* rr = postRecv(api, link.recvComm, 1, &rdata, &cap, &tag, nullptr);
        void* sr = postSend(api, link.sendComm, out.data(), out.size(), cycle, nullptr);
        int got = -1;
        NCCL_OK(waitRequest(api, sr, nullptr));
        NCCL_OK(waitRequest(api, rr, &got));
        HARNESS_CHECK(got == static_cast<int>(out.size()) &&
                          checkPattern(in.data(), out.size(), cycle) == out.size(),
                      "cycle %d: self traffic corrupted", cycle);
        closeLink(api, link);
        NCCL_OK(api.finalize());
      }  // dlclose
      HARNESS_CHECK(!pluginMapped(), "cycle %d: the library is still mapped after dlclose", cycle);
      // UCX joins its async thread while cleaning up; allow the kernel a moment to reap it.
      int threads = 0;
      for (int i = 0; i < 200 && (threads = countEntries("/proc/self/task")) != threads0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      HARNESS_CHECK(threads == threads0, "cycle %d: %d threads after finalize+dlclose, %d before",
                    cycle, threads, threads0);
      int fds = countEntries("/proc/self/fd");
      HARNESS_CHECK(fds == fds0, "cycle %d: %d open fds after finalize+dlclose, %d before", cycle,
                    fds, fds0);
    }
  });
  removeTree(dir);
  expectAllPassed(codes);
}

INSTANTIATE_TEST_SUITE_P(Tables, NetPluginReloadTest, testing::Values(kNewestAbi, 11, 8),
                         [](const auto& p) { return "v" + std::to_string(p.param); });

// A peer that dies mid-transfer makes test() return ncclRemoteError (6) on the survivor, for a
// waiting receive (sender died) and for a waiting send (receiver died). Never a hang.
void survivorRun(const std::string& tls, bool senderDies, const std::string& dir, int rank);

class NetPluginPeerDeathTest : public testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(NetPluginPeerDeathTest, SurvivorGetsRemoteError) {
  const std::string tls = std::get<0>(GetParam());
  const bool senderDies = std::get<1>(GetParam());
  std::string dir = makeTempDir();
  const int victim = senderDies ? 0 : 1;
  auto codes = runRanks(2, [&](int rank) {
    useLoopback(tls);
    const int threads0 = countEntries("/proc/self/task");
    survivorRun(tls, senderDies, dir, rank);
    // Teardown after a peer died must leave nothing running either.
    int threads = 0;
    for (int i = 0; i < 200 && (threads = countEntries("/proc/self/task")) != threads0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    HARNESS_CHECK(threads == threads0, "%d threads after finalize+dlclose, %d before", threads,
                  threads0);
  });
  removeTree(dir);
  EXPECT_EQ(codes[victim], 128 + SIGKILL) << ranksSummary(codes);
  EXPECT_EQ(codes[1 - victim], 0) << ranksSummary(codes);
}

void survivorRun(const std::string& tls, bool senderDies, const std::string& dir, int rank) {
  {
    NetApi api(kPluginPath, 11);
    NCCL_OK(api.init());
    Exchange ex(dir);
    Link link = connectPeers(api, ex, "death", rank, 1 - rank, 1 - rank);
    const size_t kBig = 32u << 20;
    std::vector<uint8_t> buf(kBig, 1), in(kBig, 0);
    // Rank 0 sends to rank 1. One message first, so the death happens on a working link.
    void* rdata = in.data();
    size_t cap = kBig;
    int tag0 = 0, tag1 = 1, tag2 = 2;
    if (rank == 0) {
      NCCL_OK(
          waitRequest(api, postSend(api, link.sendComm, buf.data(), 4096, 0, nullptr), nullptr));
    } else {
      NCCL_OK(
          waitRequest(api, postRecv(api, link.recvComm, 1, &rdata, &cap, &tag0, nullptr), nullptr));
    }
    ex.barrier("warm", rank, 2);
    if (rank == 0) {
      void* big = postSend(api, link.sendComm, buf.data(), kBig, 1, nullptr);
      if (senderDies) {
        int done = 0;
        for (int i = 0; i < 100 && !done; ++i) NCCL_OK(api.test(big, &done, nullptr));
        raise(SIGKILL);  // mid-transfer: the receiver still waits on tag 2
      }
      ncclResult_t r = waitRequest(api, big, nullptr, 120);  // receiver never posts tag 1
      HARNESS_CHECK(r == ncclRemoteError, "send to a dead receiver: test returned %d, want 6",
                    static_cast<int>(r));
    } else {
      if (!senderDies) {
        (void)postRecv(api, link.recvComm, 1, &rdata, &cap, &tag0, nullptr);
        raise(SIGKILL);
      }
      void* r1 = postRecv(api, link.recvComm, 1, &rdata, &cap, &tag1, nullptr);
      void* r2 = postRecv(api, link.recvComm, 1, &rdata, &cap, &tag2, nullptr);
      ncclResult_t a = waitRequest(api, r1, nullptr, 120);
      ncclResult_t b = a == ncclSuccess ? waitRequest(api, r2, nullptr, 120) : ncclRemoteError;
      HARNESS_CHECK(b == ncclRemoteError && (a == ncclSuccess || a == ncclRemoteError),
                    "receive from a dead sender: test returned %d then %d, want 6",
                    static_cast<int>(a), static_cast<int>(b));
      void* more = nullptr;
      HARNESS_CHECK(
          api.irecv(link.recvComm, 1, &rdata, &cap, &tag2, nullptr, &more) == ncclRemoteError,
          "a broken comm must refuse new receives");
    }
    closeLink(api, link);
    NCCL_OK(api.finalize());
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, NetPluginPeerDeathTest,
                         testing::Combine(testing::Values("tcp", "sm"), testing::Bool()),
                         [](const auto& p) {
                           return std::get<0>(p.param) +
                                  (std::get<1>(p.param) ? "_senderDies" : "_receiverDies");
                         });

// ---- TERSE_NET_LOSSLESS ---------------------------------------------------------------------

enum class Payload { kSparse, kRandom, kMixed, kBf16 };
constexpr Payload kPayloads[] = {Payload::kSparse, Payload::kRandom, Payload::kMixed,
                                 Payload::kBf16};

// Deterministic bytes of a kind: sparse (9 of 10 four-byte words zero, like ReLU activations),
// random (incompressible), mixed (a sparse first half, a random second half), bf16-like
// (random mantissas under a few exponents). Byte i depends on (seed, kind, n, i) only.
void fillPayload(uint8_t* p, size_t n, uint64_t seed, Payload kind) {
  fillPattern(p, n, seed);
  if (kind == Payload::kRandom) return;
  for (size_t w = 0; w + 4 <= n; w += 4) {
    uint64_t r = mix(seed ^ (w * 0x9e37ull + 1));
    if (kind == Payload::kBf16) {
      p[w + 1] = static_cast<uint8_t>((0x3a + r % 3) | (r & 0x80));
      p[w + 3] = static_cast<uint8_t>((0x3a + (r >> 8) % 3) | ((r >> 8) & 0x80));
    } else if ((kind == Payload::kSparse || w + 4 <= n / 2) && r % 10 != 0) {
      std::memset(p + w, 0, 4);
    }
  }
}

void checkPayload(const uint8_t* got, size_t n, uint64_t seed, Payload kind, const char* what) {
  std::vector<uint8_t> want(n);
  fillPayload(want.data(), n, seed, kind);
  for (size_t i = 0; i < n; ++i)
    HARNESS_CHECK(got[i] == want[i], "%s: byte %zu of %zu is %#x, want %#x", what, i, n, got[i],
                  want[i]);
}

// The counts a lossless send comm logs when it closes: "lossless: C of E sends ...".
std::pair<long, long> losslessStats() {
  for (auto& [level, text] : loggedLines()) {
    size_t at = text.find("lossless: ");
    long c = -1, e = -1;
    if (level == NCCL_LOG_INFO && at != std::string::npos &&
        std::sscanf(text.c_str() + at, "lossless: %ld of %ld sends", &c, &e) == 2)
      return {c, e};
  }
  return {-1, -1};
}

// Every payload kind and size from 0 B to 64 MiB, both ways at once, receives larger than sends
// and posted before the sends on one tag (the probes must keep posting order), a grouped receive
// of mixed kinds, and receives too small for a compressed and for a raw message. What arrives
// must be the sent bytes exactly with the raw sizes reported, and the comm's own count must show
// that sparse data really went compressed and random data raw.
class NetPluginLosslessTest : public testing::TestWithParam<std::string> {};

TEST_P(NetPluginLosslessTest, PayloadsBitExactBothWays) {
  const std::string tls = GetParam();
  std::string dir = makeTempDir();
  auto codes = runRanks(2, [&](int rank) {
    useLoopback(tls);
    const size_t kMin = 64 << 10;
    useLossless(true, kMin);
    NetApi api(kPluginPath, 11);
    NCCL_OK(api.init(recordingLogger));
    ncclNetProperties_v11_t props;
    NCCL_OK(api.getProperties(0, &props));
    Exchange ex(dir);
    const int peer = 1 - rank;
    Link link = connectPeers(api, ex, "lossless", rank, peer, peer);
    long eligible = 0, mustCompress = 0, mustRaw = 0;
    auto account = [&](size_t n, Payload kind) {
      if (n < kMin) return;
      ++eligible;
      mustCompress += kind == Payload::kSparse || kind == Payload::kMixed;
      mustRaw += kind == Payload::kRandom;
    };
    auto seedOf = [](int src, size_t k, int j) { return (uint64_t(src) << 40) ^ (k << 8) ^ j; };
    const std::vector<size_t> sizes = {0,        1,      4095,           kMin - 1, kMin,
                                       kMin + 1, 300000, (1u << 20) + 3, 8u << 20, 64u << 20};
    const size_t extra = 4096 + 13;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t n = sizes[k];
      // Large sizes one kind at a time to bound memory; smaller ones all kinds in flight at once.
      const size_t batch = n >= (8u << 20) ? 1 : 4;
      for (size_t j0 = 0; j0 < 4; j0 += batch) {
        std::vector<std::vector<uint8_t>> out(batch), in(batch);
        std::vector<void*> smh(batch), rmh(batch), rreq(batch), sreq(batch);
        const int tag = static_cast<int>(k);
        for (size_t b = 0; b < batch; ++b) {
          Payload kind = kPayloads[j0 + b];
          out[b].resize(n + 1);
          fillPayload(out[b].data(), n, seedOf(rank, k, int(j0 + b)), kind);
          in[b].assign(n + extra, 0xA5);
          NCCL_OK(api.regMr(link.sendComm, out[b].data(), out[b].size(), NCCL_PTR_HOST, &smh[b]));
          NCCL_OK(api.regMr(link.recvComm, in[b].data(), in[b].size(), NCCL_PTR_HOST, &rmh[b]));
          void* data = in[b].data();
          size_t cap = in[b].size();
          int t = tag;
          rreq[b] = postRecv(api, link.recvComm, 1, &data, &cap, &t, &rmh[b]);
        }
        for (size_t b = 0; b < batch; ++b) {
          sreq[b] = postSend(api, link.sendComm, out[b].data(), n, tag, smh[b]);
          account(n, kPayloads[j0 + b]);
        }
        for (size_t b = 0; b < batch; ++b) {
          int ssize = -1, rsize = -1;
          NCCL_OK(waitRequest(api, sreq[b], &ssize));
          NCCL_OK(waitRequest(api, rreq[b], &rsize));
          HARNESS_CHECK(ssize == static_cast<int>(n) && rsize == static_cast<int>(n),
                        "size %zu kind %zu: send reported %d, receive %d", n, j0 + b, ssize, rsize);
          char what[64];
          std::snprintf(what, sizeof(what), "size %zu kind %zu", n, j0 + b);
          checkPayload(in[b].data(), n, seedOf(peer, k, int(j0 + b)), kPayloads[j0 + b], what);
          for (size_t i = n; i < in[b].size(); ++i)
            HARNESS_CHECK(in[b][i] == 0xA5, "%s: byte %zu past the message was written", what, i);
          NCCL_OK(api.deregMr(link.sendComm, smh[b]));
          NCCL_OK(api.deregMr(link.recvComm, rmh[b]));
        }
      }
    }

    // A grouped receive of every kind, the sends in reverse tag order.
    const int n = props.maxRecvs;
    std::vector<std::vector<uint8_t>> gout(n), gin(n);
    std::vector<void*> gdata(n);
    std::vector<size_t> gcaps(n);
    std::vector<int> gtags(n);
    auto gsize = [](int t) { return size_t(90000) + size_t(t) * 40000; };
    for (int t = 0; t < n; ++t) {
      gout[t].resize(gsize(t));
      fillPayload(gout[t].data(), gsize(t), seedOf(rank, 99, t), kPayloads[t % 4]);
      gin[t].assign(gsize(t) + 64, 0);
      gdata[t] = gin[t].data();
      gcaps[t] = gin[t].size();
      gtags[t] = 500 + t;
    }
    void* grecv =
        postRecv(api, link.recvComm, n, gdata.data(), gcaps.data(), gtags.data(), nullptr);
    std::vector<void*> gsend;
    for (int t = n - 1; t >= 0; --t) {
      gsend.push_back(postSend(api, link.sendComm, gout[t].data(), gsize(t), 500 + t, nullptr));
      account(gsize(t), kPayloads[t % 4]);
    }
    for (void* r : gsend) NCCL_OK(waitRequest(api, r, nullptr));
    std::vector<int> gsizes(n, -1);
    NCCL_OK(waitRequest(api, grecv, gsizes.data()));
    for (int t = 0; t < n; ++t) {
      HARNESS_CHECK(gsizes[t] == static_cast<int>(gsize(t)), "grouped tag %d: size %d, want %zu", t,
                    gsizes[t], gsize(t));
      checkPayload(gin[t].data(), gsize(t), seedOf(peer, 99, t), kPayloads[t % 4], "grouped");
    }

    // Receives smaller than the message fail with ncclInvalidUsage, compressed or raw, and the
    // comm keeps working (rank 0 sends, rank 1 receives). The mixed message's frame (about half
    // a MiB) is larger than the receive plus a frame header: the receiver must refuse it from
    // its announced size, before sizing a buffer from it, and say so naming the peer.
    ex.barrier("lossless-trunc", rank, 2);
    const size_t big = 1 << 20;
    std::vector<uint8_t> tout(big), tin(big + 8, 0);
    if (rank == 0) {
      const Payload kinds[4] = {Payload::kSparse, Payload::kMixed, Payload::kRandom,
                                Payload::kSparse};
      for (int m = 0; m < 4; ++m) {
        fillPayload(tout.data(), big, seedOf(0, 77, m), kinds[m]);
        (void)waitRequest(api, postSend(api, link.sendComm, tout.data(), big, 700, nullptr),
                          nullptr);
        account(big, kinds[m]);
      }
    } else {
      void* data = tin.data();
      size_t small = 64 << 10;
      int t = 700;
      for (int m = 0; m < 3; ++m) {
        ncclResult_t r =
            waitRequest(api, postRecv(api, link.recvComm, 1, &data, &small, &t, nullptr), nullptr);
        HARNESS_CHECK(r == ncclInvalidUsage,
                      "message %d into a too small receive: test returned %d", m,
                      static_cast<int>(r));
      }
      int refused = 0;
      for (auto& [level, text] : loggedLines())
        refused += level == NCCL_LOG_WARN &&
                   text.find("refusing a compressed frame of") != std::string::npos &&
                   text.find("from the peer at ") != std::string::npos;
      // At least the mixed frame (its random half alone is 512 KiB); the sparse one's size
      // depends on zstd.
      HARNESS_CHECK(refused >= 1,
                    "no WARN line refuses an oversized compressed frame naming the peer");
      size_t cap = tin.size();
      int got = -1;
      NCCL_OK(waitRequest(api, postRecv(api, link.recvComm, 1, &data, &cap, &t, nullptr), &got));
      HARNESS_CHECK(got == static_cast<int>(big), "after the failures: %d bytes", got);
      checkPayload(tin.data(), big, seedOf(0, 77, 3), Payload::kSparse, "after the failures");
    }
    ex.barrier("lossless-done", rank, 2);
    closeLink(api, link);
    auto [compressed, counted] = losslessStats();
    HARNESS_CHECK(counted == eligible, "the comm counted %ld sends of >= %zu bytes, %ld were made",
                  counted, kMin, eligible);
    HARNESS_CHECK(compressed >= mustCompress && compressed <= eligible - mustRaw,
                  "%ld sends compressed: want at least the %ld sparse/mixed and none of the %ld "
                  "random",
                  compressed, mustCompress, mustRaw);
    NCCL_OK(api.finalize());
  });
  removeTree(dir);
  expectAllPassed(codes);
}

INSTANTIATE_TEST_SUITE_P(Transports, NetPluginLosslessTest, testing::Values("tcp", "sm"),
                         [](const auto& p) { return p.param; });

// TERSE_NET_LOSSLESS on one rank only: connect and accept both fail with ncclInvalidUsage and a
// WARN naming the variable; nothing is ever delivered as garbage.
TEST(NetPluginLossless, MismatchBetweenRanksIsAnError) {
  std::string dir = makeTempDir();
  auto codes = runRanks(2, [&](int rank) {
    useLoopback("tcp");
    useLossless(rank == 0);
    NetApi api(kPluginPath, 11);
    NCCL_OK(api.init(recordingLogger));
    Exchange ex(dir);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void* lc = nullptr;
    NCCL_OK(api.listen(0, handle, &lc));
    ex.put("mm.h" + std::to_string(rank), handle, sizeof(handle));
    std::vector<char> peerHandle = ex.get("mm.h" + std::to_string(1 - rank));
    ncclResult_t c = ncclSuccess, a = ncclSuccess;
    void *sc = nullptr, *rc = nullptr;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((c == ncclSuccess && sc == nullptr) || (a == ncclSuccess && rc == nullptr)) {
      if (c == ncclSuccess && sc == nullptr) c = api.connect(0, peerHandle.data(), &sc);
      if (a == ncclSuccess && rc == nullptr) a = api.accept(lc, &rc);
      HARNESS_CHECK(std::chrono::steady_clock::now() < deadline, "connect/accept never ended");
    }
    HARNESS_CHECK(c == ncclInvalidUsage && sc == nullptr,
                  "connect to a rank with another TERSE_NET_LOSSLESS returned %d", (int)c);
    HARNESS_CHECK(a == ncclInvalidUsage && rc == nullptr,
                  "accept from a rank with another TERSE_NET_LOSSLESS returned %d", (int)a);
    int named = 0;
    for (auto& [level, text] : loggedLines())
      named += level == NCCL_LOG_WARN &&
               text.find("TERSE_NET_LOSSLESS differs between ranks") != std::string::npos;
    HARNESS_CHECK(named == 2, "%d WARN lines name the mismatch, want 2 (connect and accept)",
                  named);
    ex.barrier("mm-done", rank, 2);
    NCCL_OK(api.closeListen(lc));
    NCCL_OK(api.finalize());
  });
  removeTree(dir);
  expectAllPassed(codes);
}

// Malformed values fail init with ncclInvalidArgument instead of silently meaning "off".
TEST(NetPluginLossless, BadValuesFailInit) {
  const std::pair<const char*, const char*> bad[] = {{"TERSE_NET_LOSSLESS", "maybe"},
                                                     {"TERSE_NET_LOSSLESS_MIN_BYTES", "100"},
                                                     {"TERSE_NET_LOSSLESS_MIN_BYTES", "64k"}};
  for (const auto& setting : bad) {
    // Named copies, not a structured binding: C++17 does not let a lambda capture a binding
    // (GCC accepts it, clang rejects it).
    const char* name = setting.first;
    const char* value = setting.second;
    auto codes = runRanks(1, [&](int) {
      useLoopback("tcp");
      useLossless(true);
      setenv(name, value, 1);
      NetApi api(kPluginPath, 11);
      ncclResult_t r = api.init();
      HARNESS_CHECK(r == ncclInvalidArgument, "init with %s=%s returned %d", name, value, (int)r);
      (void)api.finalize();
    });
    EXPECT_EQ(codes[0], 0) << name << "=" << value;
  }
}

}  // namespace
}  // namespace terse::harness
