// The training example's building blocks against independent references: gradients against
// finite differences, the data shards against their definition, checkpoints against what was
// saved, and the error-feedback re-partitioning against a full-tensor view built by hand.
#include "checkpoint.h"
#include "model.h"

#include "terse/collectives/engine.h"
#include "terse/collectives/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <stdlib.h>

namespace terse::train {
namespace {

DatasetConfig tinyData() {
  DatasetConfig c;
  c.features = 5;
  c.classes = 3;
  c.trainSize = 64;
  c.testSize = 16;
  c.seed = 7;
  return c;
}

void checkGradient(const std::string& kind) {
  Dataset train, test;
  makeDatasets(tinyData(), &train, &test);
  Model model(kind, 5, 4, 3, 11);
  // Non-zero biases so every branch (ReLU on and off) is exercised.
  for (size_t i = 0; i < model.parameterCount(); ++i)
    model.params()[i] += 0.05f * std::sin(float(i));
  std::vector<size_t> rows = {0, 3, 5, 9, 17, 40};
  std::vector<float> grad(model.parameterCount());
  model.lossAndGradient(train, rows, grad.data(), nullptr);
  const float h = 1e-3f;
  for (size_t i = 0; i < model.parameterCount(); ++i) {
    float keep = model.params()[i];
    model.params()[i] = keep + h;
    double up = model.lossAndGradient(train, rows, nullptr, nullptr);
    model.params()[i] = keep - h;
    double down = model.lossAndGradient(train, rows, nullptr, nullptr);
    model.params()[i] = keep;
    double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(grad[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << kind << " parameter " << i;
  }
}

TEST(TrainModel, SoftmaxGradientMatchesFiniteDifferences) { checkGradient("softmax"); }
TEST(TrainModel, MlpGradientMatchesFiniteDifferences) { checkGradient("mlp"); }

TEST(TrainModel, LossIsCrossEntropyOfUniformAtZeroWeights) {
  Dataset train, test;
  makeDatasets(tinyData(), &train, &test);
  Model model("softmax", 5, 0, 3, 1);
  std::fill(model.params().begin(), model.params().end(), 0.0f);
  std::vector<size_t> rows = {1, 2, 3};
  EXPECT_NEAR(model.lossAndGradient(train, rows, nullptr, nullptr), std::log(3.0), 1e-6);
}

TEST(TrainData, DatasetIsDeterministicAndLabelsInRange) {
  Dataset a, b, ta, tb;
  makeDatasets(tinyData(), &a, &ta);
  makeDatasets(tinyData(), &b, &tb);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.label, b.label);
  EXPECT_EQ(ta.x, tb.x);
  for (int l : a.label) EXPECT_TRUE(l >= 0 && l < 3);
  DatasetConfig other = tinyData();
  other.seed = 8;
  Dataset c, tc;
  makeDatasets(other, &c, &tc);
  EXPECT_NE(a.x, c.x);
}

// --feature-spread scales feature d by spread^(-d/(D-1)) and changes nothing else: the same
// labels, the first feature as it was, the last one 1/spread of it, the ones between in order.
TEST(TrainData, FeatureSpreadScalesEachFeatureAndNothingElse) {
  Dataset plain, plainTest, spread, spreadTest;
  DatasetConfig config = tinyData();
  makeDatasets(config, &plain, &plainTest);
  config.featureSpread = 1000;
  makeDatasets(config, &spread, &spreadTest);
  ASSERT_EQ(spread.label, plain.label);
  ASSERT_EQ(spread.x.size(), plain.x.size());
  const size_t d = plain.features;
  ASSERT_GE(d, 3u);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(spread.row(i)[0], plain.row(i)[0]) << "row " << i;
    EXPECT_NEAR(spread.row(i)[d - 1], plain.row(i)[d - 1] / 1000.0,
                1e-6 * std::fabs(plain.row(i)[d - 1]))
        << "row " << i;
    for (size_t f = 1; f + 1 < d; ++f) {
      const double want = plain.row(i)[f] * std::pow(1000.0, -double(f) / double(d - 1));
      EXPECT_NEAR(spread.row(i)[f], want, 1e-6 * std::fabs(want))
          << "row " << i << " feature " << f;
    }
  }
  EXPECT_EQ(spreadTest.label, plainTest.label);
}

TEST(TrainData, IidGlobalBatchDoesNotDependOnWorldSize) {
  Dataset train, test;
  makeDatasets(tinyData(), &train, &test);
  const size_t batch = 8;
  for (size_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<size_t> epochRows;
    for (size_t step = 0; step < stepsPerEpoch(train.size(), batch); ++step) {
      std::vector<size_t> one = batchRows(train, Split::kIid, 3, epoch, step, batch, 0, 1);
      for (int world : {2, 4, 8}) {
        std::vector<size_t> joined;
        for (int r = 0; r < world; ++r) {
          auto part = batchRows(train, Split::kIid, 3, epoch, step, batch, r, world);
          EXPECT_EQ(part.size(), batch / world);
          joined.insert(joined.end(), part.begin(), part.end());
        }
        EXPECT_EQ(joined, one) << "world " << world << " step " << step;
      }
      epochRows.insert(one.begin(), one.end());
    }
    // An epoch visits every row once.
    EXPECT_EQ(epochRows.size(), train.size());
    EXPECT_EQ(std::set<size_t>(epochRows.begin(), epochRows.end()).size(), train.size());
  }
}

TEST(TrainData, NonIidRanksSeeFewClasses) {
  DatasetConfig c = tinyData();
  c.trainSize = 600;
  c.classes = 4;
  c.labelNoise = 0;
  Dataset train, test;
  makeDatasets(c, &train, &test);
  for (int r = 0; r < 4; ++r) {
    std::set<int> seen;
    for (size_t step = 0; step < 10; ++step)
      for (size_t row : batchRows(train, Split::kNonIid, 3, 0, step, 16, r, 4))
        seen.insert(train.label[row]);
    EXPECT_LE(seen.size(), 2u) << "rank " << r;  // 4 classes over 4 shards: one or two each
  }
}

// ---- checkpoints ------------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/terse-train-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Feedback of one tensor of `count` elements as rank `rank` of `world` holds it after an
// allreduce: worker values 1000*rank + k, server values -(offset + k) (so the position in the
// tensor can be read back from the value).
ErrorFeedback savedState(const std::string& codec, size_t count, int world, int rank) {
  auto ef = ErrorFeedback::create(codec, count);
  EXPECT_TRUE(ef.isOk());
  for (size_t k = 0; k < count; ++k) ef->worker()[k] = float(1000 * rank) + float(k);
  Range c = alignedChunkRange(count, world, rank, CollectiveEngine::kChunkAlign);
  float* s = ef->server(world, c.begin, c.length);
  for (size_t k = 0; k < c.length; ++k) s[k] = -float(c.begin + k);
  return std::move(ef).value();
}

TEST(TrainCheckpoint, ModelRoundTripAndCorruptionIsDetected) {
  TempDir dir;
  ModelState s{42, 4, "onebit", {1.5f, -2.0f, 3.25f}, {0.5f, 0.25f, -1.0f}};
  ASSERT_TRUE(saveModel(dir.path(), s).isOk());
  auto back = loadModel(dir.path());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->step, 42u);
  EXPECT_EQ(back->world, 4);
  EXPECT_EQ(back->codec, "onebit");
  EXPECT_EQ(back->params, s.params);
  EXPECT_EQ(back->momentum, s.momentum);
  {
    std::fstream f(dir.path() + "/model.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  auto bad = loadModel(dir.path());
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("checksum"), std::string::npos);
  EXPECT_FALSE(loadModel(dir.path() + "/missing").isOk());
}

// The decoders the file loaders use, on bytes: exact round trips, and every cut or extended file
// refused with an error naming it (the fuzz target fuzz_checkpoint goes further).
TEST(TrainCheckpoint, DecodersRefuseEveryTruncationAndNameTheFile) {
  const std::vector<uint8_t> model =
      encodeModel(ModelState{7, 2, "int8", {1.0f, 2.0f, 3.0f}, {0.0f, -1.0f, 4.0f}});
  auto back = decodeModel(model, "m.bin");
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(encodeModel(*back), model);
  std::vector<ErrorFeedback> states;
  states.push_back(savedState("int8", 5000, 2, 1));
  const std::vector<uint8_t> fb = encodeFeedback(1, states);
  auto fbBack = decodeFeedback(fb, "f.bin", 1);
  ASSERT_TRUE(fbBack.isOk()) << fbBack.status().toString();
  EXPECT_EQ(encodeFeedback(1, *fbBack), fb);
  auto other = decodeFeedback(fb, "f.bin", 0);
  ASSERT_FALSE(other.isOk());
  EXPECT_NE(other.status().message().find("f.bin says it belongs to rank 1"), std::string::npos);
  for (size_t cut = 0; cut < model.size(); ++cut) {
    std::vector<uint8_t> part(model.begin(), model.begin() + static_cast<long>(cut));
    auto r = decodeModel(part, "m.bin");
    ASSERT_FALSE(r.isOk()) << cut;
    EXPECT_NE(r.status().message().find("m.bin"), std::string::npos) << r.status().message();
  }
  std::vector<uint8_t> longer = fb;
  longer.push_back(0);
  EXPECT_FALSE(decodeFeedback(longer, "f.bin", 1).isOk());
}

TEST(TrainCheckpoint, SameWorldSizeLoadsEachRanksOwnStateExactly) {
  TempDir dir;
  const size_t count = 9000;
  for (int r = 0; r < 4; ++r) {
    std::vector<ErrorFeedback> mine = {savedState("onebit", count, 4, r),
                                       savedState("onebit", 100, 4, r)};
    ASSERT_TRUE(saveFeedback(dir.path(), r, mine).isOk());
  }
  for (int r = 0; r < 4; ++r) {
    auto got = loadFeedback(dir.path(), 4, 4, r);
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    ASSERT_EQ(got->size(), 2u);
    EXPECT_EQ((*got)[0].serialize(), savedState("onebit", count, 4, r).serialize());
    EXPECT_EQ((*got)[1].serialize(), savedState("onebit", 100, 4, r).serialize());
  }
}

void checkRepartition(int oldWorld, int newWorld) {
  const size_t count = 9000;  // 5 aligned units: uneven chunks, some ranks own nothing at n=8
  std::vector<ErrorFeedback> old;
  for (int r = 0; r < oldWorld; ++r)
    old.push_back(savedState("topk:ratio=0.01", count, oldWorld, r));
  std::vector<const ErrorFeedback*> parts;
  for (auto& e : old) parts.push_back(&e);
  const float meanRank = 1000.0f * float(oldWorld - 1) / 2.0f;
  for (int r = 0; r < newWorld; ++r) {
    auto got = repartitionFeedback(parts, newWorld, r);
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    Range c = alignedChunkRange(count, newWorld, r, CollectiveEngine::kChunkAlign);
    EXPECT_EQ(got->serverWorldSize(), newWorld);
    EXPECT_EQ(got->serverOffset(), c.begin);
    ASSERT_EQ(got->serverLength(), c.length);
    // Asking for the partition the allreduce will ask for must keep (not reset) the values.
    const float* s = got->server(newWorld, c.begin, c.length);
    for (size_t k = 0; k < c.length; ++k)
      ASSERT_EQ(s[k], -float(c.begin + k)) << oldWorld << "->" << newWorld << " rank " << r;
    for (size_t k = 0; k < count; k += 997) ASSERT_FLOAT_EQ(got->worker()[k], meanRank + float(k));
  }
}

TEST(TrainCheckpoint, RepartitionFourToTwo) { checkRepartition(4, 2); }
TEST(TrainCheckpoint, RepartitionFourToOne) { checkRepartition(4, 1); }
TEST(TrainCheckpoint, RepartitionTwoToEight) { checkRepartition(2, 8); }
TEST(TrainCheckpoint, RepartitionSameWorldKeepsServerChunks) { checkRepartition(3, 3); }

TEST(TrainCheckpoint, RepartitionRejectsStatesThatDoNotBelongTogether) {
  std::vector<ErrorFeedback> old = {savedState("onebit", 9000, 2, 0),
                                    savedState("onebit", 9000, 2, 1)};
  ErrorFeedback wrongCodec = savedState("topk:ratio=0.01", 9000, 2, 1);
  auto r1 = repartitionFeedback({&old[0], &wrongCodec}, 4, 0);
  EXPECT_FALSE(r1.isOk());
  // Rank 1's state claims rank 0's chunk.
  ErrorFeedback wrongChunk = savedState("onebit", 9000, 2, 0);
  auto r2 = repartitionFeedback({&old[0], &wrongChunk}, 4, 0);
  ASSERT_FALSE(r2.isOk());
  EXPECT_NE(r2.status().message().find("do not belong together"), std::string::npos);
  EXPECT_FALSE(repartitionFeedback({&old[0], &old[1]}, 4, 4).isOk());
  EXPECT_FALSE(repartitionFeedback({}, 4, 0).isOk());
}

TEST(TrainCheckpoint, DifferentWorldSizeThroughFiles) {
  TempDir dir;
  for (int r = 0; r < 4; ++r)
    ASSERT_TRUE(saveFeedback(dir.path(), r, {savedState("onebit", 9000, 4, r)}).isOk());
  auto got = loadFeedback(dir.path(), 4, 2, 1);
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  Range c = alignedChunkRange(9000, 2, 1, CollectiveEngine::kChunkAlign);
  EXPECT_EQ((*got)[0].serverOffset(), c.begin);
  EXPECT_FALSE(loadFeedback(dir.path(), 5, 2, 1).isOk());  // rank 4's file does not exist
}

}  // namespace
}  // namespace terse::train
