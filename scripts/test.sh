#!/usr/bin/env bash
# Sets up, builds and runs every test through ctest. This is what .ci/run calls.
# TERSE_TEST_ARGS adds ctest arguments (e.g. "-L codec" or "-R Transport").
# The torch tests run against a pinned current PyTorch in a virtual environment that
# scripts/torch-env.sh makes once per machine and reuses (TERSE_TORCH=off: Debian's torch 1.13).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TERSE_BUILD_DIR:-build}
bash scripts/install-deps.sh
torch_python=$(bash scripts/torch-env.sh | tail -n 1)
bash scripts/build.sh ${torch_python:+-DTERSE_TORCH_PYTHON=$torch_python} "$@"
if [ -n "$torch_python" ]; then
  # terse into that environment with the one pip command a user runs, packaging the library
  # just built (docs/pytorch.md, "Installing").
  bash scripts/torch-env.sh --install-terse "$build_dir" >/dev/null
fi
# Tests spawn several ranks each; two at a time keep a 2-core machine busy without starving them.
ctest --test-dir "$build_dir" --output-on-failure --timeout 600 -j "${TERSE_TEST_JOBS:-2}" ${TERSE_TEST_ARGS:-}
