#!/usr/bin/env python3
"""Replays one recording across a grid of configs on Ray: per-op and total times in one CSV + plot.

    .venv/bin/python tools/sweeps/replay_sweep.py REC --config trn2 --config trn3 configs/whatif/*.yaml
        [--grid core.sbuf.bytes_per_partition=196608,393216] [--grid KEY=V1,V2,...]...
        [--set KEY=VALUE]... [--rebuild] --csv OUT.csv [--png OUT.png] [--jobs N]
        [--ray-address ADDR] [--trnsim PATH] [--force]

REC is a recording (a `*.trnrec` directory) that `trnsim.record` wrote. The
points are every --config (one flag may list several, so a shell glob works) times the Cartesian
product of the --grid values: configs outermost, then the grids in the order given, the first
slowest. Each point runs `trnsim replay REC --config C --set ... --timing-only --json F` once on Ray;
--set values apply to every point (before the grid's). Before anything runs, `trnsim config
validate` checks every (config, grid point), so an unknown key or a bad value is one error up front.
With --rebuild every point replays with `--rebuild`: each kernel is built again for that point's
config from its recorded invocation, so values that only shape how kernels are built (SBUF size,
LNC, tile choices) move the time too; without it the recorded programs are re-timed.

The CSV has one row per (point, op), ops sorted by name, then one `__total__` row per point:
    config, config_hash, programs, <one column per --grid key>, op, count, recorded_ns, ns, ratio
config is the --config as given; config_hash the hash of the effective config the point ran on
(--set and grid values applied); programs "rebuilt" (--rebuild) or "recorded", as the replay's
report says it ran; count the launches of the op (all launches on the __total__
row); recorded_ns the time in the recording and ns the replayed time, in simulated nanoseconds;
ratio = ns / recorded_ns (above 1: slower than recorded; empty if recorded_ns is 0). The
__total__ row's times are the replay's own totals (total_ns, recorded_total_ns), not a sum of ops.
The plot (default: the CSV's name with .png) has one bar per point, stacked by op; its title says
which programs ran.

Ray: a local Ray of --jobs CPUs (default: all of this machine's), or the cluster at --ray-address
(default $RAY_ADDRESS, which `ray job submit` sets), where --jobs (if given) caps the points in
flight. Workers need no copy of this checkout: the
trnsim binary, the recording and each config (flattened by `trnsim config show --effective-only`,
so bases need no lookup) travel by value through Ray's object store. They do need the Python and
Ray versions of this machine, and the shared libraries trnsim links (deps/debian-packages.txt).

A point that fails does not stop the others: the CSV and plot hold the points that succeeded, every
failure is printed with its command and the tail of its stderr, and the exit status is 1. --csv
and --png are never overwritten without --force. The binary is --trnsim, else
$TRNSIM_BUILD_DIR/bin/trnsim (default build/bin/trnsim).
"""
import argparse
import csv
import io
import itertools
import json
import os
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fanout  # noqa: E402

TOTAL_OP = "__total__"
FIXED_COLUMNS = ["config", "config_hash", "programs"]
OP_COLUMNS = ["op", "count", "recorded_ns", "ns", "ratio"]
JSON_NAME = "replay.json"


def default_trnsim() -> pathlib.Path:
    build = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", REPO_ROOT / "build"))
    return build / "bin" / "trnsim"


def assignment(text):
    key, equals, value = text.partition("=")
    if not equals or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def grid_axis(text):
    key, equals, values = text.partition("=")
    items = [v.strip() for v in values.split(",")]
    if not equals or not key.strip() or not values.strip() or any(not v for v in items):
        raise argparse.ArgumentTypeError(f"expected KEY=V1,V2,... with no empty value, got {text!r}")
    if len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(f"{key.strip()}: a value is given twice in {text!r}")
    return key.strip(), items


