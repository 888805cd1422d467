#!/usr/bin/env python3
"""Writes scripts/device-check.sh's summary (summary.json and summary.md in --out) from the
stage table and logs it left in --logs. Exit 0 when no stage failed, 1 otherwise.

The bandwidth goal (issue #36): the codec kernels of fp16, bf16, int8, fp8, mxfp8 and mxfp4 at
0.8 or more of a device-to-device copy measured in the same run (terse-bench gpukernels' ratio
column). A kernel below it fails stage gpu-bench, so the summary says which.

Issue #45's stages (their parsers below are unit-tested by tests/gpu/device_summary_test.py on
the recorded samples in tests/gpu/samples/):
  coll-device  terse-bench rows (JSON) of allreduce / reducescatter / allgather on CUDA and host
               buffers, 2 and 4 ranks (coll/<ranks>-<kind>-<buffers>[-<tag>].json), and the
               overlap runs (tag "serial": one pipeline segment per chunk);
  nccl-perf    tests/gpu/nccl_perf_job.py allreduce rows per transport and link (nccl-perf/ and
               netem/ *.json with mode allreduce), plotted as bus bandwidth against size;
  ddp          the same script's DDP runs (mode ddp): steps/s and the loss curves.
The issue's targets are reported (met, missed, or not measured); they do not fail a stage.
With --replot SUMMARY_JSON the plot is made again from a returned summary.json (where the
GPU machine's Python had no matplotlib)."""
import argparse
import glob
import json
import os
import re
import sys

GOAL = 0.8
# The kernels the goal is about: each codec's encoder and decoders.
GOAL_KERNELS = re.compile(r"^(convert f32->f16|convert f16->f32|accumulate f16|"
                          r"convert f32->bf16|convert bf16->f32|accumulate bf16|"
                          r"int8(Quantize|Dequantize)|"
                          r"(fp8|mxfp8|mxfp4)(Quantize|Dequantize))")
STAGES_NEEDING_GPU = {"gpu-tests", "memcheck", "gpu-bench", "torch-cuda", "nccl-net",
                      "nccl-collnet", "nccl-perf", "ddp", "coll-device", "netem"}


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


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def coll_rows(coll_dir):
    """terse-bench JSON rows of stage coll-device, each tagged with its run (file name
    <ranks>-<kind>-<buffers>[-<tag>].json; tag "serial" is the no-overlap run)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(coll_dir, "*.json"))):
        m = re.fullmatch(r"(\d+)-(allreduce|reducescatter|allgather)-(host|cuda)(?:-(\w+))?\.json",
                         os.path.basename(path))
        data = load_json(path)
        if not m or not isinstance(data, list):
            continue
        for r in data:
            rows.append(dict(r, codec=r["codec"].split(":")[0], run=m.group(4) or "pipelined"))
    return rows


def coll_table(rows):
    """One line per (collective, ranks, codec): host and CUDA buffers side by side."""
    keyed = {}
    for r in rows:
        if r["run"] != "pipelined":
            continue
        keyed.setdefault((r["collective"], r["ranks"], r["codec"], r["bytes"]), {})[r["buffers"]] = r
    out = []
    for (kind, ranks, codec, size), by in sorted(keyed.items(), key=lambda kv: (
            kv[0][0], kv[0][1], kv[0][3], CODEC_ORDER.get(kv[0][2], 99), kv[0][2])):
        h, c = by.get("host"), by.get("cuda")
        out.append({"collective": kind, "ranks": ranks, "codec": codec, "bytes": size,
                    "host_us": h and h["time_us"], "host_busbw": h and h["busbw_gbs"],
                    "cuda_us": c and c["time_us"], "cuda_busbw": c and c["busbw_gbs"],
                    "cuda_codec_us": c and c.get("compress_us", 0) + c.get("reduce_us", 0),
                    "cuda_maxrelerr": c and c["maxrelerr"],
                    "cuda_vs_host": h and c and h["time_us"] / c["time_us"]})
    return out


def overlap_table(rows):
    """The pipelined CUDA allreduce against the same with one segment per chunk (serial)."""
    piped = {(r["ranks"], r["codec"], r["bytes"]): r for r in rows
             if r["buffers"] == "cuda" and r["run"] == "pipelined" and r["collective"] == "allreduce"}
    out = []
    for r in rows:
        if r["run"] != "serial" or r["buffers"] != "cuda":
            continue
        p = piped.get((r["ranks"], r["codec"], r["bytes"]))
        if not p:
            continue
        codec_us = p.get("compress_us", 0) + p.get("reduce_us", 0)
        out.append({"ranks": r["ranks"], "codec": r["codec"], "bytes": r["bytes"],
                    "pipelined_us": p["time_us"], "serial_us": r["time_us"],
                    "codec_us": codec_us, "saved_us": r["time_us"] - p["time_us"],
                    "speedup": r["time_us"] / p["time_us"]})
    return out


CODEC_ORDER = {c: i for i, c in enumerate(
    ["none", "fp16", "bf16", "int8", "fp8", "mxfp8", "mxfp4", "int4", "onebit", "topk"])}
TRANSPORT_ORDER = ["socket", "net", "collnet-none", "collnet-fp16", "collnet-int8",
                   "collnet-mxfp8"]


def transport_rank(t):
    return (TRANSPORT_ORDER.index(t) if t in TRANSPORT_ORDER else 99, t)


def job_results(*dirs):
    """tests/gpu/nccl_perf_job.py's results: (allreduce runs, ddp runs), each a list of dicts."""
    perf, ddp = [], []
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.json"))):
            data = load_json(path)
            if not isinstance(data, dict) or "transport" not in data:
                continue
            (perf if data.get("mode") == "allreduce" else ddp).append(data)
    return perf, ddp


