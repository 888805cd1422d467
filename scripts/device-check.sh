#!/usr/bin/env bash
# The GPU check (docs/cuda.md, "Checking on a lent GPU"), one command on a lent GPU machine:
#
#   bash scripts/device-check.sh OUT            # OUT: where the summary goes ($OUT there)
#   bash scripts/device-check.sh OUT --dry-run  # here: every stage that needs no GPU
#
# Uses the folder scripts/device-prepare.sh filled (${TERSE_DEVICE_KIT:-.device-kit}: Debian
# packages, unpacked into a private prefix inside it, never into /), configures and builds only
# what the checks need for the GPU it finds (its compute capability, every core), then runs each
# stage timed, under its own limit, a failure reported without stopping the rest, most valuable
# first (the limits; what an H200 is expected to take, docs/cuda.md, "Checking on a lent GPU"):
#   gpu-bench    (60 s; ~2)   terse-bench gpukernels: GB/s of every codec kernel against a
#                device-to-device copy in the same run; goal: fp16, bf16, int8, fp8, mxfp8, mxfp4
#                >= 0.8 of it
#   nccl-net / nccl-collnet (60 s each; ~8, ~18)  tests/gpu/nccl_plugin_job.py: torch's NCCL
#                backend, 2 processes as 2 hosts, bytes through libnccl-net-terse.so; then CollNet
#                with int8
#   nccl-perf    (100 s; ~80) tests/gpu/nccl_perf_job.py allreduce: busbw from 4 MiB to 1 GiB
#                over loopback with NCCL's Socket, terse's net plugin and its CollNet with none,
#                fp16, int8, mxfp8
#   netem        (100 s; ~95, ~1 where namespaces are refused) the same over emulated links
#                (namespaces + tc, scripts/lib/netns.sh) at 10 and 25 Gbit/s, and DDP at 10
#   ddp          (80 s; ~75)  nccl_perf_job.py ddp: a ~100M-parameter transformer, steps/s and
#                loss with Socket and with CollNet int8, up to 200 steps each as time allows
#   gpu-tests    (90 s; ~33)  ctest -L gpu (kernels, device codecs and collectives, CollNet GPU
#                buffers) and OneBitAdam.DevicePathMatchesHost
#   coll-device  (75 s; ~55)  terse-bench allreduce/reducescatter/allgather, every codec, CUDA
#                and host buffers, 2 and 4 ranks on the GPU; the overlap run
#   torch-cuda   (60 s; ~14)  tests/torch/cuda_tensors_test.py gpu: the DDP hook with every
#                codec and OneBitAdam on CUDA tensors, 2 ranks on the GPU
#   memcheck     (what is left, at most 150 s) compute-sanitizer over the kernel tests
# and writes OUT/summary.json and OUT/summary.md (plus OUT/check.log, every stage's output, and
# busbw.png where a Python has matplotlib), all within TERSE_DEVICE_BUDGET_S (480 s).
# Exit 0 when no stage that ran failed.
#
# --dry-run (no GPU needed; ctest's Scripts.DeviceCheckDryRun): configures a fresh build from the
# kit and checks that UCX, zstd, GoogleTest and Google Benchmark came from it, links and runs a
# probe against the kit's libraries, and runs every stage against an existing build
# (--build-dir, default TERSE_BUILD_DIR or build) where it is built, each of which must report
# its skip cleanly; the new stages also run their CPU-side logic (the NCCL jobs' plans and their
# timer and DDP step as gloo smoke tests on the CPU, terse-bench on host buffers), so the summary
# parses real output and draws its plot; it builds nothing else.
set -uo pipefail
set -a   # every variable below is exported: stages run their functions in a child bash (timeout): stages run their functions in a child bash (timeout)
cd "$(dirname "$0")/.."
root=$PWD