def parse_args(argv):
    # REC comes first in the usage: after --config's list it would be read as one more config.
    usage = ("%(prog)s REC --config C [C ...] [--grid KEY=V1,V2] [--set KEY=VALUE] [--rebuild] --csv CSV\n"
             "       [--png PNG] [--jobs N] [--ray-address ADDR] [--trnsim PATH] [--force]")
    parser = argparse.ArgumentParser(usage=usage, description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recording", metavar="REC", nargs="?", help="a recording: a *.trnrec directory")
    parser.add_argument("--config", action="extend", nargs="+", required=True, metavar="C",
                        help="configs (names or files); repeatable, and one flag may list several")
    parser.add_argument("--grid", action="append", type=grid_axis, default=[], metavar="KEY=V1,V2",
                        help="a config key and the values to sweep it over (repeatable)")
    parser.add_argument("--set", action="append", type=assignment, default=[], metavar="KEY=VALUE",
                        help="a config override for every point (repeatable)")
    parser.add_argument("--rebuild", action="store_true",
                        help="replay with --rebuild: kernels built again for each point's config from their "
                             "recorded invocations (else the recorded programs are re-timed)")
    parser.add_argument("--csv", required=True, help="output CSV (refused if it exists, unless --force)")
    parser.add_argument("--png", help="output plot (default: the CSV's name with .png)")
    parser.add_argument("--force", action="store_true", help="overwrite existing --csv/--png")
    parser.add_argument("--jobs", type=int,
                        help="points run in parallel: the CPUs of the local Ray (default: this machine's "
                             f"{os.cpu_count()}); with --ray-address, the most points in flight at once")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="join this Ray cluster (host:port of its head; default $RAY_ADDRESS if set) "
                             "instead of starting a local Ray")
    parser.add_argument("--trnsim", type=pathlib.Path, help="the trnsim binary (default $TRNSIM_BUILD_DIR/bin/trnsim)")
    args = parser.parse_args(argv)

    if args.recording is None:
        taken = [c for c in args.config if c.rstrip("/").endswith(".trnrec") or pathlib.Path(c).is_dir()]
        hint = f" ({taken[-1]} was read as a config: put REC before --config)" if taken else ""
        parser.error(f"the recording REC is required{hint}")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    for name in dict.fromkeys(args.config):
        if args.config.count(name) > 1:
            parser.error(f"--config {name} is given twice")
    keys = [key for key, _ in args.grid]
    for key in keys:
        if keys.count(key) > 1:
            parser.error(f"--grid {key} is given twice (list all its values in one --grid)")
        if key in FIXED_COLUMNS + OP_COLUMNS:
            parser.error(f"--grid {key}: the CSV already has a column named {key!r}")
    for key, _ in args.set:
        if key in keys:
            parser.error(f"{key} is both a --set and a --grid key")
    return args


def check_outputs(args):
    csv_path = pathlib.Path(args.csv)
    png_path = pathlib.Path(args.png) if args.png else csv_path.with_suffix(".png")
    if csv_path.resolve() == png_path.resolve():
        sys.exit(f"error: --csv and --png are the same file {csv_path}")
    for path in (csv_path, png_path):
        if path.exists() and not args.force:
            sys.exit(f"error: {path} exists (pass --force to overwrite)")
    return csv_path, png_path


def grid_points(grid):
    """Every combination of the grid's values, as [(key, value), ...], the first key slowest."""
    keys = [key for key, _ in grid]
    return [list(zip(keys, values)) for values in itertools.product(*(values for _, values in grid))]


def set_flags(assignments):
    return [flag for key, value in assignments for flag in ("--set", f"{key}={value}")]


