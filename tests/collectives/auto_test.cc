// The auto codec policy: its spec grammar, error-feedback states made for it, and a pick that is
// the same on every rank (any disagreement would fail the call's descriptor check).
#include "world.h"

#include "terse/collectives/auto_select.h"
#include "terse/compressors/auto_spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace terse {
namespace {

TEST(AutoSpec, LossBudgetOrdersTheCandidates) {
  auto def = parseAutoSpec("auto");
  ASSERT_TRUE(def.isOk());
  EXPECT_EQ(def.value().canonical, "auto:max=int8");
  ASSERT_EQ(def.value().candidates.size(), 4u);
  EXPECT_EQ(def.value().candidates[0], "none");
  EXPECT_EQ(def.value().candidates[3].rfind("int8", 0), 0u);
  auto all = parseAutoSpec("auto:max=onebit");
  ASSERT_TRUE(all.isOk());
  EXPECT_EQ(all.value().candidates.size(), 10u);
  // The low-bit formats sit between int8 and onebit: 8-bit floats first, then 4-bit formats.
  auto eight = parseAutoSpec("auto:max=mxfp8");
  ASSERT_TRUE(eight.isOk());
  ASSERT_EQ(eight.value().candidates.size(), 6u);
  EXPECT_EQ(eight.value().candidates[4].rfind("fp8:", 0), 0u);
  EXPECT_EQ(eight.value().candidates[5].rfind("mxfp8:", 0), 0u);
  auto four = parseAutoSpec("auto:max=int4");
  ASSERT_TRUE(four.isOk());
  ASSERT_EQ(four.value().candidates.size(), 8u);
  EXPECT_EQ(four.value().candidates[6].rfind("mxfp4:", 0), 0u);
  EXPECT_EQ(four.value().candidates[7].rfind("int4:", 0), 0u);
  for (const auto& c : four.value().candidates) EXPECT_EQ(c.find("onebit"), std::string::npos);
  EXPECT_EQ(parseAutoSpec("auto:max=none").value().candidates.size(), 1u);
  for (const char* bad : {"auto:max=zstd", "auto:min=int8", "automatic"}) {
    auto r = parseAutoSpec(bad);
    EXPECT_FALSE(r.isOk()) << bad;
    if (!r.isOk()) {
      EXPECT_NE(r.status().message().find("accepted"), std::string::npos) << r.status().message();
    }
  }
}

TEST(AutoSpec, FeedbackStateServesEveryAllowedCodecAndResetsOnSwitch) {
  auto ef = ErrorFeedback::create("auto:max=int8", 10);
  ASSERT_TRUE(ef.isOk()) << ef.status().toString();
  EXPECT_TRUE(ef.value().checkCompatible("int8", 10).isOk());
  EXPECT_TRUE(ef.value().checkCompatible("fp16", 10).isOk());
  EXPECT_FALSE(ef.value().checkCompatible("onebit", 10).isOk()) << "onebit is beyond max=int8";
  EXPECT_FALSE(ef.value().checkCompatible("int8", 11).isOk());
  ErrorFeedback& e = ef.value();
  e.prepareFor("fp16");
  e.worker()[3] = 1.5f;
  e.prepareFor("fp16");
  EXPECT_EQ(e.worker()[3], 1.5f) << "same codec: residuals kept";
  e.prepareFor("int8:block=256,round=nearest,seed=0");
  EXPECT_EQ(e.worker()[3], 0.0f) << "another codec: residuals reset";
  auto back = ErrorFeedback::deserialize(e.serialize().data(), e.serialize().size());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back.value().codecSpec(), "auto:max=int8");
}

