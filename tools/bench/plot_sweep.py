#!/usr/bin/env python3
"""Plots of the CSVs that sweep.py writes (also imported by sweep.py).

    .venv/bin/python tools/bench/plot_sweep.py matmul SWEEP.csv [--png SWEEP.png]

matmul: MFU (%) against GFLOP per matmul, one colour per config, one marker per M. Both axes are
logarithmic: single-token (M = 1) projections sit at 0.01-0.1 % MFU and prefill shapes at 30-80 %,
so a linear MFU axis would flatten every decode point onto zero.

    .venv/bin/python tools/bench/plot_sweep.py attention SWEEP.csv [--png SWEEP.png]

attention: achieved TFLOPS (top) and time (bottom) against sequence length, forward (left) and
backward (right); one line per (config, head dim, causal, batch): colour = config and head dim,
dashed = causal, marker = batch. The dotted line is each config's peak.

    .venv/bin/python tools/bench/plot_sweep.py kernels SWEEP.csv [--png SWEEP.png]

kernels: utilisation per kernel and size (MFU for the Tensor-engine kernels, HBM bandwidth against
the core's share for the rest), one bar per config, labelled with the bottleneck engine.
"""
import argparse
import csv
import math
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]


def read_rows(csv_path):
    with open(csv_path, newline="") as f:
        return list(csv.DictReader(f))


def plot_matmul(csv_path, png_path):
    rows = read_rows(csv_path)
    if not rows:
        raise ValueError(f"{csv_path} has no rows")
    configs = list(dict.fromkeys(r["config"] for r in rows))
    ms = sorted({int(r["m"]) for r in rows})
    dtypes = sorted({r["dtype"] for r in rows})
    colours = {c: plt.get_cmap("tab10")(i % 10) for i, c in enumerate(configs)}
    markers = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(ms)}

    fig, ax = plt.subplots(figsize=(10, 6), dpi=120)
    for config in configs:
        for m in ms:
            pts = [r for r in rows if r["config"] == config and int(r["m"]) == m]
            if not pts:
                continue
            ax.scatter([float(r["gflop"]) for r in pts], [100.0 * float(r["mfu"]) for r in pts],
                       color=colours[config], marker=markers[m], s=36, alpha=0.8,
                       edgecolors="black", linewidths=0.4)
    ax.set_xscale("log")
    ax.set_xlabel("GFLOP per matmul (2·M·K·N)")
    ax.set_ylabel("MFU (%, log scale)")
    ax.set_yscale("log")
    mfus = [100.0 * float(r["mfu"]) for r in rows if float(r["mfu"]) > 0]
    low = 10 ** math.floor(math.log10(min(mfus))) if mfus else 0.01
    ax.set_ylim(low, 100)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.15)
    layouts = sorted({r.get("weight_layout", "") for r in rows} - {""})
    names = {"nk": "weights stored [N, K] (--transpose-b)", "kn": "weights stored [K, N]"}
    layout = "".join(f", {names.get(l, l)}" for l in layouts)
    ax.set_title(f"Projection matmuls of open-weight models: MFU vs size\n"
                 f"dtype {', '.join(dtypes)}{layout}, {len(rows)} points")

    config_handles = [Line2D([], [], linestyle="", marker="o", markersize=8, color=colours[c],
                             markeredgecolor="black", label=c) for c in configs]
    m_handles = [Line2D([], [], linestyle="", marker=markers[m], markersize=8, color="grey",
                        markeredgecolor="black", label=f"M = {m}") for m in ms]
    legend = ax.legend(handles=config_handles, title="config", loc="lower right",
                       bbox_to_anchor=(0.84, 0.0))
    ax.add_artist(legend)
    ax.legend(handles=m_handles, title="tokens", loc="lower right")
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)


