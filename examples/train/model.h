// The training example's data and models: a deterministic synthetic classification task (no
// downloads), its IID and non-IID shards, and two small models (softmax regression, a two-layer
// ReLU MLP) with hand-written forward and backward passes over one flat parameter vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace terse::train {

// splitmix64: tiny, fully specified, so every rank and every machine draws the same numbers.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1)
  double normal();   // Box-Muller
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }

 private:
  uint64_t state_;
};

struct DatasetConfig {
  size_t features = 64;
  size_t classes = 10;
  size_t modesPerClass = 2;  // two Gaussian blobs per class: not linearly separable
  double centerScale = 0.5;  // spread of the blob centres
  double noise = 1.1;        // std-dev of the samples around their centre
  double labelNoise = 0.05;  // fraction of labels replaced by a random class (a loss floor)
  // Feature d is multiplied by spread^(-d/(features-1)): 1 (the default) leaves every feature on
  // one scale; above 1 the features span [1/spread, 1], as unnormalized inputs do. Each
  // feature's information is unchanged, but its weights' gradients shrink with its scale, and
  // a codec that rounds small values within a block to zero loses them unless error feedback
  // carries them (tests/train/convergence_test.py).
  double featureSpread = 1.0;
  size_t trainSize = 32768;
  size_t testSize = 2048;
  uint64_t seed = 1;
};

struct Dataset {
  size_t features = 0, classes = 0;
  std::vector<float> x;    // size() * features, row-major
  std::vector<int> label;  // class of each row
  size_t size() const { return label.size(); }
  const float* row(size_t i) const { return x.data() + i * features; }
};

// Train and test sets drawn from the same mixture (the test set's labels are clean).
void makeDatasets(const DatasetConfig& config, Dataset* train, Dataset* test);

// Which training rows rank `rank` of `world` uses in step `step` of epoch `epoch`, for a global
// batch of `globalBatch` rows (a multiple of world):
//  iid:    one permutation of the whole set per epoch; step s takes rows [s*B, (s+1)*B) of it
//          and rank r the r-th slice. The global batch does not depend on the world size, so a
//          run resumed at another world size sees exactly the same data.
//  noniid: the set sorted by label and cut into `world` contiguous shards (each rank sees only
//          a few classes); each rank walks a per-epoch permutation of its own shard.
enum class Split { kIid, kNonIid };
std::vector<size_t> batchRows(const Dataset& train, Split split, uint64_t seed, size_t epoch,
                              size_t step, size_t globalBatch, int rank, int world);
inline size_t stepsPerEpoch(size_t trainSize, size_t globalBatch) {
  return trainSize / globalBatch;
}

// A named slice of the flat parameter vector (one tensor).
struct Tensor {
  std::string name;
  size_t offset = 0, length = 0;
};

class Model {
 public:
  // kind "softmax" (hidden ignored) or "mlp". Weights are drawn from `seed` (every rank the
  // same), biases start at zero.
  static bool validKind(const std::string& kind) { return kind == "softmax" || kind == "mlp"; }
  Model(const std::string& kind, size_t features, size_t hidden, size_t classes, uint64_t seed);

  const std::string& kind() const { return kind_; }
  size_t parameterCount() const { return params_.size(); }
  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }

  // Mean cross-entropy over `rows` and the number classified correctly. With grad non-null,
  // writes d(mean loss)/d(params) there (parameterCount() floats, overwritten).
  double lossAndGradient(const Dataset& data, const std::vector<size_t>& rows, float* grad,
                         size_t* correct) const;

 private:
  std::string kind_;
  size_t features_, hidden_, classes_;
  std::vector<float> params_;
  std::vector<Tensor> tensors_;
};

}  // namespace terse::train
