// Issue #22: a careless caller gets an error on every rank, at once, and the communicator stays
// usable, never a silent wrong answer, a crash or a wait for the whole timeout. Ranks are threads
// over the in-process backend (and UCX where the transport matters); the same contract from C
// and as processes is tests/api/misuse_c_test.c under terse-run.
#include "terse/api/internal.h"
#include "terse/collectives/worker.h"
#include "terse/common/env.h"
#include "terse/common/env_by_name.h"
#include "terse/communicator.h"
#include "terse/compressors/codec.h"
#include "terse/compressors/error_feedback.h"
#include "terse/rendezvous/bootstrap.h"
#include "terse/rendezvous/store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace terse {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Long enough that waiting it out is unmistakable against the 1 s every misuse must take at most.
constexpr milliseconds kTimeout{20000};
constexpr auto kPromptly = std::chrono::seconds(1);
// An abort over UCX reaches the peers when UCX reports the closed endpoints (0.2-0.7 s measured
// on an idle machine, more under ctest's parallel load): far below the timeout all the same.
constexpr auto kAbortPromptly = std::chrono::seconds(3);

std::vector<std::unique_ptr<Communicator>> makeWorld(int n) {
  auto world = createInProcWorld(n, kTimeout);
  EXPECT_TRUE(world.isOk()) << world.status().toString();
  return std::move(world).value();
}

struct Outcome {
  Status status;
  Clock::duration took{};
};

// fn(rank, comm) on one thread per rank; each rank's status and how long its call took.
std::vector<Outcome> onEachRank(std::vector<std::unique_ptr<Communicator>>& comms,
                                const std::function<Status(int, Communicator&)>& fn) {
  std::vector<Outcome> out(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] {
      auto start = Clock::now();
      out[r].status = fn(static_cast<int>(r), *comms[r]);
      out[r].took = Clock::now() - start;
    });
  for (auto& t : threads) t.join();
  return out;
}

// After a misuse every rank runs a correct allreduce and gets the exact sum: the communicator
// stays usable and no rank paired this call with an earlier one.
void expectUsable(std::vector<std::unique_ptr<Communicator>>& comms, const std::string& after) {
  const int n = static_cast<int>(comms.size());
  const size_t count = 1000;
  std::vector<std::vector<float>> out(n, std::vector<float>(count, -1.0f));
  auto res = onEachRank(comms, [&](int r, Communicator& c) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((r + 1) * (i % 7));
    return c.allreduce(in.data(), out[r].data(), count, DataType::kFloat32, ReduceOp::kSum);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(res[r].status.isOk())
        << after << ": rank " << r << ": " << res[r].status.toString();
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[r][i], static_cast<float>(n * (n + 1) / 2 * (i % 7)))
          << after << ": rank " << r << " element " << i;
  }
}

// The last rank misuses the call, the others make it correctly: the misusing rank gets
// `ownCode`, every other rank kInvalidUsage naming it, all within a second.
void expectRefusedEverywhere(std::vector<std::unique_ptr<Communicator>>& comms,
                             const std::string& what, StatusCode ownCode,
                             const std::function<Status(Communicator&)>& good,
                             const std::function<Status(Communicator&)>& bad) {
  const int n = static_cast<int>(comms.size()), culprit = n - 1;
  auto res =
      onEachRank(comms, [&](int r, Communicator& c) { return r == culprit ? bad(c) : good(c); });
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(what + ", rank " + std::to_string(r));
    EXPECT_EQ(res[r].status.code(), r == culprit ? ownCode : StatusCode::kInvalidUsage)
        << res[r].status.toString();
    if (r != culprit) {
      EXPECT_NE(res[r].status.message().find("rank " + std::to_string(culprit)), std::string::npos)
          << res[r].status.toString();
    }
    EXPECT_LT(res[r].took, kPromptly);
  }
  expectUsable(comms, what);
}