out=""
dry=0
prepare=0
build_dir=""
for a in "$@"; do
  case "$a" in
    --dry-run) dry=1 ;;
    --prepare) prepare=1 ;;
    --build-dir=*) build_dir=${a#--build-dir=} ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "device-check: unknown option $a" >&2; exit 2 ;;
    *) out=$a ;;
  esac
done
[ -n "$out" ] || { echo "usage: scripts/device-check.sh OUT [--dry-run] [--build-dir=DIR]" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
kit=${TERSE_DEVICE_KIT:-.device-kit}
case "$kit" in /*) ;; *) kit=$root/$kit ;; esac
budget=${TERSE_DEVICE_BUDGET_S:-480}
start=$(date +%s)
logs=$(mktemp -d /tmp/terse-device-check.XXXXXX)
results=$logs/results.tsv
: >"$results"
jobs=$(nproc)

remaining() { echo $((budget - ($(date +%s) - start))); }

# record NAME STATUS SECONDS NOTE: one row of the summary.
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4//$'\t'/ }" >>"$results"; echo "== $1: $2 ($3 s) $4"; }

# stage NAME LIMIT CMD...: runs CMD with its output in $logs/NAME.log, at most LIMIT seconds and
# never past the budget. Exit 77 is a skip (the reason: the log's last line starting "SKIP").
stage() {
  local name=$1 limit=$2
  shift 2
  local left
  left=$(remaining)
  if [ "$left" -lt 15 ]; then
    record "$name" skip 0 "no time left in the ${budget} s budget"
    return
  fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0 rc
  t0=$(date +%s)
  echo "== $name: $* (limit ${limit} s)"
  if declare -F "$1" >/dev/null; then
    export -f "$1"
    timeout -k 10 "$limit" bash -c '"$@"' _ "$@" >"$logs/$name.log" 2>&1
  else
    timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
  fi
  rc=$?
  local secs=$(($(date +%s) - t0))
  if [ $rc -eq 0 ]; then
    record "$name" ok "$secs" "$(grep -E '^(ok|NOTE)' "$logs/$name.log" | tail -1 | cut -c1-200)"
  elif [ $rc -eq 77 ]; then
    record "$name" skip "$secs" "$(grep -E 'SKIP' "$logs/$name.log" | tail -1 | cut -c1-200)"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    record "$name" fail "$secs" "timed out after ${limit} s"
  else
    # A stage's own verdict ("FAIL: ...") first; else the first line that looks like an error.
    local why
    why=$(grep -E '^FAIL' "$logs/$name.log" | tail -1)
    [ -n "$why" ] || why=$(grep -E 'FAIL|Error|error|Failed' "$logs/$name.log" | head -1)
    record "$name" fail "$secs" "exit $rc: $(echo "$why" | cut -c1-200)"
  fi
}

# ---- the machine ----------------------------------------------------------------------------
py=${TERSE_DEVICE_PYTHON:-}
if [ -z "$py" ]; then
  if [ -x /opt/torch/.venv/bin/python3 ]; then py=/opt/torch/.venv/bin/python3; else py=$(command -v python3); fi
fi
gpu=0
cc=""
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
fi
nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo '+changes')"
  echo "gpu=$( [ $gpu = 1 ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 || echo none)"
  echo "compute_capability=${cc:-none}"
  echo "nvcc=$( [ -n "$nvcc_bin" ] && "$nvcc_bin" --version | grep -o 'release [0-9.]*' || echo none)"
  echo "cxx=$( (c++ --version 2>/dev/null || echo none) | head -1)"
  echo "cmake=$( (cmake --version 2>/dev/null || echo none) | head -1)"
  echo "ninja=$(ninja --version 2>/dev/null || echo none)"
  echo "os=$( (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") || uname -s)"
  echo "glibc=$(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"
  echo "cores=$jobs"
  echo "python=$py $("$py" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)"
  echo "torch=$("$py" -c 'import torch, torch.distributed as d; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "nccl", (lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else v)(torch.cuda.nccl.version()) if torch.cuda.is_available() and d.is_nccl_available() else "-")' 2>/dev/null || echo none)"
  echo "compute_sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || echo none)"
  echo "kit=$( [ -f "$kit/MANIFEST" ] && sed -n 's/^made: //p' "$kit/MANIFEST" || echo none)"
} >"$logs/machine.txt"
cat "$logs/machine.txt"

# ---- the kit: Debian packages unpacked into a private prefix -------------------------------
# --prepare (ctest's dry run, whose kit lives in the build tree): fill the kit first if empty.
if [ $prepare = 1 ] && [ ! -d "$kit/debs" ]; then
  stage prepare 120 env TERSE_DEVICE_KIT="$kit" bash "$root/scripts/device-prepare.sh"
fi
# Outside the kit, so the carried folder stays the packages alone.
if [ $dry = 1 ]; then prefix=$logs/prefix; else prefix=${TERSE_DEVICE_PREFIX:-/tmp/terse-device-prefix}; fi
unpack_kit() {
  [ -d "$kit/debs" ] || { echo "SKIP: no $kit/debs (run scripts/device-prepare.sh first)"; return 77; }
  [ "$(uname -m)" = x86_64 ] || { echo "FAIL: the kit holds amd64 packages and this is $(uname -m)"; return 1; }
  rm -rf "$prefix"
  mkdir -p "$prefix"
  local f
  for f in "$kit"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$f" "$prefix" || return 1
    else  # no dpkg: a .deb is an ar archive holding data.tar.*
      (cd "$logs" && ar x "$f" && tar -xf data.tar.* -C "$prefix" && rm -f data.tar.* control.tar.* debian-binary) || return 1
    fi
  done
  # pkg-config files name /usr: point them at the prefix (libzstd.pc's libdir also lacks the
  # multiarch directory its library is in).
  local pc
  for pc in "$prefix"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
    sed -i -e "s|^prefix *= */usr\$|prefix=$prefix/usr|" \
        -e 's|^libdir=${exec_prefix}/lib$|libdir=${exec_prefix}/lib/x86_64-linux-gnu|' "$pc"
  done
  echo "ok: $(ls "$kit"/debs/*.deb | wc -l) packages unpacked into $prefix ($(du -sh "$prefix" | cut -f1))"
}
kit_env() {
  local lib=$prefix/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_PATH=$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export CMAKE_PREFIX_PATH=$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ! command -v pkg-config >/dev/null && ! command -v pkgconf >/dev/null; then
    export PKG_CONFIG=$prefix/usr/bin/pkgconf
  fi
}
stage kit 60 unpack_kit
kit_ok=0
if grep -q $'^kit\tok' "$results"; then kit_ok=1; kit_env; fi

