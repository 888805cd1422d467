// CollNet on CUDA device buffers, driven through the v12 table from forked ranks as NCCL does:
// with a device, getProperties reports NCCL_PTR_CUDA, regMr takes device memory (and refuses
// host memory registered as device memory), and iallreduce / ireducescatter / iallgather on
// device buffers give, bit for bit, what the same calls give on host buffers (terse's device
// path matches its host path for these codecs). Built in every CUDA build; skips with a message
// on machines without a device (label gpu).
#include "abi/nccl_plugin.h"
#include "net_harness.h"

#include "terse/kernels/device.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace terse::harness {
namespace {

constexpr const char* kPluginPath = TERSE_PLUGIN_PATH;

// CUDA must not be initialised in the parent before it forks the ranks, so a child looks.
bool deviceInChild() {
  std::vector<int> codes = runRanks(
      1,
      [](int) {
        if (!device::available()) _exit(3);  // quietly: the parent turns it into a skip
      },
      60);
  return codes[0] == 0;
}

#define REQUIRE_DEVICE_IN_CHILD()                                                         \
  do {                                                                                    \
    if (!deviceInChild())                                                                 \
      GTEST_SKIP() << "no CUDA device: CollNet's device path is built but cannot run on " \
                      "this machine; run `ctest -L gpu` on a GPU host to test it";        \
  } while (0)

void useLoopback() {
  setenv("UCX_NET_DEVICES", "lo", 1);
  setenv("UCX_TLS", "tcp", 1);
  setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
}

struct Coll {
  void* dl = nullptr;
  const ncclCollNet_v12_t* t = nullptr;
  void* ctx = nullptr;
  void* cc = nullptr;

  Coll(const Exchange& ex, int rank, int nranks) {
    dl = dlopen(kPluginPath, RTLD_NOW | RTLD_LOCAL);
    HARNESS_CHECK(dl != nullptr, "dlopen: %s", dlerror());
    t = static_cast<const ncclCollNet_v12_t*>(dlsym(dl, "ncclCollNetPlugin_v12"));
    HARNESS_CHECK(t != nullptr, "no ncclCollNetPlugin_v12");
    NCCL_OK(t->init(&ctx, 0x612, nullptr));
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void* lc = nullptr;
    NCCL_OK(t->listen(ctx, 0, handle, &lc));
    ex.put("h" + std::to_string(rank), handle, sizeof(handle));
    std::vector<std::vector<char>> all(nranks);
    std::vector<void*> ptrs(nranks);
    for (int r = 0; r < nranks; ++r) {
      all[r] = ex.get("h" + std::to_string(r));
      ptrs[r] = all[r].data();
    }
    NCCL_OK(t->connect(ptrs.data(), nranks, rank, lc, &cc));
    HARNESS_CHECK(cc != nullptr, "connect gave no comm");
    NCCL_OK(t->closeListen(lc));
  }
  ~Coll() {
    if (cc != nullptr) t->closeColl(cc);
    if (ctx != nullptr) t->finalize(ctx);
    dlclose(dl);
  }
  void wait(void* req) {
    HARNESS_CHECK(req != nullptr, "no request");
    int done = 0, size = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!done) {
      NCCL_OK(t->test(req, &done, &size));
      HARNESS_CHECK(std::chrono::steady_clock::now() < deadline, "request not done in 120 s");
    }
  }
};

// A device copy of `bytes` host bytes, freed with the object.
struct DeviceBytes {
  void* p = nullptr;
  size_t n = 0;
  explicit DeviceBytes(size_t bytes) : n(bytes) {
    HARNESS_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes) == cudaSuccess, "cudaMalloc(%zu)", bytes);
  }
  DeviceBytes(const void* host, size_t bytes) : DeviceBytes(bytes) {
    HARNESS_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess, "copy in");
  }
  ~DeviceBytes() { cudaFree(p); }
  std::vector<uint8_t> read() const {
    std::vector<uint8_t> out(n);
    HARNESS_CHECK(cudaMemcpy(out.data(), p, n, cudaMemcpyDeviceToHost) == cudaSuccess, "copy out");
    return out;
  }
};

std::vector<uint8_t> input(size_t bytes, uint64_t seed) {
  // float32 values in [-1, 1): bit patterns that are finite for every codec.
  std::vector<uint8_t> out(bytes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i + 4 <= bytes; i += 4) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    float v = static_cast<float>(x >> 40) / static_cast<float>(1 << 23) - 1.0f;
    std::memcpy(out.data() + i, &v, 4);
  }
  return out;
}

TEST(CollNetGpu, PropertiesAndRegistrationOfDeviceMemory) {
  REQUIRE_DEVICE_IN_CHILD();
  std::string dir = makeTempDir();
  auto codes = runRanks(1, [&](int rank) {
    useLoopback();
    Exchange ex(dir);
    Coll c(ex, rank, 1);
    ncclNetProperties_v12_t props;
    NCCL_OK(c.t->getProperties(0, &props));
    HARNESS_CHECK((props.ptrSupport & NCCL_PTR_CUDA) && (props.ptrSupport & NCCL_PTR_HOST),
                  "ptrSupport %#x lacks NCCL_PTR_CUDA with a device present", props.ptrSupport);
    DeviceBytes d(4096);
    void* mh = nullptr;
    NCCL_OK(c.t->regMr(c.cc, d.p, d.n, NCCL_PTR_CUDA, &mh));
    NCCL_OK(c.t->deregMr(c.cc, mh));
    std::vector<uint8_t> host(4096);
    HARNESS_CHECK(
        c.t->regMr(c.cc, host.data(), host.size(), NCCL_PTR_CUDA, &mh) == ncclInvalidArgument,
        "host memory registered as NCCL_PTR_CUDA must be refused");
  });
  for (int code : codes) EXPECT_EQ(code, 0);
  removeTree(dir);
}

