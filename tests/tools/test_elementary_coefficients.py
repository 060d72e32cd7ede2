"""The committed exp/erf polynomial coefficients are the ones tools/numerics/elementary_coefficients.py derives."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_committed_coefficients_are_what_the_script_writes():
    result = subprocess.run([sys.executable, str(ROOT / "tools/numerics/elementary_coefficients.py"), "--check"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    # Each polynomial is accurate to well under an fp32 ulp's 1e-7 (what correct rounding needs).
    errors = [float(line.rsplit(" ", 1)[1]) for line in result.stderr.splitlines() if "max relative error" in line]
    assert len(errors) == 4 and max(errors) < 1e-14, result.stderr
