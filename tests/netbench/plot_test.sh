#!/usr/bin/env bash
# plot_network.py on a hand-made results directory: the speedups in results.md must be the
# ratios of the fixture's times (computed here independently), and every file must be written.
# Needs no root; skips (77) only when Debian's python3-matplotlib is missing.
set -euo pipefail
src=${1:?usage: plot_test.sh SOURCE_DIR}
py=/usr/bin/python3
"$py" -c 'import matplotlib' 2>/dev/null || { echo "SKIP: $py has no matplotlib (apt-get install python3-matplotlib)"; exit 77; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/raw"
echo '{"ranks": 2, "iters": 3, "warmup": 1, "cpus": 2, "command": "fixture"}' >"$dir/setup.json"

# Each of $3... in directory $1 must be a PNG (its 8-byte signature); $2 ends the message.
expect_pngs() {
  local d=$1 what=$2 png
  shift 2
  for png in "$@"; do
    if [[ $(head -c 8 "$d/$png" 2>/dev/null | od -An -tx1 | tr -d ' \n') != 89504e470d0a1a0a ]]; then
      echo "FAIL: $png missing or not a PNG$what"
      fails=1
    fi
  done
}

# The rows on stdin (whitespace-separated fields) as a JSON array: $1 prints one row's object
# from its fields.
json_rows() {
  local row=$1 first=1 line
  echo "["
  while read -r line; do
    ((first)) || echo ","
    first=0
    # shellcheck disable=SC2086  # the fields are words
    "$row" $line
  done
  echo "]"
}

# terse row: bytes codec time_us ratio err; busbw follows from the time (2 ranks: factor 1).
terse_row() {
  awk -v b="$1" -v c="$2" -v t="$3" -v q="$4" -v e="$5" 'BEGIN {
    printf "{\"collective\": \"allreduce\", \"ranks\": 2, \"bytes\": %d, \"codec\": \"%s\", \"time_us\": %s, \"algbw_gbs\": %f, \"busbw_gbs\": %f, \"wire_bytes\": %d, \"ratio\": %s, \"maxrelerr\": %s}", b, c, t, b / t / 1000, b / t / 1000, b / q, q, e }'
}
terse_rows() { json_rows terse_row; }
mpi_rows() {
  local bytes=$1 t=$2
  awk -v b="$bytes" -v t="$t" 'BEGIN { printf "[{\"collective\": \"allreduce\", \"impl\": \"openmpi\", \"ranks\": 2, \"bytes\": %d, \"time_us\": %s, \"algbw_gbs\": %f, \"busbw_gbs\": %f}]\n", b, t, b / t / 1000, b / t / 1000 }'
}

printf '1048576 none 16000 1 0\n1048576 int8 4000 3.9 1.5e-3\n' | terse_rows >"$dir/raw/t1-1M.json"
printf '4194304 none 64000 1 0\n4194304 int8 12800 3.9 1.5e-3\n' | terse_rows >"$dir/raw/t1-4M.json"
printf '1048576 none 2000 1 0\n1048576 int8 2500 3.9 1.5e-3\n' | terse_rows >"$dir/raw/t10-1M.json"
printf '4194304 none 8000 1 0\n4194304 int8 6400 3.9 1.5e-3\n' | terse_rows >"$dir/raw/t10-4M.json"
mpi_rows 1048576 20000 >"$dir/raw/m1-1M.json"
mpi_rows 4194304 80000 >"$dir/raw/m1-4M.json"
{
  for f in t1-1M:1:1M m1-1M:1:1M t1-4M:1:4M m1-4M:1:4M t10-1M:10:1M t10-4M:10:4M; do
    IFS=: read -r name rate size <<<"$f"
    impl=terse
    [[ $name == m* ]] && impl=openmpi
    echo "{\"impl\": \"$impl\", \"rate_gbit\": $rate, \"size\": \"$size\", \"file\": \"raw/$name.json\", \"probe_gbit\": null, \"seconds\": 1}"
  done
} >"$dir/runs.jsonl"

"$py" "$src/bench/plot_network.py" "$dir"

