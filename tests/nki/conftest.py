"""Fixtures of the NKI front-end tests: ``nki`` / ``neuronxcc.nki`` are served by trnsim.nki.

Installed once when this conftest is imported (pytest imports it before the test modules, so they
may ``import nki`` at module level) and again around every test (autouse), uninstalled after each
test so that a test that checks install()/uninstall() starts from a known state."""
import importlib.util
import pathlib

import numpy as np
import pytest

import trnsim.nki

# Test modules elsewhere do `from conftest import REPO_ROOT, build_dir`, and whichever conftest was
# imported last holds the module name `conftest`: this one offers the root conftest's helpers too.
_root_spec = importlib.util.spec_from_file_location("_tests_root_conftest",
                                                    pathlib.Path(__file__).resolve().parents[1] / "conftest.py")
_root = importlib.util.module_from_spec(_root_spec)
_root_spec.loader.exec_module(_root)
REPO_ROOT, build_dir = _root.REPO_ROOT, _root.build_dir

trnsim.nki.install()


@pytest.fixture(autouse=True)
def nki_installed():
    trnsim.nki.install()
    yield
    trnsim.nki.uninstall()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def check_timing():
    """``check_timing(kernel, *args)``: after a values run of ``kernel(*args)``, a timing-only run
    reuses the trace (no retrace) and gives the same latency, which is > 0."""
    def check(kernel, *args, **kwargs):
        values_ns = kernel.last_latency_ns
        traces = kernel.trace_count
        assert values_ns is not None and values_ns > 0
        assert kernel.run(args, kwargs, timing_only=True) is None
        assert kernel.last_latency_ns == values_ns
        assert kernel.trace_count == traces
        return values_ns
    return check


def source_line(fn, marker):
    """(basename, line) of the line of ``fn``'s source that holds ``# <marker>``: where a kernel's error must point."""
    import inspect
    import os
    lines, first = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if f"# {marker}" in text:
            return os.path.basename(inspect.getsourcefile(fn)), first + i
    raise AssertionError(f"no '# {marker}' in {fn.__name__}")