def perf_rows(perf):
    """Flat rows: link, transport, bytes, busbw, time, algorithm NCCL chose, error."""
    rows = []
    for run in perf:
        for r in run.get("rows", []):
            rows.append({"link": run.get("link", "loopback"), "transport": run["transport"],
                         "bytes": r["bytes"], "time_us": r["time_us"], "busbw_gbs": r["busbw_gbs"],
                         "algo": r.get("algo", "?"), "maxrelerr": r["maxrelerr"]})
    return rows


def busbw_at(rows, link, transport, size=None):
    """(bytes, busbw) at `size`, or at the largest size measured for both when size is None."""
    pts = {r["bytes"]: r["busbw_gbs"] for r in rows
           if r["link"] == link and r["transport"] == transport}
    if size is not None:
        return (size, pts[size]) if size in pts else None
    return (max(pts), pts[max(pts)]) if pts else None


def ddp_compare(ddp, link, base="socket", other="collnet-int8"):
    """Steps/s of `other` over `base` on one link, and their losses over the steps both ran
    (mean of the last 10 of them, relative difference)."""
    runs = {d["transport"]: d for d in ddp if d.get("link", "loopback") == link and "losses" in d}
    if base not in runs or other not in runs:
        return None
    a, b = runs[base], runs[other]
    n = min(len(a["losses"]), len(b["losses"]))
    tail = max(1, min(10, n))
    la = sum(a["losses"][n - tail:n]) / tail if n else float("nan")
    lb = sum(b["losses"][n - tail:n]) / tail if n else float("nan")
    return {"link": link, "base": base, "other": other, "steps_compared": n,
            "base_steps_per_s": a["steps_per_s"], "other_steps_per_s": b["steps_per_s"],
            "speedup": b["steps_per_s"] / a["steps_per_s"] if a["steps_per_s"] else None,
            "base_loss": la, "other_loss": lb,
            "loss_rel_diff": abs(lb - la) / abs(la) if n and la else None}


# Issue #45's kernel goals: every encoder and decoder of the block codecs and onebit (with and
# without residual, nearest and stochastic) at 0.8 of the copy; top-k compress 0.3, its decoders
# 0.5 (terse-bench gpukernels' rows and byte counts).
CODEC_KERNELS = re.compile(r"^(int8|fp8|fp8e5m2|mxfp8|mxfp4|int4|onebit)"
                           r"(Quantize|Dequantize|Compress|Decompress)")
