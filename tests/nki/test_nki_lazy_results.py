"""Matmul results are written where they are assigned, but never out of program order: a result the
kernel keeps, or one whose operands change before it is used, holds the values of its own moment."""
import numpy as np

from neuronxcc import nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def operands_change_before_use(a, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    product = nisa.nc_matmul(x, y)        # x.T @ y
    x[...] = 0.0                          # overwrites an operand before the result is used
    nl.store(out, nl.copy(product))
    return out


@nki.jit
def result_used_twice(a, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    product = nisa.nc_matmul(x, y)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
    acc += product
    acc += product                         # a kept result: added twice, not accumulated into twice
    nl.store(out, nl.copy(acc))
    return out


@nki.jit
def accumulated_in_place(a, b):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
    for _ in range(3):
        acc += nisa.nc_matmul(x, y)        # temporaries: accumulated in PSUM by the matmuls
    nl.store(out, nl.copy(acc))
    return out


def test_results_keep_their_program_order(rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    want = a.T @ b
    np.testing.assert_allclose(operands_change_before_use(a, b), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(result_used_twice(a, b), 2 * want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(accumulated_in_place(a, b), 3 * want, rtol=1e-4, atol=1e-4)
    assert accumulated_in_place.last_summary.instructions.get("nc_matmul") == 3
    assert "tensor_tensor" not in accumulated_in_place.last_summary.instructions
