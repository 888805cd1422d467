#!/usr/bin/env bash
# Sets up, builds and runs terse's main benchmark on this machine: 4 ranks allreduce 64 MiB of
# float32 with every codec, next to OpenMPI's MPI_Allreduce in the same run
# (scripts/bench-allreduce.sh; pass its options, e.g. --tcp or --size 16M).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec bash scripts/bench-allreduce.sh "$@"
