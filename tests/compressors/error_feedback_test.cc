// ErrorFeedback: creation, compatibility errors naming both sides, server repartitioning, and
// the checkpoint form (round trip, truncation, corruption).
#include "terse/compressors/error_feedback.h"
#include "terse/kernels/device.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace terse::test {
namespace {

ErrorFeedback filled(const std::string& spec, size_t count, int world, size_t off, size_t len) {
  auto ef = ErrorFeedback::create(spec, count);
  EXPECT_TRUE(ef.isOk()) << ef.status().toString();
  auto v = randomValues(count, 1);
  std::copy(v.begin(), v.end(), ef->worker());
  if (world > 0) {
    float* s = ef->server(world, off, len);
    EXPECT_NE(s, nullptr);
    for (size_t i = 0; i < len; ++i) s[i] = static_cast<float>(i) * 0.5f - 3.0f;
  }
  return std::move(ef).value();
}

TEST(ErrorFeedback, CreateCanonicalizesAndStartsAtZero) {
  auto ef = ErrorFeedback::create("onebit", 1000);
  ASSERT_TRUE(ef.isOk());
  EXPECT_EQ(ef->codecSpec(), "onebit:block=2048");
  EXPECT_EQ(ef->count(), 1000u);
  for (size_t i = 0; i < 1000; ++i) EXPECT_EQ(ef->worker()[i], 0.0f);
  EXPECT_EQ(ef->serverLength(), 0u);
  auto bad = ErrorFeedback::create("onebit:block=3", 10);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("power of two"), std::string::npos);
}

TEST(ErrorFeedback, CompatibilityErrorsNameBothSides) {
  auto ef = ErrorFeedback::create("topk:ratio=0.01", 500);
  ASSERT_TRUE(ef.isOk());
  EXPECT_TRUE(ef->checkCompatible("topk", 500).isOk());  // same canonical spec
  Status s = ef->checkCompatible("topk:ratio=0.02", 500);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("topk:ratio=0.01"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("topk:ratio=0.02"), std::string::npos) << s.message();
  s = ef->checkCompatible("topk:ratio=0.01", 501);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("500"), std::string::npos);
  EXPECT_NE(s.message().find("501"), std::string::npos);
  EXPECT_FALSE(ef->checkCompatible("nonsense", 500).isOk());
}

TEST(ErrorFeedback, ServerResidualRepartitionsToZero) {
  auto ef = filled("onebit", 1000, 4, 250, 250);
  EXPECT_EQ(ef.serverWorldSize(), 4);
  EXPECT_EQ(ef.serverOffset(), 250u);
  float* s = ef.server(4, 250, 250);  // same partition: kept
  EXPECT_EQ(s[3], 3 * 0.5f - 3.0f);
  s = ef.server(2, 500, 500);  // another partition: fresh zeros
  ASSERT_NE(s, nullptr);
  for (size_t i = 0; i < 500; ++i) ASSERT_EQ(s[i], 0.0f);
  EXPECT_EQ(ef.serverLength(), 500u);
  EXPECT_EQ(ef.server(2, 900, 200), nullptr);  // past the tensor
  EXPECT_EQ(ef.server(0, 0, 10), nullptr);
  ef.reset();
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(ef.worker()[i], 0.0f);
}

