#!/usr/bin/python3
"""Turns a bench-network.sh results directory into results.json, results.md and PNG plots.

  /usr/bin/python3 bench/plot_network.py RESULTS_DIR

RESULTS_DIR holds setup.json (how the run was made), runs.jsonl (one line per benchmark run: impl,
rate_gbit, size, file, probe_gbit) and the raw JSON rows each benchmark wrote. Written next to them:

  results.json          every row, tagged with its link rate, its speedup over `none` and (when
                        several allreduce algorithms ran) its speedup over `flat`
  results.md            the same as a Markdown table, with the setup above it; with several
                        algorithms also a table of each codec's algorithms side by side
  busbw-<R>gbit.png     bus bandwidth vs message size at R Gbit/s, one line per codec and OpenMPI
                        (only when several sizes were measured)
  busbw.png             bus bandwidth per codec at each rate (when a single size was measured)
  speedup.png           speedup over terse `none` per codec at each rate (largest size)
  algo-speedup.png      speedup of each algorithm over `flat` per codec at each rate (largest
                        size; only when flat and another algorithm were measured)

Bus bandwidth is nccl-tests' figure for the uncompressed-equivalent size, so a compressed codec
can exceed the link rate; speedup is time(none) / time(codec) at the same rate, size and
algorithm. When several algorithms ran (bench-network.sh --algos), a series is a codec with its
algorithm ("int8 twolevel"); rows of older runs, without an algorithm, count as one algorithm.
Uses Debian's python3-matplotlib (run with /usr/bin/python3).
"""
import json
import os
import sys

kOpenMpi = "OpenMPI"


def fail(msg):
    sys.stderr.write(f"plot_network: {msg}\n")
    sys.exit(1)


