#!/usr/bin/env bash
# Builds terse under AddressSanitizer + UndefinedBehaviorSanitizer (CPU only: nvcc and ASan do
# not mix, and the GPU tests need a GPU anyway) into ${TERSE_ASAN_DIR:-build-asan} and runs the
# ctest labels in TERSE_SANITIZE_LABELS. Any sanitizer report stops the test and fails the run.
#   scripts/sanitize.sh                       # default labels: codec common api collectives
#   TERSE_SANITIZE_LABELS="codec|transport" scripts/sanitize.sh
# TERSE_SANITIZE_MODE=thread builds build-tsan with ThreadSanitizer instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${TERSE_SANITIZE_MODE:-address,undefined}
if [[ $mode == thread ]]; then
  build_dir=${TERSE_TSAN_DIR:-build-tsan}
else
  build_dir=${TERSE_ASAN_DIR:-build-asan}
fi
labels=${TERSE_SANITIZE_LABELS:-codec|common|api|collectives|rendezvous}
jobs=${TERSE_BUILD_JOBS:-2}
# The default compiler (gcc on Debian): it links libasan into shared libraries, which libterse.so
# and the NCCL plugin need because they link with --no-undefined (clang does not). CC/CXX
# override it.
start=$(date +%s)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTERSE_SANITIZE="$mode" -DTERSE_ENABLE_CUDA=OFF -DTERSE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build_dir" -j "$jobs"
built=$(date +%s)

# halt_on_error: the first report fails the test instead of scrolling past. detect_leaks stays
# on: a leak in a test binary is a leak in the library. A LeakSanitizer suppressions file, if
# third-party leaks ever need one, goes in scripts/lsan.supp.
supp="$PWD/scripts/lsan.supp"
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:print_stacktrace=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
[[ -f $supp ]] && export LSAN_OPTIONS="suppressions=$supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
ctest --test-dir "$build_dir" --output-on-failure --timeout 900 -j "${TERSE_TEST_JOBS:-2}" \
  -L "$labels"
end=$(date +%s)
echo "sanitize.sh ($mode): build $((built - start)) s, tests $((end - built)) s"
