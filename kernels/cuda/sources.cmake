# CUDA kernels: included by kernels/CMakeLists.txt when the build has nvcc. They join the
# terse_kernels target next to the CPU sources, under the same names in namespace cuda.
# CMAKE_CUDA_ARCHITECTURES comes from the top level (TERSE_CUDA_ARCHITECTURES).
# Every .cu here (like cpu/*.cc): a codec's new kernel file needs no edit of this list.
file(GLOB terse_kernels_cuda_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cu)
target_sources(terse_kernels PRIVATE ${terse_kernels_cuda_sources})
target_compile_definitions(terse_kernels PUBLIC TERSE_HAVE_CUDA=1)
target_link_libraries(terse_kernels PUBLIC CUDA::cudart)
# --fmad=false: the CPU path rounds a*b+c twice (no contraction in ISO C++ mode), so the GPU must
# too for results to match bitwise. --expt-relaxed-constexpr lets device code call the constexpr
# helpers of the shared headers.
target_compile_options(terse_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false --expt-relaxed-constexpr>)
# Static library consumed by host-only executables: resolve device code inside the library.
set_target_properties(terse_kernels PROPERTIES CUDA_SEPARABLE_COMPILATION OFF
                                               CUDA_RESOLVE_DEVICE_SYMBOLS ON)