KERNEL_GOALS = [("every block-codec and onebit encoder and decoder / copy", CODEC_KERNELS, 0.8),
                ("topk compress / copy", re.compile(r"^topkCompress"), 0.3),
                ("topk decoders / copy", re.compile(r"^topkDecompress"), 0.5)]


def kernel_targets(bench):
    """The kernel goals over gpukernels' rows: the lowest ratio of each group against its goal."""
    out = []
    for name, pattern, goal in KERNEL_GOALS:
        rows = [r for r in bench if pattern.match(r["kernel"])]
        if not rows:
            out.append({"target": name, "status": "not measured", "value": None, "goal": goal,
                        "what": "terse-bench gpukernels"})
            continue
        low = min(rows, key=lambda r: r["ratio"])
        below = [r["kernel"] for r in rows if r["ratio"] < goal]
        out.append({"target": name, "status": "missed" if below else "met",
                    "value": low["ratio"], "goal": goal,
                    "what": f"lowest of {len(rows)}: {low['kernel']}"
                            + (f"; below: {', '.join(below)}" if below else "")})
    return out


def targets(rows, ddp, bench=()):
    """Issue #45's targets, each met / missed / not measured (with what was compared)."""
    out = kernel_targets(list(bench))

    def verdict(name, value, goal, what):
        if value is None:
            out.append({"target": name, "status": "not measured", "value": None, "goal": goal,
                        "what": what})
        else:
            out.append({"target": name, "status": "met" if value >= goal else "missed",
                        "value": value, "goal": goal, "what": what})
    gib = 1 << 30
    s, n = busbw_at(rows, "loopback", "socket", gib), busbw_at(rows, "loopback", "net", gib)
    verdict("net plugin / Socket busbw at 1 GiB (loopback)", s and n and n[1] / s[1], 0.95,
            "allreduce busbw, 2 processes as 2 hosts")
    s10 = busbw_at(rows, "10gbit", "socket")
    c10 = s10 and busbw_at(rows, "10gbit", "collnet-int8", s10[0])
    verdict("CollNet int8 / Socket busbw at 10 Gbit/s", s10 and c10 and c10[1] / s10[1], 2.5,
            f"at {s10[0]} bytes" if s10 else "largest size measured by both")
    d10 = ddp_compare(ddp, "10gbit")
    verdict("DDP steps/s CollNet int8 / Socket at 10 Gbit/s", d10 and d10["speedup"], 1.5,
            "~100M-parameter transformer")
    # The dry run's gloo smoke test ("cpu-smoke") measures nothing a target is about.
    for link in sorted({d.get("link", "loopback") for d in ddp} - {"cpu-smoke"}):
        d = ddp_compare(ddp, link)
        if d and d["loss_rel_diff"] is not None:
            out.append({"target": f"DDP loss CollNet int8 within 1% of Socket ({link})",
                        "status": "met" if d["loss_rel_diff"] <= 0.01 else "missed",
                        "value": d["loss_rel_diff"], "goal": 0.01,
                        "what": f"mean of the last 10 of {d['steps_compared']} steps both ran"
                                + ("" if d["steps_compared"] >= 200 else
                                   " (fewer than the issue's 200: what fitted the budget)")})
    return out


