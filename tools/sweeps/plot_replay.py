#!/usr/bin/env python3
"""Plot of the CSV that replay_sweep.py writes (also imported by it).

    .venv/bin/python tools/sweeps/plot_replay.py SWEEP.csv [--png SWEEP.png] [--title TEXT] [--force]

One horizontal bar per point (config and grid values), stacked by op: the ops with the most
replayed time across the sweep get a colour each, the rest are one grey "other ops" segment. A
black tick marks the point's total (the replay's own total, which need not be the sum of its ops
when launches on several devices overlap), labelled with the ratio to the recorded total; the
dotted line is the recorded total. The title says which programs ran (the CSV's `programs`
column: "rebuilt" for each config, or the "recorded" ones re-timed).
"""
import argparse
import csv
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

TOTAL_OP = "__total__"
NAMED_OPS = 8  # ops with their own colour; more would make the legend unreadable
UNITS = [(1e9, "s"), (1e6, "ms"), (1e3, "us"), (1.0, "ns")]


def plot_replay(csv_path, png_path, title=""):
    with open(csv_path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        columns = reader.fieldnames or []
    missing = [c for c in ("config", "op", "ns", "recorded_ns", "ratio") if c not in columns]
    if missing:
        raise ValueError(f"{csv_path} is not a replay_sweep.py CSV (no column {', '.join(missing)})")
    if not rows:
        raise ValueError(f"{csv_path} has no rows")
    # A point is everything left of `op` except the hash and the mode: config and the grid's key=value
    # columns. The mode (one per sweep) goes in the title.
    point_columns = [c for c in columns[:columns.index("op")] if c not in ("config_hash", "programs")]
    modes = sorted({r.get("programs") or "recorded" for r in rows})
    mode_text = {"rebuilt": "kernels rebuilt per config", "recorded": "recorded programs re-timed"}
    point_of = lambda r: tuple(r[c] for c in point_columns)  # noqa: E731
    points = list(dict.fromkeys(point_of(r) for r in rows))
    totals = {point_of(r): r for r in rows if r["op"] == TOTAL_OP}
    op_rows = [r for r in rows if r["op"] != TOTAL_OP]

    time_by_op = {}
    for r in op_rows:
        time_by_op[r["op"]] = time_by_op.get(r["op"], 0.0) + float(r["ns"])
    named = sorted(time_by_op, key=lambda op: (-time_by_op[op], op))[:NAMED_OPS]
    largest = max([float(r["ns"]) for r in totals.values()] + [float(r["recorded_ns"]) for r in totals.values()]
                  + [1.0])
    scale, unit = next((s, u) for s, u in UNITS if largest >= s)
    colours = {op: plt.get_cmap("tab10")(i % 10) for i, op in enumerate(named)}

    def label(point):
        parts = [pathlib.Path(point[0]).stem if point[0].endswith(".yaml") else point[0]]
        parts += [f"{c.split('.')[-1]}={v}" for c, v in zip(point_columns[1:], point[1:])]
        return " ".join(parts)

    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.42 * len(points)), dpi=110)
    for y, point in enumerate(points):
        left = 0.0
        ops = {r["op"]: float(r["ns"]) for r in op_rows if point_of(r) == point}
        for op in named:
            if op in ops:
                ax.barh(y, ops[op] / scale, left=left, height=0.7, color=colours[op], edgecolor="black",
                        linewidth=0.3)
                left += ops[op] / scale
        other = sum(ns for op, ns in ops.items() if op not in colours)
        if other:
            ax.barh(y, other / scale, left=left, height=0.7, color="lightgrey", edgecolor="black", linewidth=0.3)
        if point in totals:
            total = float(totals[point]["ns"]) / scale
            ax.plot([total, total], [y - 0.42, y + 0.42], color="black", linewidth=2)
            ratio = totals[point]["ratio"]
            ax.text(total, y, f"  {total:.4g} {unit}" + (f" ({float(ratio):.3f}x)" if ratio else ""),
                    va="center", fontsize=8)
    recorded = sorted({float(r["recorded_ns"]) for r in totals.values()})
    for value in recorded:
        ax.axvline(value / scale, color="black", linestyle=":", linewidth=1)
    ax.set_yticks(range(len(points)))
    ax.set_yticklabels([label(p) for p in points], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, largest / scale * 1.25)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(facecolor=colours[op], edgecolor="black", label=op) for op in named]
    if len(time_by_op) > len(named):
        handles.append(Patch(facecolor="lightgrey", edgecolor="black", label="other ops"))
    handles += [Line2D([], [], color="black", linewidth=2, label="replayed total"),
                Line2D([], [], color="black", linestyle=":", label="recorded total")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)  # clear of the bars
    ax.set_title(f"Replay of {title or pathlib.Path(csv_path).stem} per config: {len(points)} points ("
                 + ", ".join(mode_text.get(m, m) for m in modes) + ")")
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--png", help="default: the CSV's name with .png")
    parser.add_argument("--title", default="", help="the recording's name, in the title")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --png")
    args = parser.parse_args(argv)
    png = pathlib.Path(args.png) if args.png else pathlib.Path(args.csv).with_suffix(".png")
    if png.exists() and not args.force:
        parser.exit(1, f"error: {png} exists (pass --force to overwrite)\n")
    try:
        plot_replay(args.csv, png, args.title)
    except OSError as e:
        parser.exit(1, f"error: {e.filename}: {e.strerror}\n")
    except ValueError as e:  # not a replay CSV, or a cell that is not a number
        parser.exit(1, f"error: {e}\n")
    print(f"plot -> {png}")


if __name__ == "__main__":
    main()