# A probe linked against the kit's UCX and zstd and run with them: proves the libraries load here.
probe_kit() {
  local pc=${PKG_CONFIG:-$(command -v pkg-config || command -v pkgconf)}
  cat >"$logs/probe.c" <<'EOF'
#include <stdio.h>
#include <ucp/api/ucp.h>
#include <zstd.h>
int main(void) {
  unsigned major, minor, release;
  ucp_get_version(&major, &minor, &release);
  printf("ok: UCX %u.%u.%u and zstd %u load from the kit\n", major, minor, release,
         ZSTD_versionNumber());
  return 0;
}
EOF
  ${CC:-cc} -o "$logs/probe" "$logs/probe.c" $($pc --cflags --libs ucx libzstd) || return 1
  ldd "$logs/probe" | grep -E 'libucp|libzstd'
  ldd "$logs/probe" | grep -q "$prefix.*libucp" || { echo "FAIL: libucp did not resolve into the kit"; return 1; }
  "$logs/probe"
}
if [ $kit_ok = 1 ]; then stage kit-probe 60 probe_kit; else record kit-probe skip 0 "no kit"; fi

# ---- configure and build ------------------------------------------------------------------
arch=${cc:-${TERSE_CUDA_ARCHITECTURES:-90}}
if [ $dry = 1 ]; then
  cfg_dir=$logs/build-dry   # thrown away: the dry run only proves the kit configures
