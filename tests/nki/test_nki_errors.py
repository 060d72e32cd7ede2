"""Kernels that cannot run raise trnsim.nki.KernelError naming this file, the exact line of the
offending call (found by its ``# <marker>`` comment) and the rule broken."""
import inspect
import os

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import trnsim.nki
from conftest import source_line


def line_of(fn, marker):
    """(basename, line) of the line of ``fn``'s source that holds ``# <marker>``."""
    return source_line(fn, marker)


@pytest.fixture(autouse=True)
def trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def raises_at(kernel, marker, rule, *args):
    with pytest.raises(trnsim.nki.KernelError) as info:
        kernel(*args)
    base, line = line_of(kernel.__wrapped__, marker)
    message = str(info.value)
    assert f"{base}:{line}:" in message, message
    assert rule in message, message
    assert nki.KernelError is trnsim.nki.KernelError
    return message


def test_partition_dim_over_128():
    @nki.jit
    def too_tall(a):
        out = nl.ndarray((256, 64), a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((256, 64), a.dtype, buffer=nl.sbuf)  # tall-tile
        t[...] = nl.load(a)
        nl.store(out, t)
        return out
    message = raises_at(too_tall, "tall-tile", "[partition-limit]", np.zeros((256, 64), np.float32))
    assert "256" in message and "128" in message


def test_load_of_more_than_128_partitions():
    @nki.jit
    def tall_load(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)  # tall-load
        nl.store(out, t)
        return out
    raises_at(tall_load, "tall-load", "partition", np.zeros((200, 8), np.float32))


def test_psum_overflow_nine_banks():
    @nki.jit
    def nine_accumulators(a):
        out = nl.ndarray((9, 128, 512), nl.float32, buffer=nl.shared_hbm)
        x = nl.load(a)
        accs = []
        for i in range(9):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)  # psum-tile
            accs.append(acc)
        ones = nl.full((128, 128), 1.0, nl.float32)
        for acc in accs:
            acc += nl.matmul(ones, x, transpose_x=True)
        for i, acc in enumerate(accs):   # all nine are live until here
            nl.store(out[i], acc)
        return out
    message = raises_at(nine_accumulators, "psum-tile", "[psum-capacity]", np.zeros((128, 512), np.float32))
    assert "PSUM overflow" in message


def test_sbuf_tile_larger_than_a_partition():
    @nki.jit
    def huge(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64 * 1024), nl.float32, buffer=nl.sbuf)  # huge-tile
        nl.store(out, t[:, 0:8])
        return out
    message = raises_at(huge, "huge-tile", "[sbuf-capacity]", np.zeros((128, 8), np.float32))
    assert "SBUF overflow" in message


def test_sbuf_overflow_of_live_tiles():
    # strict_allocation=True: the error instead of the compiler's spilling (tests/nki/test_nki_spill.py).
    @nki.jit(strict_allocation=True)
    def four_big(a):
        # 4 x 64 KiB per partition live at once: more than the 224 KiB of a trn2 partition.
        out = nl.ndarray((128, 8), a.dtype, buffer=nl.shared_hbm)
        tiles = []
        for i in range(4):
            t = nl.ndarray((128, 16 * 1024), nl.float32, buffer=nl.sbuf)  # big-tile
            nisa.memset(t, float(i))
            tiles.append(t)
        acc = nl.zeros((128, 8), nl.float32)
        for t in tiles:
            acc[...] = acc + t[:, 0:8]
        nl.store(out, acc)
        return out
    message = raises_at(four_big, "big-tile", "[sbuf-capacity]", np.zeros((128, 8), np.float32))
    assert "SBUF overflow" in message


def test_isa_legality_stationary_free_size():
    @nki.jit
    def wide_stationary(a, b):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        s, m = nl.load(a), nl.load(b)
        acc = nl.ndarray((128, 64), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc[:, :], s, m)  # wide-matmul
        nl.store(out, acc)
        return out
    message = raises_at(wide_stationary, "wide-matmul", "[matmul-stationary-size]", np.zeros((128, 256), np.float32),
                        np.zeros((128, 64), np.float32))
    assert "stationary free size 256 exceeds 128" in message, message


