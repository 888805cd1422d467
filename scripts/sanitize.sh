#!/usr/bin/env bash
# Builds terse under a sanitizer (CPU only: nvcc and the sanitizers do not mix, and the GPU tests
# need a GPU anyway) and runs the ctest labels in TERSE_SANITIZE_LABELS. Any sanitizer report
# stops the test and fails the run. Only the targets those labels need are built.
#   scripts/sanitize.sh                          # ASan + UBSan into build-asan
#   TERSE_SANITIZE_LABELS="codec|transport" scripts/sanitize.sh
#   TERSE_SANITIZE_MODE=thread scripts/sanitize.sh   # ThreadSanitizer into build-tsan
# TERSE_SANITIZE_TARGETS overrides the target list (space-separated; "all" builds everything).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${TERSE_SANITIZE_MODE:-address,undefined}
if [[ $mode == thread ]]; then
  build_dir=${TERSE_TSAN_DIR:-build-tsan}
  # The layers with threads (the transports, the collectives, the API's worker thread) and
  # the soak run, with ranks as threads over both transports. Tests whose ranks are forked
  # processes (label `process`) are left out: a race needs threads of one process, which the
  # thread tests and the soak have, and under ThreadSanitizer's timing the process tests meet
  # rare UCX-internal assertions on peer failure (docs/reliability.md) instead of races.
  labels=${TERSE_SANITIZE_LABELS:-transport|collectives|api|soak}
else
  build_dir=${TERSE_ASAN_DIR:-build-asan}
  labels=${TERSE_SANITIZE_LABELS:-codec|common|api|process|collectives|rendezvous|transport|plugin|train|optim|soak|sim_layouts}
  # terse-sim's layout tests (the issue-44 layouts and a smaller matrix) need SimGrid; without
  # it the build has no terse-sim (the top-level CMakeLists.txt says so), so they are left out.
  if [[ $labels == *sim_layouts* ]] && ! pkg-config --exists 'simgrid >= 3.32' 2>/dev/null; then
    echo "sanitize.sh: SimGrid >= 3.32 not found: label sim_layouts left out" >&2
    labels=$(tr '|' '\n' <<<"$labels" | grep -vx sim_layouts | paste -sd '|')
  fi
fi
jobs=${TERSE_BUILD_JOBS:-2}

# The test executables (and the programs tests launch) behind each label.
declare -A label_targets=(
  [codec]="terse_codec_tests"
  [common]="common_test"
  [rendezvous]="rendezvous_test launcher_test terse-run terse-bench"
  [transport]="transport_test communicator_test"
  [process]="transport_process_test api_process_test fault_process_test misuse_c_test terse-run
    terse-bench shrink_process_test optim_shrink_process_test"
  [collectives]="collectives_test"
  [api]="c_api_test c_api_onebit_adam_test c_api_sharded_onebit_adam_test misuse_test settings_test stats_test split_test terse-run
    allreduce-example shrink_c_test store_ops_test"
  [plugin]="plugin_net_test plugin_dlopen_c plugin_collnet_test plugin_parsers_test
    plugin_ef_period_test plugin_abi_layout_test nccl-net-terse"
  [train]="train_unit_test terse-train terse-run"
  [optim]="optim_test"
  [soak]="terse-bench"
  [sim_layouts]="terse-sim"
)
if [[ -n ${TERSE_SANITIZE_TARGETS:-} ]]; then
  targets=$TERSE_SANITIZE_TARGETS
else
  targets=""
  IFS='|' read -ra wanted <<<"$labels"
  for l in "${wanted[@]}"; do
    [[ -n ${label_targets[$l]:-} ]] || { echo "sanitize.sh: no target list for label '$l'; set TERSE_SANITIZE_TARGETS" >&2; exit 2; }
    targets="$targets ${label_targets[$l]}"
  done
fi

# The default compiler (gcc on Debian): it links the sanitizer runtime into shared libraries,
# which libterse.so and the NCCL plugin need because they link with --no-undefined (clang does
# not). CC/CXX override it. The benchmarks are built for terse-run and the soak run.
start=$(date +%s)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTERSE_SANITIZE="$mode" -DTERSE_ENABLE_CUDA=OFF -DTERSE_BUILD_BENCH=ON >/dev/null
if [[ $targets == " all" || $targets == all ]]; then
  cmake --build "$build_dir" -j "$jobs"
else
  # shellcheck disable=SC2086  # the list is meant to split
  cmake --build "$build_dir" -j "$jobs" --target $(printf '%s\n' $targets | sort -u)
fi
built=$(date +%s)

# halt_on_error: the first report fails the test instead of scrolling past. detect_leaks stays
# on: a leak in a test binary is a leak in the library. Suppressions, each with its reason, are
# in scripts/{lsan,tsan}.supp. fast_unwind_on_malloc=0: Debian's UCX has no frame pointers, so
# the fast unwinder stops at ucs_calloc and a leak report (or a suppression) could not tell
# which UCX object leaked.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:print_stacktrace=1:detect_leaks=1:fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
[[ -f scripts/lsan.supp ]] &&
  export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
if [[ $mode == thread ]]; then
  # UCX's memory hooks (libucm) wrap madvise/mmap, which glibc calls while a thread exits and
  # ThreadSanitizer has already dropped that thread's state: every test crashed there. The
  # hooks only serve RDMA registration caches, which loopback TCP and shared memory never use.
  export UCX_MEM_MMAP_HOOK_MODE=${UCX_MEM_MMAP_HOOK_MODE:-none}
fi
ctest --test-dir "$build_dir" --output-on-failure --timeout 900 -j "${TERSE_TEST_JOBS:-2}" \
  -L "^($labels)\$"
end=$(date +%s)
echo "sanitize.sh ($mode): build $((built - start)) s, tests $((end - built)) s"
