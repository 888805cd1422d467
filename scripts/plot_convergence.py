#!/usr/bin/python3
"""Plots terse-train's JSON logs: training loss against step, one line per codec, solid with
error feedback and dashed without. Needs matplotlib (Debian: /usr/bin/python3 with
python3-matplotlib; the pyenv python3 on PATH lacks it).

  /usr/bin/python3 scripts/plot_convergence.py build/tests/train/convergence docs/img/convergence.png

Reads every *.json in the directory that holds a terse-train log ("config" and "steps"), smooths
the per-step minibatch loss with a moving average (--window steps) and marks each epoch's
full-training-set loss with a dot. With --table it also prints the docs/convergence.md table
(final losses and accuracies against the uncompressed run) as Markdown.
"""
import argparse
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["none", "fp16", "bf16", "int8", "fp8", "mxfp8", "mxfp4", "int4", "onebit", "topk"]


def label(cfg):
    codec = cfg["codec"]
    # Canonical specs spell out every parameter ("int8:block=256,round=nearest,seed=0"); the
    # legend keeps the codec and top-k's ratio only.
    name = codec.split(":")[0]
    if name == "topk" and "ratio=" in codec:
        name += " " + codec.split("ratio=")[1].split(",")[0]
    if codec != "none":
        name += " + EF" if cfg["error_feedback"] else " (no EF)"
    return name


def smooth(values, window):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("logdir")
    p.add_argument("output")
    p.add_argument("--window", type=int, default=50)
    p.add_argument("--title", default=None)
    p.add_argument("--table", action="store_true", help="print the Markdown results table")
    args = p.parse_args()
    runs = []
    for path in sorted(glob.glob(os.path.join(args.logdir, "*.json"))):
        with open(path) as f:
            try:
                log = json.load(f)
            except json.JSONDecodeError:
                continue
        if isinstance(log, dict) and "config" in log and "steps" in log and log["steps"]:
            runs.append(log)
    if not runs:
        sys.exit(f"no terse-train logs in {args.logdir}")

    def key(log):
        c = log["config"]
        base = next((i for i, n in enumerate(ORDER) if c["codec"].startswith(n)), len(ORDER))
        return (not c["error_feedback"] and c["codec"] != "none", base, c["codec"])

    runs.sort(key=key)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color_of = {}
    for log in runs:
        cfg = log["config"]
        base = next((n for n in ORDER if cfg["codec"].startswith(n)), cfg["codec"])
        color = color_of.setdefault(base, colors[len(color_of) % len(colors)])
        steps = [s[0] for s in log["steps"]]
        loss = smooth([s[1] for s in log["steps"]], args.window)
        style = "-" if cfg["error_feedback"] or cfg["codec"] == "none" else "--"
        ax.plot(steps, loss, style, color=color, linewidth=1.4, label=label(cfg))
        ax.plot([e["step"] for e in log["epochs"]], [e["train_loss"] for e in log["epochs"]], "o",
                color=color, markersize=3)
    c = runs[0]["config"]
    ax.set_title(args.title or f"terse-train: {c['model']} ({c['parameters']} parameters), "
                 f"{c['world']} ranks, {c['split']} split, global batch {c['batch']}")
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss (minibatch, {args.window}-step mean; dots: full set per epoch)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(ncol=2, fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output} ({len(runs)} runs)")
    if args.table:
        print_table(runs)


def print_table(runs):
    base = next((r for r in runs if r["config"]["codec"] == "none"), None)
    if base is None:
        sys.exit("--table needs the run with codec none as the reference")
    b = base["epochs"][-1]
    b_bytes = base["bytes_sent_rank0"]
    print("| codec (canonical spec) | EF | final train loss | vs none | test acc | vs none "
          "| test loss | bytes sent by rank 0 |")
    print("|---|---|---|---|---|---|---|---|")
    for log in runs:
        c, e = log["config"], log["epochs"][-1]
        ef = "–" if c["codec"] == "none" else ("yes" if c["error_feedback"] else "**no**")
        print(f"| {c['codec']} | {ef} | {e['train_loss']:.4f} | "
              f"{(e['train_loss'] / b['train_loss'] - 1) * 100:+.2f}% | {e['test_acc'] * 100:.2f}% | "
              f"{(e['test_acc'] - b['test_acc']) * 100:+.2f} | {e['test_loss']:.4f} | "
              f"{log['bytes_sent_rank0'] / 1e6:.1f} MB ({log['bytes_sent_rank0'] / b_bytes:.3f}x) |")


if __name__ == "__main__":
    main()
