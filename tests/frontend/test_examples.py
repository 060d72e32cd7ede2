"""The PyTorch examples run end to end on the simulated device and agree with the CPU."""
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