def plot_attention(csv_path, png_path):
    rows = read_rows(csv_path)
    if not rows:
        raise ValueError(f"{csv_path} has no rows")
    directions = [d for d in ("forward", "backward") if any(r["direction"] == d for r in rows)]
    configs = list(dict.fromkeys(r["config"] for r in rows))
    dims = sorted({int(r["head_dim"]) for r in rows})
    batches = sorted({int(r["batch"]) for r in rows})
    palette = plt.get_cmap("tab10")
    colours = {(c, d): palette((i * len(dims) + j) % 10) for i, c in enumerate(configs) for j, d in enumerate(dims)}
    markers = {b: MARKERS[i % len(MARKERS)] for i, b in enumerate(batches)}

    fig, axes = plt.subplots(2, len(directions), figsize=(7 * len(directions), 9), dpi=110, squeeze=False)
    for col, direction in enumerate(directions):
        ax_tf, ax_t = axes[0][col], axes[1][col]
        for config in configs:
            for d in dims:
                for causal in ("0", "1"):
                    for b in batches:
                        pts = sorted((int(r["seq"]), float(r["tflops"]), float(r["time_ns"]) / 1e3) for r in rows
                                     if r["direction"] == direction and r["config"] == config and
                                     int(r["head_dim"]) == d and r["causal"] == causal and int(r["batch"]) == b)
                        if not pts:
                            continue
                        style = dict(color=colours[(config, d)], linestyle="--" if causal == "1" else "-",
                                     marker=markers[b], markersize=5)
                        ax_tf.plot([p[0] for p in pts], [p[1] for p in pts], **style)
                        ax_t.plot([p[0] for p in pts], [p[2] for p in pts], **style)
            mfu_rows = [r for r in rows if r["config"] == config and float(r["mfu"]) > 0]
            if mfu_rows:  # peak = tflops / mfu, the same for every row of a config
                peak = float(mfu_rows[0]["tflops"]) / float(mfu_rows[0]["mfu"])
                ax_tf.axhline(peak, color=colours[(config, dims[-1])], linestyle=":", linewidth=1)
        for ax in (ax_tf, ax_t):
            ax.set_xscale("log", base=2)
            ax.grid(True, alpha=0.3)
            ax.set_xlabel("sequence length")
        ax_t.set_yscale("log")
        ax_tf.set_ylim(bottom=0)
        ax_tf.set_title(f"flash attention {direction}" +
                        (" (model FLOPs: 5 matmuls)" if direction == "backward" else " (model FLOPs: 2 matmuls)"))
        ax_tf.set_ylabel("achieved TFLOPS per core")
        ax_t.set_ylabel("time (us, log scale)")
    handles = [Line2D([], [], color=colours[(c, d)], label=f"{c} d={d}") for c in configs for d in dims]
    handles += [Line2D([], [], color="grey", linestyle="-", label="non-causal"),
                Line2D([], [], color="grey", linestyle="--", label="causal"),
                Line2D([], [], color="grey", linestyle=":", label="peak")]
    handles += [Line2D([], [], color="grey", linestyle="", marker=markers[b], label=f"batch {b}") for b in batches]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6))
    dtypes = ", ".join(sorted({r["dtype"] for r in rows}))
    fig.suptitle(f"Flash attention on the timing model: {dtypes}, {len(rows)} points")
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    fig.savefig(png_path)
    plt.close(fig)


def plot_kernels(csv_path, png_path):
    rows = read_rows(csv_path)
    if not rows:
        raise ValueError(f"{csv_path} has no rows")
    configs = list(dict.fromkeys(r["config"] for r in rows))
    labels = list(dict.fromkeys(f"{r['kernel']} {r['shape']}" for r in rows))
    colours = {c: plt.get_cmap("tab10")(i % 10) for i, c in enumerate(configs)}
    height = 0.8 / len(configs)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.45 * len(labels) * max(1, len(configs) / 2)), dpi=110)
    for ci, config in enumerate(configs):
        for li, label in enumerate(labels):
            match = [r for r in rows if r["config"] == config and f"{r['kernel']} {r['shape']}" == label]
            if not match:
                continue
            r = match[0]
            uses_mfu = r.get("mfu") not in (None, "")
            value = 100 * float(r["mfu"] if uses_mfu else r["bandwidth_utilization"] or 0)
            y = li + (ci - (len(configs) - 1) / 2) * height
            ax.barh(y, value, height=height * 0.9, color=colours[config], hatch="" if uses_mfu else "//",
                    edgecolor="black", linewidth=0.4)
            ax.text(value + 1, y, f"{value:.0f}% {'MFU' if uses_mfu else 'BW'}, {float(r['time_ns']) / 1e3:.0f} us, "
                    f"{r['bottleneck']}", va="center", fontsize=7)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 140)
    ax.set_xlabel("utilisation (%): MFU (plain bars) or HBM bandwidth of the core's share (hatched)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(handles=[Line2D([], [], color=colours[c], linewidth=8, label=c) for c in configs], loc="lower right")
    ax.set_title(f"Kernel library on the timing model: {len(rows)} points")
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="sweep", required=True, metavar="SWEEP")
    matmul = sub.add_parser("matmul", help="MFU vs GFLOP of a `sweep.py matmul` CSV")
    matmul.add_argument("csv")
    matmul.add_argument("--png", help="default: the CSV's name with .png")
    for name, text in (("attention", "TFLOPS and time vs sequence length of a `sweep.py attention` CSV"),
                       ("kernels", "utilisation per kernel of a `sweep.py kernels` CSV")):
        p = sub.add_parser(name, help=text)
        p.add_argument("csv")
        p.add_argument("--png", help="default: the CSV's name with .png")
    args = parser.parse_args(argv)
    png = pathlib.Path(args.png) if args.png else pathlib.Path(args.csv).with_suffix(".png")
    {"matmul": plot_matmul, "attention": plot_attention, "kernels": plot_kernels}[args.sweep](args.csv, png)
    print(f"plot -> {png}")


if __name__ == "__main__":
    main()