// A pipelined two-level allreduce gives a rank one chunk per segment: each keeps its residual.
// A chunk that overlaps kept ones (another partition of those elements) replaces just them;
// another world size replaces all.
TEST(ErrorFeedback, DisjointServerChunksKeepTheirResiduals) {
  auto ef = ErrorFeedback::create("onebit", 1000).value();
  float* a = ef.server(2, 100, 50);
  float* b = ef.server(2, 600, 40);
  float* c = ef.server(2, 300, 10);
  ASSERT_TRUE(a && b && c);
  a[0] = 1.0f, b[39] = 2.0f, c[5] = 3.0f;
  EXPECT_EQ(ef.serverRegions(), 3u);
  EXPECT_EQ(ef.serverLength(), 100u);
  EXPECT_EQ(ef.serverOffset(), 100u);  // the first chunk's
  EXPECT_EQ(ef.server(2, 100, 50)[0], 1.0f);
  EXPECT_EQ(ef.server(2, 600, 40)[39], 2.0f);
  EXPECT_EQ(ef.server(2, 300, 10)[5], 3.0f);
  // [290, 320) overlaps [300, 310) only: that one goes, the others stay.
  float* d = ef.server(2, 290, 30);
  ASSERT_NE(d, nullptr);
  for (int i = 0; i < 30; ++i) ASSERT_EQ(d[i], 0.0f);
  EXPECT_EQ(ef.serverRegions(), 3u);
  EXPECT_EQ(ef.server(2, 100, 50)[0], 1.0f);
  EXPECT_EQ(ef.server(2, 600, 40)[39], 2.0f);
  // The same offset with another length is another partition too.
  EXPECT_EQ(ef.server(2, 600, 41)[39], 0.0f);
  EXPECT_EQ(ef.serverRegions(), 3u);
  // An empty chunk keeps and drops nothing.
  EXPECT_TRUE(ef.serverChecked(2, 120, 0).isOk());
  EXPECT_EQ(ef.serverRegions(), 3u);
  // Another world: everything starts again.
  EXPECT_EQ(ef.server(4, 100, 50)[0], 0.0f);
  EXPECT_EQ(ef.serverRegions(), 1u);
  EXPECT_EQ(ef.serverWorldSize(), 4);
}

std::vector<uint8_t> reseal(std::vector<uint8_t> b);  // below: a new checksum for forged bytes

// Forged checkpoints: a field written in place, and the verdict every forgery must get.
void put64(std::vector<uint8_t>& b, size_t off, uint64_t v) { std::memcpy(b.data() + off, &v, 8); }
void put32(std::vector<uint8_t>& b, size_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); }
void expectReject(const std::vector<uint8_t>& b, const char* what) {
  auto r = ErrorFeedback::deserialize(b.data(), b.size());
  ASSERT_FALSE(r.isOk()) << what;
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << what;
}

TEST(ErrorFeedback, SeveralServerChunksSurviveACheckpoint) {
  auto ef = filled("onebit:block=64", 500, 0, 0, 0);
  for (size_t o : {400u, 10u, 200u}) {
    float* s = ef.server(3, o, 20);
    for (int i = 0; i < 20; ++i) s[i] = static_cast<float>(o) + i * 0.25f;
  }
  auto bytes = ef.serialize();
  uint32_t version;
  std::memcpy(&version, bytes.data() + 4, 4);
  EXPECT_EQ(version, 2u);  // several chunks: the table's version
  auto back = ErrorFeedback::deserialize(bytes.data(), bytes.size());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->serialize(), bytes);
  EXPECT_EQ(back->serverRegions(), 3u);
  EXPECT_EQ(back->server(3, 200, 20)[7], 200 + 7 * 0.25f);
  EXPECT_EQ(back->server(3, 10, 20)[19], 10 + 19 * 0.25f);
  // One chunk is still written as version 1, byte for byte the old layout.
  auto one = filled("onebit:block=64", 100, 2, 50, 50).serialize();
  std::memcpy(&version, one.data() + 4, 4);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(one.size(), 40u + 16 + 4 * 100 + 4 * 50 + 8);

  // Forged tables with valid checksums: every one is kCorrupt.
  const size_t table = 40 + 16 + 4 * 500;  // after the header, the spec and the worker residual
  {
    auto b = bytes;
    put64(b, table + 16, 25);  // second chunk [25, +20) overlaps the first [10, +20)
    expectReject(reseal(b), "overlap");
  }
  {
    auto b = bytes;
    put64(b, table, 300);  // out of order
    expectReject(reseal(b), "order");
  }
  {
    auto b = bytes;
    put64(b, table + 32, 490);  // [490, +20) past the tensor
    expectReject(reseal(b), "past the end");
  }
  {
    auto b = bytes;
    put64(b, table + 8, 0);  // an empty chunk, and the lengths no longer add up
    expectReject(reseal(b), "empty");
  }
  {
    auto b = bytes;
    put64(b, 24, 1);  // one chunk in a version-2 table
    expectReject(reseal(b), "count of chunks");
  }
  {
    auto b = bytes;
    put64(b, 24, uint64_t{1} << 61);  // a table larger than the data
    expectReject(reseal(b), "huge table");
  }
}

