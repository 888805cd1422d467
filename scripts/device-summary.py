#!/usr/bin/env python3
"""Writes scripts/device-check.sh's summary (summary.json and summary.md in --out) from the
stage table and logs it left in --logs. Exit 0 when no stage failed, 1 otherwise.

The bandwidth goal (issue #36): the codec kernels of fp16, bf16, int8, fp8, mxfp8 and mxfp4 at
0.8 or more of a device-to-device copy measured in the same run (terse-bench gpukernels' ratio
column). A kernel below it fails stage gpu-bench, so the summary says which."""
import argparse
import json
import os
import re

GOAL = 0.8
# The kernels the goal is about: each codec's encoder and decoders.
GOAL_KERNELS = re.compile(r"^(convert f32->f16|convert f16->f32|accumulate f16|"
                          r"convert f32->bf16|convert bf16->f32|accumulate bf16|"
                          r"int8(Quantize|Dequantize)|"
                          r"(fp8|mxfp8|mxfp4)(Quantize|Dequantize))")
STAGES_NEEDING_GPU = {"gpu-tests", "memcheck", "gpu-bench", "torch-cuda", "nccl-net",
                      "nccl-collnet"}


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def bench_rows(text):
    """terse-bench gpukernels' table: name, us/call, GB/s, ratio (the name may hold spaces)."""
    rows = []
    started = False
    for line in text.splitlines():
        if line.startswith("kernel") and "vs memcpy" in line:
            started = True
            continue
        if not started:
            continue
        parts = line.split()
        if len(parts) < 4:
            continue
        try:
            us, gbs, ratio = (float(x) for x in parts[-3:])
        except ValueError:
            continue
        rows.append({"kernel": " ".join(parts[:-3]), "us": us, "gbs": gbs, "ratio": ratio})
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--logs", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dry-run", default="0")
    p.add_argument("--elapsed", type=int, default=0)
    p.add_argument("--budget", type=int, default=480)
    args = p.parse_args()

    machine = {}
    for line in read(os.path.join(args.logs, "machine.txt")).splitlines():
        key, _, value = line.partition("=")
        machine[key] = value
    stages = []
    for line in read(os.path.join(args.logs, "results.tsv")).splitlines():
        name, status, secs, note = (line.split("\t") + ["", "", "", ""])[:4]
        stages.append({"stage": name, "status": status, "seconds": int(secs or 0), "note": note})

    bench = bench_rows(read(os.path.join(args.logs, "gpu-bench.log")))
    goal = [dict(r, meets=r["ratio"] >= GOAL) for r in bench if GOAL_KERNELS.match(r["kernel"])]
    below = [r["kernel"] for r in goal if not r["meets"]]
    for s in stages:
        if s["stage"] == "gpu-bench" and s["status"] == "ok" and below:
            s["status"] = "fail"
            s["note"] = f"below {GOAL} of the copy: " + ", ".join(below)
    torch_cuda = None
    if os.path.exists(os.path.join(args.logs, "torch-cuda.json")):
        torch_cuda = json.loads(read(os.path.join(args.logs, "torch-cuda.json")))
    nccl = {}
    for mode in ("net", "collnet"):
        path = os.path.join(args.logs, "nccl", f"{mode}.json")
        if os.path.exists(path):
            nccl[mode] = json.loads(read(path))

    failed = [s["stage"] for s in stages if s["status"] == "fail"]
    not_on_gpu = sorted({s["stage"] for s in stages if s["stage"] in STAGES_NEEDING_GPU and
                         s["status"] != "ok"})
    summary = {"dry_run": args.dry_run == "1", "elapsed_s": args.elapsed, "budget_s": args.budget,
               "machine": machine, "stages": stages, "failed": failed,
               "gpu_stages_not_passed": not_on_gpu,
               "bench": bench, "bandwidth_goal": {"ratio": GOAL, "kernels": goal,
                                                  "below": below},
               "torch_cuda": torch_cuda, "nccl": nccl}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)

    md = [f"# terse GPU check{' (dry run)' if summary['dry_run'] else ''}", "",
          f"{machine.get('date', '?')}, commit {machine.get('commit', '?')}: "
          f"{machine.get('gpu', '?')}, compute capability {machine.get('compute_capability')}, "
          f"nvcc {machine.get('nvcc')}, {machine.get('os')} (glibc {machine.get('glibc')}), "
          f"{machine.get('cores')} cores; torch {machine.get('torch')}. "
          f"{args.elapsed} s of a {args.budget} s budget.", "",
          "| stage | status | seconds | note |", "|---|---|---:|---|"]
    for s in stages:
        md.append(f"| {s['stage']} | {s['status']} | {s['seconds']} | "
                  f"{s['note'].replace('|', '/')} |")
    if bench:
        md += ["", f"GPU codec kernels (terse-bench gpukernels; goal: the marked kernels at "
               f">= {GOAL} of the copy):", "",
               "| kernel | us/call | GB/s | vs copy | goal |", "|---|---:|---:|---:|---|"]
        marks = {r["kernel"]: r["meets"] for r in goal}
        for r in bench:
            mark = {True: "meets", False: "**below**"}.get(marks.get(r["kernel"]), "")
            md.append(f"| {r['kernel']} | {r['us']:.1f} | {r['gbs']:.1f} | {r['ratio']:.2f} | "
                      f"{mark} |")
    if torch_cuda:
        md += ["", "PyTorch on CUDA tensors (2 ranks, one GPU):", "",
               "| run | result |", "|---|---|"]
        for r in torch_cuda.get("rows", []):
            md.append(f"| {r.get('codec')} | " + ", ".join(
                f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in r.items() if k != "codec" and v not in (None, "")) + " |")
    for mode, r in nccl.items():
        md += ["", f"NCCL {mode} (NCCL {r.get('nccl')}): plugin loaded {r['net_plugin_loaded']}, "
               f"network terse {r['using_network_terse']}, CollNet connected "
               f"{r['collnet_connected']}; " + "; ".join(r["checks"] + r["failures"]), "",
               "```"] + r["nccl_log"][:25] + ["```"]
    md += ["", f"Stages that have not passed on a GPU in this run: "
           f"{', '.join(not_on_gpu) if not_on_gpu else 'none'}."]
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