Status allreduceWith(Communicator& c, const std::string& codec, size_t count = 4096) {
  std::vector<float> in(count, 1.0f), out(count);
  return c.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum,
                     CollectiveOptions{codec});
}

// Finding 1: an invalid codec spec on one rank used to leave it out of the call, so the others'
// call paired with its next one and returned ok with a wrong sum.
TEST(Misuse, AnInvalidCodecSpecOnOneRankFailsThatCallEverywhere) {
  auto comms = makeWorld(3);
  for (const char* spec : {"bogus", "int8:block=3", "", "auto:max=bogus", "int8\x1b[31m"}) {
    expectRefusedEverywhere(
        comms, std::string("spec '") + spec + "'", StatusCode::kInvalidArgument,
        [](Communicator& c) { return allreduceWith(c, "int8"); },
        [&](Communicator& c) { return allreduceWith(c, spec); });
  }
  // The escaped spec: no raw control byte reaches the message (finding 15).
  Status s = allreduceWith(*makeWorld(1)[0], "int8\x1b[31m");
  EXPECT_EQ(s.message().find('\x1b'), std::string::npos) << s.message();
}

// Finding 2: count x element size wrapped around (0x4000000000000010 float32 "reduced" 16
// elements; float16 corrupted the heap; SIZE_MAX threw length_error).
TEST(Misuse, ACountWhoseBytesOverflowIsRefusedEverywhere) {
  auto comms = makeWorld(2);
  std::vector<uint16_t> small(64);
  for (size_t count : {size_t{0x4000000000000010ull}, size_t{0x8000000000000010ull},
                       std::numeric_limits<size_t>::max()}) {
    for (DataType t : {DataType::kFloat32, DataType::kFloat16}) {
      for (const char* codec : {"none", "int8", "topk"}) {
        expectRefusedEverywhere(
            comms, "count " + std::to_string(count) + " " + dataTypeName(t) + " " + codec,
            StatusCode::kInvalidArgument, [&](Communicator& c) { return allreduceWith(c, codec); },
            [&](Communicator& c) {
              std::vector<uint16_t> out(64);
              return c.allreduce(small.data(), out.data(), count, t, ReduceOp::kSum,
                                 CollectiveOptions{codec});
            });
      }
    }
  }
}

