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
terse-bench ran it with (`--algo`); --intra-gbps sets the node link's speed for the prediction
(terse-sim's default, 100 GB/s, is an NVLink-class figure; emulated hosts' ranks share memory or
loopback and this machine's cores: docs/benchmarks.md, "Simulated against measured", measures it).

Which rows the link bounds. When the run also measured an unshaped link (bench-network.sh
--rates "... unshaped", recorded as rate 0), each shaped row gets two more columns: the link's
time alone (the same terse-sim command with compute free and the node link at its default: what
the shaped link needs for the call's real messages) and the same call's measured time on the
unshaped link (what everything but the link costs on this machine: the codecs, the engine's
arithmetic, the transport's CPU time, ranks sharing cores). The floor is that time, or the
fastest shaped time of the same call if that is lower (each is one run of a few calls). A row is
link-bound when the link alone needs at least the floor, CPU-bound otherwise; auto's rows are
not predicted (its pick depends on the link). --tolerance P (default 20) then summarises the
link-bound rows' errors, and --check makes the exit status 1 when one of them is off by more than
P percent (2 when no row could be classified).
"""
import argparse
import json
import subprocess
import sys


def load(prefix):
    try:
        with open(prefix + "-setup.json") as f:
            setup = json.load(f)
        with open(prefix + "-runs.jsonl") as f:
            runs = [json.loads(line) for line in f if line.strip()]
        with open(prefix + "-terse.json") as f:
            rows = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"sim-validate: cannot read the measured run {prefix}-*: {e}")
    return setup, runs, rows


def predict(args, setup, per_host, rate, row, algo, with_compute):
    """terse-sim's time in us for one measured row, with the model's compute or without."""
    cmd = [args.sim, "--world", str(setup["ranks"]), "--ranks-per-node", str(per_host)]
    cmd += ["--nic-per-rank"] if per_host == 1 else []
    cmd += ["--nic-gbit", str(rate), "--nic-lat-us", "0", "--switch-lat-us", "0",
            "--bytes", str(row["bytes"]), "--codec", row["codec"], "--algo", algo]
    # The link alone: no compute, and the node link at terse-sim's default speed, so the time is
    # the shaped links' (a slow --intra-gbps stands for this machine's CPU copying inside a host,
    # which the unshaped run measures).
    if with_compute:
        cmd += ["--model", args.model, "--compute-share", args.compute_share]
        if args.intra_gbps:
            cmd += ["--intra-gbps", args.intra_gbps]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"sim-validate: {' '.join(cmd)} failed:\n{done.stdout}")
    try:
        return float(done.stdout.strip().splitlines()[-1].split()[4])
    except (IndexError, ValueError):
        sys.exit(f"sim-validate: cannot read a time in the output of {' '.join(cmd)}:\n"
                 f"{done.stdout}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sim", required=True, help="the terse-sim binary")
    p.add_argument("--measured", required=True, help="prefix of the saved bench-network.sh run")
    p.add_argument("--model", required=True, help="terse-bench codecs --json output")
    p.add_argument("--compute-share", default="1")
    p.add_argument("--intra-gbps", default=None, help="node link GB/s (terse-sim --intra-gbps)")
    p.add_argument("--tolerance", type=float, default=20.0,
                   help="percent a link-bound row's prediction may be off (default 20)")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when a link-bound row is off by more than --tolerance")
    args = p.parse_args()
    setup, runs, rows = load(args.measured)
    runs = [r for r in runs if r.get("impl") == "terse"]
    per_host = int(setup.get("ranks_per_host", 1))
    # Rows per run: terse-bench wrote one per codec and algorithm ("all" expands to every codec).
    if not runs or len(rows) % len(runs) != 0:
        sys.exit(f"sim-validate: {len(rows)} measured rows do not split evenly into "
                 f"{len(runs)} terse runs")
    per_run = len(rows) // len(runs)
    sizes = {"16M": 16 << 20, "64M": 64 << 20}
    shaped, unshaped, fastest = [], {}, {}
    for i, run in enumerate(runs):
        for row in rows[i * per_run:(i + 1) * per_run]:
            if row["bytes"] != sizes.get(run["size"], row["bytes"]):
                sys.exit(f"sim-validate: row {row['codec']} of {row['bytes']} bytes does not "
                         f"belong to the run of size {run['size']}")
            algo = row.get("algorithm", "auto")
            key = (row["bytes"], row["codec"], algo)
            if float(run["rate_gbit"]) == 0:
                unshaped[key] = row["time_us"]
            else:
                shaped.append((run, row, algo))
                fastest[key] = min(fastest.get(key, row["time_us"]), row["time_us"])
    if not shaped:
        sys.exit("sim-validate: the run has no shaped link to predict")

    print(f"measured: `{setup['command']}` (commit {setup['git_commit']}, "
          f"{setup['date_utc']})")
    print(f"predicted: {args.sim} ... --model {args.model} --compute-share {args.compute_share}\n")
    head = "| link | size | codec | algo | measured (ms) | predicted (ms) | error |"
    rule = "|---|---:|---|---|---:|---:|---:|"
    if unshaped:
        head += " link alone (ms) | unshaped (ms) | bound by |"
        rule += "---:|---:|---|"
    print(head)
    print(rule)
    link_bound, unclassified, skipped = [], 0, 0
    for run, row, algo in shaped:
        probe = run.get("probe_gbit")
        rate = probe if probe else run["rate_gbit"]
        link = f"{float(run['rate_gbit']):g} Gbit/s " + (f"({probe} probed)" if probe else
                                                          "(not probed)")
        codec = row["codec"].split(":")[0]
        line = f"| {link} | {row['bytes'] >> 20} MiB | {codec} | {algo} | {row['time_us'] / 1e3:.1f} |"
        if codec == "auto":
            # auto's pick depends on the link it measured, so neither a prediction of one codec
            # nor the unshaped run's (possibly other) pick stands for this row.
            skipped += 1
            print(line + " - | - |" + (" - | - | not predicted: auto |" if unshaped else ""))
            continue
        predicted_us = predict(args, setup, per_host, rate, row, algo, True)
        error = (predicted_us / row["time_us"] - 1) * 100
        line += f" {predicted_us / 1e3:.1f} | {error:+.0f}% |"
        if unshaped:
            key = (row["bytes"], row["codec"], algo)
            if key not in unshaped:
                unclassified += 1
                line += " - | - | not measured unshaped |"
            else:
                # What everything but the link costs cannot exceed what the call took on any
                # link: the lower of the unshaped time and the fastest shaped one (one noisy run
                # each, and ranks sharing cores can be slower with the link out of the way).
                floor_us = min(unshaped[key], fastest[key])
                alone_us = predict(args, setup, per_host, rate, row, algo, False)
                bound = "link" if alone_us >= floor_us else "CPU"
                line += f" {alone_us / 1e3:.1f} | {unshaped[key] / 1e3:.1f} | {bound} |"
                if bound == "link":
                    link_bound.append((f"{float(run['rate_gbit']):g} Gbit/s "
                                       f"{row['bytes'] >> 20} MiB {codec} {algo}", error))
        print(line)
    if skipped:
        print(f"\n({skipped} auto rows not predicted)")
    if not unshaped:
        print("\n(no unshaped run measured: which rows the link bounds is not known)")
        if args.check:
            print("sim-validate: --check needs an unshaped run (bench-network.sh --rates "
                  "\"... unshaped\") to know which rows to hold to the tolerance", file=sys.stderr)
            return 2
        return 0
    classified = len(shaped) - skipped - unclassified
    outside = [(name, e) for name, e in link_bound if abs(e) > args.tolerance]
    worst = max((abs(e) for _, e in link_bound), default=0)
    print(f"\n{len(link_bound)} of {classified} classified rows link-bound; "
          f"{len(link_bound) - len(outside)} within {args.tolerance:g}% (largest error "
          f"{worst:.0f}%)" + (f"; {unclassified} rows had no unshaped measurement"
                              if unclassified else "")
          + "".join(f"\n  outside: {n} ({e:+.0f}%)" for n, e in outside))
    if args.check and classified == 0:
        print("sim-validate: --check: no row could be classified (no unshaped measurement of "
              "the same size, codec and algorithm)", file=sys.stderr)
        return 2
    return 1 if args.check and outside else 0

if __name__ == "__main__":
    sys.exit(main())
