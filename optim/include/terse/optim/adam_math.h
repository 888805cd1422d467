// The per-element arithmetic of the Adam family, shared verbatim by the CPU loops and the CUDA
// kernels of optim/ (TERSE_HD), so the CPU unit tests vouch for the GPU's formulas too.
//
// The order of operations follows torch.optim.AdamW (PyTorch 1.13): decoupled weight decay
// first, p *= 1 - lr * wd; then p -= (lr / c1) * m / (sqrt(v) / sqrt(c2) + eps) with the bias
// corrections c1 = 1 - beta1^t and c2 = 1 - beta2^t. Keeping that order keeps a terse run and a
// torch AdamW run of the same model within float rounding of each other during warm-up.
#pragma once

#include "terse/common/hd.h"

#if !defined(__CUDACC__)
#include <cmath>
#endif

namespace terse::optim {

// The scalars of one step, computed once on the host.
struct AdamStepScalars {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float decayFactor = 1.0f;  // 1 - lr * weightDecay
  float stepSize = 0.0f;     // lr / (1 - beta1^t)
  float sqrtC2 = 1.0f;       // sqrt(1 - beta2^t), t the step the variance was last updated at
  float eps = 1e-8f;
};

TERSE_HD float adamSqrt(float x) {
#if defined(__CUDA_ARCH__)
  return sqrtf(x);
#else
  return std::sqrt(x);
#endif
}

// First moment: m <- beta1 m + (1 - beta1) g.
TERSE_HD float adamMomentum(float m, float g, float beta1) {
  return beta1 * m + (1.0f - beta1) * g;
}

// Second moment: v <- beta2 v + (1 - beta2) g^2.
TERSE_HD float adamVariance(float v, float g, float beta2) {
  return beta2 * v + (1.0f - beta2) * (g * g);
}

// The denominator of Adam's update, sqrt(v) / sqrt(c2) + eps.
TERSE_HD float adamDenom(float v, const AdamStepScalars& s) {
  return adamSqrt(v) / s.sqrtC2 + s.eps;
}

// The AdamW parameter update from the moments (v is the live variance during warm-up).
//
// A coordinate whose variance is exactly zero has never had a nonzero gradient (a dead ReLU
// unit's weights, an unused embedding row). In AdamW its m is zero too and the update is only
// the decay; a codec, though, could hand it a nonzero averaged momentum (onebit gives every
// element of a block +-scale) and m / eps would throw it 1e8 steps away. So such coordinates
// take no momentum step anywhere: identical to AdamW while m is zero, and the automatic form of
// DeepSpeed's user-supplied momentum mask for parameters that must not move.
//
// The test is v == 0 exactly, not "v is not positive": a NaN variance (a NaN gradient reached
// the coordinate) is not a zero one, and must leave m, v and p NaN as in AdamW rather than
// freeze the coordinate silently at p * decay (issue #35). v cannot be negative.
TERSE_HD bool adamNoGradientYet(float v) { return v == 0.0f; }

TERSE_HD float adamParam(float p, float m, float v, const AdamStepScalars& s) {
  float decayed = p * s.decayFactor;
  if (adamNoGradientYet(v)) return decayed;
  return decayed - s.stepSize * (m / adamDenom(v, s));
}

// Compressed phase. With the variance frozen (the same on every rank) the update is linear in
// m, so the ranks average the *preconditioned* momentum u = m / denom: avg(m_i / d) =
// avg(m_i) / d. The codec then works in the update's own units, where every coordinate is O(1)
// as in Adam: a coordinate with a tiny variance cannot receive a block-mate's magnitude divided
// by its tiny denominator (onebit's per-block mean would do exactly that to raw momenta).
// Zero-variance coordinates send 0 (see adamParam); a NaN variance sends NaN, which makes the
// coordinate's codec block NaN on every rank (the codecs' rule for non-finite input).
TERSE_HD float adamPreconditioned(float m, float v, const AdamStepScalars& s) {
  if (adamNoGradientYet(v)) return 0.0f;
  return m / adamDenom(v, s);
}

// After the allreduce: the averaged u gives back the momentum (m = u * denom) ...
TERSE_HD float adamMomentumFrom(float u, float v, const AdamStepScalars& s) {
  if (adamNoGradientYet(v)) return 0.0f;
  return u * adamDenom(v, s);
}

// ... and the AdamW update p (1 - lr wd) - lr / c1 * u.
TERSE_HD float adamParamFrom(float p, float u, float v, const AdamStepScalars& s) {
  float decayed = p * s.decayFactor;
  if (adamNoGradientYet(v)) return decayed;
  return decayed - s.stepSize * u;
}

// Sharded OneBitAdam (sharded_onebit_adam.h). After the freeze every rank scales its gradient by
// 2^-e per element, e the exponent of the frozen denominator d (2^e <= d < 2^(e+1)), so the
// codec works in Adam's units without every rank holding d: one int8 per parameter. Powers of
// two make the scaling and the owner's unscaling exact. Clamped to +-kAdamMaxScaleExp so that
// neither direction overflows a normal gradient (outside, the scale is only approximate, which
// costs nothing: the owner unscales by the same power). kAdamNoGradientExp marks coordinates
// that never had a gradient: they send 0 (their owner takes no momentum step, see adamParam).
constexpr int kAdamMaxScaleExp = 60;
constexpr int kAdamNoGradientExp = -128;

TERSE_HD int adamScaleExponent(float v, const AdamStepScalars& s) {
  if (adamNoGradientYet(v)) return kAdamNoGradientExp;
  float d = adamDenom(v, s);
  if (!(d >= 0.0f && d < 3.0e38f)) return 0;  // NaN: the owner's NaN variance makes p NaN anyway
  int e = 0;
#if defined(__CUDA_ARCH__)
  (void)frexpf(d, &e);
#else
  (void)std::frexp(d, &e);
#endif
  e -= 1;  // frexp: d = f 2^e with f in [0.5, 1)
  return e < -kAdamMaxScaleExp ? -kAdamMaxScaleExp : (e > kAdamMaxScaleExp ? kAdamMaxScaleExp : e);
}

// 2^e as a float (|e| <= kAdamMaxScaleExp, so always a normal number).
TERSE_HD float adamPow2(int e) {
#if defined(__CUDA_ARCH__)
  return ldexpf(1.0f, e);
#else
  return std::ldexp(1.0f, e);
#endif
}

// The sender's scaled gradient g * 2^-e (0 for the no-gradient sentinel), and the owner's
// unscaling of the averaged value.
TERSE_HD float adamScaleDown(float g, int e) {
  return g * (e == kAdamNoGradientExp ? 0.0f : adamPow2(-e));
}
TERSE_HD float adamScaleUp(float x, int e) {
  return x * (e == kAdamNoGradientExp ? 0.0f : adamPow2(e));
}

// ShardedOneBitAdam with local momentum (ShardedOneBitAdamOptions::localMomentum): every rank
// keeps the momentum of its own gradients over the whole tensor, in the scaled units above,
// mLocal <- beta1 mLocal + (1 - beta1) g 2^-e, and sends that. By linearity the ranks' average
// is the momentum of the averaged gradient, so the owner takes it as m (scaled up; 0 where v == 0,
// as adamParam asks) instead of integrating it again.
TERSE_HD float adamLocalMomentum(float mLocal, float g, int e, float beta1) {
  return adamMomentum(mLocal, adamScaleDown(g, e), beta1);
}
TERSE_HD float adamMomentumFromAverage(float mAvg, int e, float v) {
  return adamNoGradientYet(v) ? 0.0f : adamScaleUp(mAvg, e);
}

}  // namespace terse::optim