// Finding 7: send and recv overlapping by one element gave ok with a wrong element.
TEST(Misuse, OverlappingBuffersAreRefusedAndInPlaceStillWorks) {
  auto comms = makeWorld(2);
  for (const char* codec : {"none", "fp16", "bf16", "int8", "topk", "onebit"}) {
    expectRefusedEverywhere(
        comms, std::string("overlap, ") + codec, StatusCode::kInvalidArgument,
        [&](Communicator& c) { return allreduceWith(c, codec, 3000); },
        [&](Communicator& c) {
          std::vector<float> buf(3001, 1.0f);
          return c.allreduce(buf.data(), buf.data() + 1, 3000, DataType::kFloat32, ReduceOp::kSum,
                             CollectiveOptions{codec});
        });
  }
  // Reduce-scatter has no in-place form: the same buffer is refused too.
  expectRefusedEverywhere(
      comms, "reduce-scatter in place", StatusCode::kInvalidArgument,
      [](Communicator& c) {
        std::vector<float> in(100, 1.0f), out(50);
        return c.reduceScatter(in.data(), out.data(), 100, DataType::kFloat32, ReduceOp::kSum);
      },
      [](Communicator& c) {
        std::vector<float> buf(100, 1.0f);
        return c.reduceScatter(buf.data(), buf.data(), 100, DataType::kFloat32, ReduceOp::kSum);
      });
  // Allgather in place (send at this rank's part of recv, as NCCL's) is the one other form that
  // stays valid, for every codec: it gives what the out-of-place call gives.
  for (const char* codec : {"none", "fp16", "int8", "onebit", "topk"}) {
    const size_t count = 70001;
    auto res = onEachRank(comms, [&](int r, Communicator& c) {
      auto part = c.partOf(count);
      std::vector<float> mine(part.second), apart(count), inplace(count);
      for (size_t i = 0; i < part.second; ++i) mine[i] = std::sin(0.01f * (part.first + i) + r);
      Status s = c.allgather(mine.data(), apart.data(), count, DataType::kFloat32,
                             CollectiveOptions{codec});
      if (!s.isOk()) return s;
      std::copy(mine.begin(), mine.end(), inplace.begin() + part.first);
      s = c.allgather(inplace.data() + part.first, inplace.data(), count, DataType::kFloat32,
                      CollectiveOptions{codec});
      if (s.isOk() && inplace != apart) return errorInternal("in place differs from out of place");
      return s;
    });
    for (auto& o : res) EXPECT_TRUE(o.status.isOk()) << codec << ": " << o.status.toString();
  }
  // Allgather with send one element past its part overlaps: refused.
  expectRefusedEverywhere(
      comms, "allgather overlap", StatusCode::kInvalidArgument,
      [](Communicator& c) {
        std::vector<float> in(c.partOf(100).second, 1.0f), out(100);
        return c.allgather(in.data(), out.data(), 100, DataType::kFloat32);
      },
      [](Communicator& c) {
        std::vector<float> buf(101, 1.0f);
        return c.allgather(buf.data() + c.partOf(100).first + 1, buf.data(), 100,
                           DataType::kFloat32);
      });
  // Allreduce exactly in place stays valid.
  auto res = onEachRank(comms, [](int, Communicator& c) {
    std::vector<float> buf(3000, 2.0f);
    Status s = c.allreduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    if (s.isOk() && buf[2999] != 4.0f) return errorInternal("in place gave %g", buf[2999]);
    return s;
  });
  for (auto& o : res) EXPECT_TRUE(o.status.isOk()) << o.status.toString();
}

// Finding 10 from C++: element types and reductions outside the enums.
TEST(Misuse, EnumValuesOutsideTheirRangeAreRefusedEverywhere) {
  auto comms = makeWorld(2);
  expectRefusedEverywhere(
      comms, "dtype 200", StatusCode::kInvalidArgument,
      [](Communicator& c) { return allreduceWith(c, "none"); },
      [](Communicator& c) {
        std::vector<float> in(4096, 1.0f), out(4096);
        return c.allreduce(in.data(), out.data(), 4096, static_cast<DataType>(200), ReduceOp::kSum);
      });
  expectRefusedEverywhere(
      comms, "op 7", StatusCode::kInvalidArgument,
      [](Communicator& c) { return allreduceWith(c, "none"); },
      [](Communicator& c) {
        std::vector<float> in(4096, 1.0f), out(4096);
        return c.allreduce(in.data(), out.data(), 4096, DataType::kFloat32,
                           static_cast<ReduceOp>(7));
      });
}

