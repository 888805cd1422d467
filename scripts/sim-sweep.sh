#!/usr/bin/env bash
# Sweeps terse-sim (docs/simulation.md) over world sizes, codecs, algorithms, NIC rates and
# message sizes, one simulated call per point, and writes every row as JSON, a Markdown table of
# the predicted time with the speedup over `none` (same algorithm) and over flat `none` at the
# same world, rate and size, and plots of both against the world size (one panel per rate,
# one figure per size: time-SIZE.png, speedup-SIZE.png; python3-matplotlib).
#
#   scripts/sim-sweep.sh --worlds "8 16 32 64" --rates "100 400" --sizes "64M" \
#       --codecs "none int8 onebit" --algos "flat twolevel" --ranks-per-node 8 --out sim-results
#
# --algos takes terse-sim's --algo values (default auto). Extra terse-sim options (link
# latencies, --nic-per-rank, --model FILE, --assume-gbps C,D, --post-us U) go after `--`. Exit status: 0
# done, 1 a point failed, 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

worlds="8 16 32 64"
rates="100 400"
sizes="64M"
codecs="none int8 onebit"
algos="auto"
rpn=8
out="sim-results/sweep-$(date -u +%Y%m%dT%H%M%SZ)"
bin=${TERSE_SIM:-${TERSE_BUILD_DIR:-build}/bin/terse-sim}  # TERSE_SIM: another terse-sim binary
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --worlds) worlds=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --codecs) codecs=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --ranks-per-node) rpn=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "sim-sweep: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
[[ -x $bin ]] || { echo "sim-sweep: $bin not built (cmake --build ${TERSE_BUILD_DIR:-build} --target terse-sim)" >&2; exit 2; }
mkdir -p "$out"
failed=0
for size in $sizes; do
  for rate in $rates; do
    for world in $worlds; do
      for codec in $codecs; do
        for algo in $algos; do
          name="w${world}-r${rate}-s${size}-${codec//[:=,]/_}-${algo}"
          if [[ $algo == twolevel && $world -le $rpn ]]; then
            echo "sim-sweep: $name skipped: $world ranks are one node of $rpn, no two levels"
            continue
          fi
          if ! "$bin" --world "$world" --ranks-per-node "$rpn" --nic-gbit "$rate" --bytes "$size" \
              --codec "$codec" --algo "$algo" --json "$out/$name.json" "${extra[@]}" \
              >"$out/$name.txt" 2>&1; then
            echo "sim-sweep: $name failed (see $out/$name.txt)" >&2
            failed=1
            continue
          fi
          echo "sim-sweep: $name $(tail -1 "$out/$name.txt")"
        done
      done
    done
  done
done

/usr/bin/python3 scripts/sim-sweep-report.py "$out"
exit $failed
