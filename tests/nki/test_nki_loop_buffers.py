"""The front-end's SBUF allocator gives a tile made in a loop body a second buffer when there is room (as
the NKI compiler multi-buffers loop-local tiles), so iteration i+1's load need not wait for iteration i's
reader; a kernel that fits only with one buffer per line still runs, with one buffer."""
import re

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
import trnsim


def _addresses(program, shape_text):
    """Byte offsets of the SBUF tiles of that shape, in declaration (creation) order."""
    return [int(m.group(1)) for m in re.finditer(r"^sbuf sb_\d+ : " + re.escape(shape_text) + r" @ 0:(\d+)$",
                                                 program, re.M)]


def _make_kernel(columns, iterations):
    @nki.jit
    def scale_rows(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(iterations):
            tile = nl.ndarray((128, columns), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x[i * 128:(i + 1) * 128, :])
            nisa.activation(dst=tile, op=nl.exp, data=tile)
            nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=tile)
        return out
    return scale_rows


def test_loop_tiles_alternate_buffers_and_overlap(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    kernel = _make_kernel(2048, 6)
    x = rng.standard_normal((6 * 128, 2048)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), np.exp(x), rtol=1e-5)
    addresses = _addresses(kernel.last_program, "fp32[128, 2048]")
    assert len(addresses) == 6
    assert all(a != b for a, b in zip(addresses, addresses[1:])), addresses
    # With every tile at one address each load waits for the previous iteration's store; alternating, it
    # overlaps the previous iteration's exp and the stores' start latency (the DMA stays the bottleneck).
    one_buffer = re.sub(r"(^sbuf sb_\d+ : fp32\[128, 2048\] @ 0:)\d+$", r"\g<1>0", kernel.last_program, flags=re.M)
    alternating = trnsim.run_program(kernel.last_program, timing_only=True, config="trn2").execution_ns
    single = trnsim.run_program(one_buffer, timing_only=True, config="trn2").execution_ns
    assert alternating < 0.93 * single, (alternating, single)


def test_a_tile_that_fits_only_once_keeps_one_buffer(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    # 120 KiB per partition: two would not fit the trn2 SBUF (224 KiB), so every iteration shares one.
    kernel = _make_kernel(30 * 1024, 3)
    x = rng.standard_normal((3 * 128, 30 * 1024)).astype(np.float32)
    np.testing.assert_allclose(kernel(x), np.exp(x), rtol=1e-5)
    addresses = _addresses(kernel.last_program, "fp32[128, 30720]")
    assert len(addresses) == 3 and len(set(addresses)) == 1, addresses
