"""Redundant computations are emitted once (frontend/python/trnsim/nki/_cse.py), as the compiler's CSE / loop-invariant
code motion leaves them out, and values never change: a later write through the reused name gets a tile of its own."""
import re

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def _load(x):
    """x [128, 512] into a tile (called while a kernel traces)."""
    t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _multiplies(program):
    return len(re.findall(r"^tensor_tensor .*op=multiply", program, re.M))


def test_a_loop_invariant_product_is_computed_once(rng):
    @nki.jit
    def invariant(a, b):
        out = nl.ndarray((4, 128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
        at, bt = _load(a), _load(b)
        for i in range(4):
            prod = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=prod, data1=at, data2=bt, op=nl.multiply)   # the same in every iteration
            res = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=res, data=prod, op0=nl.add, operand0=float(i))
            nisa.dma_copy(dst=out[i], src=res)
        return out
    a, b = (rng.standard_normal((128, 512)).astype(np.float32) for _ in range(2))
    out = invariant(a, b)
    np.testing.assert_allclose(out, np.stack([a * b + i for i in range(4)]), rtol=1e-6)
    assert _multiplies(invariant.last_program) == 1


def test_a_changed_input_is_computed_again(rng):
    @nki.jit
    def changed(a, b):
        out = nl.ndarray((2, 128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
        at, bt = _load(a), _load(b)
        for i in range(2):
            prod = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=prod, data1=at, data2=bt, op=nl.multiply)
            nisa.dma_copy(dst=out[i], src=prod)
            nisa.tensor_scalar(dst=at, data=at, op0=nl.add, operand0=1.0)     # the input changes
        return out
    a, b = (rng.standard_normal((128, 512)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(changed(a, b), np.stack([a * b, (a + 1) * b]), rtol=1e-6)
    assert _multiplies(changed.last_program) == 2


def test_writing_the_reused_tile_copies_it_first(rng):
    @nki.jit
    def copy_on_write(a, b):
        out = nl.ndarray((2, 128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
        at, bt = _load(a), _load(b)
        first = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=first, data1=at, data2=bt, op=nl.multiply)
        second = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=second, data1=at, data2=bt, op=nl.multiply)   # redundant: names first's tile
        nisa.tensor_scalar(dst=second[:, 0:256], data=second[:, 0:256], op0=nl.add, operand0=1.0)  # ... until written
        nisa.dma_copy(dst=out[0], src=first)
        nisa.dma_copy(dst=out[1], src=second)
        return out
    a, b = (rng.standard_normal((128, 512)).astype(np.float32) for _ in range(2))
    expected = a * b
    changed = expected.copy()
    changed[:, 0:256] += 1
    np.testing.assert_allclose(copy_on_write(a, b), np.stack([expected, changed]), rtol=1e-6)
    assert _multiplies(copy_on_write.last_program) == 1
