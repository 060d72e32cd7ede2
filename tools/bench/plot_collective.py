#!/usr/bin/env python3
"""busbw against message size, one line per algorithm, from the CSV `trnsim bench collective --csv` writes
(`--plot F` runs this itself).

    .venv/bin/python tools/bench/plot_collective.py POINTS.csv OUT.png

The size axis is logarithmic (1 KiB .. 1 GiB spans six decades); busbw is linear, in GB/s (1e9 bytes/s).
"""
import argparse
import csv
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = ["o", "s", "^", "D", "v", "P"]


def size_label(nbytes):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


def plot(csv_path, png_path):
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"{csv_path}: no points")
    by_algorithm = {}
    for r in rows:
        by_algorithm.setdefault(r["algorithm"], []).append((int(r["bytes"]), float(r["busbw_gbps"])))
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (algorithm, points) in enumerate(sorted(by_algorithm.items())):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=MARKERS[i % len(MARKERS)], label=algorithm)
    sizes = sorted({int(r["bytes"]) for r in rows})
    ax.set_xscale("log", base=2)
    step = max(1, len(sizes) // 10)
    ax.set_xticks(sizes[::step])
    ax.set_xticklabels([size_label(s) for s in sizes[::step]])
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    first = rows[0]
    ax.set_title(f"{first['op']} on {first['config']} {first['system']}, {first['ranks']} ranks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="algorithm")
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=pathlib.Path)
    parser.add_argument("png", type=pathlib.Path)
    args = parser.parse_args()
    plot(args.csv, args.png)


if __name__ == "__main__":
    main()
