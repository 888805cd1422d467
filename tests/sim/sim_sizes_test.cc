// The sizing mode against the real thing: a simulated 4-rank collective with the sizing codecs
// (no payload computed or copied) posts exactly the messages, with exactly the sizes, that the
// same call posts over the in-process transport with the real codecs. And the premise of the
// sizing mode: every codec's wire size depends on the element count alone.
#include "harness.h"
#include "sim_harness.h"

#include "terse/collectives/engine.h"
#include "terse/sim/sizing_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <random>
#include <sstream>

namespace terse::testing {
namespace {

const std::vector<std::string>& codecSpecs() {
  static const std::vector<std::string> specs = {
      "none", "fp16", "bf16", "int8", "fp8", "mxfp8", "mxfp4", "int4", "onebit", "topk:ratio=0.01"};
  return specs;
}

// A ragged count (not a multiple of any block or chunk) big enough for several segments.
constexpr size_t kCount = (size_t{3} << 18) + 4133;

// "rank peer bytes" per message, each rank's messages sorted (the order of posting between
// peers may differ with timing; the multiset may not).
std::string messageTable(const std::vector<std::vector<RecordingTransport::Send>>& sends) {
  std::ostringstream out;
  for (size_t r = 0; r < sends.size(); ++r) {
    std::vector<std::pair<int, size_t>> v;
    for (const auto& s : sends[r]) v.push_back({s.peer, s.bytes});
    std::sort(v.begin(), v.end());
    for (const auto& [peer, bytes] : v) out << r << ' ' << peer << ' ' << bytes << '\n';
  }
  return out.str();
}

CollectiveOp makeOp(CollectiveKind kind, const Codec* codec, const float* in, float* out) {
  CollectiveOp op;
  op.kind = kind;
  op.send = in;
  op.recv = out;
  op.count = kCount;
  op.codec = codec;
  return op;
}

struct Case {
  std::string spec;
  CollectiveKind kind;
  bool twoLevel = false;  // two nodes of two ranks, the engine's two-level algorithm
};

// gtest prints parameters in test listings; a name instead of 40 raw bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.spec << ' ' << collectiveName(c.kind) << (c.twoLevel ? " two-level" : "");
}

// Ranks 0,1 on node 0 and 2,3 on node 1 (testPlatform's layout), for two-level cases.
void layout(CollectiveEngine& engine, CollectiveOp& op, bool twoLevel) {
  if (!twoLevel) return;
  Status s = engine.enableTwoLevel({0, 0, 1, 1}, 1, 2);
  EXPECT_TRUE(s.isOk()) << s.toString();
  op.algorithm = Algorithm::kTwoLevel;
}

class SimSizesTest : public ::testing::TestWithParam<Case> {};

TEST_P(SimSizesTest, SameMessagesAsInProcess) {
  const Case c = GetParam();
  auto real = makeCodec(c.spec);
  ASSERT_TRUE(real.isOk()) << real.status().toString();
  const int n = 4;

  // The real call: real codec, in-process transport, ranks as threads.
  std::vector<std::vector<RecordingTransport::Send>> inproc(n);
  runThreads(Backend::kInProc, n, [&](Transport& t) {
    RecordingTransport rec(t);
    std::vector<float> in(kCount), out(kCount);
    std::mt19937 rng(t.rank());
    std::normal_distribution<float> d;
    for (float& x : in) x = d(rng);
    CollectiveEngine engine(rec, std::chrono::milliseconds(60000));
    CollectiveOp op = makeOp(c.kind, real->get(), in.data(), out.data());
    layout(engine, op, c.twoLevel);
    Status s = engine.run(op);
    ASSERT_TRUE(s.isOk()) << s.toString();
    inproc[t.rank()] = rec.sends();
  });

  // The simulated call: sizing codec, no payload copied, buffers shared by every rank.
  const std::string simulated = inChild([&] {
    std::vector<std::vector<RecordingTransport::Send>> sends(n);
    std::vector<float> in(kCount), out(kCount);
    int charged = 0;
    sim::SizingCodec sizing(*real, {1, 1}, [&](double seconds) {
      ++charged;
      sim::chargeCompute(seconds);
    });
    const Codec* codec = c.spec == "none" ? real->get() : &sizing;
    sim::SimTransportOptions opt;
    opt.copyPayload = false;
    auto r = sim::runSimulation(testPlatform(n), opt, [&](Transport& t) {
      RecordingTransport rec(t);
      CollectiveEngine engine(rec, std::chrono::milliseconds(60000));
      CollectiveOp op = makeOp(c.kind, codec, in.data(), out.data());
      layout(engine, op, c.twoLevel);
      Status s = engine.run(op);
      EXPECT_TRUE(s.isOk()) << s.toString();
      sends[t.rank()] = rec.sends();
    });
    EXPECT_TRUE(r.isOk()) << r.status().toString();
    if (c.spec != "none") {
      EXPECT_GT(charged, 0) << "the sizing codec charged no compute";
    }
    EXPECT_GT(r->seconds, 0);
    return messageTable(sends);
  });
  const std::string expected = messageTable(inproc);
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(simulated, expected);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& s : codecSpecs()) out.push_back({s, CollectiveKind::kAllReduce});
  for (const char* s : {"none", "int8", "topk:ratio=0.01"}) {
    out.push_back({s, CollectiveKind::kReduceScatter});
    out.push_back({s, CollectiveKind::kAllGather});
  }
  for (const char* s : {"none", "int8", "onebit"})
    out.push_back({s, CollectiveKind::kAllReduce, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Codecs, SimSizesTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string name = i.param.spec.substr(0, i.param.spec.find(':'));
                           return name + "_" + collectiveName(i.param.kind) +
                                  (i.param.twoLevel ? "_twolevel" : "");
                         });

// The sizing mode's premise: for each codec the size compress() returns depends on the count
// and type only, not on the values (random, zeros, constants, huge, mixed signs).
TEST(SizingCodec, WireSizeDependsOnCountOnly) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0, 3);
  for (const auto& spec : codecSpecs()) {
    auto real = makeCodec(spec);
    ASSERT_TRUE(real.isOk());
    sim::SizingCodec sizing(*real, {0, 0}, nullptr);
    for (size_t n : {size_t{1}, size_t{31}, size_t{2048}, size_t{100003}}) {
      std::vector<std::vector<float>> inputs(4, std::vector<float>(n));
      for (float& x : inputs[0]) x = d(rng);
      for (float& x : inputs[1]) x = 1.0f;
      for (float& x : inputs[2]) x = 3e38f;
      for (size_t i = 0; i < n; ++i) inputs[3][i] = (i % 3 == 0) ? -1e-30f : 7.0f * i;
      auto want = sizing.wireBytes(DataType::kFloat32, n);
      ASSERT_TRUE(want.isOk()) << want.status().toString();
      std::vector<uint8_t> wire((*real)->maxWireBytes(n));
      for (auto& in : inputs) {
        auto got =
            (*real)->compress(in.data(), DataType::kFloat32, n, nullptr, wire.data(), wire.size());
        ASSERT_TRUE(got.isOk()) << got.status().toString();
        EXPECT_EQ(*got, *want) << spec << " n=" << n;
      }
      // The sizing codec returns that size, writes nothing, and rejects a message of another.
      std::fill(wire.begin(), wire.end(), 0xCD);
      auto sized = sizing.compress(inputs[0].data(), DataType::kFloat32, n, nullptr, wire.data(),
                                   wire.size());
      ASSERT_TRUE(sized.isOk());
      EXPECT_EQ(*sized, *want);
      EXPECT_TRUE(std::all_of(wire.begin(), wire.end(), [](uint8_t b) { return b == 0xCD; }));
      std::vector<float> acc(n);
      EXPECT_TRUE(sizing.decompressAccumulate(wire.data(), *want, acc.data(), n).isOk());
      EXPECT_EQ(sizing.decompressAccumulate(wire.data(), *want + 1, acc.data(), n).code(),
                StatusCode::kCorrupt);
    }
  }
}

TEST(SizingCodec, ThroughputModelReadsBenchJsonAndNamesMissingCodecs) {
  const std::string path = ::testing::TempDir() + "/codecs.json";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fprintf(f,
               "{\n  \"benchmark\": \"codecs\",\n  \"results\": [\n"
               "    {\"codec\": \"int8:block=256,round=nearest,seed=0\", \"wire_bytes\": 1, "
               "\"compress_gbps\": 2.5000, \"decompress_accumulate_gbps\": 4.0000}\n  ]\n}\n");
  std::fclose(f);
  auto m = sim::ThroughputModel::fromBenchJson(path);
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  auto t = m->lookup("int8:block=256,round=nearest,seed=0");
  ASSERT_TRUE(t.isOk());
  EXPECT_DOUBLE_EQ(t->compressGBps, 2.5);
  EXPECT_DOUBLE_EQ(t->decompressAccumulateGBps, 4.0);
  auto missing = m->lookup("fp16");
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("int8:block=256"), std::string::npos);
  EXPECT_FALSE(sim::ThroughputModel::fromBenchJson(path + ".absent").isOk());
}

}  // namespace
}  // namespace terse::testing
