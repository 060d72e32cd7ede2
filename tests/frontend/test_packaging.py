"""`pip install --no-build-isolation .`: the wheel setup.py makes from the CMake build holds the package
and its native module, and installed on its own (away from the build folder) it imports and runs.

The wheel is built from the existing build ($TRNSIM_BUILD_DIR, else build/), which is only brought up
to date, so this takes seconds rather than a full compile."""
import os
import pathlib
import subprocess
import sys
import tomllib
import zipfile

import pytest

from conftest import REPO_ROOT, build_dir

# A stale build has to recompile what changed, on a shared 2-core machine: bounded, not unlimited.
BUILD_TIMEOUT_S = 300


def _env():
    env = dict(os.environ, TRNSIM_BUILD_DIR=str(build_dir()))
    env.pop("PYTHONPATH", None)  # the installed copy, not the build folder, must be what imports
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if not list((build_dir() / "python" / "trnsim").glob("_C*.so")):
        pytest.fail(f"{build_dir()}/python/trnsim/_C*.so is missing: run `make` first")
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
                           "-w", str(out), str(REPO_ROOT)],
                          capture_output=True, text=True, cwd=REPO_ROOT, env=_env(), timeout=BUILD_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    wheels = list(out.glob("trnsim-*.whl"))
    assert len(wheels) == 1, list(out.iterdir())
    return wheels[0]


def test_wheel_contents(wheel):
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    # A platform wheel for this interpreter: it carries a compiled module.
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.startswith(f"trnsim-{version}-{tag}-{tag}-linux_"), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(f"trnsim-{version}.dist-info/METADATA").decode()
        entry_points = zf.read(f"trnsim-{version}.dist-info/entry_points.txt").decode()
    assert "trnsim/__init__.py" in names and "trnsim/device.py" in names
    # PyTorch's autoload and dynamo find the device through these (tests/frontend/test_autoload.py).
    assert "_trnsim_autoload.py" in names
    assert "[torch.backends]\ntrnsim = _trnsim_autoload:autoload\n" in entry_points, entry_points
    assert "[torch_dynamo_backends]\nneuron = _trnsim_autoload:compile_backend\n" in entry_points, entry_points
    assert any(n.startswith("trnsim/_C") and n.endswith(".so") for n in names), names
    # The shipped configs travel with the package.
    assert {"trnsim/configs/trn2.yaml", "trnsim/configs/trn3.yaml"} <= set(names)
    sources = {p.name for p in (REPO_ROOT / "frontend" / "python" / "trnsim").glob("*.py")}
    assert sources <= {pathlib.PurePosixPath(n).name for n in names if n.startswith("trnsim/")}
    # Installing must never pull a torch (a CUDA wheel by default): none declared, or exactly the pinned one.
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:") and "torch" in line:
            assert line.split(":", 1)[1].strip().replace(" ", "") == "torch==2.13.0", line


def test_installed_wheel_imports_and_runs(wheel, tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site),
                           str(wheel)], capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import pathlib, torch, trnsim\n"
        "assert pathlib.Path(trnsim.__file__).resolve().is_relative_to(pathlib.Path(sys.argv[1]).resolve()), trnsim.__file__\n"
        "x = torch.randn(2, device='neuron')\n"
        "assert x.device.type == 'neuron' and x.shape == (2,)\n"
        "y = (x * 2).cpu()\n"
        "import os; assert os.path.join(sys.argv[1], 'trnsim', 'configs') in os.environ['TRNSIM_CONFIG_PATH']\n"
        "assert trnsim.set_config('trn3')['name'] == 'trn3'\n"
        "assert torch.equal(y, x.cpu() * 2)\n"
        "print('OK', trnsim.__file__)\n")
    run = subprocess.run([sys.executable, "-c", script, str(site)], capture_output=True, text=True,
                         env=dict(_env(), TRNSIM_FALLBACK="allow"), cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert run.stdout.startswith("OK " + str(site)), run.stdout
    # With the installed copy on the path, `import torch` alone registers the device (autoload).
    autoload = subprocess.run(
        [sys.executable, "-c", "import sys, torch\n"
                               "x = torch.randn(2, device='neuron')\n"
                               "print(x.device, sys.modules['trnsim'].__file__)\n"],
        capture_output=True, text=True, env=dict(_env(), PYTHONPATH=str(site)), cwd=tmp_path, timeout=120)
    assert autoload.returncode == 0, autoload.stdout[-4000:] + autoload.stderr[-4000:]
    assert autoload.stdout.startswith(f"neuron:0 {site}"), autoload.stdout
