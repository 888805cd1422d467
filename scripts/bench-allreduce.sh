#!/usr/bin/env bash
# The main benchmark: 4 ranks on this machine allreduce 64 MiB of float32 with every codec, next
# to OpenMPI's MPI_Allreduce on the same machine in the same run.
#   scripts/bench-allreduce.sh [--tcp|--defaults] [--ranks N] [--size 64M] [--rounds N] [--out DIR]
#                              [-- extra terse-bench flags]
# --tcp forces both terse (UCX_TLS=tcp) and OpenMPI (btl tcp) onto TCP over loopback; the default
# lets each use shared memory. --defaults runs what a new user gets: no UCX_* variable at all (any
# set are removed), OpenMPI without transport selection, terse's `none` codec only, and prints
# terse's speed-up over OpenMPI. Nothing leaves the loopback interface.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TERSE_BUILD_DIR:-build}
ranks=4 size=64M tcp=0 defaults=0 rounds=1 out="" iters=${TERSE_BENCH_ITERS:-10} warmup=${TERSE_BENCH_WARMUP:-3}
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tcp) tcp=1 ;;
    --defaults) defaults=1 ;;
    --ranks) ranks=$2; shift ;;
    --size) size=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --out) out=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench-allreduce: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$build_dir/bin/terse-bench" ] || { echo "bench-allreduce: build first (scripts/build.sh)" >&2; exit 1; }
# A terse-bench built without the API layer (no UCX at configure time) has no allreduce.
"$build_dir/bin/terse-bench" --help 2>&1 | grep -qw allreduce ||
  { echo "bench-allreduce: $build_dir/bin/terse-bench has no allreduce subcommand (API layer not built: is UCX installed?)" >&2; exit 1; }
[ -n "$out" ] && mkdir -p "$out"

mpi_flags=(--allow-run-as-root --oversubscribe --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
codecs=all
if [ "$defaults" = 1 ]; then
  [ "$tcp" = 1 ] && { echo "bench-allreduce: --tcp and --defaults exclude each other" >&2; exit 2; }
  for v in $(env | sed -n 's/^\(UCX_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
  codecs=none
  label="defaults, no UCX_* variables"
elif [ "$tcp" = 1 ]; then
  export UCX_NET_DEVICES=lo
  export UCX_TLS=tcp
  mpi_flags+=(--mca btl tcp,self --mca pml ob1)
  label="TCP over loopback"
else
  # UCX's shared-memory transports (terse watches same-host peers itself on them).
  export UCX_NET_DEVICES=lo
  export UCX_TLS=${UCX_TLS:-posix,cma,self}
  mpi_flags+=(--mca btl vader,self)
  label="shared memory"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
have_mpi=0
[ -x "$build_dir/bin/mpi-allreduce-bench" ] && command -v mpirun >/dev/null && have_mpi=1
# --rounds N alternates the two programs N times (JSON from the last round): on a shared machine
# the load changes within seconds, and the median of the per-round ratios is what to compare.
ratios=()
for ((round = 1; round <= rounds; round++)); do
  [ "$rounds" -gt 1 ] && echo "== round $round of $rounds"
  echo "== terse: $ranks ranks, $size float32, codec $codecs, $label"
  "$build_dir/bin/terse-run" -n "$ranks" -- "$build_dir/bin/terse-bench" allreduce -b "$size" -e "$size" \
    -n "$iters" -w "$warmup" --codec "$codecs" ${out:+-J "$out/terse.json"} "${extra[@]}" | tee "$tmp/terse"
  # Each step's output is checked, not only its exit status: a step that printed no table once
  # let the script go on to OpenMPI and end without a word about terse.
  grep -q '^\[[0-9]*\] *[0-9]' "$tmp/terse" ||
    { echo "bench-allreduce: FAILED: terse-bench printed no result rows (output above)" >&2; exit 1; }
  if [ "$have_mpi" = 0 ]; then
    echo "== OpenMPI baseline skipped: mpirun or mpi-allreduce-bench missing"
    continue
  fi
  echo "== OpenMPI MPI_Allreduce: $ranks ranks, $size float32, $label"
  mpirun "${mpi_flags[@]}" -np "$ranks" "$build_dir/bin/mpi-allreduce-bench" -b "$size" -e "$size" \
    -n "$iters" -w "$warmup" ${out:+-J "$out/openmpi.json"} | tee "$tmp/mpi"
  # The slowest rank's time per call of terse's `none` row and OpenMPI's, each table's columns
  # found by their header names (scripts/lib/allreduce-headline.awk).
  headline=$(awk -f scripts/lib/allreduce-headline.awk "$tmp/terse" "$tmp/mpi") ||
    { echo "bench-allreduce: FAILED: no headline from the tables above" >&2; exit 1; }
  echo "$headline"
  ratios+=("$(echo "$headline" | sed -n 's/.*speed-up \([0-9.]*\)x$/\1/p')")
done
if [ "${#ratios[@]}" -gt 1 ]; then
  printf '%s\n' "${ratios[@]}" | sort -g | awk '{ r[NR] = $1 } END {
    m = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
    printf "== terse none vs OpenMPI over %d rounds: median speed-up %.2fx (min %.2fx, max %.2fx)\n", NR, m, r[1], r[NR] }'
fi