fails=0
expect_row() {
  # rate size codec speedup: the table row must carry this speedup (time(none) / time(row)).
  if ! grep -Eq "^\| $1 \| $2 \| $3 \| [0-9.]+ \| [0-9.]+ \| $4 \|" "$dir/results.md"; then
    echo "FAIL: no row '| $1 | $2 | $3 | ... | $4 |' in results.md"
    fails=1
  fi
}
# Expected speedups, by hand from the times above.
expect_row 1 1M none 1.00x
expect_row 1 1M int8 "$(awk 'BEGIN { printf "%.2fx", 16000 / 4000 }')"
expect_row 1 1M OpenMPI "$(awk 'BEGIN { printf "%.2fx", 16000 / 20000 }')"
expect_row 1 4M int8 "$(awk 'BEGIN { printf "%.2fx", 64000 / 12800 }')"
expect_row 10 1M int8 "$(awk 'BEGIN { printf "%.2fx", 2000 / 2500 }')"
expect_row 10 4M int8 "$(awk 'BEGIN { printf "%.2fx", 8000 / 6400 }')"
# 10 Gbit/s has no OpenMPI run: no OpenMPI row may appear there.
if grep -Eq '^\| 10 \| [0-9]+M \| OpenMPI' "$dir/results.md"; then
  echo "FAIL: an OpenMPI row at 10 Gbit/s, where none was measured"
  fails=1
fi
rows=$(grep -Ec '^\| (1|10) \| [0-9]+M \|' "$dir/results.md")
[[ $rows == 10 ]] || { echo "FAIL: results.md has $rows data rows, expected 10"; fails=1; }
expect_pngs "$dir" "" busbw-1gbit.png busbw-10gbit.png speedup.png
"$py" - "$dir/results.json" <<'PY' || fails=1
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert len(rows) == 10, len(rows)
got = {(r["rate_gbit"], r["bytes"], r["codec"]): r["speedup_vs_none"] for r in rows}
assert abs(got[(1.0, 1048576, "int8")] - 4.0) < 1e-9, got
assert abs(got[(1.0, 4194304, "OpenMPI")] - 0.8) < 1e-9, got
PY

# Two algorithms (bench-network.sh --ranks-per-host 2 --algos "flat twolevel"): rows carry
# "algorithm"; speedup over none is within one algorithm, speedup over flat is time(flat, same
# codec) / time(row), and the side-by-side table pairs each codec's algorithms.
dir2="$dir/algos"
mkdir -p "$dir2/raw"
echo '{"ranks": 4, "hosts": 2, "ranks_per_host": 2, "algos": "flat twolevel", "iters": 3, "warmup": 1, "cpus": 2, "command": "fixture"}' >"$dir2/setup.json"
# algorithm row: bytes codec algorithm time_us err
algo_row() {
  awk -v b="$1" -v c="$2" -v a="$3" -v t="$4" -v e="$5" 'BEGIN {
    printf "{\"collective\": \"allreduce\", \"ranks\": 4, \"bytes\": %d, \"codec\": \"%s\", \"algorithm\": \"%s\", \"time_us\": %s, \"algbw_gbs\": %f, \"busbw_gbs\": %f, \"wire_bytes\": %d, \"ratio\": 1, \"maxrelerr\": %s}", b, c, a, t, b / t / 1000, 1.5 * b / t / 1000, b, e }'
}
algo_rows() { json_rows algo_row; }
printf '%s\n' "1048576 none flat 20000 1e-7" "1048576 int8 flat 8000 7e-3" \
  "1048576 none twolevel 16000 1e-7" "1048576 int8 twolevel 5000 6e-3" | algo_rows >"$dir2/raw/t-1M.json"
printf '%s\n' "4194304 none flat 80000 1e-7" "4194304 int8 flat 32000 7e-3" \
  "4194304 none twolevel 64000 1e-7" "4194304 int8 twolevel 16000 6e-3" | algo_rows >"$dir2/raw/t-4M.json"
