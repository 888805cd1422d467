#!/usr/bin/env bash
# The latency sweep: terse's `none` allreduce against OpenMPI's MPI_Allreduce and gloo's
# (torch.distributed) on this machine, 4 KiB to 64 MiB, for 2 and 4 ranks, in one run; each
# row gives the slowest rank's time per call of each and terse's time over theirs (below 1 is
# faster). Small collectives are what a process-group backend carries (barriers, flags,
# per-layer gathers), so this is where latency is judged (issue 47).
#   scripts/bench-latency.sh [--ranks "2 4"] [--small-iters N] [--large-iters N] [--rt]
# --rt runs every program under `chrt -r 10` (root): on a host that is busy with other work
# (a build), real-time round-robin keeps that work from deciding the figures; all three
# programs get the same treatment. Shared memory for all (UCX posix/cma, OpenMPI vader, gloo
# over loopback TCP, its only transport). gloo needs a torch environment (scripts/torch-env.sh;
# TERSE_TORCH_PYTHON or the default venv); without one its column says "-".
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TERSE_BUILD_DIR:-build}
ranks_list="2 4" small_iters=1000 large_iters=10 rt=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks_list=$2; shift ;;
    --small-iters) small_iters=$2; shift ;;
    --large-iters) large_iters=$2; shift ;;
    --rt) rt=(chrt -r 10) ;;
    *) echo "bench-latency: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$build_dir/bin/terse-bench" ] || { echo "bench-latency: build first (scripts/build.sh)" >&2; exit 1; }
export UCX_NET_DEVICES=lo UCX_TLS=${UCX_TLS:-posix,cma,self}
python=${TERSE_TORCH_PYTHON:-}
if [ -z "$python" ]; then
  python=$(ls -d "${XDG_CACHE_HOME:-$HOME/.cache}"/terse/torch-*/bin/python 2>/dev/null | tail -1 || true)
fi
have_gloo=0
[ -n "$python" ] && "$python" -c "import torch.distributed" 2>/dev/null && have_gloo=1
have_mpi=0
[ -x "$build_dir/bin/mpi-allreduce-bench" ] && command -v mpirun >/dev/null && have_mpi=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Two sweeps per program: 4 KiB-1 MiB with many calls, 4-64 MiB with few. Rows: "bytes us".
sweep() {  # sweep NAME RANKS: fills $tmp/NAME.RANKS
  local name=$1 n=$2 out="$tmp/$1.$2" b e iters port=$((29700 + RANDOM % 200))
  : >"$out"
  for range in "4K 1M $small_iters" "4M 64M $large_iters"; do
    read -r b e iters <<<"$range"
    local warm=$((iters / 10 + 1))
    case "$name" in
      terse)
        "${rt[@]}" "$build_dir/bin/terse-run" -n "$n" -- "$build_dir/bin/terse-bench" allreduce \
          -b "$b" -e "$e" -f 4 -n "$iters" -w "$warm" --codec none 2>&1 |
          awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print $2, $8 }' >>"$out" ;;
      openmpi)
        "${rt[@]}" mpirun --allow-run-as-root --oversubscribe --mca btl vader,self \
          --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np "$n" \
          "$build_dir/bin/mpi-allreduce-bench" -b "$b" -e "$e" -f 4 -n "$iters" -w "$warm" 2>&1 |
          awk '$1 ~ /^[0-9]+$/ { print $1, $3 }' >>"$out" ;;
      gloo)
        "${rt[@]}" "$python" -m torch.distributed.run --nproc-per-node "$n" --master-port "$port" \
          bench/gloo_allreduce_bench.py -b "$b" -e "$e" -f 4 -n "$iters" -w "$warm" 2>/dev/null |
          awk '$1 ~ /^[0-9]+$/ { print $1, $3 }' >>"$out" ;;
    esac
  done
  [ -s "$out" ] || { echo "bench-latency: $name with $n ranks printed no rows" >&2; exit 1; }
}

echo "# bench-latency: none allreduce, float32 sum, slowest rank's us per call; $(nproc) CPUs;" \
  "${rt[*]:-no chrt}; $(date -u +%Y-%m-%dT%H:%MZ)"
for n in $ranks_list; do
  sweep terse "$n"
  [ "$have_mpi" = 1 ] && sweep openmpi "$n" || : >"$tmp/openmpi.$n"
  [ "$have_gloo" = 1 ] && sweep gloo "$n" || : >"$tmp/gloo.$n"
  echo "# $n ranks"
  printf "%12s %10s %10s %10s %10s %10s\n" "size(B)" "terse" "openmpi" "gloo" "/openmpi" "/gloo"
  awk -v mpi="$tmp/openmpi.$n" -v gloo="$tmp/gloo.$n" '
    function cell(v) { return v == "" ? "-" : sprintf("%.1f", v) }
    function ratio(t, v) { return v == "" || v <= 0 ? "-" : sprintf("%.2f", t / v) }
    BEGIN { while ((getline l < mpi) > 0) { split(l, f, " "); m[f[1]] = f[2] }
            while ((getline l < gloo) > 0) { split(l, f, " "); g[f[1]] = f[2] } }
    { printf "%12d %10.1f %10s %10s %10s %10s\n", $1, $2, cell(m[$1]), cell(g[$1]),
        ratio($2, m[$1]), ratio($2, g[$1]) }' "$tmp/terse.$n"
done