def size_text(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def plot_busbw(rows, out_dir, title):
    """busbw.png: bus bandwidth against size, one panel per link, one line per transport
    (matplotlib, as bench/plot_network.py, whose colours and size labels it borrows). One file:
    the device tool returns at most 8. Returns (files, why-not)."""
    if not rows:
        return [], "no allreduce rows"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], f"{sys.executable} has no matplotlib (make it here: --replot summary.json)"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
    import plot_network  # noqa: E402 -- bench/, found relative to this script
    links = sorted({r["link"] for r in rows}, key=lambda k: (k != "loopback", k))
    fig, axes = plt.subplots(1, len(links), figsize=(6 * len(links) + 2, 5), squeeze=False)
    for ax, link in zip(axes[0], links):
        order = sorted({r["transport"] for r in rows if r["link"] == link}, key=transport_rank)
        for t in order:
            pts = sorted((r["bytes"], r["busbw_gbs"]) for r in rows
                         if r["link"] == link and r["transport"] == t)
            st = plot_network.style_for(t, order)
            label = {"socket": "NCCL Socket", "net": "terse net plugin"}.get(
                t, t.replace("collnet-", "terse CollNet "))
            if link == "cpu-smoke":  # the dry run's gloo stand-in measures no transport
                label = f"gloo smoke test (as {t})"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, color=st["color"],
                    linestyle=st["linestyle"], marker=st["marker"])
        m = re.fullmatch(r"(\d+)gbit", link)
        if m:
            ax.axhline(int(m.group(1)) / 8, color="grey", linewidth=1, linestyle=":",
                       label=f"line rate ({m.group(1)} Gbit/s)")
        sizes = sorted({r["bytes"] for r in rows if r["link"] == link})
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([plot_network.size_label(x) for x in sizes], rotation=45)
        ax.set_xlabel("message size (bytes of float32)")
        ax.set_ylabel("bus bandwidth (GB/s, nccl-tests' definition)")
        ax.set_title(link, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"NCCL allreduce, 2 processes as 2 hosts; {title}", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "busbw.png"), dpi=90)
    plt.close(fig)
    return ["busbw.png"], ""