// A tensor shorter than the world leaves the last ranks an empty chunk: that is a valid server
// residual (nothing to keep), not a misfit. The GPU check found the device path refusing it
// ("server chunk [7, +0) does not fit a tensor of 7 elements", 2026-11-28, H200), since it took
// server()'s null pointer for an empty chunk as the error.
TEST(ErrorFeedback, EmptyServerChunkIsValidOnBothPaths) {
  auto ef = ErrorFeedback::create("onebit", 7).value();
  auto s = ef.serverChecked(3, 7, 0);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_EQ(ef.serverLength(), 0u);
  auto empty = ErrorFeedback::create("topk", 0).value();
  EXPECT_TRUE(empty.serverChecked(4, 0, 0).isOk());
  auto past = ef.serverChecked(3, 7, 1);
  ASSERT_FALSE(past.isOk());
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("[7, +1)"), std::string::npos) << past.status().message();
  EXPECT_EQ(ef.serverChecked(0, 0, 0).status().code(), StatusCode::kInvalidArgument);
  if (!device::available()) {
    // Without a device the empty chunk gets as far as the device copy, which is unsupported here:
    // the chunk itself is no longer the error.
    auto d = ef.deviceServer(3, 7, 0, nullptr);
    ASSERT_FALSE(d.isOk());
    EXPECT_EQ(d.status().code(), StatusCode::kUnsupported) << d.status().toString();
    EXPECT_EQ(ef.deviceServer(3, 7, 1, nullptr).status().code(), StatusCode::kInvalidArgument);
  }
}

