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


@nki.jit
def fragmenting(x):
    """Tiles a (2 units), b (2), c (4) fill SBUF (a unit is an eighth of it); c dies, then a, so by age the next
    2-unit tile d lands in c's old bytes and the 4-unit tile e then finds two 2-unit holes around the live b. Packed
    by best fit (d into a's bytes) it fits, as nki-library's bwmm_shard_on_block needs."""
    unit = x.shape[1]
    out = nl.ndarray((128, 5 * unit), dtype=x.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 2 * unit), dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, 2 * unit), dtype=x.dtype, buffer=nl.sbuf)
    c = nl.ndarray((128, 4 * unit), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=a, value=1.0)
    nisa.memset(dst=b, value=2.0)
    nisa.memset(dst=c, value=3.0)
    nisa.tensor_tensor(dst=a[:, 0:unit], data1=a[:, 0:unit], data2=c[:, 0:unit], op=nl.add)    # c's last use
    nisa.tensor_tensor(dst=b[:, 0:unit], data1=b[:, 0:unit], data2=a[:, 0:unit], op=nl.add)    # a's last use
    d = nl.ndarray((128, 2 * unit), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=d, src=x.reshape((128, unit)).ap([[unit, 128], [0, 2], [1, unit]]))
    e = nl.ndarray((128, 4 * unit), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=e, value=5.0)
    nisa.dma_copy(dst=out[:, 0:unit], src=b[:, 0:unit])
    nisa.dma_copy(dst=out[:, unit:2 * unit], src=d[:, 0:unit])
    nisa.dma_copy(dst=out[:, 2 * unit:5 * unit], src=e[:, 0:3 * unit])
    return out


def test_a_kernel_that_fits_only_packed_tightly_gets_a_best_fit_placement(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    unit = 229376 // 4 // 8   # fp32 elements in an eighth of a trn2 SBUF partition
    x = np.arange(128 * unit, dtype=np.float32).reshape(128, unit)
    got = fragmenting(x)
    np.testing.assert_array_equal(got[:, :unit], 6.0)          # b + (a + c) = 2 + 4
    np.testing.assert_array_equal(got[:, unit:2 * unit], x)
    np.testing.assert_array_equal(got[:, 2 * unit:], 5.0)
