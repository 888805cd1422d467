// Synthetic data and the two models of the training example (see model.h).
#include "model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace terse::train {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  // 1 - uniform() is in (0, 1], so the logarithm is finite.
  double u1 = 1.0 - uniform(), u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

namespace {

void drawSet(const DatasetConfig& c, const std::vector<double>& centers, size_t n,
             double labelNoise, Rng& rng, Dataset* out) {
  out->features = c.features;
  out->classes = c.classes;
  out->x.resize(n * c.features);
  out->label.resize(n);
  // Each feature's factor (all 1 without a spread), computed once for every row.
  std::vector<double> scale(c.features, 1.0);
  for (size_t d = 0; c.features > 1 && d < c.features; ++d)
    scale[d] = std::pow(c.featureSpread, -double(d) / double(c.features - 1));
  for (size_t i = 0; i < n; ++i) {
    size_t cls = rng.below(c.classes), mode = rng.below(c.modesPerClass);
    const double* centre = centers.data() + (cls * c.modesPerClass + mode) * c.features;
    for (size_t d = 0; d < c.features; ++d)
      out->x[i * c.features + d] =
          static_cast<float>(scale[d] * (centre[d] + c.noise * rng.normal()));
    if (labelNoise > 0 && rng.uniform() < labelNoise) cls = rng.below(c.classes);
    out->label[i] = static_cast<int>(cls);
  }
}

// A permutation of 0..n-1 (Fisher-Yates over our own generator, not std::shuffle, whose
// algorithm the standard leaves open).
std::vector<size_t> permutation(size_t n, uint64_t seed) {
  std::vector<size_t> p(n);
  std::iota(p.begin(), p.end(), size_t{0});
  Rng rng(seed);
  for (size_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.below(i)]);
  return p;
}

uint64_t mixSeed(uint64_t a, uint64_t b) {
  Rng r(a * 0x2545f4914f6cdd1dull + b);
  return r.next();
}

}  // namespace

void makeDatasets(const DatasetConfig& config, Dataset* train, Dataset* test) {
  Rng rng(config.seed);
  std::vector<double> centers(config.classes * config.modesPerClass * config.features);
  for (double& v : centers) v = config.centerScale * rng.normal();
  Rng trainRng(mixSeed(config.seed, 1)), testRng(mixSeed(config.seed, 2));
  drawSet(config, centers, config.trainSize, config.labelNoise, trainRng, train);
  drawSet(config, centers, config.testSize, 0.0, testRng, test);
}

namespace {

// The per-epoch order a rank walks (the whole permutation for iid, the rank's label-sorted shard
// permuted for noniid). Built once per epoch and cached: every step of the epoch reuses it.
struct EpochOrder {
  const Dataset* data = nullptr;
  size_t size = 0, epoch = 0;
  uint64_t seed = 0;
  Split split = Split::kIid;
  int rank = -1, world = 0;
  std::vector<size_t> rows;
};

const std::vector<size_t>& epochOrder(const Dataset& train, Split split, uint64_t seed,
                                      size_t epoch, int rank, int world) {
  thread_local EpochOrder cache;
  if (split == Split::kIid) rank = 0, world = 1;  // one order shared by every rank
  if (cache.data == &train && cache.size == train.size() && cache.epoch == epoch &&
      cache.seed == seed && cache.split == split && cache.rank == rank && cache.world == world)
    return cache.rows;
  cache = EpochOrder{&train, train.size(), epoch, seed, split, rank, world, {}};
  if (split == Split::kIid) {
    cache.rows = permutation(train.size(), mixSeed(seed, 1000 + epoch));
    return cache.rows;
  }
  // Non-IID: the rank's shard of the label-sorted set (a stable sort keeps it deterministic).
  std::vector<size_t> byLabel(train.size());
  std::iota(byLabel.begin(), byLabel.end(), size_t{0});
  std::stable_sort(byLabel.begin(), byLabel.end(),
                   [&](size_t a, size_t b) { return train.label[a] < train.label[b]; });
  const size_t shard = train.size() / static_cast<size_t>(world);
  const size_t shardBegin = shard * static_cast<size_t>(rank);
  std::vector<size_t> perm =
      permutation(shard, mixSeed(seed, (1000 + epoch) * 4096 + static_cast<size_t>(rank)));
  cache.rows.resize(shard);
  for (size_t i = 0; i < shard; ++i) cache.rows[i] = byLabel[shardBegin + perm[i]];
  return cache.rows;
}

}  // namespace

std::vector<size_t> batchRows(const Dataset& train, Split split, uint64_t seed, size_t epoch,
                              size_t step, size_t globalBatch, int rank, int world) {
  const size_t local = globalBatch / static_cast<size_t>(world);
  const std::vector<size_t>& order = epochOrder(train, split, seed, epoch, rank, world);
  std::vector<size_t> rows(local);
  if (order.empty()) return rows;
  // iid: step s takes rows [s*B, (s+1)*B) of the epoch's order and rank r the r-th slice of
  // them; noniid: each rank walks its own shard's order.
  const size_t begin =
      split == Split::kIid ? step * globalBatch + static_cast<size_t>(rank) * local : step * local;
  for (size_t i = 0; i < local; ++i) rows[i] = order[(begin + i) % order.size()];
  return rows;
}

