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


@nki.jit
def sum_with_scales(a, b, scales):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_compute(out, (a, b), scales=scales, reduce_op=nl.add)
    return out


def test_dma_compute_takes_unit_scales_and_refuses_others(rng):
    """nki-library (qkv_tkg, bwmm_shard_on_block) passes scales=(1.0, ...): the plain sum; other scales are an
    error rather than a sum that ignores them."""
    a, b = (rng.standard_normal((64, 32)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(sum_with_scales(a, b, (1.0, 1.0)), a + b, rtol=1e-6)
    with pytest.raises(nki.KernelError, match="unit"):
        sum_with_scales(a, b, (0.5, 1.0))


def test_missing_lists_what_cannot_run():
    missing = trnsim.nki.isa.missing()
    assert "dma_compute" not in missing and "nc_matmul" not in missing
    assert "register_alloc" not in missing and "register_load" not in missing
    assert "core_barrier" not in missing and "scalar_store" not in missing
    assert "sendrecv" not in missing
    assert missing == []                        # every nki.isa function of NKI 0.7 traces


def test_an_nki_function_without_an_instruction_is_a_kernel_error(monkeypatch):
    """The path a function NKI has and trnsim's ISA lacks takes (none today): a KernelError naming it."""
    monkeypatch.setattr(trnsim.nki.isa, "NKI_FUNCTIONS", trnsim.nki.isa.NKI_FUNCTIONS + ["future_instruction"])
    assert trnsim.nki.isa.missing() == ["future_instruction"]

    @nki.jit
    def uses(a):
        nisa.future_instruction(a)
        return a
    with pytest.raises(trnsim.nki.KernelError, match="nki.isa.future_instruction is not supported"):
        uses(np.zeros((128, 4), np.float32))
