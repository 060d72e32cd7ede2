"""The golden recordings under traces/: one training step of the demo model (examples/transformer_demo.py,
default sizes, after a warm-up step) recorded with trnsim.record on trn2 and on trn3. The golden tier
replays each on its own config (`trnsim replay REC --diff`) and fails on any launch whose time changed;
`make golden-update` (tools/golden_update.py) re-records them and prints the per-launch diff.

    check(name)     -> rows of launches whose replayed time differs from the recorded one
    rerecord(name)  -> re-records into a temporary directory, returns the per-launch diff against
                       the committed recording, and replaces it only when a time, a program or a
                       kernel invocation moved
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
TRACES = REPO_ROOT / "traces"
# name -> config the demo step is recorded on
RECORDINGS = {"demo_step_trn2": "trn2", "demo_step_trn3": "trn3"}


def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", REPO_ROOT / "build"))


def path_of(name) -> pathlib.Path:
    return TRACES / f"{name}.trnrec"


def replay(recording, *args):
    """Runs `trnsim replay RECORDING --json F ARGS...`; returns (exit code, stdout + stderr, the JSON or None)."""
    binary = build_dir() / "bin" / "trnsim"
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `make` first")
    with tempfile.TemporaryDirectory(prefix="trnsim-golden-") as tmp:
        out = pathlib.Path(tmp) / "replay.json"
        proc = subprocess.run([str(binary), "replay", str(recording), "--json", str(out), *map(str, args)],
                              capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
        doc = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, proc.stdout + proc.stderr, doc


def changed_rows(doc):
    """(index, op, shapes, old ns, new ns) of every launch of a replay --json whose time changed."""
    return [(l["index"], l["op"], l["shapes"], l["recorded_ns"], l["ns"]) for l in doc["launches"]
            if l["ns"] != l["recorded_ns"]]


def check(name, *args):
    """Replays the committed recording on its own config (plus ARGS, e.g. a --set nudge); returns
    (changed rows, the replay's JSON). Raises RuntimeError when the replay itself fails."""
    code, output, doc = replay(path_of(name), "--diff", *args)
    if doc is None or code not in (0, 1):
        raise RuntimeError(f"trnsim replay {shown(path_of(name))} exited {code}:\n{output}")
    rows = changed_rows(doc)
    if bool(rows) != (code == 1):
        raise RuntimeError(f"trnsim replay --diff exited {code} with {len(rows)} changed launches:\n{output}")
    return rows, doc


def read_launches(recording):
    lines = [json.loads(l) for l in (pathlib.Path(recording) / "manifest.jsonl").read_text().splitlines() if l]
    return [l for l in lines[1:] if "index" in l]


def launch_diff(old, new):
    """Rows (index, op, shapes, old ns, new ns) for launches whose time, op, programs or kernel
    invocation differ (an invocation that changes alone shows the same ns twice), plus launches on
    one side only (old or new ns None)."""
    rows = []
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else None
        b = new[i] if i < len(new) else None
        ref = b or a
        same = a and b and a["op"] == b["op"] and a["shapes"] == b["shapes"] and a["ns"] == b["ns"] and \
            a.get("programs") == b.get("programs") and a.get("transfer_bytes") == b.get("transfer_bytes") and \
            a.get("kernel") == b.get("kernel")
        if not same:
            rows.append((i, ref["op"], ref["shapes"], a and a["ns"], b and b["ns"]))
    return rows


def rerecord(name):
    """Records the demo step again (tools/record_demo_step.py in a fresh process); replaces the
    committed recording when anything moved (a header that differs only in the trnsim version or the
    host seconds is not a change). Returns (diff rows, replaced)."""
    target = path_of(name)
    with tempfile.TemporaryDirectory(prefix="trnsim-rerecord-") as tmp:
        fresh = pathlib.Path(tmp) / f"{name}.trnrec"
        proc = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "record_demo_step.py"),
                               "--config", RECORDINGS[name], "--out", str(fresh)],
                              capture_output=True, text=True, cwd=REPO_ROOT, timeout=1200,
                              env={**os.environ, "TRNSIM_BUILD_DIR": str(build_dir())})
        if proc.returncode != 0:
            raise RuntimeError(f"recording {name} failed:\n{proc.stdout}{proc.stderr}")
        old = read_launches(target) if target.exists() else []
        rows = launch_diff(old, read_launches(fresh))
        old_header = _header(target) if target.exists() else None
        if not rows and old_header and _config_id(old_header) == _config_id(_header(fresh)):
            return rows, False
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(fresh, target)
    return rows, True


def _config_id(header):
    """The recorded config without the file path it resolved to (which differs between checkouts)."""
    return {k: v for k, v in header["config"].items() if k != "source"}


def _header(recording):
    return json.loads((pathlib.Path(recording) / "manifest.jsonl").read_text().splitlines()[0])


def num(x) -> str:
    return "(none)" if x is None else repr(x)


def ratio(a, b) -> str:
    if a is None or b is None:
        return "-"
    return ("inf" if b else "1") if a == 0 else f"{b / a:.9f}"


def table(header, body) -> str:
    """Rows of cells as aligned columns under a header and a rule (the golden diffs' layout)."""
    widths = [max(len(r[k]) for r in [header, *body]) for k in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_rows(rows) -> str:
    header = ("index", "op", "shapes", "old ns", "new ns", "new/old")
    return table(header, [(str(i), op, json.dumps(shapes), num(a), num(b), ratio(a, b)) for i, op, shapes, a, b in rows])


def shown(path) -> str:
    path = pathlib.Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
