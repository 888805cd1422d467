#!/usr/bin/env bash
# Sweeps terse-sim (docs/simulation.md) over world sizes, codecs, NIC rates and message sizes,
# one simulated call per point, and writes every row as JSON plus a Markdown table of the
# predicted time and the speedup over `none` at the same world, rate and size.
#
#   scripts/sim-sweep.sh --worlds "8 16 32 64" --rates "100 400" --sizes "64M" \
#       --codecs "none int8 onebit" --ranks-per-node 8 --out sim-results
#
# Extra terse-sim options (link latencies, --nic-per-rank, --model FILE, --assume-gbps C,D)
# go after `--`. Exit status: 0 done, 1 a point failed, 2 bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

worlds="8 16 32 64"
rates="100 400"
sizes="64M"
codecs="none int8 onebit"
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
    --ranks-per-node) rpn=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
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
        name="w${world}-r${rate}-s${size}-${codec//[:=,]/_}"
        if ! "$bin" --world "$world" --ranks-per-node "$rpn" --nic-gbit "$rate" --bytes "$size" \
            --codec "$codec" --json "$out/$name.json" "${extra[@]}" >"$out/$name.txt" 2>&1; then
          echo "sim-sweep: $name failed (see $out/$name.txt)" >&2
          failed=1
          continue
        fi
        echo "sim-sweep: $name $(tail -1 "$out/$name.txt")"
      done
    done
  done
done

/usr/bin/python3 - "$out" <<'PY'
import glob, json, re, sys
out = sys.argv[1]
rows = [json.load(open(f)) for f in sorted(glob.glob(out + "/*.json"))]
def rate(r):
    return float(re.search(r"NIC ([0-9.]+) Gbit/s", r["platform"]).group(1))
base = {(r["world"], rate(r), r["bytes"]): r["time_us"] for r in rows if r["codec"] == "none"}
rows.sort(key=lambda r: (r["bytes"], rate(r), r["world"], r["codec"]))
with open(out + "/table.md", "w") as f:
    f.write("| ranks | NIC Gbit/s | size | codec | time (us) | busbw (GB/s) | busiest NIC (MB) | vs none | wall (s) |\n")
    f.write("|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
    for r in rows:
        b = base.get((r["world"], rate(r), r["bytes"]))
        speed = "%.2fx" % (b / r["time_us"]) if b else "-"
        f.write("| %d | %g | %d MiB | %s | %.1f | %.2f | %.1f | %s | %.1f |\n" % (
            r["world"], rate(r), r["bytes"] >> 20, r["codec"], r["time_us"], r["busbw_gbs"],
            r["max_nic_bytes"] / 1e6, speed, r["wall_s"]))
print("sim-sweep: table in " + out + "/table.md")
PY
exit $failed