TEST(AutoSelect, EveryRankPicksTheSameCodec) {
  for (const char* spec : {"auto:max=int8", "auto:max=onebit"}) {
    const int n = 4;
    const size_t count = (size_t{1} << 20) + 7;
    std::vector<std::vector<float>> in(n, std::vector<float>(count)),
        out(n, std::vector<float>(count));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) in[r][i] = std::sin(0.001f * i + r);
    std::vector<std::string> picks(n);
    auto st = testing::runWorld(n, [&](int r, CollectiveEngine& e) -> Status {
      TERSE_ASSIGN_OR_RETURN(std::unique_ptr<AutoSelector> sel, AutoSelector::create(spec));
      TERSE_ASSIGN_OR_RETURN(ErrorFeedback ef, ErrorFeedback::create(spec, count));
      for (int step = 0; step < 2; ++step) {
        CollectiveOp op;
        op.send = in[r].data();
        op.recv = out[r].data();
        op.count = count;
        op.feedback = &ef;
        TERSE_ASSIGN_OR_RETURN(op.codec, sel->choose(e, op));
        picks[r] = op.codec->spec();
        TERSE_RETURN_IF_ERROR(e.run(op));
      }
      EXPECT_TRUE(sel->calibrated());
      CollectiveOp probe;
      probe.kind = CollectiveKind::kAllReduce;
      probe.count = count;
      auto predictions = sel->predict(probe, n);
      EXPECT_EQ(predictions.size(), std::string(spec) == "auto:max=int8" ? 4u : 10u);
      for (auto& p : predictions) EXPECT_GT(p.second, 0.0) << p.first;
      return Status::ok();
    });
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(st[r].isOk()) << spec << " rank " << r << ": " << st[r].toString();
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(picks[r], picks[0]);
      EXPECT_EQ(0, std::memcmp(out[r].data(), out[0].data(), count * 4)) << "rank " << r;
    }
  }
}

// Above 2^20 elements each (kind, type, size class) is measured once at its own size among the
// contenders the model leaves; a margin this wide makes every candidate contend, so the
// measurement runs (and must agree across ranks) whatever this machine's speeds are.
TEST(AutoSelect, RefinesEachSizeClassOnceAndRanksAgree) {
  const int n = 3;
  const size_t big = (size_t{1} << 21) + 5, small = size_t{1} << 20;
  std::vector<std::vector<float>> in(n, std::vector<float>(big)), out(n, std::vector<float>(big));
  std::vector<std::vector<uint16_t>> in16(n, std::vector<uint16_t>(big)),
      out16(n, std::vector<uint16_t>(big));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < big; ++i) {
      in[r][i] = std::cos(0.003f * i - r);
      in16[r][i] = static_cast<uint16_t>(0x3c00 + (i + r) % 512);  // fp16 values in [1, 2)
    }
  std::vector<std::vector<std::string>> picks(n);
  std::vector<size_t> classes(n);
  auto st = testing::runWorld(n, [&](int r, CollectiveEngine& e) -> Status {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<AutoSelector> sel,
                           AutoSelector::create("auto:max=onebit", 1e9));
    auto call = [&](size_t count, DataType dt, CollectiveKind kind) -> Status {
      CollectiveOp op;
      op.kind = kind;
      op.send = dt == DataType::kFloat32 ? static_cast<void*>(in[r].data()) : in16[r].data();
      op.recv = dt == DataType::kFloat32 ? static_cast<void*>(out[r].data()) : out16[r].data();
      op.count = count;
      op.dtype = dt;
      TERSE_ASSIGN_OR_RETURN(op.codec, sel->choose(e, op));
      picks[r].push_back(op.codec->spec());
      return e.run(op);
    };
    TERSE_RETURN_IF_ERROR(call(small, DataType::kFloat32, CollectiveKind::kAllReduce));
    EXPECT_EQ(sel->refinedClasses(), 0u) << "2^20 elements is inside the calibrated range";
    TERSE_RETURN_IF_ERROR(call(big, DataType::kFloat32, CollectiveKind::kAllReduce));
    EXPECT_EQ(sel->refinedClasses(), 1u);
    TERSE_RETURN_IF_ERROR(call(big - 3, DataType::kFloat32, CollectiveKind::kAllReduce));
    EXPECT_EQ(sel->refinedClasses(), 1u) << "same class: measured once";
    TERSE_RETURN_IF_ERROR(call(big, DataType::kFloat16, CollectiveKind::kAllReduce));
    TERSE_RETURN_IF_ERROR(call(big, DataType::kFloat32, CollectiveKind::kReduceScatter));
    TERSE_RETURN_IF_ERROR(call(big, DataType::kFloat32, CollectiveKind::kAllGather));
    classes[r] = sel->refinedClasses();
    TERSE_RETURN_IF_ERROR(call(big, DataType::kFloat32, CollectiveKind::kAllReduce));
    return Status::ok();
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(st[r].isOk()) << "rank " << r << ": " << st[r].toString();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(classes[r], 4u) << "fp16 and the other kinds are classes of their own";
    EXPECT_EQ(picks[r], picks[0]) << "rank " << r;
  }
  // Same picks, same inputs in the same order: the last allreduce's outputs agree bit for bit.
  for (int r = 1; r < n; ++r)
    EXPECT_EQ(0, std::memcmp(out[r].data(), out[0].data(), big * 4)) << "rank " << r;
}

}  // namespace
}  // namespace terse
