#!/usr/bin/env bash
# Sets up a fresh machine (Debian packages) and builds terse into ${TERSE_BUILD_DIR:-build}.
# Extra arguments go to CMake's configure step, e.g. -DTERSE_SANITIZE=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build_dir=${TERSE_BUILD_DIR:-build}
jobs=${TERSE_BUILD_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=${TERSE_BUILD_TYPE:-RelWithDebInfo} "$@"
cmake --build "$build_dir" -j "$jobs"