else
  cfg_dir=${TERSE_DEVICE_BUILD:-$root/build-device}
fi
configure() {
  local extra=()
  [ -n "$nvcc_bin" ] && extra+=(-DCMAKE_CUDA_COMPILER="$nvcc_bin")
  cmake -S "$root" -B "$cfg_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTERSE_CUDA_ARCHITECTURES="$arch" -DTERSE_BUILD_SIM=OFF -DTERSE_TORCH_PYTHON="$py" \
    "${extra[@]}" || return 1
  # Where each dependency came from: the kit's, unless the machine had its own.
  local cache=$cfg_dir/CMakeCache.txt
  grep -E '^(GTest_DIR|benchmark_DIR|pkgcfg_lib_UCX_ucp|pkgcfg_lib_ZSTD_zstd|TERSE_HAVE_CUDA|CMAKE_CUDA_ARCHITECTURES)[:=]' "$cache"
  if [ $dry = 1 ] && [ $kit_ok = 1 ]; then
    local v bad=0
    for v in GTest_DIR benchmark_DIR pkgcfg_lib_UCX_ucp pkgcfg_lib_ZSTD_zstd; do
      grep -E "^$v[:=]" "$cache" | grep -q "$prefix" || { echo "FAIL: $v did not come from the kit"; bad=1; }
    done
    [ $bad = 0 ] || return 1
    echo "ok: configured from the kit (GoogleTest, Google Benchmark, UCX and zstd all from $prefix)"
  else
    echo "ok: configured for compute capability $arch in $cfg_dir"
  fi
}
targets=(gpu_kernels_test gpu_device_codecs_test gpu_device_collectives_test plugin_collnet_gpu_test
         optim_test terse-bench terse-run terse_c nccl-net-terse)
if [ $kit_ok = 1 ] || [ $dry = 0 ]; then
  stage configure 150 configure
else
  record configure skip 0 "no kit to configure from"
