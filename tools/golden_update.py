#!/usr/bin/env python3
"""Golden timings of the kernel library's headline benches and the example kernels.

`traces/golden/kernels.json` holds, for each case, the command that produces it and its simulated
time as the tool reports it: `total_ns` and per-engine `busy_ns` from the `--stats` JSON of
`trnsim bench ...` / `trnsim run ... --timing-only` (doubles written round-trip exact), or, for
`kernel_runner ... --bench`, its one JSON line (`total_ns` as printed, per-engine busy fractions as
printed). The simulator is deterministic, so any difference is a timing change.

    .venv/bin/python tools/golden_update.py            # rerun every case, print the diff, rewrite the file
    .venv/bin/python tools/golden_update.py --check    # rerun and compare only (exit 1 on any change)

`tests/golden/test_golden_timings.py` (pytest marker `golden`, part of `make test`) imports this
module, reruns the cases and fails on any change; `make golden-update` runs this script.

It also re-records the demo model's training step under traces/ (tools/golden_recordings.py:
`traces/demo_step_trn2.trnrec`, `traces/demo_step_trn3.trnrec`), prints the per-launch diff of
what moved (old ns, new ns, ratio) and replaces a recording only when a time or a program moved.
With --check the recordings are replayed (`trnsim replay --diff`) instead of re-recorded.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import golden_recordings  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN_PATH = REPO_ROOT / "traces" / "golden" / "kernels.json"
FORMAT = 1

MATMUL = ["bench", "matmul", "--m", "4096", "--k", "8192", "--n", "8192", "--transpose-a"]
ATTENTION = ["bench", "attention", "--seq", "4096", "--head-dim", "128", "--causal"]
CONV = ["bench", "conv2d", "--input", "8x64x56x56", "--weight", "64x64x3x3", "--padding", "1"]


def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", REPO_ROOT / "build"))


def case_definitions():
    """The cases, in order: (name, tool, args). tool is `trnsim` (run with `--stats FILE` appended)
    or `kernel_runner` (its stdout JSON line). Every examples/kernels/*.tasm is a case."""
    cases = []
    for config in ("trn1", "trn2", "trn3"):
        cases.append((f"matmul_bf16_4096x8192x8192_ta_{config}", "trnsim", MATMUL + ["--config", config]))
    cases.append(("matmul_bf16_4096x8192x8192_ta_trn2_cores2", "trnsim", MATMUL + ["--config", "trn2", "--cores", "2"]))
    for config in ("trn2", "trn3"):
        cases.append((f"attention_fwd_s4096_d128_causal_{config}", "trnsim", ATTENTION + ["--config", config]))
    cases.append(("attention_bwd_s4096_d128_causal_trn2", "trnsim", ATTENTION + ["--backward", "--config", "trn2"]))
    cases.append(("rmsnorm_bf16_8192x4096_trn2", "kernel_runner",
                  ["rmsnorm", "shape=8192x4096", "dtype=bf16", "--bench", "config=trn2"]))
    # AdamW as in tools/bench/sweep.py's kernel sweep at 8192 rows: 8192 x 4096 fp32 parameters.
    cases.append(("adamw_fp32_33554432_trn2", "kernel_runner",
                  ["adamw", "elements=33554432", "dtype=fp32", "--bench", "config=trn2"]))
    cases.append(("conv2d_fwd_8x64x56x56_64x64x3x3_p1_trn2", "trnsim", CONV + ["--config", "trn2"]))
    cases.append(("conv2d_bwd_8x64x56x56_64x64x3x3_p1_trn2", "trnsim", CONV + ["--backward", "--config", "trn2"]))
    for tasm in sorted((REPO_ROOT / "examples" / "kernels").glob("*.tasm")):
        rel = tasm.relative_to(REPO_ROOT).as_posix()
        cases.append((f"example_{tasm.stem}_trn2", "trnsim", ["run", rel, "--config", "trn2", "--timing-only"]))
    return [{"name": n, "tool": t, "args": a} for n, t, a in cases]


def tool_path(tool: str) -> pathlib.Path:
    if tool not in ("trnsim", "kernel_runner"):
        raise ValueError(f"unknown tool {tool!r}")
    return build_dir() / "bin" / tool


def missing_tools(cases):
    return sorted({str(tool_path(c["tool"])) for c in cases if not tool_path(c["tool"]).exists()})


def run_case(case, extra_args=()):
    """Runs one case (extra_args: e.g. ["--set", "k=v"], appended to a trnsim command) and returns
    {"total_ns": ..., "busy": {engine: value}, "busy_unit": "ns"|"fraction", "config_hash": ...}.
    Raises RuntimeError when the tool fails."""
    binary = tool_path(case["tool"])
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `make` first")
    with tempfile.TemporaryDirectory(prefix="trnsim-golden-") as tmp:
        args = list(case["args"]) + list(extra_args)
        if case["tool"] == "trnsim":
            stats_path = pathlib.Path(tmp) / "stats.json"
            args += ["--stats", str(stats_path)]
        cmd = [str(binary), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        if case["tool"] == "trnsim":
            stats = json.loads(stats_path.read_text())
            return {"total_ns": stats["total_ns"], "config_hash": stats["config_hash"], "busy_unit": "ns",
                    "busy": {e: v["busy_ns"] for e, v in stats["engines"].items()}}
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if len(lines) != 1:
        raise RuntimeError(f"{' '.join(cmd)}: expected one JSON line, got:\n{proc.stdout}")
    line = json.loads(lines[0])
    return {"total_ns": line["total_ns"], "config_hash": None, "busy_unit": "fraction",
            "busy": {k[:-len("_busy")]: v for k, v in line.items() if k.endswith("_busy")}}


def command_text(case) -> str:
    suffix = " --stats STATS.json" if case["tool"] == "trnsim" else ""
    return f"build/bin/{case['tool']} {' '.join(case['args'])}{suffix}"


def run_all(cases):
    """[(case, result)] for every case, in order."""
    return [(case, run_case(case)) for case in cases]


def golden_document(results):
    entries = []
    for case, r in results:
        entries.append({"name": case["name"], "tool": case["tool"], "args": case["args"],
                        "command": command_text(case), "total_ns": r["total_ns"],
                        "busy_unit": r["busy_unit"], "busy": r["busy"], "config_hash": r["config_hash"]})
    return {"format": FORMAT,
            "about": "Golden simulated timings; written by tools/golden_update.py (make golden-update), "
                     "checked by tests/golden/test_golden_timings.py. Do not edit by hand.",
            "cases": entries}


def load_golden(path=GOLDEN_PATH):
    doc = json.loads(pathlib.Path(path).read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: format {doc.get('format')!r}, expected {FORMAT}")
    return doc


def compare(golden_cases, results):
    """Rows (case, metric, old, new) for every timing that differs (exact comparison), plus cases
    present on one side only (old or new is None). metric is `total_ns` or `busy:<engine>`."""
    old_by_name = {c["name"]: c for c in golden_cases}
    new_by_name = {case["name"]: r for case, r in results}
    rows = []
    for name in list(old_by_name) + [n for n in new_by_name if n not in old_by_name]:
        old, new = old_by_name.get(name), new_by_name.get(name)
        if old is None or new is None:
            rows.append((name, "total_ns", old and old["total_ns"], new and new["total_ns"]))
            continue
        if old["total_ns"] != new["total_ns"]:
            rows.append((name, "total_ns", old["total_ns"], new["total_ns"]))
        for engine in sorted(set(old["busy"]) | set(new["busy"])):
            a, b = old["busy"].get(engine), new["busy"].get(engine)
            if a != b:
                rows.append((name, f"busy:{engine}", a, b))
    return rows


def format_table(rows) -> str:
    def delta(a, b):
        return "-" if a is None or b is None else repr(b - a)

    header = ("case", "metric", "old", "new", "new/old", "new-old")
    num, ratio = golden_recordings.num, golden_recordings.ratio
    return golden_recordings.table(header, [(c, m, num(a), num(b), ratio(a, b), delta(a, b)) for c, m, a, b in rows])


shown = golden_recordings.shown


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; do not rewrite the file")
    parser.add_argument("--out", type=pathlib.Path, default=GOLDEN_PATH, help="golden file (default %(default)s)")
    args = parser.parse_args(argv)
    cases = case_definitions()
    missing = missing_tools(cases)
    if missing:
        print(f"error: missing {', '.join(missing)}: run `make` first", file=sys.stderr)
        return 1
    results = run_all(cases)
    old_cases = load_golden(args.out)["cases"] if args.out.exists() else []
    rows = compare(old_cases, results)
    if rows:
        print(f"{len(rows)} timing change(s) against {shown(args.out)}:")
        print(format_table(rows))
    else:
        print(f"no timing changes against {shown(args.out)} ({len(results)} cases)")
    recording_changes = update_recordings(check_only=args.check)
    if args.check:
        return 1 if rows or recording_changes else 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(golden_document(results), indent=2) + "\n")
    print(f"wrote {shown(args.out)} ({len(results)} cases)")
    return 0


def update_recordings(check_only):
    """Re-records (or, with check_only, replays) every golden recording and prints what moved;
    returns the number of changed launches."""
    changes = 0
    for name in golden_recordings.RECORDINGS:
        where = golden_recordings.shown(golden_recordings.path_of(name))
        if check_only:
            rows, _ = golden_recordings.check(name)
            replaced = False
        else:
            rows, replaced = golden_recordings.rerecord(name)
        changes += len(rows)
        if rows:
            print(f"{len(rows)} launch(es) of {where} changed:")
            print(golden_recordings.format_rows(rows))
        else:
            print(f"no launch of {where} changed")
        if replaced:
            print(f"wrote {where}")
    return changes


if __name__ == "__main__":
    sys.exit(main())
