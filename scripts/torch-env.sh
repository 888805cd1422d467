#!/usr/bin/env bash
# Sets up the current-PyTorch virtual environment the torch tests run against (docs/pytorch.md,
# "Current PyTorch in CI") and prints its interpreter's path on the last line of stdout.
#
# The environment lives outside the checkout, so a fresh clone on the same machine (CI's) reuses
# it: ${TERSE_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/terse/torch-VERSION-pyXY}. Built once (about
# 2-4 minutes and 5.4 GB: PyPI's torch wheel is the CUDA 13 build, which also runs on CPU) and
# marked complete by a stamp file written last, so an interrupted install is redone, not trusted.
# Pinned versions: a new torch is a deliberate change here, not whatever PyPI serves that day.
#
# With --install-terse BUILD_DIR it then installs terse from this checkout into the venv with the
# one pip command a user runs (python/pyproject.toml, scikit-build-core), which compiles
# libterse.so with CMake into build-pip/. It is handed BUILD_DIR's compilers, so ccache serves
# the objects BUILD_DIR's build just made (about 10 s instead of minutes; docs/pytorch.md).
#
# TERSE_TORCH=off skips everything (prints nothing; the tests then run against Debian's torch).
set -euo pipefail
cd "$(dirname "$0")/.."

kTorchVersion=2.15.0
kNumpyVersion=2.4.6   # the newest for Debian 12's Python 3.11
kSkbuildVersion=1.1.2

if [ "${TERSE_TORCH:-on}" = off ]; then
  echo "torch-env: TERSE_TORCH=off; not setting up torch $kTorchVersion" >&2
  exit 0
fi

base_python=/usr/bin/python3
py=$("$base_python" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
cache=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}
venv=${TERSE_TORCH_VENV:-$cache/terse/torch-$kTorchVersion-py$py}
stamp="$venv/.terse-complete"
want="torch==$kTorchVersion numpy==$kNumpyVersion scikit-build-core==$kSkbuildVersion"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  echo "torch-env: reusing $venv ($want)" >&2
else
  echo "torch-env: creating $venv ($want; about 2 minutes and 5.4 GB the first time)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$base_python" -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input $want >&2
  "$venv/bin/python" -c 'import torch, numpy; torch.ones(2) @ torch.ones(2)' >&2
  echo "$want" > "$stamp"
fi

if [ "${1:-}" = --install-terse ]; then
  build_dir=${2:?torch-env: --install-terse needs the build directory}
  lib="$build_dir/lib/libterse.so"
  [ -f "$lib" ] || { echo "torch-env: no $lib; build first" >&2; exit 1; }
  # The one pip command a user runs (docs/pytorch.md), compiling the library. No build
  # isolation: the backend comes from this venv. The compilers are BUILD_DIR's (pip's own
  # environment would pick e.g. x86_64-linux-gnu-g++, which ccache hashes as another compiler).
  compiler() {
    local path
    path=$(sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt" | head -n 1)
    if [ -x "$path" ]; then echo "$path"; fi   # not ...-NOTFOUND (no nvcc)
  }
  cc=$(compiler CMAKE_C_COMPILER) cxx=$(compiler CMAKE_CXX_COMPILER)
  cuda=$(compiler CMAKE_CUDA_COMPILER)
  env -u TERSE_PREBUILT_LIBRARY ${cc:+CC="$cc"} ${cxx:+CXX="$cxx"} ${cuda:+CUDACXX="$cuda"} \
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --no-build-isolation --force-reinstall --no-deps ./python >&2
fi
echo "$venv/bin/python"