// The pieces relayoutFeedback (communicator.h) moves residuals to another world with.
TEST(ErrorFeedback, CopyServerToAndSetServerFromMoveTheServerResidual) {
  auto ef = filled("onebit:block=64", 1000, 4, 250, 250);
  const std::vector<float> worker(ef.worker(), ef.worker() + 1000);
  std::vector<float> full(1000, 9.0f);
  ef.copyServerTo(full.data());
  EXPECT_EQ(full[249], 9.0f);  // outside the chunk: left alone
  EXPECT_EQ(full[250], -3.0f);
  EXPECT_EQ(full[499], 249 * 0.5f - 3.0f);
  EXPECT_EQ(full[500], 9.0f);
  // Another world's chunk, read from the view at its own offsets; the worker residual stays.
  ASSERT_TRUE(ef.setServerFrom(3, 200, 300, full.data()).isOk());
  EXPECT_EQ(ef.serverWorldSize(), 3);
  EXPECT_EQ(ef.serverRegions(), 1u);
  EXPECT_EQ(ef.serverOffset(), 200u);
  EXPECT_EQ(ef.serverLength(), 300u);
  const float* s = ef.server(3, 200, 300);  // the same chunk: kept, not restarted
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s[0], 9.0f);
  EXPECT_EQ(s[50], -3.0f);
  EXPECT_EQ(s[299], 249 * 0.5f - 3.0f);
  EXPECT_EQ(std::vector<float>(ef.worker(), ef.worker() + 1000), worker);
  // A null view means zeros; an empty chunk is kept as the partition; bad chunks change nothing.
  ASSERT_TRUE(ef.setServerFrom(2, 500, 500, nullptr).isOk());
  EXPECT_EQ(ef.server(2, 500, 500)[7], 0.0f);
  ASSERT_TRUE(ef.setServerFrom(5, 1000, 0, full.data()).isOk());
  EXPECT_EQ(ef.serverWorldSize(), 5);
  EXPECT_EQ(ef.serverOffset(), 1000u);
  const auto before = ef.serialize();
  EXPECT_EQ(ef.setServerFrom(2, 900, 101, full.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ef.setServerFrom(0, 0, 10, full.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ef.serialize(), before);
}

TEST(ErrorFeedback, AnAllgatherUseIsRememberedAndCopied) {
  auto ef = ErrorFeedback::create("onebit", 10).value();
  EXPECT_FALSE(ef.usedForAllgather());
  ef.prepareFor("onebit:block=2048");  // allreduce, reduce-scatter
  EXPECT_FALSE(ef.usedForAllgather());
  ef.prepareFor("onebit:block=2048", true);
  EXPECT_TRUE(ef.usedForAllgather());
  ErrorFeedback copy = ef;
  EXPECT_TRUE(copy.usedForAllgather());
  ef.reset();  // zeroes the residuals; the state is still an allgather's part
  EXPECT_TRUE(ef.usedForAllgather());
}

TEST(ErrorFeedback, CopiesAreIndependentAndMovesKeepTheState) {
  auto ef = filled("onebit:block=64", 1000, 4, 250, 250);
  ErrorFeedback copy = ef;  // copy construction
  ErrorFeedback assigned;
  assigned = ef;  // copy assignment
  EXPECT_EQ(copy.serialize(), ef.serialize());
  EXPECT_EQ(assigned.serialize(), ef.serialize());
  copy.worker()[3] += 1.0f;
  assigned.server(4, 250, 250)[0] += 1.0f;
  EXPECT_NE(copy.worker()[3], ef.worker()[3]);
  EXPECT_NE(assigned.server(4, 250, 250)[0], ef.server(4, 250, 250)[0]);
  auto bytes = ef.serialize();
  ErrorFeedback moved = std::move(ef);
  EXPECT_EQ(moved.serialize(), bytes);
  EXPECT_FALSE(moved.residualsOnDevice());
}

TEST(ErrorFeedback, DeviceResidualsWithoutADeviceAreAClearError) {
  if (device::available()) GTEST_SKIP() << "a CUDA device is present: tests/gpu covers this path";
  auto ef = filled("topk", 100, 2, 50, 50);
  auto before = ef.serialize();
  auto w = ef.deviceWorker(nullptr);
  ASSERT_FALSE(w.isOk());
  EXPECT_EQ(w.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(w.status().message().find(device::built() ? "device" : "built without"),
            std::string::npos)
      << w.status().message();
  EXPECT_FALSE(ef.deviceServer(2, 50, 50, nullptr).isOk());
  EXPECT_FALSE(ef.residualsOnDevice());
  EXPECT_EQ(ef.serialize(), before);  // nothing was lost
}

TEST(ErrorFeedback, SerializeRoundTrip) {
  for (auto [spec, count, world] :
       std::vector<std::tuple<std::string, size_t, int>>{{"onebit:block=64", 1000, 4},
                                                         {"topk", 0, 0},
                                                         {"int8", 7, 0},
                                                         {"topk:ratio=0.3", 33, 3}}) {
    SCOPED_TRACE(spec);
    size_t len = world ? count / world : 0;
    auto ef = filled(spec, count, world, len, len);
    auto bytes = ef.serialize();
    auto back = ErrorFeedback::deserialize(bytes.data(), bytes.size());
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_EQ(back->codecSpec(), ef.codecSpec());
    ASSERT_EQ(back->count(), count);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(back->worker()[i], ef.worker()[i]);
    EXPECT_EQ(back->serverWorldSize(), world);
    EXPECT_EQ(back->serverOffset(), ef.serverOffset());
    ASSERT_EQ(back->serverLength(), len);
    if (world) {
      float* s = back->server(world, len, len);  // same partition: the loaded residual is kept
      for (size_t i = 0; i < len; ++i) ASSERT_EQ(s[i], static_cast<float>(i) * 0.5f - 3.0f);
    }
    EXPECT_EQ(back->serialize(), bytes);
  }
}

TEST(ErrorFeedback, TruncatedAndCorruptCheckpointsAreRejected) {
  auto ef = filled("int8:block=32", 40, 2, 20, 20);
  auto bytes = ef.serialize();
  for (size_t len = 0; len < bytes.size(); ++len) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + len);
    auto r = ErrorFeedback::deserialize(cut.data(), cut.size());
    ASSERT_FALSE(r.isOk()) << "accepted " << len << " of " << bytes.size() << " bytes";
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(ErrorFeedback::deserialize(longer.data(), longer.size()).isOk());
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    auto f = bytes;
    f[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_FALSE(ErrorFeedback::deserialize(f.data(), f.size()).isOk()) << "bit " << bit;
  }
  EXPECT_FALSE(ErrorFeedback::deserialize(nullptr, 100).isOk());
}

}  // namespace
}  // namespace terse::test

