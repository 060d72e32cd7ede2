"""The PyTorch examples run end to end on the simulated device and agree with the CPU."""
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON_DIR = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", ROOT / "build")) / "python"


def test_mlp_training_example_matches_cpu_without_fallbacks():
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), TRNSIM_FALLBACK="error")
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "mlp_training.py"), "--steps", "2",
                             "--batch", "64", "--width", "192"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    reports = re.findall(r"^(trn[23]): simulated ([0-9.]+) us .* max relative difference to the CPU ([0-9.e+-]+)$",
                         result.stdout, re.MULTILINE)
    assert [r[0] for r in reports] == ["trn2", "trn3"], result.stdout
    for _, simulated_us, difference in reports:
        assert float(simulated_us) > 0
        assert float(difference) < 1e-4
    assert result.stdout.count("fallback ops: 0") == 2, result.stdout


def test_transformer_demo_reduced(tmp_path):
    """examples/transformer_demo.py (what `make demo` runs) in a reduced size: both configs' tables
    and totals, losses that agree with the CPU, and one Perfetto trace per config with an "ops" track."""
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "transformer_demo.py"), "--layers", "1",
                             "--seq", "128", "--d-model", "128", "--vocab", "1024", "--steps", "1",
                             "--out", str(tmp_path)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "=== trn2: " in out and "=== trn3: " in out, out
    assert re.search(r"^trn2: simulated [0-9.]+ us .*MFU", out, re.MULTILINE), out
    assert re.search(r"^trn3: simulated [0-9.]+ us .*MFU", out, re.MULTILINE), out
    per_step = re.search(r"^simulated time / step \(us\)\s+([0-9,.]+)\s+([0-9,.]+)$", out, re.MULTILINE)
    assert per_step and all(float(v.replace(",", "")) > 0 for v in per_step.groups()), out
    speedup = re.search(r"^speed-up trn3 / trn2: ([0-9.]+)x", out, re.MULTILINE)
    assert speedup and float(speedup.group(1)) > 0, out
    difference = re.search(r"^max relative difference to the CPU: ([0-9.e+-]+) \(OK", out, re.MULTILINE)
    assert difference and float(difference.group(1)) < 0.05, out
    assert re.search(r"^fallback ops / step\s+\d+\s+\d+$", out, re.MULTILINE), out
    for config in ("trn2", "trn3"):
        trace = tmp_path / f"transformer_{config}.json"
        assert trace.is_file() and str(trace) in out, out
        events = json.loads(trace.read_text())["traceEvents"]
        tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        assert "ops" in tracks, sorted(tracks)
        assert any(e.get("ph") == "X" for e in events)
    assert "ui.perfetto.dev" in out
