"""nki.isa calls the front-end composes (dma_compute) and the API it still lacks (missing())."""
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import trnsim.nki


@nki.jit
def sum_of_three(a, b, c):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_compute(out, [a, b, c], reduce_op=nl.add)
    return out


def test_dma_compute_adds_its_sources(rng):
    a, b, c = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(sum_of_three(a, b, c), a + b + c, rtol=1e-6)
    assert sum_of_three.last_summary.instructions == {"dma_copy": 3}


def test_missing_lists_what_cannot_run():
    missing = trnsim.nki.isa.missing()
    assert "dma_compute" not in missing and "nc_matmul" not in missing
    assert "register_alloc" not in missing and "register_load" not in missing
    assert "core_barrier" not in missing and "scalar_store" not in missing
    assert missing == ["sendrecv"]              # with the collectives (the multi-chip issue)
    for name in missing:
        @nki.jit
        def uses(a, name=name):
            getattr(nisa, name)(a)
            return a
        with pytest.raises(trnsim.nki.KernelError, match=f"nki.isa.{name} is not supported"):
            uses(np.zeros((128, 4), np.float32))
