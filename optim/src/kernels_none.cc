// Builds without nvcc: OneBitAdam's device path reports that it is not compiled in. The host
// path never calls these (it only takes the device path for device memory, which such a build
// never sees), so reaching one is a clear error rather than a crash.
#include "kernels.h"

namespace terse::optim::cuda {

namespace {
Status notBuilt() {
  return errorUnsupported("OneBitAdam on device memory: this build of terse has no CUDA");
}
}  // namespace

Status adamWarmup(float*, const float*, float*, float*, size_t, const AdamStepScalars&, void*) {
  return notBuilt();
}
Status preconditioned(float*, const float*, const float*, const float*, size_t,
                      const AdamStepScalars&, void*) {
  return notBuilt();
}
Status update(float*, float*, const float*, const float*, size_t, const AdamStepScalars&, void*) {
  return notBuilt();
}

Status scaleGradient(float*, const float*, const int8_t*, size_t, void*) { return notBuilt(); }
Status localMomentum(float*, const float*, const float*, const int8_t*, size_t, float, void*) {
  return notBuilt();
}
Status shardUpdate(float*, float*, const float*, const float*, const float*, const int8_t*, size_t,
                   const AdamStepScalars&, bool, void*) {
  return notBuilt();
}

}  // namespace terse::optim::cuda
