"""Issue 42 N1: hostile NKI launches and sizes get a clear error naming the kernel line and the rule, checked before
the work (an empty or huge SPMD grid, an HBM tensor beyond the simulated HBM or beyond the host memory trnsim gives
a kernel), and bool tensors keep NumPy's bool logic (NKI's bool_ is a byte holding 0 or 1)."""
import inspect
import os

import numpy as np
import pytest

import nki
import nki.language as nl
import trnsim.nki
from conftest import source_line
from trnsim.nki import _runtime, _trace


@pytest.fixture(autouse=True)
def trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def line_of(fn, marker):
    return "%s:%d:" % source_line(fn, marker)


@nki.jit
def copy(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x))
    return out


@pytest.mark.parametrize("grid", [0, (2, 0), -1])
def test_an_empty_grid_is_refused(grid):
    x = np.ones((4, 8), np.float32)
    with pytest.raises(trnsim.nki.KernelError, match=r"test_nki_bounds.py:\d+: .*launches no instance.*\[grid\]"):
        copy[grid](x)


@pytest.mark.parametrize("grid", [2.5, "2"])
def test_a_grid_dim_that_is_not_an_int_is_refused(grid):
    with pytest.raises(trnsim.nki.KernelError, match=r"grid dims are ints.*\[grid\]"):
        copy[grid]


def test_a_huge_grid_is_refused_before_any_trace():
    x = np.ones((4, 8), np.float32)
    traces = copy.trace_count
    with pytest.raises(trnsim.nki.KernelError, match=r"1,048,576 SPMD instances.*65,536.*\[grid-size\]"):
        copy[2 ** 20](x)
    with pytest.raises(trnsim.nki.KernelError, match=r"\[grid-size\]"):
        copy[1024, 1024](x)
    assert copy.trace_count == traces
    assert _runtime.DEFAULT_MAX_GRID_INSTANCES == 65536


def test_the_grid_bound_is_configurable(monkeypatch):
    monkeypatch.setenv("TRNSIM_NKI_MAX_GRID_INSTANCES", "3")
    x = np.ones((4, 8), np.float32)
    np.testing.assert_array_equal(copy[3](x), x)
    with pytest.raises(trnsim.nki.KernelError, match=r"4 SPMD instances.*\(3,.*\[grid-size\]"):
        copy[4](x)


@nki.jit
def big_output(x, rows):
    out = nl.ndarray((rows, 1 << 20), dtype=nl.float32, buffer=nl.shared_hbm)  # big
    nl.store(out[0:4, 0:8], value=nl.load(x))
    return out


def test_an_output_beyond_the_host_bound_names_its_line_and_size():
    x = np.ones((4, 8), np.float32)
    # 4096 x 2^20 fp32 = 16 GiB: more than the host bound (4 GiB by default), less than trn2's 96 GiB HBM.
    with pytest.raises(trnsim.nki.KernelError) as info:
        big_output(x, 4096)
    message = str(info.value)
    assert line_of(big_output.__wrapped__, "big") in message, message
    assert "16.00 GiB" in message and "TRNSIM_NKI_MAX_HOST_HBM_BYTES" in message and "[host-memory]" in message


def test_an_output_beyond_the_simulated_hbm_names_its_line():
    x = np.ones((4, 8), np.float32)
    # 2^20 x 2^20 fp32 = 4 TiB: more than trn2's HBM (96 GiB).
    with pytest.raises(trnsim.nki.KernelError) as info:
        big_output(x, 1 << 20)
    message = str(info.value)
    assert line_of(big_output.__wrapped__, "big") in message, message
    assert "4,096.00 GiB" in message and "96.00 GiB" in message and "[hbm-capacity]" in message


def test_the_host_bound_is_configurable(monkeypatch):
    x = np.ones((4, 8), np.float32)
    monkeypatch.setenv("TRNSIM_NKI_MAX_HOST_HBM_BYTES", str(40 << 20))
    out = big_output(x, 8)   # 32 MiB
    np.testing.assert_array_equal(out[0:4, 0:8], x)
    with pytest.raises(trnsim.nki.KernelError, match=r"\[host-memory\]"):
        big_output(x, 16)    # 64 MiB


@nki.jit
def bool_ops(a, b):
    s = nl.ndarray(a.shape, dtype=nl.bool_, buffer=nl.shared_hbm)
    p = nl.ndarray(a.shape, dtype=nl.bool_, buffer=nl.shared_hbm)
    f = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    nl.store(s, value=nl.add(ta, tb))
    nl.store(p, value=nl.multiply(ta, tb))
    nl.store(f, value=nl.add(ta, 0.5))
    return s, p, f


def test_bool_tensors_keep_numpy_bool_logic(rng):
    a = rng.random((8, 16)) < 0.5
    b = rng.random((8, 16)) < 0.5
    s, p, f = bool_ops(a, b)
    assert s.dtype == np.bool_ and p.dtype == np.bool_
    np.testing.assert_array_equal(s, a + b)     # True + True is True
    np.testing.assert_array_equal(p, a * b)
    np.testing.assert_array_equal(f, (a + 0.5).astype(np.float32))
    assert s.view(np.uint8).max() == 1


@nki.jit
def bool_subtract(a, b):
    out = nl.ndarray(a.shape, dtype=nl.bool_, buffer=nl.shared_hbm)
    nl.store(out, value=nl.subtract(nl.load(a), nl.load(b)))  # sub
    return out


def test_bool_subtraction_is_refused_as_numpy_does():
    a = np.ones((4, 4), bool)
    with pytest.raises(trnsim.nki.KernelError) as info:
        bool_subtract(a, a)
    assert line_of(bool_subtract.__wrapped__, "sub") in str(info.value)
    assert "[bool-arithmetic]" in str(info.value)
    with pytest.raises(TypeError):
        np.subtract(a, a)


@pytest.mark.parametrize("call", [lambda x: nki.simulate(copy)[0](x), lambda x: nki.simulate(copy)[2 ** 20](x)])
def test_grids_given_through_simulate_are_checked_too(call):
    with pytest.raises(trnsim.nki.KernelError, match=r"test_nki_bounds.py:\d+: .*\[grid(-size)?\]"):
        call(np.ones((4, 8), np.float32))