def test_instruction_on_an_engine_that_cannot_run_it():
    @nki.jit
    def exp_on_vector(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        y = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.activation(y, nl.exp, nl.load(a), engine=nisa.engine.vector)  # wrong-engine
        nl.store(out, y)
        return out
    message = raises_at(exp_on_vector, "wrong-engine", "[engine]", np.zeros((128, 8), np.float32))
    assert "vector" in message


def test_legacy_index_out_of_range_without_mask():
    import neuronxcc.nki.language as lnl

    @nki.jit
    def overreach(a):
        out = nl.ndarray((128, 8), a.dtype, buffer=nl.shared_hbm)
        i_p = lnl.arange(128)[:, None]
        i_f = lnl.arange(8)[None, :]
        t = lnl.load(a[64 + i_p, i_f])  # overreach
        nl.store(out, t)
        return out
    message = raises_at(overreach, "overreach", "index expression", np.zeros((128, 8), np.float32))
    assert "64..191" in message


def test_legacy_mask_that_does_not_cover_the_overreach():
    import neuronxcc.nki.language as lnl

    @nki.jit
    def overreach(a):
        out = nl.ndarray((128, 8), a.dtype, buffer=nl.shared_hbm)
        i_p = lnl.arange(128)[:, None]
        i_f = lnl.arange(8)[None, :]
        t = lnl.load(a[64 + i_p, i_f], mask=(64 + i_p < 150))  # loose-mask
        nl.store(out, t)
        return out
    raises_at(overreach, "loose-mask", "under its mask", np.zeros((128, 8), np.float32))


def test_shape_mismatch():
    @nki.jit
    def mismatch(a, b):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        y = nl.add(nl.load(a), nl.load(b))  # mismatch
        nl.store(out, y)
        return out
    raises_at(mismatch, "mismatch", "do not match", np.zeros((128, 8), np.float32), np.zeros((128, 16), np.float32))


def test_call_outside_a_kernel():
    with pytest.raises(trnsim.nki.KernelError, match="outside a kernel"):
        nl.zeros((128, 8), nl.float32)


def test_legacy_matmul_legality_names_the_line():
    import neuronxcc.nki.isa as lisa
    import neuronxcc.nki.language as lnl

    @nki.jit
    def wide(a, b):
        out = lnl.ndarray((128, 64), lnl.float32, buffer=lnl.shared_hbm)
        acc = lnl.zeros((128, 64), lnl.float32, buffer=lnl.psum)
        s, m = lnl.load(a), lnl.load(b)
        acc += lisa.nc_matmul(s, m)  # legacy-wide
        lnl.store(out, value=lnl.copy(acc))
        return out
    raises_at(wide, "legacy-wide", "[matmul-stationary-size]", np.zeros((128, 256), np.float32),
              np.zeros((128, 64), np.float32))


def _helper_that_overflows(x):
    return nl.ndarray((129, 4), nl.float32, buffer=nl.sbuf)  # helper-line


def test_error_in_a_helper_names_the_helper_line():
    @nki.jit
    def calls_helper(a):
        t = _helper_that_overflows(nl.load(a))
        return None
    with pytest.raises(trnsim.nki.KernelError) as info:
        calls_helper(np.zeros((4, 4), np.float32))
    base, line = line_of(_helper_that_overflows, "helper-line")
    assert f"{base}:{line}:" in str(info.value) and "[partition-limit]" in str(info.value)


def test_timing_only_reports_the_same_error():
    @nki.jit(values=False)
    def exp_on_vector(a):
        y = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
        nisa.activation(y, nl.exp, nl.load(a), engine=nisa.engine.vector)  # wrong-engine
        return None
    raises_at(exp_on_vector, "wrong-engine", "[engine]", np.zeros((128, 8), np.float32))


@nki.jit
def many_instructions(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    for _ in range(100):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)  # trace-size
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_trace_beyond_the_bound_is_an_error_not_an_oom(monkeypatch):
    x = np.zeros((128, 16), np.float32)
    monkeypatch.setenv("TRNSIM_NKI_MAX_TRACED_INSTRUCTIONS", "50")
    message = raises_at(many_instructions, "trace-size", "[trace-size]", x)
    assert "traces more than 50 instructions" in message and "TRNSIM_NKI_MAX_TRACED_INSTRUCTIONS" in message
    monkeypatch.setenv("TRNSIM_NKI_MAX_TRACED_INSTRUCTIONS", "1000")
    np.testing.assert_array_equal(many_instructions(x), x + 100)