def validate_points(trnsim, configs, fixed, grid):
    """`trnsim config validate` on every config with each grid point's overrides: an unknown key or
    a value the config rejects stops the sweep here, before anything runs."""
    for point in grid_points(grid):
        overrides = fixed + point
        result = subprocess.run([str(trnsim), "config", "validate", *configs, *set_flags(overrides)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            where = " with " + " ".join(f"{k}={v}" for k, v in point) if point else ""
            # One line per config file: the same message for each when the key is wrong everywhere.
            messages = "\n".join(dict.fromkeys(result.stderr.strip().splitlines()))
            sys.exit(f"error: the configs do not validate{where}:\n{messages}")


def number(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is {value!r}, not a number")
    return float(value)


def programs_column(rebuild):
    return "rebuilt" if rebuild else "recorded"


def rows_of(config, point, report, rebuild=False):
    """The CSV rows of one point from its `trnsim replay --json` report. A report that lacks a field
    raises ValueError naming it (a replay tool out of step with this script, not a silent blank), and
    so does one whose mode is not the one asked for (`rebuild`; a report without the field is from a
    trnsim that never rebuilt)."""
    ran = report.get("rebuild", False) if isinstance(report, dict) else False
    if not isinstance(ran, bool):
        raise ValueError(f"the replay report's rebuild is {ran!r}, not true or false")
    if ran != rebuild:
        raise ValueError(f"asked to replay {'with' if rebuild else 'without'} --rebuild, the report says "
                         f"rebuild={'true' if ran else 'false'}")
    try:
        config_hash = report["config"]["hash"]
        per_op = report["per_op"]
        launches = report["launches"]
        totals = (number(report["recorded_total_ns"], "recorded_total_ns"), number(report["total_ns"], "total_ns"))
    except (KeyError, TypeError) as e:
        raise ValueError(f"the replay report lacks {e}")
    if not isinstance(per_op, dict) or not isinstance(launches, list):
        raise ValueError("the replay report's per_op is not an object or its launches not a list")
    base = {"config": config, "config_hash": config_hash, "programs": programs_column(ran), **dict(point)}

    def row(op, count, recorded_ns, ns):
        ratio = f"{ns / recorded_ns:.6f}" if recorded_ns > 0 else ""
        return {**base, "op": op, "count": count, "recorded_ns": repr(recorded_ns), "ns": repr(ns), "ratio": ratio}

    rows = []
    for op in sorted(per_op):
        entry = per_op[op]
        try:
            count = entry["count"]
            if isinstance(count, bool) or not isinstance(count, int):
                raise ValueError(f"per_op[{op!r}].count is {count!r}, not an integer")
            rows.append(row(op, count, number(entry["recorded_ns"], f"per_op[{op!r}].recorded_ns"),
                            number(entry["ns"], f"per_op[{op!r}].ns")))
        except (KeyError, TypeError) as e:
            raise ValueError(f"the replay report's per_op[{op!r}] lacks {e}")
    rows.append(row(TOTAL_OP, len(launches), *totals))
    return rows


def main(argv=None):
    args = parse_args(argv)
    trnsim = args.trnsim or default_trnsim()
    if not trnsim.is_file():
        sys.exit(f"error: {trnsim} is missing: run `make` first (or pass --trnsim, or set TRNSIM_BUILD_DIR)")
    recording = pathlib.Path(args.recording)
    if not recording.exists():
        sys.exit(f"error: recording {recording} does not exist")
    if not (recording / "manifest.jsonl").is_file():
        sys.exit(f"error: {recording} is not a recording (a *.trnrec directory with a manifest.jsonl)")
    csv_path, png_path = check_outputs(args)

    validate_points(trnsim, args.config, args.set, args.grid)
    try:
        configs = {c: fanout.effective_config(trnsim, c) for c in args.config}
    except fanout.FanOutError as e:
        sys.exit(f"error: {e}")
    points = [(config, point) for config in args.config for point in grid_points(args.grid)]

    try:
        with fanout.FanOut(jobs=args.jobs, address=fanout.ray_address(args.ray_address)) as fan:
            exe = fan.file(trnsim, executable=True)
            rec = fan.tree(recording)
            shipped = {c: fan.text("config.yaml", text, shown=c) for c, text in configs.items()}
            tasks = [fanout.Task([exe, "replay", rec, "--config", shipped[config], *set_flags(args.set + point),
                                  "--timing-only", *(["--rebuild"] if args.rebuild else []), "--json", JSON_NAME],
                                 outputs=[JSON_NAME],
                                 label=" ".join([f"config={config}"] + [f"{k}={v}" for k, v in point]))
                     for config, point in points]
            results = fan.run(tasks, desc="replay")
    except fanout.FanOutError as e:
        sys.exit(f"error: {e}")

    rows, failed, not_rebuilt = [], [], set()
    for (config, point), result in zip(points, results):
        if result.ok:
            try:
                report = json.loads(result.outputs[JSON_NAME])
                rows += rows_of(config, point, report, args.rebuild)
                if args.rebuild and report.get("not_rebuilt_launches"):
                    not_rebuilt.add(report["not_rebuilt_launches"])
                continue
            except ValueError as e:  # json.JSONDecodeError is one
                result.error = f"unreadable {JSON_NAME}: {e}"
        failed.append(result)
    if not_rebuilt:
        # A recording made before launches carried their kernel invocations: "rebuilt" is partly not so.
        print(f"warning: {max(not_rebuilt)} kernel launch(es) of {recording} carry no kernel invocation and were "
              "re-timed as recorded, not rebuilt (re-record to rebuild them)", file=sys.stderr)

    if rows:
        columns = FIXED_COLUMNS + [key for key, _ in args.grid] + OP_COLUMNS
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        csv_path.write_text(text.getvalue())
        ran = len(points) - len(failed)
        print(f"{ran} point{'s' if ran != 1 else ''}, {len(rows)} rows -> {csv_path}")

        import plot_replay
        png_path.parent.mkdir(parents=True, exist_ok=True)
        plot_replay.plot_replay(csv_path, png_path, title=recording.name)
        print(f"plot -> {png_path}")
    sys.exit(fanout.report_failures(failed, len(points), str(csv_path)))


if __name__ == "__main__":
    main()
