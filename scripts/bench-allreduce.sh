#!/usr/bin/env bash
# The main benchmark: 4 ranks on this machine allreduce 64 MiB of float32 with every codec, next
# to OpenMPI's MPI_Allreduce on the same machine in the same run.
#   scripts/bench-allreduce.sh [--tcp] [--ranks N] [--size 64M] [--out DIR] [-- extra terse-bench flags]
# --tcp forces both terse (UCX_TLS=tcp) and OpenMPI (btl tcp) onto TCP over loopback; the default
# lets each use shared memory. Nothing leaves the loopback interface.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TERSE_BUILD_DIR:-build}
ranks=4 size=64M tcp=0 out="" iters=${TERSE_BENCH_ITERS:-10} warmup=${TERSE_BENCH_WARMUP:-3}
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tcp) tcp=1 ;;
    --ranks) ranks=$2; shift ;;
    --size) size=$2; shift ;;
    --out) out=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench-allreduce: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$build_dir/bin/terse-bench" ] || { echo "bench-allreduce: build first (scripts/build.sh)" >&2; exit 1; }
[ -n "$out" ] && mkdir -p "$out"

export UCX_NET_DEVICES=lo
mpi_flags=(--allow-run-as-root --oversubscribe --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
if [ "$tcp" = 1 ]; then
  export UCX_TLS=tcp
  mpi_flags+=(--mca btl tcp,self --mca pml ob1)
  label="TCP over loopback"
else
  mpi_flags+=(--mca btl vader,self)
  label="shared memory"
fi

echo "== terse: $ranks ranks, $size float32, every codec, $label"
"$build_dir/bin/terse-run" -n "$ranks" -- "$build_dir/bin/terse-bench" allreduce -b "$size" -e "$size" \
  -n "$iters" -w "$warmup" --codec all ${out:+-J "$out/terse.json"} "${extra[@]}"

if [ -x "$build_dir/bin/mpi-allreduce-bench" ] && command -v mpirun >/dev/null; then
  echo "== OpenMPI MPI_Allreduce: $ranks ranks, $size float32, $label"
  mpirun "${mpi_flags[@]}" -np "$ranks" "$build_dir/bin/mpi-allreduce-bench" -b "$size" -e "$size" \
    -n "$iters" -w "$warmup" ${out:+-J "$out/openmpi.json"}
else
  echo "== OpenMPI baseline skipped: mpirun or mpi-allreduce-bench missing"
fi