fi
if [ $dry = 1 ]; then
  record build skip 0 "dry run: builds nothing; every stage uses the existing build"
  bdir=${build_dir:-${TERSE_BUILD_DIR:-build}}
  case "$bdir" in /*) ;; *) bdir=$root/$bdir ;; esac
else
  bdir=$cfg_dir
  if grep -q $'^configure\tok' "$results"; then
    stage build "${TERSE_DEVICE_BUILD_LIMIT_S:-240}" cmake --build "$bdir" -j "$jobs" --target "${targets[@]}"
  else
    record build skip 0 "configure failed"
  fi
fi
built() { [ -x "$bdir/bin/$1" ] || [ -e "$bdir/lib/$1" ]; }
export TERSE_LIBRARY=$bdir/lib/libterse.so
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

# ---- GPU codec bandwidth against a device copy ---------------------------------------------
if built terse-bench && ! "$bdir/bin/terse-bench" --help 2>&1 | grep -q gpukernels; then
  record gpu-bench skip 0 "terse-bench in $bdir has no gpukernels (a build without CUDA)"
elif built terse-bench && [ $gpu = 1 ]; then
  stage gpu-bench 60 "$bdir/bin/terse-bench" gpukernels --n=67108864 --iters=20
elif built terse-bench; then
  stage gpu-bench 30 bash -c "'$bdir/bin/terse-bench' gpukernels --n=1024 --iters=1 && echo 'SKIP: no GPU: terse-bench gpukernels found none and measured nothing' && exit 77"
else
  record gpu-bench skip 0 "terse-bench not built in $bdir"
fi

# ---- a real NCCL job through the plugin --------------------------------------------------
if built libnccl-net-terse.so; then
  stage nccl-net 60 "$py" tests/gpu/nccl_plugin_job.py net --plugin "$bdir/lib/libnccl-net-terse.so" \
    --work "$logs/nccl" --timeout 50
  stage nccl-collnet 60 "$py" tests/gpu/nccl_plugin_job.py collnet --codec int8 \
    --plugin "$bdir/lib/libnccl-net-terse.so" --work "$logs/nccl" --timeout 50
else
  record nccl-net skip 0 "libnccl-net-terse.so not built in $bdir"
  record nccl-collnet skip 0 "libnccl-net-terse.so not built in $bdir"
fi

# ---- issue 45: NCCL jobs timed end to end (tests/gpu/nccl_perf_job.py) ---------------------
# Without a GPU (the dry run) each stage prints its jobs' plans and runs the job script's gloo
# smoke test on the CPU (link "cpu-smoke"), so the summary parses and plots real output, then
# reports its skip.
perf_transports="socket net collnet-none collnet-fp16 collnet-int8 collnet-mxfp8"
perf_job() {
  "$py" "$root/tests/gpu/nccl_perf_job.py" "$@" --plugin "$bdir/lib/libnccl-net-terse.so"
}
export -f perf_job   # the stages run their functions in a child bash
# Each job stops starting sizes after --seconds (start-up and NCCL's set-up come on top, ~5 s).
nccl_perf() {
  local t rc=0 ok=0
  if [ $gpu = 0 ]; then
    for t in $perf_transports; do perf_job allreduce --transport "$t" --plan >/dev/null || return 1; done
    perf_job allreduce --device cpu --transport socket --link cpu-smoke --min 4K --max 64K \
      --factor 4 --time-per-size 0.02 --seconds 20 --work "$logs/nccl-perf" || return 1
    echo "SKIP: no GPU: the plans of $(echo $perf_transports | wc -w) jobs printed, the timer's gloo smoke test ran on the CPU"
    return 77
  fi
  for t in $perf_transports; do
    # Within the stage's 100 s: a job takes its 8 s plus ~6 s of start-up and set-up.
    if [ $SECONDS -gt 85 ]; then echo "NOTE: no time left for $t"; continue; fi
    if perf_job allreduce --transport "$t" --work "$logs/nccl-perf" --seconds 8 \
        --time-per-size 0.25; then ok=$((ok + 1)); else rc=1; fi
  done
  [ $rc = 0 ] && echo "ok: $ok of $(echo $perf_transports | wc -w) transports timed, 4 MiB to 1 GiB over loopback"
  return $rc
}
if built libnccl-net-terse.so; then
  stage nccl-perf 100 nccl_perf
else
  record nccl-perf skip 0 "libnccl-net-terse.so not built in $bdir"
fi

# Emulated links: two namespaces joined by a bridge, shaped by tc (scripts/lib/netns.sh, as
# scripts/bench-network.sh). Where the machine refuses (no root, no netns in the container, no
# sch_tbf, or CUDA unusable inside a namespace) the stage skips and records why.
netem_prefix=tdc
netem() {
  # shellcheck source=lib/netns.sh
  . "$root/scripts/lib/netns.sh"
  local net=10.47.0 rate t rc=0 sizes=(--min 4M --max 256M --factor 4)
  if ! netns_usable; then echo "SKIP: emulated links unavailable: $NETNS_ERROR"; return 77; fi
  if [ $gpu = 0 ]; then
    perf_job allreduce --transport collnet-int8 --netns $netem_prefix --addr-net $net "${sizes[@]}" --plan || return 1
    echo "SKIP: no GPU (namespaces usable here; the plan printed, none created)"
    return 77
  fi
  trap 'netns_delete $netem_prefix' EXIT
  trap 'netns_delete $netem_prefix; exit 1' TERM INT
  netns_delete $netem_prefix
  if ! netns_setup $netem_prefix $net 2 || ! netns_wait_reachable $netem_prefix $net 2; then
    echo "SKIP: emulated links unavailable: $NETNS_ERROR"
    return 77
  fi
  local probe
  if ! probe=$(ip netns exec $netem_prefix-h1 "$py" -c 'import torch; print(torch.cuda.device_count())' 2>&1) ||
    [ "$(echo "$probe" | tail -1)" = 0 ]; then
    echo "SKIP: CUDA is not usable inside a network namespace here: $(echo "$probe" | tail -1)"
    return 77
  fi
  for rate in 10 25; do
    netns_shape $netem_prefix 2 $rate || { echo "SKIP: $NETNS_ERROR"; return 77; }
    # The targets' pair first (Socket, CollNet int8), then the rest as time allows.
    local list="socket collnet-int8"
    [ $rate = 10 ] && list="socket collnet-int8 net"
    for t in $list; do
      if [ $SECONDS -gt 88 ]; then echo "NOTE: no time left for $t at $rate Gbit/s"; continue; fi
      perf_job allreduce --transport "$t" --netns $netem_prefix --addr-net $net --link "${rate}gbit" \
        --tag "-${rate}gbit" "${sizes[@]}" --seconds 5 --time-per-size 0.2 --work "$logs/netem" || rc=1
    done
    if [ $rate = 10 ]; then
      for t in socket collnet-int8; do
        if [ $SECONDS -gt 80 ]; then echo "NOTE: no time left for DDP $t"; continue; fi
        perf_job ddp --transport "$t" --netns $netem_prefix --addr-net $net --link 10gbit \
          --tag -10gbit --seconds 12 --work "$logs/netem" || rc=1
      done
    fi
  done
  [ $rc = 0 ] && echo "ok: 10 and 25 Gbit/s emulated links (netns + tc tbf): allreduce and DDP timed"
  return $rc
}
if built libnccl-net-terse.so; then
  stage netem 100 netem
  # A stage killed at its limit cannot clean up after itself: no namespace outlives the check.
  (. "$root/scripts/lib/netns.sh" && [ "$(id -u)" = 0 ] && netns_delete $netem_prefix) 2>/dev/null || true
else
  record netem skip 0 "libnccl-net-terse.so not built in $bdir"
fi

# DDP on the ~100M-parameter transformer over loopback: Socket, then CollNet int8, up to 200
# steps each in 30 s (what does not fit is said in the summary: the steps both ran).
ddp() {
  local t rc=0
  if [ $gpu = 0 ]; then
    # One run (the comparison of two is unit-tested on recorded samples): the dry run stays short.
    perf_job ddp --device cpu --transport socket --link cpu-smoke --layers 1 --width 32 --seq 16 \
      --batch 2 --steps 4 --warmup 1 --seconds 30 --work "$logs/ddp" || return 1
    echo "SKIP: no GPU: the DDP step's gloo smoke test ran on the CPU (tiny model)"
    return 77
  fi
  for t in socket collnet-int8; do
    perf_job ddp --transport "$t" --steps 200 --seconds 30 --work "$logs/ddp" || rc=1
  done  # 2 x (30 s + ~6 s of start-up and teardown) in the stage's 80
  [ $rc = 0 ] && echo "ok: DDP steps/s and losses with Socket and CollNet int8 over loopback"
  return $rc
}
if built libnccl-net-terse.so; then
  stage ddp 80 ddp
else
  record ddp skip 0 "libnccl-net-terse.so not built in $bdir"
fi

# ---- the GPU tests ----------------------------------------------------------------------
gpu_tests() {
  local rc=0 ran b
  local bins=(gpu_kernels_test gpu_device_codecs_test gpu_device_collectives_test plugin_collnet_gpu_test)
  if [ $dry = 1 ]; then
    # The binaries directly: a ctest inside ctest's own run (Scripts.DeviceCheckDryRun) would
    # write into the log the outer run is writing.
    ran=0
    for b in "${bins[@]}"; do
      [ -x "$bdir/bin/$b" ] || continue
      "$bdir/bin/$b" --gtest_brief=1 || rc=1
      ran=$((ran + 1))
    done
    "$bdir/bin/optim_test" --gtest_filter='OneBitAdam.DevicePath*:ShardedOneBitAdam.DevicePath*' --gtest_brief=1 || rc=1
    [ $rc = 0 ] || return 1
    echo "SKIP: no CUDA device: the $ran gpu test binaries and OneBitAdam.DevicePathMatchesHost ran and skipped themselves"
    return 77
  fi
  local failed=$bdir/Testing/Temporary/LastTestsFailed.log names=""
  ctest --test-dir "$bdir" -L gpu --output-on-failure -j 8 --timeout 200 || rc=1
  [ -f "$failed" ] && names=$(cut -d: -f2- "$failed" | tr '\n' ' ')
  ctest --test-dir "$bdir" -R '(Sharded)?OneBitAdam\.DevicePath' --output-on-failure --timeout 120 || rc=1
  [ $rc = 0 ] || [ ! -f "$failed" ] || names+=$(cut -d: -f2- "$failed" | tr '\n' ' ')
  ran=$(ctest --test-dir "$bdir" -L gpu -N | grep -c 'Test *#')
  if [ $rc != 0 ]; then
    echo "FAIL: ${names:-see the log}"
    return 1
  fi
  if [ $gpu = 0 ]; then
    echo "SKIP: no CUDA device: the $ran gpu tests and OneBitAdam.DevicePathMatchesHost ran and skipped themselves"
    return 77
  fi
  echo "ok: $ran gpu tests and OneBitAdam.DevicePathMatchesHost passed"
}
if built gpu_kernels_test; then
  stage gpu-tests 90 gpu_tests
else
  record gpu-tests skip 0 "not built in $bdir (a CPU-only build?)"
fi
# ---- issue 45: collectives on device buffers (terse-bench --device cuda) -------------------
# Every codec, CUDA then host buffers, 2 and 4 ranks sharing the GPU, 32 MiB; then the overlap
# run: the same CUDA allreduce with one pipeline segment per chunk (TERSE_SEGMENT_BYTES = 1 GiB)
# against the default segments (1 MiB), whose compress kernels overlap the previous segment's
# transfer. Each invocation has its own limit, so one slow run costs only its share.
coll_device() {
  local np kind buf rc=0 runs=0
  local bench=("$bdir/bin/terse-run") common=(-b 32M -e 32M -n 3 -w 1 --codec all)
  mkdir -p "$logs/coll"
  if [ $gpu = 0 ]; then
    timeout 60 "${bench[@]}" -n 2 "$bdir/bin/terse-bench" allreduce -b 64K -e 64K -n 1 -w 0 \
      --codec none --codec int8 -J "$logs/coll/2-allreduce-host.json" || return 1
    timeout 60 "${bench[@]}" -n 2 "$bdir/bin/terse-bench" allreduce -b 64K --device cuda
    [ $? = 77 ] || { echo "FAIL: terse-bench --device cuda did not skip without a GPU"; return 1; }
    echo "SKIP: no GPU: host buffers ran (64 KiB), --device cuda skipped as it must"
    return 77
  fi
  one() {  # NP KIND BUF [TAG [ENV...]]
    local np=$1 kind=$2 buf=$3 tag=${4:+-$4}
    shift 4 2>/dev/null || shift 3
    # The stage's 75 s: no run starts that could not finish (each is bounded at 40 s, most
    # take ~4 s); the rest is said, not timed out.
    if [ $SECONDS -gt 60 ]; then echo "NOTE: no time left for $np ranks $kind $buf$tag"; return; fi
    echo "== $np ranks, $kind, $buf buffers${tag}"
    env "$@" timeout 40 "${bench[@]}" -n "$np" "$bdir/bin/terse-bench" "$kind" "${common[@]}" \
      --device "$buf" -J "$logs/coll/$np-$kind-$buf$tag.json" || rc=1
    runs=$((runs + 1))
  }
  for kind in allreduce reducescatter allgather; do one 2 $kind cuda; done
  one 2 allreduce cuda serial TERSE_SEGMENT_BYTES=1073741824
  for kind in allreduce reducescatter allgather; do one 2 $kind host; done
  for kind in allreduce reducescatter allgather; do one 4 $kind cuda; done
  for kind in allreduce reducescatter allgather; do one 4 $kind host; done
  [ $rc = 0 ] && echo "ok: $runs terse-bench runs on CUDA and host buffers"
  return $rc
}
if built terse-bench && built terse-run; then
  stage coll-device 75 coll_device
else
  record coll-device skip 0 "terse-bench or terse-run not built in $bdir"
fi

# ---- PyTorch on CUDA tensors -------------------------------------------------------------
if built libterse.so; then
  stage torch-cuda 60 "$py" tests/torch/cuda_tensors_test.py gpu --work "$logs/torch-cuda" \
    --json "$logs/torch-cuda.json" --timeout 55
else
  record torch-cuda skip 0 "libterse.so not built in $bdir"
fi

# ---- memcheck: while time allows ----------------------------------------------------------
memcheck() {
  local cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$cs" ] || { echo "SKIP: no compute-sanitizer"; return 77; }
  [ $gpu = 1 ] || { echo "SKIP: no GPU"; return 77; }
  # "If time allows": a run that does not finish is a skip (with what it saw), not a failure.
  timeout -k 5 "$memcheck_limit" "$cs" --tool memcheck --error-exitcode 3 --print-limit 20 \
    "$bdir/bin/gpu_kernels_test" --gtest_brief=1
  local rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    echo "SKIP: memcheck of gpu_kernels_test did not finish within $memcheck_limit s (no error reported before)"
    return 77
  fi
  [ $rc = 0 ] && echo "ok: compute-sanitizer memcheck: no errors in gpu_kernels_test"
  return $rc
}
if [ $gpu = 1 ] && [ "$(remaining)" -gt 60 ] && built gpu_kernels_test; then
  memcheck_limit=$(( $(remaining) - 20 ))
  [ "$memcheck_limit" -le 150 ] || memcheck_limit=150
  stage memcheck $((memcheck_limit + 15)) memcheck
else
  record memcheck skip 0 "$( [ $gpu = 1 ] && echo "less than 60 s left" || echo "no GPU")"
fi

# ---- the summary ---------------------------------------------------------------------------
for f in "$logs"/*.log "$logs"/nccl/*.log "$logs"/{nccl-perf,netem,ddp}/*-rank[01].log; do
  [ -f "$f" ] || continue
  echo "===== $(basename "$f") (last 400 lines)"
  tail -n 400 "$f"
done >"$out/check.log"
# A failed stage's whole log comes back too (check.log keeps the last 400 lines of each), at
# most four of them, each its last 4 MiB: the device tool returns 8 files at most (with
# summary.json, summary.md, check.log and busbw.png).
cut -f1,2 "$results" | awk -F'\t' '$2 == "fail" {print $1}' | head -4 | while read -r name; do
  [ -f "$logs/$name.log" ] && tail -c 4194304 "$logs/$name.log" >"$out/failed-$name.log"
done
# The summary's Python: the first with matplotlib (for the bus bandwidth plot), else python3.
summary_py=python3
for cand in python3 /usr/bin/python3 "$py"; do
  if "$cand" -c 'import matplotlib' >/dev/null 2>&1; then summary_py=$cand; break; fi
done
"$summary_py" "$root/scripts/device-summary.py" --logs "$logs" --out "$out" --dry-run "$dry" \
  --elapsed $(($(date +%s) - start)) --budget "$budget"
status=$?
rm -rf "$logs"
exit $status
