#!/usr/bin/env python3
"""The table and plots of a scripts/sim-sweep.sh run: reads every row JSON in DIR (terse-sim
--json, w*.json) and writes DIR/rows.json (all of them), DIR/table.md and, where matplotlib is importable, DIR/time-SIZE.png and
DIR/speedup-SIZE.png (one panel per NIC rate, one line per codec and algorithm, against the
world size). `vs none` compares with `none` under the same algorithm, `vs flat none` with flat
`none` (the uncompressed baseline a user has today); `-` where that point was not run.

    /usr/bin/python3 scripts/sim-sweep-report.py DIR
"""
import glob
import json
import os
import re
import sys


def rate(row):
    return float(re.search(r"NIC ([0-9.]+) Gbit/s", row["platform"]).group(1))


def short(codec):
    return codec.split(":")[0]


def size_name(nbytes):
    return f"{nbytes >> 30}GiB" if nbytes >= 1 << 30 and nbytes % (1 << 30) == 0 \
        else f"{nbytes >> 20}MiB"


def load(out):
    rows = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "w*.json")))]
    if not rows:
        sys.exit(f"sim-sweep-report: no row JSON in {out}")
    for r in rows:
        r.setdefault("algo", "auto")
        r["rate"] = rate(r)
    return rows


def table(rows, out):
    key = lambda r: (r["world"], r["rate"], r["bytes"])  # noqa: E731
    none = {key(r) + (r["algo"],): r["time_us"] for r in rows if short(r["codec"]) == "none"}
    flat = {key(r): r["time_us"] for r in rows
            if short(r["codec"]) == "none" and r["algo"] == "flat"}
    rows.sort(key=lambda r: (r["bytes"], r["rate"], r["world"], short(r["codec"]), r["algo"]))

    def ratio(base, t):
        return "%.2fx" % (base / t) if base else "-"
    path = os.path.join(out, "table.md")
    with open(path, "w") as f:
        f.write("| ranks | NIC Gbit/s | size | codec | algo | time (us) | busbw (GB/s) | "
                "busiest NIC (MB) | vs none | vs flat none | wall (s) |\n")
        f.write("|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|\n")
        for r in rows:
            f.write("| %d | %g | %s | %s | %s | %.1f | %.2f | %.1f | %s | %s | %.1f |\n" % (
                r["world"], r["rate"], size_name(r["bytes"]), short(r["codec"]), r["algo"],
                r["time_us"], r["busbw_gbs"], r["max_nic_bytes"] / 1e6,
                ratio(none.get(key(r) + (r["algo"],)), r["time_us"]),
                ratio(flat.get(key(r)), r["time_us"]), r["wall_s"]))
    print("sim-sweep: table in " + path)
    return flat


def plots(rows, flat, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("sim-sweep: no matplotlib (Debian: python3-matplotlib), no plots")
        return
    for nbytes in sorted({r["bytes"] for r in rows}):
        at = [r for r in rows if r["bytes"] == nbytes]
        rates = sorted({r["rate"] for r in at})
        lines = sorted({(short(r["codec"]), r["algo"]) for r in at})
        codecs = sorted({c for c, _ in lines})
        colours = {c: matplotlib.colormaps["tab10"](i % 10) for i, c in enumerate(codecs)}
        styles = {"flat": "--", "twolevel": "-", "auto": ":", "ring": "-.", "rd": "-."}
        for what in ("time", "speedup"):
            fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 4), squeeze=False)
            for ax, rt in zip(axes[0], rates):
                for codec, algo in lines:
                    pts = sorted((r["world"], r["time_us"]) for r in at if r["rate"] == rt and
                                 short(r["codec"]) == codec and r["algo"] == algo)
                    if what == "speedup":
                        pts = [(w, flat[(w, rt, nbytes)] / t) for w, t in pts
                               if (w, rt, nbytes) in flat]
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(algo, "-"),
                                marker="o", ms=3, color=colours[codec], label=f"{codec} {algo}")
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_title(f"{size_name(nbytes)} allreduce, NIC {rt:g} Gbit/s")
                ax.set_xlabel("ranks")
                ax.set_ylabel("predicted time (us)" if what == "time"
                              else "speedup over flat none")
                if what == "speedup":
                    ax.axhline(1.0, color="grey", lw=0.8)
                ax.grid(True, which="both", alpha=0.3)
            axes[0][-1].legend(fontsize=7, loc="best")
            fig.tight_layout()
            path = os.path.join(out, f"{what}-{size_name(nbytes)}.png")
            fig.savefig(path, dpi=110)
            plt.close(fig)
            print("sim-sweep: plot " + path)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = load(sys.argv[1])
    with open(os.path.join(sys.argv[1], "rows.json"), "w") as f:
        json.dump(rows, f, indent=1)  # every point in one file, to keep with the table
    flat = table(rows, sys.argv[1])
    plots(rows, flat, sys.argv[1])


if __name__ == "__main__":
    main()
