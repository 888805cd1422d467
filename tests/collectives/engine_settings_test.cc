// The engine's tunables are values it is given (EngineSettings, terse/collectives/engine.h): it
// never reads the environment, so an engine built alone runs with what its builder passed, or
// with the registered defaults, whatever TERSE_* variables are set.
#include "terse/collectives/engine.h"
#include "terse/common/env.h"
#include "terse/transport/inproc.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace terse {
namespace {

TEST(EngineSettings, AnEngineBuiltAloneDoesNotReadTheEnvironment) {
  setenv("TERSE_SEGMENT_BYTES", "262144", 1);
  setenv("TERSE_PIPELINE_DEPTH", "5", 1);
  setenv("TERSE_ALGO", "flat", 1);
  auto fabric = makeInProcFabric(1);
  ASSERT_TRUE(fabric.isOk());
  auto transport = createInProcTransport(*fabric, 0);
  ASSERT_TRUE(transport.isOk()) << transport.status().toString();
  EngineSettings given = EngineSettings::defaults();
  given.segmentBytes = size_t{8} << 20;  // 2^21 float32 elements
  given.pipelineDepth = 3;
  given.algorithm = Algorithm::kTwoLevel;
  const CollectiveEngine passed(**transport, std::chrono::seconds(60), given);
  const CollectiveEngine alone(**transport, std::chrono::seconds(60));
  unsetenv("TERSE_SEGMENT_BYTES");
  unsetenv("TERSE_PIPELINE_DEPTH");
  unsetenv("TERSE_ALGO");
  EXPECT_EQ(passed.segmentElements(), size_t{1} << 21);
  EXPECT_EQ(passed.pipelineDepth(), 3u);
  EXPECT_EQ(passed.defaultAlgorithm(), Algorithm::kTwoLevel);
  // The registered defaults: 1 MiB segments, depth 1, auto.
  EXPECT_EQ(alone.segmentElements(), size_t{1} << 18);
  EXPECT_EQ(alone.pipelineDepth(), 1u);
  EXPECT_EQ(alone.defaultAlgorithm(), Algorithm::kAuto);
}

// What a communicator hands its engine: the values its ranks compared (AgreedSettings), with
// this rank's pipeline depth.
TEST(EngineSettings, FromTheAgreedSnapshot) {
  setenv("TERSE_SMALL_BYTES", "0", 1);
  setenv("TERSE_ALGO", "FLAT", 1);
  auto agreed = AgreedSettings::fromEnvironment();
  unsetenv("TERSE_SMALL_BYTES");
  unsetenv("TERSE_ALGO");
  ASSERT_TRUE(agreed.isOk()) << agreed.status().toString();
  const EngineSettings s = EngineSettings::from(*agreed, 4);
  EXPECT_EQ(s.smallBytes, 0u);
  EXPECT_EQ(s.algorithm, Algorithm::kFlat);
  EXPECT_EQ(s.pipelineDepth, 4u);
  EXPECT_EQ(s.segmentBytes, size_t{1} << 20);
  EXPECT_EQ(s.directAgreementRanks, 32u);
}

}  // namespace
}  // namespace terse
