"""Shared pytest fixtures: where the build put the binaries; a Ray for the sweeps to join."""
import logging
import os
import pathlib
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", REPO_ROOT / "build"))


# `import torch` autoloads trnsim (its "torch.backends" entry point) from the first trnsim dist-info on
# sys.path, before any test module puts its build's package there: the build under test comes first,
# so TRNSIM_BUILD_DIR's trnsim is the one torch loads, not the one the venv's .pth names.
if (build_dir() / "python").is_dir():
    sys.path.insert(0, str(build_dir() / "python"))


@pytest.fixture(scope="session")
def trnsim_bin() -> pathlib.Path:
    path = build_dir() / "bin" / "trnsim"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make` first")
    return path


@pytest.fixture
def run_trnsim(trnsim_bin):
    def run(*args, cwd=None):
        return subprocess.run([str(trnsim_bin), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120)
    return run


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray of 2 CPUs that a module's sweeps join with --ray-address: one Ray start-up per
    module (seconds on 2 cores) instead of one per sweep. Shut down when the module ends."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
