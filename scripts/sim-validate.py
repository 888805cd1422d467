#!/usr/bin/env python3
"""Sets terse-sim's predictions beside a measured scripts/bench-network.sh run (docs/simulation.md,
"Validation against measurement") and prints the table with each prediction's error.

    scripts/sim-validate.py --sim build/bin/terse-sim \
        --measured sim/validation/bench-network-2026-11-25 \
        --model sim/models/codecs-cpu-1MiB-2026-11-25.json --compute-share 0.25

--measured names the prefix of three files bench-network.sh's results were saved as:
PREFIX-setup.json (the command, commit and rank count), PREFIX-runs.jsonl (one line per link
rate and size, in the order run, with the rate the probe measured on the shaped link) and
PREFIX-terse.json (terse-bench's rows, one per codec for each of those runs, in the same order).
Each prediction runs `terse-sim --world R --ranks-per-node 1 --nic-per-rank` at the probed rate
with latencies left out (microseconds against milliseconds), the given model and compute share.
A run with several ranks per host (--ranks-per-host K) is predicted with `--ranks-per-node K`
and one NIC per node (each emulated host has one shaped link), and each row with the algorithm
terse-bench ran it with (`--algo`); --intra-gbps sets the node link's speed (terse-sim's
default, 100 GB/s, is an NVLink-class figure; emulated hosts' ranks share memory or loopback).
"""
import argparse
import json
import subprocess
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sim", required=True, help="the terse-sim binary")
    p.add_argument("--measured", required=True, help="prefix of the saved bench-network.sh run")
    p.add_argument("--model", required=True, help="terse-bench codecs --json output")
    p.add_argument("--compute-share", default="1")
    p.add_argument("--intra-gbps", default=None, help="node link GB/s (terse-sim --intra-gbps)")
    args = p.parse_args()
    try:
        with open(args.measured + "-setup.json") as f:
            setup = json.load(f)
        with open(args.measured + "-runs.jsonl") as f:
            runs = [json.loads(line) for line in f if line.strip()]
        with open(args.measured + "-terse.json") as f:
            rows = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"sim-validate: cannot read the measured run {args.measured}-*: {e}")
    runs = [r for r in runs if r.get("impl") == "terse"]
    per_host = int(setup.get("ranks_per_host", 1))
    algos = setup.get("algos", "auto").split()
    per_run = len(setup["codecs"].split()) * len(algos)
    if len(rows) != per_run * len(runs):
        sys.exit(f"sim-validate: {len(rows)} measured rows, expected {per_run} codecs x algos x "
                 f"{len(runs)} runs")
    print(f"measured: `{setup['command']}` (commit {setup['git_commit']}, "
          f"{setup['date_utc']})")
    print(f"predicted: {args.sim} ... --model {args.model} --compute-share {args.compute_share}\n")
    print("| link | size | codec | algo | measured (ms) | predicted (ms) | error |")
    print("|---|---:|---|---|---:|---:|---:|")
    for i, run in enumerate(runs):
        for row in rows[i * per_run:(i + 1) * per_run]:
            if row["bytes"] != {"16M": 16 << 20, "64M": 64 << 20}.get(run["size"], row["bytes"]):
                sys.exit(f"sim-validate: row {row['codec']} of {row['bytes']} bytes does not "
                         f"belong to the run of size {run['size']}")
            algo = row.get("algorithm", "auto")
            cmd = [args.sim, "--world", str(setup["ranks"]), "--ranks-per-node", str(per_host)]
            cmd += ["--nic-per-rank"] if per_host == 1 else []
            cmd += ["--nic-gbit", str(run["probe_gbit"]), "--nic-lat-us", "0",
                    "--switch-lat-us", "0", "--bytes", str(row["bytes"]), "--codec", row["codec"],
                    "--algo", algo, "--model", args.model, "--compute-share", args.compute_share]
            if args.intra_gbps:
                cmd += ["--intra-gbps", args.intra_gbps]
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            if done.returncode != 0:
                sys.exit(f"sim-validate: {' '.join(cmd)} failed:\n{done.stdout}")
            predicted_us = float(done.stdout.strip().splitlines()[-1].split()[4])
            measured_us = row["time_us"]
            link = f"{run['rate_gbit']} Gbit/s ({run['probe_gbit']} probed)"
            print(f"| {link} | {row['bytes'] >> 20} MiB | {row['codec'].split(':')[0]} | {algo} | "
                  f"{measured_us / 1e3:.1f} | {predicted_us / 1e3:.1f} | "
                  f"{(predicted_us / measured_us - 1) * 100:+.0f}% |")


if __name__ == "__main__":
    main()
