#!/usr/bin/env bash
# Sets up, builds and runs terse's main benchmark on this machine.
# For now: the codec benchmark (compress / decompress-accumulate GB/s next to memcpy).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build_dir=${TERSE_BUILD_DIR:-build}
"$build_dir/bin/terse-bench" codecs "$@"