// Findings 5 and 15: disagreements among valid calls fail every rank at once and name both
// calls in words.
TEST(Misuse, DisagreementsFailEveryRankAtOnceAndNameBothCalls) {
  auto comms = makeWorld(2);
  // A barrier against an allreduce used to make both wait the whole timeout (and one message
  // said "within 0 ms"), leaving the communicator dead.
  auto res = onEachRank(comms, [](int r, Communicator& c) {
    return r == 0 ? c.barrier() : allreduceWith(c, "none");
  });
  for (auto& o : res) {
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidUsage) << o.status.toString();
    EXPECT_NE(o.status.message().find("barrier()"), std::string::npos) << o.status.toString();
    EXPECT_LT(o.took, kPromptly);
  }
  expectUsable(comms, "barrier against allreduce");
  // int8 against fp16: both specs in the message, not hashes.
  res = onEachRank(comms,
                   [](int r, Communicator& c) { return allreduceWith(c, r ? "fp16" : "int8"); });
  for (auto& o : res) {
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidUsage);
    EXPECT_NE(o.status.message().find("codec int8"), std::string::npos) << o.status.toString();
    EXPECT_NE(o.status.message().find("codec fp16"), std::string::npos) << o.status.toString();
  }
  expectUsable(comms, "int8 against fp16");
  // auto against int8: the message names the caller's call (auto's spec), not its calibration.
  res = onEachRank(comms, [](int r, Communicator& c) {
    return allreduceWith(c, r ? "int8" : "auto:max=int8", 1 << 21);
  });
  for (auto& o : res) {
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidUsage) << o.status.toString();
    EXPECT_NE(o.status.message().find("count=2097152"), std::string::npos) << o.status.toString();
    EXPECT_NE(o.status.message().find("codec auto:max=int8"), std::string::npos)
        << o.status.toString();
    EXPECT_LT(o.took, kPromptly);
  }
  expectUsable(comms, "auto against int8");
  // Once auto is calibrated it would pick int8 without calibrating: still a disagreement.
  res = onEachRank(comms,
                   [](int, Communicator& c) { return allreduceWith(c, "auto:max=int8", 1000); });
  for (auto& o : res) ASSERT_TRUE(o.status.isOk()) << o.status.toString();
  res = onEachRank(comms, [](int r, Communicator& c) {
    return allreduceWith(c, r ? "int8" : "auto:max=int8", 1000);
  });
  for (auto& o : res) EXPECT_EQ(o.status.code(), StatusCode::kInvalidUsage) << o.status.toString();
  expectUsable(comms, "calibrated auto against int8");
}

// Finding 4: an abort on a rank that stays alive reaches its peers at once, naming it.
TEST(Misuse, AnAbortReachesThePeersAtOnce) {
  for (bool ucx : {false, true}) {
    SCOPED_TRACE(ucx ? "ucx" : "inproc");
    std::vector<std::unique_ptr<Communicator>> comms;
    if (ucx) {
      setenv("UCX_TLS", "tcp,self", 1);
      setenv("UCX_NET_DEVICES", "lo", 1);
      auto store = createMemoryStore();
      comms.resize(2);
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          auto c = Communicator::createUcx(r, 2, *store, kTimeout, "abort");
          ASSERT_TRUE(c.isOk()) << c.status().toString();
          comms[r] = std::move(c).value();
        });
      for (auto& t : threads) t.join();
      for (auto& c : comms) ASSERT_NE(c, nullptr);
    } else {
      comms = makeWorld(2);
    }
    expectUsable(comms, "before the abort");
    comms[1]->abort(errorInvalidUsage("the application gave up"));
    auto start = Clock::now();
    Status s = allreduceWith(*comms[0], "none");
    EXPECT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.toString();
    EXPECT_LT(Clock::now() - start, ucx ? kAbortPromptly : kPromptly) << s.toString();
    // The aborting rank's own calls carry its reason.
    Status own = allreduceWith(*comms[1], "none");
    EXPECT_NE(own.message().find("the application gave up"), std::string::npos) << own.toString();
    std::thread t0([&] { comms[0].reset(); });
    comms[1].reset();
    t0.join();
  }
}

// Finding 3: an exception on the collective thread ended the process.
TEST(Misuse, AnExceptionOnTheCollectiveThreadBecomesTheCallsStatus) {
  CollectiveWorker worker;
  Status s = worker.run([]() -> Status { throw std::length_error("vector too long"); });
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("vector too long"), std::string::npos);
  s = worker.run([]() -> Status { throw std::bad_alloc(); });
  EXPECT_EQ(s.code(), StatusCode::kSystemError);
  EXPECT_TRUE(worker.run([] { return Status::ok(); }).isOk()) << "the thread lives on";
}

