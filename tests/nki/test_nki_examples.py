"""The NKI examples (examples/nki/*.py) run as users run them, ``python -m trnsim.nki <script>``, in
a subprocess: each exits 0 and prints its values check against NumPy (and, but for matmul.py's
default run, the run summary)."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

import trnsim

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "nki"

CASES = [
    # (script, extra args, checks that print a run summary, kernels checked)
    ("matmul.py", [], False, 4),
    ("softmax.py", [], True, 2),
    ("softmax.py", ["--dtype", "bfloat16", "--target", "trn3", "-N", "300", "-D", "512"], True, 2),
    ("rmsnorm.py", [], True, 2),
    ("rmsnorm.py", ["--dtype", "bfloat16", "--target", "trn1", "-N", "200", "-D", "768"], True, 2),
    ("flash_attention.py", [], True, 1),
    ("flash_attention.py", ["-S", "384", "-d", "32", "--heads", "3", "--target", "trn1"], True, 1),
]


def _env():
    """The parent's environment, with the trnsim package this test imported on PYTHONPATH."""
    env = dict(os.environ)
    root = str(pathlib.Path(trnsim.__file__).resolve().parent.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        parts.insert(0, root)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env.pop("NEURON_PLATFORM_TARGET_OVERRIDE", None)
    return env


@pytest.mark.parametrize("script, args, summary, kernels", CASES,
                         ids=[f"{c[0]}{'-' + '-'.join(c[1]) if c[1] else ''}" for c in CASES])
def test_example_runs_and_checks_values(script, args, summary, kernels):
    path = EXAMPLES / script
    assert path.exists(), path
    proc = subprocess.run([sys.executable, "-m", "trnsim.nki", str(path), *args], capture_output=True, text=True,
                          env=_env(), timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{script} {args} exited {proc.returncode}:\n{out}"
    checks = re.findall(r"values ok \(max error [0-9.e+-]+", proc.stdout)
    assert len(checks) == kernels, f"expected {kernels} values-check lines:\n{out}"
    assert "WRONG" not in proc.stdout
    assert re.search(r"[0-9.]+ us on trn[123]", proc.stdout), out
    if summary:
        assert re.search(r"summary: <[0-9.]+ us; MFU [0-9.]+% HFU [0-9.]+% MBU [0-9.]+%", proc.stdout), out
