"""A tile made once and wholly overwritten in a loop (the NKI samples' adaptive_avg_pool2d loads every pooling
window into one tile): by default neuronx-cc allocates the traced kernel, so each whole overwrite is a new value
with a placement of its own, and a window's load need not wait for the previous window's reader. The front-end
gives such a write a fresh tile; a partial write, or one that also reads the tile, keeps it."""
import re

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
import trnsim

ROWS, COLUMNS, WINDOWS = 128, 512, 6


def _tile_names(program, shape_text):
    return re.findall(r"^sbuf (sb_\d+) : " + re.escape(shape_text) + r" @", program, re.M)


def _window_sums(write):
    """Sums each [128, 512] window of x through one tile made outside the loop; ``write`` decides how the
    window reaches the tile."""
    @nki.jit
    def kernel(x):
        out = nl.ndarray((ROWS, WINDOWS), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.ndarray((ROWS, COLUMNS), dtype=nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((ROWS, WINDOWS), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=tile, value=0.0)
        for w in nl.static_range(WINDOWS):
            write(tile, x[:, w * COLUMNS:(w + 1) * COLUMNS])
            nisa.tensor_reduce(dst=sums[:, w:w + 1], op=nl.add, data=tile, axis=1)
        nisa.dma_copy(dst=out, src=sums)
        return out
    return kernel


def _whole(tile, window):
    nisa.dma_copy(dst=tile, src=window)


def _half(tile, window):
    nisa.dma_copy(dst=tile[:, 0:COLUMNS // 2], src=window[:, 0:COLUMNS // 2])


def test_a_whole_overwrite_gets_a_fresh_tile_and_overlaps(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    x = rng.standard_normal((ROWS, WINDOWS * COLUMNS)).astype(np.float32)
    whole = _window_sums(_whole)
    np.testing.assert_allclose(whole(x), x.reshape(ROWS, WINDOWS, COLUMNS).sum(axis=2), rtol=1e-4, atol=1e-4)
    # The memset's tile and one per window.
    assert len(_tile_names(whole.last_program, "fp32[128, 512]")) == 1 + WINDOWS
    # The same program with every window's tile at one address is the kernel as written, buffer reused: each
    # load then waits for the previous window's reduce, and the DMA start latency is paid once per window.
    program = whole.last_program
    one_address = re.sub(r"(^sbuf sb_\d+ : fp32\[128, 512\] @ 0:)\d+$", r"\g<1>0", program, flags=re.M)
    # Reused, each window pays the DMA start latency (1.3 us), its engine time (50 + 8 x 86 ns per engine) and
    # HBM latency (161 ns) before its reduce: >= 6 x 2.2 us. Renamed, the six loads queue back to back behind
    # one start latency (~1.3 + 6 x 0.74 us) and the reduces follow them: about half the body.
    renamed = trnsim.run_program(program, timing_only=True, config="trn2").latency_ns
    reused = trnsim.run_program(one_address, timing_only=True, config="trn2").latency_ns
    assert reused > WINDOWS * (1300 + 738 + 161), reused
    assert renamed < 0.6 * reused, (renamed, reused)


def test_a_partial_overwrite_keeps_the_tile_and_its_other_values(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    x = rng.standard_normal((ROWS, WINDOWS * COLUMNS)).astype(np.float32)
    half = _window_sums(_half)
    windows = x.reshape(ROWS, WINDOWS, COLUMNS)[:, :, :COLUMNS // 2]
    np.testing.assert_allclose(half(x), windows.sum(axis=2), rtol=1e-4, atol=1e-4)   # the memset's zeros remain
    assert len(_tile_names(half.last_program, "fp32[128, 512]")) == 1


def test_a_write_that_reads_the_tile_keeps_it(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")

    def accumulate(tile, window):
        loaded = nl.ndarray((ROWS, COLUMNS), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=loaded, src=window)
        nisa.tensor_tensor(dst=tile, data1=tile, data2=loaded, op=nl.add)

    x = rng.standard_normal((ROWS, WINDOWS * COLUMNS)).astype(np.float32)
    running = _window_sums(accumulate)
    cumulative = np.cumsum(x.reshape(ROWS, WINDOWS, COLUMNS), axis=1).sum(axis=2)
    np.testing.assert_allclose(running(x), cumulative, rtol=1e-4, atol=1e-3)


def test_a_read_add_write_dma_keeps_the_tile(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")

    def add_into(tile, window):
        nisa.dma_copy(dst=tile, src=window, dst_rmw_op=nl.add)   # tile += window: reads the tile

    x = rng.standard_normal((ROWS, WINDOWS * COLUMNS)).astype(np.float32)
    running = _window_sums(add_into)
    cumulative = np.cumsum(x.reshape(ROWS, WINDOWS, COLUMNS), axis=1).sum(axis=2)
    np.testing.assert_allclose(running(x), cumulative, rtol=1e-4, atol=1e-3)
