// OneBitAdam's kernels: grid-stride elementwise loops over adam_math.h's formulas, so the GPU
// computes exactly what the CPU path (and its tests) compute. Built with --fmad=false for the
// same reason as the codec kernels: no contraction the CPU path does not do.
#include "../src/kernels.h"

#include <cuda_runtime.h>

namespace terse::optim::cuda {

namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 8192;

unsigned gridFor(size_t n) {
  size_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks == 0) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

Status launched(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return errorSystem("OneBitAdam: launching the %s kernel failed: %s", what,
                       cudaGetErrorString(err));
  return Status::ok();
}

__global__ void warmupKernel(float* p, const float* g, float* m, float* v, size_t n,
                             AdamStepScalars s) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    float mi = adamMomentum(m[i], g[i], s.beta1);
    float vi = adamVariance(v[i], g[i], s.beta2);
    m[i] = mi;
    v[i] = vi;
    p[i] = adamParam(p[i], mi, vi, s);
  }
}

__global__ void preconditionedKernel(float* u, const float* m, const float* g, const float* v,
                                     size_t n, AdamStepScalars s) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    u[i] = adamPreconditioned(adamMomentum(m[i], g[i], s.beta1), v[i], s);
}

__global__ void updateKernel(float* p, float* m, const float* u, const float* v, size_t n,
                             AdamStepScalars s) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    m[i] = adamMomentumFrom(u[i], v[i], s);
    p[i] = adamParamFrom(p[i], u[i], v[i], s);
  }
}

__global__ void scaleKernel(float* x, const float* g, const int8_t* e, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    x[i] = adamScaleDown(g[i], e[i]);
}

__global__ void localMomentumKernel(float* x, const float* mLocal, const float* g, const int8_t* e,
                                    size_t n, float beta1) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    x[i] = adamLocalMomentum(mLocal[i], g[i], e[i], beta1);
}

__global__ void shardUpdateKernel(float* pNew, float* m, const float* xAvg, const float* p,
                                  const float* v, const int8_t* e, size_t n, AdamStepScalars s,
                                  bool fromAverage) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float vi = v[i];
    const float mi = fromAverage ? adamMomentumFromAverage(xAvg[i], e[i], vi)
                     : adamNoGradientYet(vi)
                         ? 0.0f
                         : adamMomentum(m[i], adamScaleUp(xAvg[i], e[i]), s.beta1);
    m[i] = mi;
    pNew[i] = adamParam(p[i], mi, vi, s);
  }
}

}  // namespace

Status scaleGradient(float* x, const float* g, const int8_t* e, size_t n, void* stream) {
  if (n == 0) return Status::ok();
  scaleKernel<<<gridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, g, e, n);
  return launched("gradient scale");
}

Status localMomentum(float* x, const float* mLocal, const float* g, const int8_t* e, size_t n,
                     float beta1, void* stream) {
  if (n == 0) return Status::ok();
  localMomentumKernel<<<gridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, mLocal, g,
                                                                                      e, n, beta1);
  return launched("local momentum");
}

Status shardUpdate(float* pNew, float* m, const float* xAvg, const float* p, const float* v,
                   const int8_t* e, size_t n, const AdamStepScalars& s, bool fromAverage,
                   void* stream) {
  if (n == 0) return Status::ok();
  shardUpdateKernel<<<gridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      pNew, m, xAvg, p, v, e, n, s, fromAverage);
  return launched("shard update");
}

Status adamWarmup(float* p, const float* g, float* m, float* v, size_t n, const AdamStepScalars& s,
                  void* stream) {
  if (n == 0) return Status::ok();
  warmupKernel<<<gridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, g, m, v, n, s);
  return launched("warm-up");
}

Status preconditioned(float* u, const float* m, const float* g, const float* v, size_t n,
                      const AdamStepScalars& s, void* stream) {
  if (n == 0) return Status::ok();
  preconditionedKernel<<<gridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(u, m, g, v,
                                                                                       n, s);
  return launched("preconditioned momentum");
}

Status update(float* p, float* m, const float* u, const float* v, size_t n,
              const AdamStepScalars& s, void* stream) {
  if (n == 0) return Status::ok();
  updateKernel<<<gridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, m, u, v, n, s);
  return launched("update");
}

}  // namespace terse::optim::cuda