Model::Model(const std::string& kind, size_t features, size_t hidden, size_t classes, uint64_t seed)
    : kind_(kind), features_(features), hidden_(kind == "mlp" ? hidden : 0), classes_(classes) {
  auto add = [&](const char* name, size_t length) {
    tensors_.push_back(Tensor{name, params_.size(), length});
    params_.resize(params_.size() + length, 0.0f);
  };
  Rng rng(mixSeed(seed, 77));
  auto fill = [&](const Tensor& t, double stddev) {
    for (size_t i = 0; i < t.length; ++i)
      params_[t.offset + i] = static_cast<float>(stddev * rng.normal());
  };
  if (hidden_ == 0) {
    add("w", classes * features);
    add("b", classes);
    fill(tensors_[0], 0.01);
  } else {
    add("w1", hidden_ * features);
    add("b1", hidden_);
    add("w2", classes * hidden_);
    add("b2", classes);
    fill(tensors_[0], std::sqrt(2.0 / static_cast<double>(features)));  // He, for ReLU
    fill(tensors_[2], std::sqrt(1.0 / static_cast<double>(hidden_)));
  }
}

double Model::lossAndGradient(const Dataset& data, const std::vector<size_t>& rows, float* grad,
                              size_t* correct) const {
  const size_t D = features_, H = hidden_, K = classes_;
  const bool mlp = H > 0;
  const float* w1 = params_.data();
  const float* b1 = mlp ? w1 + H * D : nullptr;
  const float* w2 = mlp ? b1 + H : w1;  // the output layer (the only layer for softmax)
  const float* b2 = mlp ? w2 + K * H : w1 + K * D;
  float* gw1 = grad;
  float* gb1 = (grad && mlp) ? gw1 + H * D : nullptr;
  float* gw2 = grad ? (mlp ? gb1 + H : grad) : nullptr;
  float* gb2 = grad ? (mlp ? gw2 + K * H : grad + K * D) : nullptr;
  if (grad) std::fill(grad, grad + params_.size(), 0.0f);

  const size_t inWidth = mlp ? H : D;  // width of the output layer's input
  std::vector<float> hid(H), logits(K), dlogit(K), dhid(H);
  double lossSum = 0;
  size_t right = 0;
  const float inv = rows.empty() ? 0.0f : 1.0f / static_cast<float>(rows.size());
  for (size_t row : rows) {
    const float* x = data.row(row);
    const int y = data.label[row];
    if (mlp) {
      for (size_t h = 0; h < H; ++h) {
        float a = b1[h];
        const float* w = w1 + h * D;
        for (size_t d = 0; d < D; ++d) a += w[d] * x[d];
        hid[h] = a > 0 ? a : 0;
      }
    }
    const float* in = mlp ? hid.data() : x;
    float top = -INFINITY;
    size_t best = 0;
    for (size_t k = 0; k < K; ++k) {
      float a = b2[k];
      const float* w = w2 + k * inWidth;
      for (size_t j = 0; j < inWidth; ++j) a += w[j] * in[j];
      logits[k] = a;
      if (a > top) top = a, best = k;
    }
    double z = 0;
    for (size_t k = 0; k < K; ++k) z += std::exp(static_cast<double>(logits[k] - top));
    lossSum += std::log(z) - static_cast<double>(logits[y] - top);
    if (static_cast<int>(best) == y) ++right;
    if (!grad) continue;
    for (size_t k = 0; k < K; ++k) {
      float p = static_cast<float>(std::exp(static_cast<double>(logits[k] - top)) / z);
      dlogit[k] = (p - (static_cast<int>(k) == y ? 1.0f : 0.0f)) * inv;
    }
    if (mlp) std::fill(dhid.begin(), dhid.end(), 0.0f);
    for (size_t k = 0; k < K; ++k) {
      const float g = dlogit[k];
      gb2[k] += g;
      float* gw = gw2 + k * inWidth;
      const float* w = w2 + k * inWidth;
      for (size_t j = 0; j < inWidth; ++j) {
        gw[j] += g * in[j];
        if (mlp) dhid[j] += g * w[j];
      }
    }
    if (!mlp) continue;
    for (size_t h = 0; h < H; ++h) {
      if (hid[h] <= 0) continue;  // ReLU passes no gradient where it was off
      const float g = dhid[h];
      gb1[h] += g;
      float* gw = gw1 + h * D;
      for (size_t d = 0; d < D; ++d) gw[d] += g * x[d];
    }
  }
  if (correct) *correct = right;
  return rows.empty() ? 0.0 : lossSum / static_cast<double>(rows.size());
}

}  // namespace terse::train
