#!/usr/bin/env bash
# Installs every Debian package terse needs to build, test and benchmark.
# Idempotent: packages already present are skipped and `apt-get update` runs at most once per
# invocation (and only when something is missing). Needs root, or sudo without a password.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git   # toolchain
  ccache                                              # rebuilds in other checkouts hit the cache
  libgtest-dev libgmock-dev libbenchmark-dev          # tests and micro-benchmarks
  libucx-dev ucx-utils                                # transport (ucx_perftest is the p2p baseline)
  libzstd-dev                                         # the net plugin's optional lossless mode
  libibverbs-dev rdma-core                            # RDMA through UCX on real clusters
  openmpi-bin libopenmpi-dev                          # the MPI_Allreduce baseline of the benchmarks
  iproute2                                            # network namespaces for shaped-link tests
  clang libclang-rt-14-dev                            # libFuzzer and sanitizers
  libsimgrid-dev                                      # the simulated cluster (sim/, terse-sim)
  python3 python3-matplotlib                          # benchmark plots
  python3-torch python3-pip                           # the PyTorch DDP hook (python/), CPU-only torch 1.13
  python3-venv                                        # scripts/torch-env.sh: current torch from PyPI
  libopenblas0-pthread                                # a fast BLAS for torch (~12x the reference one)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: missing ${missing[*]}; run as root" >&2; exit 1; }
  SUDO="sudo -n"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