// Finding 8: a timeout of centuries overflowed every deadline into the past.
TEST(Misuse, TimeoutsOutsideOneMillisecondToAYearAreRefused) {
  auto comms = makeWorld(1);
  EXPECT_EQ(comms[0]->setTimeout(milliseconds(0)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->setTimeout(milliseconds(std::numeric_limits<int64_t>::max())).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(comms[0]->setTimeout(milliseconds(kMaxTimeoutMs)).isOk());
  EXPECT_TRUE(allreduceWith(*comms[0], "int8").isOk()) << "a year-long deadline still works";
}

// Finding 11: a onebit block holding 3e38, -3e38, 3e38 decoded to NaN (its sum of magnitudes
// overflowed) and lost its residual.
TEST(Misuse, OnebitKeepsHugeFiniteBlocksFinite) {
  auto codec = makeCodec("onebit:block=32");
  ASSERT_TRUE(codec.isOk());
  std::vector<float> in(64, 1.0f);
  in[0] = 3e38f;
  in[1] = -3e38f;
  in[2] = 3e38f;
  in[40] = -3.4e38f;  // a second block, every value at the edge of the range
  for (size_t i = 32; i < 64; ++i) in[i] = (i % 2 ? 1 : -1) * 3.4e38f;
  auto ef = ErrorFeedback::create("onebit:block=32", in.size());
  ASSERT_TRUE(ef.isOk());
  std::vector<uint8_t> wire((*codec)->maxWireBytes(in.size()));
  auto bytes = (*codec)->compress(in.data(), DataType::kFloat32, in.size(), ef->worker(),
                                  wire.data(), wire.size());
  ASSERT_TRUE(bytes.isOk()) << bytes.status().toString();
  std::vector<float> out(in.size());
  ASSERT_TRUE(
      (*codec)->decompress(wire.data(), *bytes, out.data(), DataType::kFloat32, out.size()).isOk());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_TRUE(std::isfinite(out[i])) << "element " << i << " decoded to " << out[i];
    EXPECT_TRUE(std::isfinite(ef->worker()[i])) << "residual " << i;
  }
  // The mean magnitude of the first block: (3 x 3e38 + 29) / 32, within float rounding.
  EXPECT_NEAR(std::fabs(out[0]) / ((3 * 3e38 + 29) / 32), 1.0, 1e-5);
  EXPECT_NEAR(std::fabs(out[33]), 3.4e38f, 3.4e38f * 1e-6);
}

// Finding 15: an impossible count is the caller's error, not "a bug in terse".
TEST(Misuse, AnImpossibleFeedbackCountIsAnInvalidArgument) {
  auto ef = ErrorFeedback::create("onebit", std::numeric_limits<size_t>::max());
  EXPECT_EQ(ef.status().code(), StatusCode::kInvalidArgument) << ef.status().toString();
  ef = ErrorFeedback::create("onebit", size_t{1} << 62);
  EXPECT_FALSE(ef.isOk());
  EXPECT_NE(ef.status().code(), StatusCode::kInternal) << ef.status().toString();
}

// Finding 12: two processes claiming one rank. Ranks as threads over a memory store, the same
// rendezvous the processes run: the second claim fails the whole rendezvous at once.
TEST(Misuse, TwoClaimsOfOneRankFailTheRendezvous) {
  auto store = createMemoryStore();
  // Another process (threads of this one all claim as this pid) already holds rank 1.
  ASSERT_TRUE(store->setIfAbsent("dup/claim/1", "pid 1 on elsewhere").isOk());
  std::vector<Status> res(2);
  std::vector<std::thread> threads;
  auto start = Clock::now();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back(
        [&, r] { res[r] = storeAllGather(*store, "dup", r, 2, "x", kTimeout).status(); });
  for (auto& t : threads) t.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5)) << "nobody waits out the timeout";
  EXPECT_NE(res[1].message().find("rank 1 was started twice: pid 1 on elsewhere holds it"),
            std::string::npos)
      << res[1].toString();
  EXPECT_NE(res[0].message().find("rank 1 was started twice"), std::string::npos)
      << "the other ranks learn why: " << res[0].toString();
}

