#!/usr/bin/env bash
# Sets up, builds and runs every test through ctest. This is what .ci/run calls.
# TERSE_TEST_ARGS adds ctest arguments (e.g. "-L codec" or "-R Transport").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
build_dir=${TERSE_BUILD_DIR:-build}
# Tests spawn several ranks each; two at a time keep a 2-core machine busy without starving them.
ctest --test-dir "$build_dir" --output-on-failure --timeout 600 -j "${TERSE_TEST_JOBS:-2}" ${TERSE_TEST_ARGS:-}