class CollNetGpuCodec : public ::testing::TestWithParam<std::string> {};

TEST_P(CollNetGpuCodec, DeviceBuffersGiveTheHostResultsBitForBit) {
  REQUIRE_DEVICE_IN_CHILD();
  const std::string codec = GetParam();
  std::string dir = makeTempDir();
  const int nranks = 2;
  auto codes = runRanks(nranks, [&](int rank) {
    useLoopback();
    setenv("TERSE_COLLNET_CODEC", codec.c_str(), 1);
    Exchange ex(dir);
    Coll c(ex, rank, nranks);
    for (size_t count : {size_t{1}, size_t{1000}, (size_t{1} << 20) + 3}) {
      const size_t bytes = count * 4;
      std::vector<uint8_t> in = input(bytes, 10 * rank + count), hostOut(bytes);
      // Host path.
      void* req = nullptr;
      NCCL_OK(c.t->iallreduce(c.cc, in.data(), hostOut.data(), count, ncclCollFloat32, ncclCollSum,
                              nullptr, nullptr, &req));
      c.wait(req);
      // Device path.
      DeviceBytes dIn(in.data(), bytes), dOut(bytes);
      NCCL_OK(c.t->iallreduce(c.cc, dIn.p, dOut.p, count, ncclCollFloat32, ncclCollSum, nullptr,
                              nullptr, &req));
      c.wait(req);
      void* flush = reinterpret_cast<void*>(0x1);
      NCCL_OK(c.t->iflush(c.cc, dOut.p, static_cast<int>(bytes), nullptr, &flush));
      HARNESS_CHECK(flush == nullptr, "iflush must have nothing left to do");
      HARNESS_CHECK(dOut.read() == hostOut, "%s: %zu-element allreduce on the device differs",
                    codec.c_str(), count);

      // Reduce-scatter from three out-of-order device parts, against the same on host parts.
      const size_t perRank = (count / nranks) * 4;
      if (perRank == 0) continue;
      const size_t window = perRank * nranks;
      std::vector<uint8_t> whole = input(window, 77 * rank + count), hostRecv(perRank);
      auto scatter = [&](uint8_t* arena) {
        size_t a = window / 3, b = window / 3, cc = window - a - b;
        std::vector<ncclNetSGE_v12_t> parts = {
            {nullptr, arena + b + cc + 32, a}, {nullptr, arena, b}, {nullptr, arena + b + 16, cc}};
        return parts;
      };
      std::vector<uint8_t> hostArena(window + 64);
      auto hostParts = scatter(hostArena.data());
      size_t at = 0;
      for (auto& p : hostParts) {
        std::memcpy(p.address, whole.data() + at, p.size);
        at += p.size;
      }
      NCCL_OK(c.t->ireducescatter(c.cc, 3, hostParts.data(), hostRecv.data(), perRank, 0, window,
                                  ncclCollFloat32, ncclCollSum, nullptr, &req));
      c.wait(req);
      DeviceBytes dArena(hostArena.data(), hostArena.size()), dRecv(perRank);
      auto devParts = scatter(static_cast<uint8_t*>(dArena.p));
      NCCL_OK(c.t->ireducescatter(c.cc, 3, devParts.data(), dRecv.p, perRank, 0, window,
                                  ncclCollFloat32, ncclCollSum, nullptr, &req));
      c.wait(req);
      HARNESS_CHECK(dRecv.read() == hostRecv, "%s: reduce-scatter on the device differs",
                    codec.c_str());

      // Allgather of an odd byte count into device memory: exact.
      const size_t odd = perRank + 1;
      std::vector<uint8_t> mine = input(odd + 3, 5 * rank + count);
      mine.resize(odd);
      DeviceBytes dMine(mine.data(), odd), dAll(odd * nranks);
      std::vector<ncclNetSGE_v12_t> agParts = {{nullptr, dAll.p, odd * nranks}};
      NCCL_OK(
          c.t->iallgather(c.cc, dMine.p, 1, agParts.data(), odd, 0, odd * nranks, nullptr, &req));
      c.wait(req);
      std::vector<uint8_t> all = dAll.read();
      for (int r = 0; r < nranks; ++r) {
        std::vector<uint8_t> theirs = input(odd + 3, 5 * r + count);
        HARNESS_CHECK(std::memcmp(all.data() + r * odd, theirs.data(), odd) == 0,
                      "allgather: rank %d's bytes differ", r);
      }
    }
  });
  for (int code : codes) EXPECT_EQ(code, 0);
  removeTree(dir);
}

// The codecs without residuals (each call independent of the last, so host and device calls can
// alternate on one communicator); the low-bit 8-bit formats among them (issue #20).
INSTANTIATE_TEST_SUITE_P(Codecs, CollNetGpuCodec,
                         ::testing::Values("none", "fp16", "bf16", "int8", "fp8", "mxfp8"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace terse::harness