TEST(Misuse, SetIfAbsentKeepsTheFirstValue) {
  char dir[] = "/tmp/terse-misuse-store-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto file = createFileStore(dir);
  ASSERT_TRUE(file.isOk());
  std::shared_ptr<Store> stores[] = {createMemoryStore(), std::move(file).value()};
  for (auto& store : stores) {
    auto first = store->setIfAbsent("k", "one");
    ASSERT_TRUE(first.isOk());
    EXPECT_FALSE(first->has_value());
    auto second = store->setIfAbsent("k", "two");
    ASSERT_TRUE(second.isOk());
    EXPECT_EQ(second->value_or(""), "one");
    EXPECT_EQ(store->tryGet("k")->value_or(""), "one") << store->describe();
  }
  std::system((std::string("rm -rf ") + dir).c_str());
}

// Finding 9: settings are parsed by one strict parser with ranges, and communicators refuse a
// malformed one by name.
TEST(Misuse, MalformedSettingsAreRefusedByName) {
  struct Bad {
    const char* name;
    const char* value;
  } cases[] = {
      {"TERSE_CPU_THREADS", "abc"},
      {"TERSE_CPU_THREADS", "-1"},
      {"TERSE_CPU_THREADS", "100000"},
      {"TERSE_DEBUG", "whatever"},
      {"TERSE_DEBUG_SUBSYS", "BOGUS"},
      {"TERSE_DEBUG_SUBSYS", "COLL,^NET"},
      {"TERSE_SEGMENT_BYTES", "abc"},
      {"TERSE_SEGMENT_BYTES", "0"},
      {"TERSE_SEGMENT_BYTES", "1"},
      {"TERSE_SEGMENT_BYTES", "-5"},
      {"TERSE_SEGMENT_BYTES", "9223372036854775807"},
      {"TERSE_PIPELINE_DEPTH", "x"},
      {"TERSE_PIPELINE_DEPTH", "0"},
      {"TERSE_PIPELINE_DEPTH", "9999"},
      {"TERSE_SMALL_BYTES", "-1"},
      {"TERSE_AGREEMENT_DIRECT_RANKS", "0"},
      {"TERSE_TIMEOUT_MS", "9223372036854775807"},
      {"TERSE_TIMEOUT_MS", "0x10"},
      {"TERSE_TIMEOUT_MS", " 10"},
      {"TERSE_TRANSPORT", "tcp"},
      {"TERSE_UCX_TCP_EAGER", "maybe"},
      {"TERSE_WORLD_SIZE", "2147483648"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(std::string(b.name) + "=" + b.value);
    setenv(b.name, b.value, 1);
    Status s = checkEnvironment();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(b.name), std::string::npos) << s.message();
    auto comm = Communicator::createFromEnv();
    EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument) << comm.status().toString();
    if (std::string(b.name) == "TERSE_WORLD_SIZE") {
      EXPECT_NE(comm.status().message().find("2147483648"), std::string::npos)
          << comm.status().toString();
    }
    unsetenv(b.name);
  }
  EXPECT_TRUE(checkEnvironment().isOk()) << checkEnvironment().toString();
  // Good values pass, case-insensitively for enums; empty counts as unset.
  setenv("TERSE_DEBUG", "info", 1);
  setenv("TERSE_DEBUG_SUBSYS", "^coll,NET", 1);
  setenv("TERSE_PIPELINE_DEPTH", "", 1);
  EXPECT_TRUE(checkEnvironment().isOk()) << checkEnvironment().toString();
  EXPECT_EQ(envEnum("TERSE_DEBUG").value(), "INFO");
  EXPECT_EQ(envInt("TERSE_PIPELINE_DEPTH").value(), 1);
  unsetenv("TERSE_DEBUG");
  unsetenv("TERSE_DEBUG_SUBSYS");
  unsetenv("TERSE_PIPELINE_DEPTH");
}

}  // namespace
}  // namespace terse