namespace terse::test {
namespace {

// The checksum of docs/wire-format.md, written again here so the test can forge checkpoints
// whose checksum is right but whose fields are not.
uint64_t docChecksum(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::vector<uint8_t> reseal(std::vector<uint8_t> b) {
  uint64_t c = docChecksum(b.data(), b.size() - 8);
  std::memcpy(b.data() + b.size() - 8, &c, 8);
  return b;
}

TEST(ErrorFeedback, ForgedFieldsWithValidChecksumAreRejected) {
  auto ef = filled("onebit:block=64", 100, 2, 50, 50);
  auto bytes = ef.serialize();
  ASSERT_TRUE(ErrorFeedback::deserialize(bytes.data(), bytes.size()).isOk());
  // The layout is as documented: resealing an unchanged copy changes nothing.
  EXPECT_EQ(reseal(bytes), bytes);
  {
    auto b = bytes;
    put64(b, 16, 101);  // count one larger than the data
    expectReject(reseal(b), "count");
  }
  {
    auto b = bytes;
    put64(b, 16, uint64_t{1} << 62);  // count whose byte size overflows
    expectReject(reseal(b), "huge count");
  }
  {
    auto b = bytes;
    put64(b, 24, 60);  // server chunk [60, 110) past the tensor
    expectReject(reseal(b), "server offset");
  }
  {
    auto b = bytes;
    put32(b, 12, static_cast<uint32_t>(-1));  // negative world size
    expectReject(reseal(b), "world");
  }
  {
    auto b = bytes;
    put32(b, 8, 1000);  // spec length beyond the limit
    expectReject(reseal(b), "spec length");
  }
  {
    auto b = bytes;
    put32(b, 4, 3);  // a future version
    expectReject(reseal(b), "version");
  }
  {
    // A spec that parses but is not canonical ("onebit" instead of "onebit:block=2048").
    auto other = filled("onebit", 3, 0, 0, 0).serialize();
    std::string canonical = "onebit:block=2048";
    ASSERT_EQ(std::string(other.begin() + 40, other.begin() + 40 + canonical.size()), canonical);
    std::vector<uint8_t> b(other.begin(), other.begin() + 40);
    put32(b, 8, 6);
    for (char c : std::string("onebit")) b.push_back(static_cast<uint8_t>(c));
    b.push_back(0);
    b.push_back(0);
    b.insert(b.end(), other.begin() + 40 + 20, other.end());
    expectReject(reseal(b), "non-canonical spec");
  }
}

}  // namespace
}  // namespace terse::test
