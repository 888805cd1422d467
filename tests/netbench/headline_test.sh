#!/usr/bin/env bash
# The main benchmark's headline (scripts/bench-allreduce.sh, which scripts/bench.sh runs): in a
# short mode (2 ranks, 8 MiB, 2 timed calls) its last line must give terse's `none` time and
# OpenMPI's, both positive, and the speed-up their ratio; the headline once read the column that
# became `algo` and printed "terse none 0.0 ms ... speed-up infx". Then a terse-bench that prints
# no table but exits 0 must make the script fail, not go on to OpenMPI.
# Skips (77) without OpenMPI (the headline compares against it).
set -euo pipefail
src=${1:?usage: headline_test.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: headline_test.sh SOURCE_DIR BUILD_DIR}
[[ -x $build/bin/mpi-allreduce-bench ]] && command -v mpirun >/dev/null ||
  { echo "SKIP: OpenMPI or mpi-allreduce-bench missing"; exit 77; }
"$build/bin/terse-bench" --help 2>&1 | grep -qw allreduce ||
  { echo "SKIP: $build/bin/terse-bench has no allreduce subcommand (API layer not built)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

TERSE_BUILD_DIR=$build TERSE_BENCH_ITERS=2 TERSE_BENCH_WARMUP=1 \
  bash "$src/scripts/bench-allreduce.sh" --ranks 2 --size 8M >"$tmp/out" 2>&1 ||
  { cat "$tmp/out"; echo "FAIL: bench-allreduce.sh exited non-zero"; exit 1; }
last=$(tail -n 1 "$tmp/out")
echo "headline: $last"
# == terse none A ms (ALGO), OpenMPI B ms per call: terse speed-up Rx
read -r a algo b r < <(echo "$last" | sed -n \
  's/^== terse none \([0-9.]*\) ms (\([a-z]*\)), OpenMPI \([0-9.]*\) ms per call: terse speed-up \([0-9.]*\)x$/\1 \2 \3 \4/p') || true
if [[ -z ${r:-} ]]; then
  echo "FAIL: the last line is not the headline"; fails=1
else
  [[ $algo == flat || $algo == twolevel ]] || { echo "FAIL: algorithm '$algo'"; fails=1; }
  # Times are printed to 0.1 ms: 8 MiB takes milliseconds, so neither may read 0.0.
  awk -v a="$a" -v b="$b" -v r="$r" 'BEGIN { exit !(a > 0 && b > 0 && r > 0 && (r - b / a) ^ 2 < (0.06 * b / a + 0.01) ^ 2) }' ||
    { echo "FAIL: times $a ms and $b ms do not give speed-up ${r}x"; fails=1; }
  # The terse time must be the `none` row's time(us) of the table above, not another column.
  grep -Eq "^\[0\] +8388608 +2097152 +float32 +sum +none +$algo +[0-9.]+ " "$tmp/out" ||
    { echo "FAIL: no terse none row"; fails=1; }
fi

# A terse-bench that answers --help but prints no table and exits 0.
mkdir -p "$tmp/build/bin"
ln -s "$(realpath "$build/bin/terse-run")" "$tmp/build/bin/terse-run"
ln -s "$(realpath "$build/bin/mpi-allreduce-bench")" "$tmp/build/bin/mpi-allreduce-bench"
cat >"$tmp/build/bin/terse-bench" <<'STUB'
#!/usr/bin/env bash
[[ ${1:-} == --help ]] && { echo "  allreduce  stub"; exit 0; }
echo "# terse-bench stub: no table"
exit 0
STUB
chmod +x "$tmp/build/bin/terse-bench"
if TERSE_BUILD_DIR=$tmp/build TERSE_BENCH_ITERS=1 TERSE_BENCH_WARMUP=0 \
  bash "$src/scripts/bench-allreduce.sh" --ranks 2 --size 256K >"$tmp/stub" 2>&1; then
  cat "$tmp/stub"; echo "FAIL: the script went on and succeeded without a terse table"; fails=1
elif grep -q "OpenMPI MPI_Allreduce" "$tmp/stub"; then
  cat "$tmp/stub"; echo "FAIL: the script went on to OpenMPI without a terse table"; fails=1
fi
[[ $fails -eq 0 ]] && echo "PASS"
exit $fails
