"""Kernels calling kernels: a @nki.jit function called while another is traced is inlined."""
import numpy as np

import nki
import nki.language as nl


@nki.jit
def scale_tile(t, factor):
    return nl.multiply(t, factor)


@nki.jit
def outer(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, scale_tile(nl.load(a), 3.0))
    return out


def test_a_kernel_called_inside_a_kernel_is_inlined(rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(outer(a), 3 * a, rtol=1e-6)
    assert scale_tile.trace_count == 0 and outer.trace_count == 1
