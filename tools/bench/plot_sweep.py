#!/usr/bin/env python3
"""Plots of the CSVs that sweep.py writes (also imported by sweep.py).

    .venv/bin/python tools/bench/plot_sweep.py matmul SWEEP.csv [--png SWEEP.png]

matmul: MFU (%) against GFLOP per matmul, one colour per config, one marker per M. Both axes are
logarithmic: single-token (M = 1) projections sit at 0.01-0.1 % MFU and prefill shapes at 30-80 %,
so a linear MFU axis would flatten every decode point onto zero.
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="sweep", required=True, metavar="SWEEP")
    matmul = sub.add_parser("matmul", help="MFU vs GFLOP of a `sweep.py matmul` CSV")
    matmul.add_argument("csv")
    matmul.add_argument("--png", help="default: the CSV's name with .png")
    args = parser.parse_args(argv)
    png = pathlib.Path(args.png) if args.png else pathlib.Path(args.csv).with_suffix(".png")
    plot_matmul(args.csv, png)
    print(f"plot -> {png}")


if __name__ == "__main__":
    main()