mpi_rows 4194304 100000 >"$dir2/raw/m-4M.json"
{
  echo '{"impl": "terse", "rate_gbit": 1, "size": "1M", "file": "raw/t-1M.json", "probe_gbit": null, "seconds": 1}'
  echo '{"impl": "terse", "rate_gbit": 1, "size": "4M", "file": "raw/t-4M.json", "probe_gbit": null, "seconds": 1}'
  echo '{"impl": "openmpi", "rate_gbit": 1, "size": "4M", "file": "raw/m-4M.json", "probe_gbit": null, "seconds": 1}'
} >"$dir2/runs.jsonl"
"$py" "$src/bench/plot_network.py" "$dir2"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
expect_algo_row() {
  # size codec algo speedup-over-none speedup-over-flat
  if ! grep -Eq "^\| 1 \| $1 \| $2 \| $3 \| [0-9.]+ \| [0-9.]+ \| $4 \| $5 \|" "$dir2/results.md"; then
    echo "FAIL: no row '| 1 | $1 | $2 | $3 | ... | $4 | $5 |' in the two-algorithm results.md"
    fails=1
  fi
}
expect_algo_row 1M none flat 1.00x -
expect_algo_row 1M int8 flat "$(ratio 20000 8000)" -
expect_algo_row 1M none twolevel 1.00x "$(ratio 20000 16000)"
expect_algo_row 1M int8 twolevel "$(ratio 16000 5000)" "$(ratio 8000 5000)"
expect_algo_row 4M int8 twolevel "$(ratio 64000 16000)" "$(ratio 32000 16000)"
# Side by side: flat time, flat err, twolevel time, twolevel err, speedup.
if ! grep -Eq "^\| 1 \| 4M \| int8 \| 32.0 \| 7.00e-03 \| 16.0 \| 6.00e-03 \| $(ratio 32000 16000) \|" "$dir2/results.md"; then
  echo "FAIL: no side-by-side row for int8 at 4M in the two-algorithm results.md"
  fails=1
fi
expect_pngs "$dir2" " (two algorithms)" busbw-1gbit.png speedup.png algo-speedup.png
"$py" - "$dir2/results.json" <<'PY' || fails=1
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert len(rows) == 9, len(rows)
by = {(r["bytes"], r["codec"], r["algorithm"]): r for r in rows}
assert abs(by[(1048576, "int8", "twolevel")]["speedup_vs_flat"] - 8000 / 5000) < 1e-9, by
assert by[(1048576, "int8", "flat")]["speedup_vs_flat"] is None
assert by[(1048576, "int8", "twolevel")]["series"] == "int8 twolevel"
assert abs(by[(4194304, "none", "twolevel")]["speedup_vs_none"] - 1.0) < 1e-9
PY

# bench-network.sh --rates "1 unshaped": the unshaped run is recorded as rate 0 and reported as
# "unshaped", after the shaped rates, with speedups within it, and plotted beside them (no line
# rate to draw).
dir3="$dir/unshaped"
mkdir -p "$dir3/raw"
echo '{"ranks": 2, "iters": 3, "warmup": 1, "cpus": 2, "command": "fixture"}' >"$dir3/setup.json"
printf '1048576 none 16000 1 0\n1048576 int8 4000 3.9 1.5e-3\n' | terse_rows >"$dir3/raw/t1.json"
printf '1048576 none 3000 1 0\n1048576 int8 1200 3.9 1.5e-3\n' | terse_rows >"$dir3/raw/t0.json"
{
  echo '{"impl": "terse", "rate_gbit": 0, "size": "1M", "file": "raw/t0.json", "probe_gbit": 20.5, "seconds": 1}'
  echo '{"impl": "terse", "rate_gbit": 1, "size": "1M", "file": "raw/t1.json", "probe_gbit": 0.95, "seconds": 1}'
} >"$dir3/runs.jsonl"
"$py" "$src/bench/plot_network.py" "$dir3"
if ! grep -Eq "^\| unshaped \| 1M \| int8 \| 1.2 \| [0-9.]+ \| $(ratio 3000 1200) \|" "$dir3/results.md"; then
  echo "FAIL: no unshaped int8 row with speedup $(ratio 3000 1200) in results.md"
  fails=1
fi
order=$(grep -Eo '^\| (1|unshaped) \| 1M \| none' "$dir3/results.md" | awk '{ print $2 }' | tr '\n' ' ')
[[ $order == "1 unshaped " ]] || { echo "FAIL: rates in the order '$order', expected the unshaped run last"; fails=1; }
grep -q "1 Gbit/s: 0.95 Gbit/s, unshaped: 20.50 Gbit/s" "$dir3/results.md" ||
  { echo "FAIL: results.md does not give the unshaped link's probe"; fails=1; }
for png in busbw.png speedup.png; do
  [[ -s $dir3/$png ]] || { echo "FAIL: $png missing (unshaped run)"; fails=1; }
done

((fails == 0)) && echo "plot_network.py: all checks passed"
exit $fails
