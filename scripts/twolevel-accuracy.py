#!/usr/bin/env python3
"""Two-level against flat allreduce, accuracy only: runs terse-bench over several inputs and
seeds with both algorithms and every codec, and prints, per input shape and codec, how
two-level's error compares with flat's (docs/benchmarks.md, "Accuracy: two-level against flat").

    scripts/twolevel-accuracy.py --out bench-results/twolevel-accuracy \
        [--shapes "uniform normal laplace"] [--seeds 3] [--ranks 8 --nodes 4] [--size 64M]

Each (shape, seed) is one `terse-run -n RANKS --nodes NODES -- terse-bench allreduce -n 1 -w 0
--algo flat --algo twolevel --codec all --input SHAPE --seed S -J OUT/SHAPE-seedS.json` on this
machine (the results do not depend on the transport, so no shaping is needed). --report-only
reads OUT's JSON again without running anything. Standard library only.
"""
import argparse
import glob
import json
import os
import subprocess
import sys


def run(args):
    os.makedirs(args.out, exist_ok=True)
    for shape in args.shapes.split():
        for seed in range(args.seeds):
            out = os.path.join(args.out, f"{shape}-seed{seed}.json")
            cmd = [args.terse_run, "-n", str(args.ranks), "--nodes", str(args.nodes), "--",
                   args.terse_bench, "allreduce", "-b", args.size, "-e", args.size, "-n", "1",
                   "-w", "0", "--algo", "flat", "--algo", "twolevel", "--codec", "all",
                   "--input", shape, "--seed", str(seed), "-J", out]
            print("+", " ".join(cmd), flush=True)
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if done.returncode != 0:
                print(done.stdout)
                sys.exit(f"twolevel-accuracy: {shape} seed {seed} exited with {done.returncode}")


def report(out):
    # rows[shape][codec][algorithm][seed] = (maxrelerr, rmsrelerr)
    rows = {}
    for path in sorted(glob.glob(os.path.join(out, "*-seed*.json"))):
        with open(path) as f:
            for r in json.load(f):
                codec = r["codec"].split(":")[0]
                shape = r.get("input", "uniform")  # rows from before --input were uniform
                rows.setdefault(shape, {}).setdefault(codec, {}).setdefault(
                    r["algorithm"], {})[r["seed"]] = (r["maxrelerr"], r["rmsrelerr"])
    if not rows:
        sys.exit(f"twolevel-accuracy: no terse-bench JSON in {out}")
    print("| input | codec | seeds | flat rmsrelerr | two-level / flat, rms | "
          "two-level / flat, max (range) | seeds where two-level's max is higher |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for shape, codecs in rows.items():
        for codec, algos in codecs.items():
            flat, two = algos.get("flat", {}), algos.get("twolevel", {})
            seeds = sorted(set(flat) & set(two))
            if not seeds or any(flat[s][0] == 0 or flat[s][1] == 0 for s in seeds):
                continue
            rms = [two[s][1] / flat[s][1] for s in seeds]
            mx = [two[s][0] / flat[s][0] for s in seeds]
            mean_flat_rms = sum(flat[s][1] for s in seeds) / len(seeds)
            print(f"| {shape} | {codec} | {len(seeds)} | {mean_flat_rms:.2e} | "
                  f"{min(rms):.3f}-{max(rms):.3f} | {min(mx):.2f}-{max(mx):.2f} | "
                  f"{sum(1 for m in mx if m > 1)} of {len(seeds)} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="directory for terse-bench's JSON")
    p.add_argument("--shapes", default="uniform normal laplace")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 of each shape")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--size", default="64M")
    p.add_argument("--terse-run", default="build/bin/terse-run")
    p.add_argument("--terse-bench", default="build/bin/terse-bench")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    if not args.report_only:
        run(args)
    report(args.out)


if __name__ == "__main__":
    main()