def size_label(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def rate_label(r):
    """A rate as the tables show it; 0 is bench-network.sh --rates unshaped (no tc limit)."""
    return "unshaped" if r == 0 else f"{r:g}"


def rate_text(r):
    """A rate as titles and axis labels show it."""
    return "unshaped" if r == 0 else f"{r:g} Gbit/s"


def rate_order(rates):
    """Shaped rates in increasing order, the unshaped run last."""
    return sorted(rates, key=lambda r: (r == 0, r))


def load(results_dir):
    """Every row of every run, flattened and tagged with rate and implementation."""
    setup_path = os.path.join(results_dir, "setup.json")
    runs_path = os.path.join(results_dir, "runs.jsonl")
    if not os.path.exists(runs_path):
        fail(f"{runs_path} not found: is {results_dir} a bench-network.sh results directory?")
    setup = {}
    if os.path.exists(setup_path):
        with open(setup_path) as f:
            setup = json.load(f)
    rows = []
    with open(runs_path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                run = json.loads(line)
                path = os.path.join(results_dir, run["file"])
                with open(path) as rf:
                    raw = json.load(rf)
            except (ValueError, KeyError, OSError) as e:
                fail(f"{runs_path}:{lineno}: {e}")
            for r in raw:
                row = {
                    "impl": run["impl"],
                    "rate_gbit": float(run["rate_gbit"]),
                    "probe_gbit": run.get("probe_gbit"),
                    "ranks": int(r.get("ranks", setup.get("ranks", 0))),
                    "bytes": int(r["bytes"]),
                    "codec": r["codec"] if run["impl"] == "terse" else kOpenMpi,
                    # What the allreduce ran (auto resolved); absent before terse-bench had --algo.
                    "algorithm": r.get("algorithm", "") if run["impl"] == "terse" else "",
                    "time_us": float(r["time_us"]),
                    "algbw_gbs": float(r["algbw_gbs"]),
                    "busbw_gbs": float(r["busbw_gbs"]),
                }
                for key in ("wire_bytes", "ratio", "maxrelerr"):
                    if key in r:
                        row[key] = float(r[key])
                if run["impl"] == "terse" and r.get("chosen") and r["codec"].startswith("auto"):
                    row["chosen"] = r["chosen"]  # the codec auto ran the call with
                rows.append(row)
    if not rows:
        fail(f"no result rows in {runs_path}")
    return setup, rows


def shorten_codecs(rows):
    """Labels by codec name ("int8") instead of the full spec ("int8:block=256,..."), unless two
    different specs of one codec were measured; the full spec stays in codec_spec. The series
    label ("series") adds the algorithm when more than one was measured."""
    specs = {}
    for r in rows:
        if r["impl"] == "terse":
            specs.setdefault(r["codec"].split(":")[0], set()).add(r["codec"])
    several = len(algorithms(rows)) > 1
    for r in rows:
        r["codec_spec"] = r["codec"]
        name = r["codec"].split(":")[0]
        if r["impl"] == "terse" and len(specs[name]) == 1:
            r["codec"] = name
        r["series"] = f"{r['codec']} {r['algorithm']}" if several and r["algorithm"] else r["codec"]


def algorithms(rows):
    """The allreduce algorithms terse ran, in the order they first appear (terse-bench's)."""
    seen = []
    for r in rows:
        if r["impl"] == "terse" and r["algorithm"] not in seen:
            seen.append(r["algorithm"])
    return seen


def add_speedups(rows):
    """speedup_vs_none = time of terse `none` / time of this row, at the same rate, size and
    algorithm (OpenMPI against the first algorithm's `none`); speedup_vs_flat = time of the same
    codec spec run `flat` / time of this row, at the same rate and size (terse rows of other
    algorithms, when flat was measured)."""
    none, flat = {}, {}
    algos = algorithms(rows)
    for r in rows:
        if r["impl"] != "terse":
            continue
        if r["codec_spec"].split(":")[0] == "none":
            none[(r["rate_gbit"], r["bytes"], r["algorithm"])] = r["time_us"]
        if r["algorithm"] == "flat":
            flat[(r["rate_gbit"], r["bytes"], r["codec_spec"])] = r["time_us"]
    for r in rows:
        algo = r["algorithm"] if r["impl"] == "terse" else (algos[0] if algos else "")
        base = none.get((r["rate_gbit"], r["bytes"], algo))
        r["speedup_vs_none"] = base / r["time_us"] if base and r["time_us"] > 0 else None
        if len(algos) > 1:
            base = flat.get((r["rate_gbit"], r["bytes"], r["codec_spec"]))
            r["speedup_vs_flat"] = (
                base / r["time_us"]
                if base and r["time_us"] > 0 and r["impl"] == "terse" and r["algorithm"] != "flat"
                else None
            )


def codec_order(rows, key="series"):
    """Series (or codecs, key="codec") in the order they first appear (terse-bench's order),
    OpenMPI last."""
    seen = []
    for r in rows:
        if r[key] not in seen and r[key] != kOpenMpi:
            seen.append(r[key])
    if any(r[key] == kOpenMpi for r in rows):
        seen.append(kOpenMpi)
    return seen


def layout_text(setup, rows):
    """How the ranks sit: one per namespace, or K per emulated host (runs before
    --ranks-per-host recorded no hosts)."""
    ranks = setup.get("ranks") or max(r["ranks"] for r in rows)
    per_host = int(setup.get("ranks_per_host", 1))
    if per_host <= 1:
        return f"{ranks} ranks, one per network namespace"
    hosts = setup.get("hosts", ranks // per_host)
    return (f"{ranks} ranks, {hosts} emulated hosts x {per_host} (one network namespace per host, "
            f"TERSE_NODE per host, ranks of a host over its unshaped loopback)")


def setup_line(setup, rows):
    parts = [f"{layout_text(setup, rows)}, veth + bridge shaped with tc tbf"]
    if setup.get("iters") is not None:
        parts.append(f"{setup['iters']} timed + {setup.get('warmup', 0)} warm-up calls")
    if setup.get("cpus"):
        parts.append(f"{setup['cpus']} CPU cores")
    return ", ".join(parts)


def title_setup(setup, rows):
    """A short setup line that fits under a plot title."""
    ranks = setup.get("ranks") or max(r["ranks"] for r in rows)
    per_host = int(setup.get("ranks_per_host", 1))
    if per_host <= 1:
        text = f"{ranks} ranks, one per netns, veth + bridge shaped by tc tbf"
    else:
        text = f"{ranks} ranks, {per_host} per emulated host (netns), links shaped by tc tbf"
    if setup.get("iters") is not None:
        text += f", {setup['iters']} timed calls"
    if setup.get("cpus"):
        text += f", {setup['cpus']}-core host"
    return text


def write_markdown(path, setup, rows):
    rates = rate_order({r["rate_gbit"] for r in rows})
    order = codec_order(rows)
    lines = ["# Allreduce on emulated links", ""]
    lines.append(f"Setup: {setup_line(setup, rows)}.")
    if setup.get("command"):
        lines.append(f"Command: `{setup['command']}`")
    if setup.get("date_utc"):
        lines.append(f"Date: {setup['date_utc']}, commit {setup.get('git_commit', 'unknown')}.")
    lines.append("")
    probes = {}
    for r in rows:
        if r.get("probe_gbit") is not None:
            probes[r["rate_gbit"]] = r["probe_gbit"]
    if probes:
        lines.append(
            "One TCP stream measured on each link: "
            + ", ".join(f"{rate_text(k)}: {probes[k]:.2f} Gbit/s" for k in rate_order(probes))
            + "."
        )
        lines.append("")
    full = sorted({(r["codec"], r["codec_spec"]) for r in rows if r["codec"] != r.get("codec_spec", r["codec"])})
    if full:
        lines.append("Codec specs: " + ", ".join(f"{c} = `{spec}`" for c, spec in full) + ".")
        lines.append("")
    algos = algorithms(rows)
    several = len(algos) > 1
    with_flat = several and "flat" in algos
    lines.append(
        "busbw is nccl-tests' bus bandwidth of the uncompressed float32 size; speedup is the time of "
        "terse `none` over the row's time at the same rate, size and algorithm; wire ratio is the "
        "uncompressed algorithm's bytes over the bytes actually sent"
        + ("; speedup over flat is the time of the same codec run `flat` over the row's time." if with_flat else ".")
    )
    lines.append("")
    # The algorithm column only when terse-bench recorded one (runs before --algo did not).
    show_algo = any(r["algorithm"] for r in rows)
    head = "| rate (Gbit/s) | size | codec |" + (" algo |" if show_algo else "")
    head += " time (ms) | busbw (GB/s) | speedup over none |"
    rule = "|---:|---:|---|" + ("---|" if show_algo else "") + "---:|---:|---:|"
    if with_flat:
        head += " speedup over flat |"
        rule += "---:|"
    lines.append(head + " wire ratio | maxrelerr |")
    lines.append(rule + "---:|---:|")
    for rate in rates:
        for size in sorted({r["bytes"] for r in rows if r["rate_gbit"] == rate}):
            sel = [r for r in rows if r["rate_gbit"] == rate and r["bytes"] == size]
            sel.sort(key=lambda r: order.index(r["series"]))
            for r in sel:
                speed = f"{r['speedup_vs_none']:.2f}x" if r.get("speedup_vs_none") else "-"
                ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
                err = f"{r['maxrelerr']:.2e}" if "maxrelerr" in r else "-"
                codec = r["codec"]
                if r.get("chosen"):
                    codec += f" (picked {r['chosen'].split(':')[0]})"
                line = f"| {rate_label(rate)} | {size_label(size)} | {codec} |"
                if show_algo:
                    line += f" {r['algorithm'] or '-'} |"
                line += f" {r['time_us'] / 1000:.1f} | {r['busbw_gbs']:.3f} | {speed} |"
                if with_flat:
                    line += f" {r['speedup_vs_flat']:.2f}x |" if r.get("speedup_vs_flat") else " - |"
                lines.append(line + f" {ratio} | {err} |")
    if with_flat:
        lines += [""] + algorithm_table(rows, algos)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def algorithm_table(rows, algos):
    """Each codec's algorithms side by side: time and maxrelerr of each, and each non-flat
    algorithm's speedup over flat (same rate, size and codec spec, same run)."""
    others = [a for a in algos if a != "flat"]
    ordered = ["flat"] + others
    head = "| rate (Gbit/s) | size | codec |"
    rule = "|---:|---:|---|"
    for a in ordered:
        head += f" {a} time (ms) | {a} maxrelerr |"
        rule += "---:|---:|"
    for a in others:
        head += f" {a} speedup over flat |"
        rule += "---:|"
    lines = ["Algorithms side by side:", "", head, rule]
    terse = [r for r in rows if r["impl"] == "terse"]
    specs = codec_order(terse, key="codec_spec")
    for rate in rate_order({r["rate_gbit"] for r in terse}):
        for size in sorted({r["bytes"] for r in terse if r["rate_gbit"] == rate}):
            for spec in specs:
                by_algo = {
                    r["algorithm"]: r
                    for r in terse
                    if r["rate_gbit"] == rate and r["bytes"] == size and r["codec_spec"] == spec
                }
                if not by_algo:
                    continue
                codec = next(iter(by_algo.values()))["codec"]
                line = f"| {rate_label(rate)} | {size_label(size)} | {codec} |"
                for a in ordered:
                    r = by_algo.get(a)
                    if r is None:
                        line += " - | - |"
                        continue
                    err = f"{r['maxrelerr']:.2e}" if "maxrelerr" in r else "-"
                    line += f" {r['time_us'] / 1000:.1f} | {err} |"
                for a in others:
                    r = by_algo.get(a)
                    line += f" {r['speedup_vs_flat']:.2f}x |" if r and r.get("speedup_vs_flat") else " - |"
                lines.append(line)
    return lines


def style_for(series, order):
    """One colour per codec; a series of a second algorithm ("int8 twolevel") keeps its codec's
    colour, dashed (lines) or hatched (bars)."""
    import matplotlib

    if series == kOpenMpi:
        return {"color": "black", "linestyle": "--", "marker": "s", "hatch": "//"}
    codecs = []
    for s in order:
        c = s.split(" ")[0]
        if s != kOpenMpi and c not in codecs:
            codecs.append(c)
    cmap = matplotlib.colormaps["tab10"]
    codec = series.split(" ")[0]
    algos = []
    for s in order:
        if " " in s and s.split(" ", 1)[1] not in algos:
            algos.append(s.split(" ", 1)[1])
    second = " " in series and algos.index(series.split(" ", 1)[1]) > 0
    return {"color": cmap(codecs.index(codec) % 10), "linestyle": ":" if second else "-",
            "marker": "^" if second else "o", "hatch": ".." if second else None}


def plot_busbw_lines(results_dir, setup, rows, order):
    import matplotlib.pyplot as plt

    written = []
    for rate in rate_order({r["rate_gbit"] for r in rows}):
        fig, ax = plt.subplots(figsize=(10, 5))
        for codec in order:
            pts = sorted(
                (r["bytes"], r["busbw_gbs"]) for r in rows if r["rate_gbit"] == rate and r["series"] == codec
            )
            if not pts:
                continue
            label = f"terse {codec}" if codec != kOpenMpi else "OpenMPI MPI_Allreduce (TCP)"
            st = style_for(codec, order)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, color=st["color"],
                    linestyle=st["linestyle"], marker=st["marker"])
        # In the ring model busbw equals the link bandwidth, so the line rate is the uncompressed ceiling.
        if rate > 0:
            ax.axhline(rate / 8, color="grey", linewidth=1, linestyle=":", label=f"line rate ({rate_text(rate)})")
        ax.set_xscale("log", base=2)
        sizes = sorted({r["bytes"] for r in rows if r["rate_gbit"] == rate})
        ax.set_xticks(sizes)
        ax.set_xticklabels([size_label(s) for s in sizes])
        ax.set_xlabel("message size (bytes of float32, uncompressed)")
        ax.set_ylabel("bus bandwidth (GB/s, uncompressed-equivalent)")
        ax.set_title(f"Allreduce, link {rate_text(rate)}\n{title_setup(setup, rows)}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        name = f"busbw-{rate_label(rate)}gbit.png" if rate > 0 else "busbw-unshaped.png"
        fig.savefig(os.path.join(results_dir, name), dpi=110)
        plt.close(fig)
        written.append(name)
    return written


def grouped_bars(ax, rates, series, order, value_fmt):
    """Bars grouped by link rate, one bar per series (codec), value printed on top."""
    width = 0.8 / max(1, len(order))
    # Many narrow bars: values upright would run into each other, so they stand on end.
    rotation = 90 if len(order) > 5 else 0
    for i, codec in enumerate(order):
        xs, ys = [], []
        for j, rate in enumerate(rates):
            v = series.get((codec, rate))
            if v is None:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            ys.append(v)
        if not xs:
            continue
        st = style_for(codec, order)
        label = f"terse {codec}" if codec != kOpenMpi else "OpenMPI MPI_Allreduce (TCP)"
        bars = ax.bar(xs, ys, width=width, color=st["color"], label=label,
                      hatch=st["hatch"], edgecolor="white")
        for b, y in zip(bars, ys):
            ax.annotate(value_fmt(y), (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom",
                        fontsize=7, xytext=(0, 2), textcoords="offset points", rotation=rotation)
    ax.margins(y=0.12)  # room above the tallest bar for its value
    ax.set_xticks(range(len(rates)))
    ax.set_xticklabels([rate_text(r) for r in rates])
    ax.set_xlabel("emulated link rate")
    ax.grid(True, axis="y", alpha=0.3)


def plot_busbw_bars(results_dir, setup, rows, order, size):
    import matplotlib.pyplot as plt

    rates = rate_order({r["rate_gbit"] for r in rows})
    series = {(r["series"], r["rate_gbit"]): r["busbw_gbs"] for r in rows if r["bytes"] == size}
    fig, ax = plt.subplots(figsize=(max(9, 4 + 0.2 * len(order) * len(rates)), 5))
    grouped_bars(ax, rates, series, order, lambda v: f"{v:.2f}")
    for j, rate in enumerate(rates):
        if rate == 0:
            continue
        ax.hlines(rate / 8, j - 0.45, j + 0.45, colors="grey", linestyles=":",
                  label="line rate" if j == 0 else None)
    # Log scale: line rates differ 25x between settings and the bars must stay readable at each.
    ax.set_yscale("log")
    ax.set_ylabel("bus bandwidth (GB/s, uncompressed-equivalent, log scale)")
    ax.set_title(f"Allreduce of {size_label(size)} float32 per link rate\n{title_setup(setup, rows)}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(os.path.join(results_dir, "busbw.png"), dpi=110)
    plt.close(fig)
    return ["busbw.png"]


def plot_speedup(results_dir, setup, rows, order, size):
    import matplotlib.pyplot as plt

    rates = rate_order({r["rate_gbit"] for r in rows})
    series = {
        (r["series"], r["rate_gbit"]): r["speedup_vs_none"]
        for r in rows
        if r["bytes"] == size and r.get("speedup_vs_none") is not None
    }
    if not series:
        return []
    fig, ax = plt.subplots(figsize=(max(9, 4 + 0.2 * len(order) * len(rates)), 5))
    grouped_bars(ax, rates, series, order, lambda v: f"{v:.2f}x")
    ax.axhline(1.0, color="grey", linewidth=1, linestyle=":")
    ax.set_ylabel("speedup over terse none (time ratio, higher is better)")
    ax.set_title(f"Allreduce of {size_label(size)} float32: speedup over uncompressed\n{title_setup(setup, rows)}",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(os.path.join(results_dir, "speedup.png"), dpi=110)
    plt.close(fig)
    return ["speedup.png"]


def plot_algo_speedup(results_dir, setup, rows, size):
    """Speedup of each non-flat algorithm over flat, one bar per codec (and algorithm) per rate."""
    import matplotlib.pyplot as plt

    rates = rate_order({r["rate_gbit"] for r in rows})
    sel = [r for r in rows if r["bytes"] == size and r.get("speedup_vs_flat") is not None]
    if not sel:
        return []
    order = codec_order(sel)
    series = {(r["series"], r["rate_gbit"]): r["speedup_vs_flat"] for r in sel}
    fig, ax = plt.subplots(figsize=(max(9, 4 + 0.2 * len(order) * len(rates)), 5))
    grouped_bars(ax, rates, series, order, lambda v: f"{v:.2f}x")
    ax.axhline(1.0, color="grey", linewidth=1, linestyle=":")
    ax.set_ylabel("speedup over flat, same codec (time ratio, higher is better)")
    ax.set_title(f"Allreduce of {size_label(size)} float32: two-level against flat\n{title_setup(setup, rows)}",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(os.path.join(results_dir, "algo-speedup.png"), dpi=110)
    plt.close(fig)
    return ["algo-speedup.png"]


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        sys.stderr.write(__doc__)
        return 2
    results_dir = argv[1]
    setup, rows = load(results_dir)
    shorten_codecs(rows)
    add_speedups(rows)
    with open(os.path.join(results_dir, "results.json"), "w") as f:
        json.dump({"setup": setup, "rows": rows}, f, indent=1)
    write_markdown(os.path.join(results_dir, "results.md"), setup, rows)
    written = ["results.json", "results.md"]
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        fail("matplotlib is missing: apt-get install python3-matplotlib and run with /usr/bin/python3")
    order = codec_order(rows)
    sizes = sorted({r["bytes"] for r in rows})
    if len(sizes) > 1:
        written += plot_busbw_lines(results_dir, setup, rows, order)
    else:
        written += plot_busbw_bars(results_dir, setup, rows, order, sizes[0])
    written += plot_speedup(results_dir, setup, rows, order, sizes[-1])
    written += plot_algo_speedup(results_dir, setup, rows, sizes[-1])
    print(f"plot_network: wrote {', '.join(written)} in {results_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