def job_markdown(summary):
    """The Markdown of issue #45's results (device collectives, NCCL perf, DDP, targets)."""
    md = []
    coll = summary.get("coll_device") or []
    if coll:
        md += ["", "Collectives on CUDA and host buffers (terse-bench, one GPU shared; busbw in "
               "GB/s, codec = compress + reduce time per call on the CUDA path):", "",
               "| collective | ranks | size | codec | host us | host busbw | CUDA us | CUDA busbw "
               "| CUDA codec us | CUDA maxrelerr | host/CUDA time |",
               "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
        for r in coll:
            md.append(f"| {r['collective']} | {r['ranks']} | {size_text(r['bytes'])} | {r['codec']} "
                      f"| {f(r['host_us'], '.0f')} | {f(r['host_busbw'], '.3f')} "
                      f"| {f(r['cuda_us'], '.0f')} | {f(r['cuda_busbw'], '.3f')} "
                      f"| {f(r['cuda_codec_us'], '.0f')} | {f(r['cuda_maxrelerr'], '.2e')} "
                      f"| {f(r['cuda_vs_host'], '.2f')} |")
    ov = summary.get("overlap") or []
    if ov:
        md += ["", "Overlap of kernels with the wire (CUDA allreduce: pipelined segments against "
               "one segment per chunk, TERSE_SEGMENT_BYTES=1 GiB):", "",
               "| ranks | codec | size | pipelined us | one segment us | codec us | saved us | "
               "speedup |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for r in ov:
            md.append(f"| {r['ranks']} | {r['codec']} | {size_text(r['bytes'])} | "
                      f"{r['pipelined_us']:.0f} | {r['serial_us']:.0f} | {r['codec_us']:.0f} | "
                      f"{r['saved_us']:.0f} | {r['speedup']:.2f} |")
    rows = summary.get("nccl_perf") or []
    for link in sorted({r["link"] for r in rows}):
        order = sorted({r["transport"] for r in rows if r["link"] == link}, key=transport_rank)
        sizes = sorted({r["bytes"] for r in rows if r["link"] == link})
        at = {(r["transport"], r["bytes"]): r for r in rows if r["link"] == link}
        md += ["", f"NCCL allreduce bus bandwidth (GB/s), {link}, 2 processes as 2 hosts "
               "(tests/gpu/nccl_perf_job.py; NCCL's algorithm below each figure):", "",
               "| size | " + " | ".join(order) + " |", "|---:|" + "---:|" * len(order)]
        for size in sizes:
            cells = []
            for t in order:
                r = at.get((t, size))
                cells.append("-" if r is None else f"{r['busbw_gbs']:.2f} ({r['algo']})")
            md.append(f"| {size_text(size)} | " + " | ".join(cells) + " |")
    for d in summary.get("ddp") or []:
        losses = d.get("losses") or []
        md += ["", f"DDP ({d.get('link', 'loopback')}, {d['transport']}): "
               f"{d.get('params', 0) / 1e6:.1f}M parameters, {d.get('steps')} steps "
               f"(batch {d.get('batch')} x {d.get('seq')} tokens a rank), "
               f"{d.get('steps_per_s', 0):.3f} steps/s; loss "
               + (f"{losses[0]:.4f} -> {losses[-1]:.4f}" if losses else "-")
               + (f"; NCCL's algorithms (calls): " + ", ".join(
                   f"{k} {v}" for k, v in sorted(d["nccl_algorithms"].items()))
                  if d.get("nccl_algorithms") else "")
               + ("; " + "; ".join(d["failures"]) if d.get("failures") else "")]
    if summary.get("plots") or summary.get("plot_note"):
        md += ["", "Plots: " + (", ".join(summary.get("plots") or []) or summary["plot_note"])]
    tg = summary.get("targets") or []
    if tg:
        md += ["", "Issue #45's targets:", "", "| target | goal | value | status | compared |",
               "|---|---:|---:|---|---|"]
        for t in tg:
            value = "-" if t["value"] is None else f"{t['value']:.3f}"
            md.append(f"| {t['target']} | {t['goal']} | {value} | {t['status']} | {t['what']} |")
    return md


def replot(path, out_dir):
    summary = load_json(path)
    if summary is None:
        print(f"device-summary: cannot read {path}", file=sys.stderr)
        return 2
    files, why = plot_busbw(summary.get("nccl_perf") or [], out_dir,
                            summary.get("machine", {}).get("gpu", ""))
    print("\n".join(os.path.join(out_dir, f) for f in files) or why)
    return 0 if files else 1


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--replot":
        if len(sys.argv) != 4:
            print("usage: device-summary.py --replot SUMMARY_JSON OUT_DIR", file=sys.stderr)
            return 2
        return replot(sys.argv[2], sys.argv[3])
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

    coll = coll_rows(os.path.join(args.logs, "coll"))
    perf, ddp = job_results(os.path.join(args.logs, "nccl-perf"), os.path.join(args.logs, "netem"),
                            os.path.join(args.logs, "ddp"))
    prows = perf_rows(perf)
    plots, plot_note = plot_busbw(prows, args.out, machine.get("gpu", "")) if prows else ([], "")

    failed = [s["stage"] for s in stages if s["status"] == "fail"]
    not_on_gpu = sorted({s["stage"] for s in stages if s["stage"] in STAGES_NEEDING_GPU and
                         s["status"] != "ok"})
    summary = {"dry_run": args.dry_run == "1", "elapsed_s": args.elapsed, "budget_s": args.budget,
               "machine": machine, "stages": stages, "failed": failed,
               "gpu_stages_not_passed": not_on_gpu,
               "bench": bench, "bandwidth_goal": {"ratio": GOAL, "kernels": goal,
                                                  "below": below},
               "torch_cuda": torch_cuda, "nccl": nccl,
               "coll_device": coll_table(coll), "overlap": overlap_table(coll),
               "coll_device_rows": coll, "nccl_perf": prows,
               "nccl_perf_runs": [{k: v for k, v in r.items() if k != "rows"} for r in perf],
               "ddp": ddp, "ddp_compare": [c for c in (ddp_compare(ddp, link) for link in sorted(
                   {d.get("link", "loopback") for d in ddp})) if c],
               "targets": targets(prows, ddp, bench) if (prows or ddp or bench) else [],
               "plots": plots, "plot_note": plot_note}
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
    md += job_markdown(summary)
    md += ["", f"Stages that have not passed on a GPU in this run: "
           f"{', '.join(not_on_gpu) if not_on_gpu else 'none'}."]
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
