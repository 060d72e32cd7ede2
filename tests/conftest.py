"""Shared pytest fixtures: where the build put the binaries."""
import os
import pathlib
import subprocess

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", REPO_ROOT / "build"))


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
