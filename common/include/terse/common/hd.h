// TERSE_HD marks arithmetic that the CPU path and the CUDA kernels share. Compiled by nvcc it
// becomes __host__ __device__; by a host compiler it is a plain inline function. Keeping one
// definition of every per-element and per-block formula is what lets the CPU tests vouch for
// the GPU results.
#pragma once

#if defined(__CUDACC__)
#define TERSE_HD __host__ __device__ __forceinline__
#else
#define TERSE_HD inline
#endif
