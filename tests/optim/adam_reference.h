// What onebit_adam_test.cc and sharded_onebit_adam_test.cc check both optimizers against: the
// same non-IID gradients and starting parameters, and an independent AdamW written here in double
// precision with plain loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace terse::adam_reference {

using Vec = std::vector<float>;

// Deterministic per-(rank, step) gradients: a shared signal plus rank-specific noise, so the
// ranks disagree (non-IID) and averaging matters.
inline Vec noiseGradient(int rank, int step, size_t n) {
  std::mt19937 gen(static_cast<uint32_t>(1000 * step + 7 * rank + 1));
  std::normal_distribution<float> noise(0.0f, 1.0f);
  Vec g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = std::sin(0.01f * static_cast<float>(i) + 0.1f * static_cast<float>(step)) +
           (0.5f + 0.5f * static_cast<float>(rank)) * noise(gen);
  return g;
}

inline Vec initialParams(size_t n) {
  Vec p(n);
  for (size_t i = 0; i < n; ++i) p[i] = 0.5f * std::cos(0.37f * static_cast<float>(i));
  return p;
}

// Reference AdamW (torch.optim.AdamW's formulas) in double, on the ranks' averaged
// noiseGradient, with the variance frozen after `freezeAfter` steps (0: never). Options is
// either optimizer's options (beta1, beta2, eps, weightDecay).
template <typename Options>
Vec referenceAdamW(int world, size_t n, int steps, const Options& o, double lr, int freezeAfter) {
  std::vector<double> p(n), m(n, 0.0), v(n, 0.0);
  Vec p0 = initialParams(n);
  for (size_t i = 0; i < n; ++i) p[i] = p0[i];
  double c2Frozen = 0.0;
  for (int t = 1; t <= steps; ++t) {
    std::vector<double> g(n, 0.0);
    for (int r = 0; r < world; ++r) {
      Vec gr = noiseGradient(r, t, n);
      for (size_t i = 0; i < n; ++i) g[i] += gr[i] / world;
    }
    bool frozen = freezeAfter > 0 && t > freezeAfter;
    double c1 = 1.0 - std::pow(o.beta1, t);
    if (!frozen) c2Frozen = 1.0 - std::pow(o.beta2, t);
    for (size_t i = 0; i < n; ++i) {
      p[i] *= 1.0 - lr * o.weightDecay;
      m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * g[i];
      if (!frozen) v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * g[i] * g[i];
      p[i] -= lr / c1 * m[i] / (std::sqrt(v[i]) / std::sqrt(c2Frozen) + o.eps);
    }
  }
  return Vec(p.begin(), p.end());
}

inline double maxAbsDiff(const Vec& a, const Vec& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

// An empty vector's data() may be null, which memcmp must not be given even for 0 bytes (UBSan).
inline bool bitEqual(const Vec& a, const Vec& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

}  // namespace terse::adam_reference
