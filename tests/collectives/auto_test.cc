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
  EXPECT_EQ(all.value().candidates.size(), 6u);
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
      auto predictions =
          sel->predict(CollectiveOp{CollectiveKind::kAllReduce, nullptr, nullptr, count}, n);
      EXPECT_EQ(predictions.size(), std::string(spec) == "auto:max=int8" ? 4u : 6u);
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

}  // namespace
}  // namespace terse
