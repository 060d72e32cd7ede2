"""Spilling (issue 37 item 4): a kernel whose live tiles exceed SBUF runs, as the Neuron compiler compiles it, with the
tile used furthest ahead stored to HBM and loaded back before its next use (frontend/python/trnsim/nki/_spill.py);
``strict_allocation=True`` keeps the [sbuf-capacity] error. Values equal NumPy's; the spill traffic is the hand-counted
bytes; the scheduled program is also checked against program order."""
import re

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import trnsim
from trnsim.nki import KernelError


def _quarter_columns():
    """fp32 columns of a tile that takes a quarter of trn2's SBUF partition: four such tiles fill it."""
    leaves = trnsim._C.config_leaves("trn2", [])
    return int(leaves["core.sbuf.bytes_per_partition"]) // 4 // 4


def _kernel(columns, **options):
    @nki.jit(**options)
    def five_live(x):
        out = nl.ndarray((128, columns), dtype=x.dtype, buffer=nl.shared_hbm)
        tiles = []
        for i in range(4):
            t = nl.ndarray((128, columns), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[i])
            tiles.append(t)
        # A fifth tile while all four are live: one of them must leave SBUF (tiles[2], used furthest ahead).
        acc = nl.ndarray((128, columns), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=acc, data1=tiles[0], data2=tiles[3], op=nl.add)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=tiles[1], op=nl.add)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=tiles[2], op=nl.add)
        nisa.dma_copy(dst=out, src=acc)
        return out
    return five_live


@pytest.fixture
def trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def test_a_kernel_beyond_sbuf_spills_and_computes_the_same_values(rng, trn2):
    columns = _quarter_columns()
    x = rng.standard_normal((4, 128, columns)).astype(np.float32)
    kernel = _kernel(columns)
    out = kernel(x)
    np.testing.assert_allclose(out, x[0] + x[3] + x[1] + x[2], rtol=1e-6)
    program = kernel.last_program
    queue = int(trnsim._C.config_leaves("trn2", [])["core.dma.queues_per_engine"]) - 1
    spills = re.findall(r"^dma_copy dst=spill\w*\{.*queue=(\d+)$", program, re.M)
    reloads = re.findall(r"^dma_copy dst=\w+_reload\w*\{.*src=spill\w*\{.*queue=(\d+)$", program, re.M)
    assert len(spills) == 1 and len(reloads) == 1, program
    assert {int(q) for q in spills + reloads} == {queue}
    # The spilled tile is x[2]'s (used furthest ahead): its reload comes after the second add.
    body = [line for line in program.splitlines() if line.startswith(("dma_copy", "tensor_tensor"))]
    reload_at = next(i for i, line in enumerate(body) if "src=spill" in line)
    assert body[reload_at + 1].startswith("tensor_tensor") and "_reload" in body[reload_at + 1]
    # Hand count: the tile out and back, 128 partitions x columns x 4 bytes each way.
    traced = next(iter(kernel._cache.values()))
    assert traced.trace.spill_bytes == 2 * 128 * columns * 4
    assert traced.trace.spill_count == 1


def test_spilling_is_timed_as_its_dma_traffic(rng, monkeypatch):
    """The same kernel on trn2 and on trn2 with twice the SBUF (where nothing spills): the HBM traffic differs by
    exactly the spill's store and reload, and the spilling run is the slower."""
    from trnsim.nki import _runtime
    monkeypatch.delenv("NEURON_PLATFORM_TARGET_OVERRIDE", raising=False)
    columns = _quarter_columns()
    x = rng.standard_normal((4, 128, columns)).astype(np.float32)
    runs = {}
    sbuf = int(trnsim._C.config_leaves("trn2", [])["core.sbuf.bytes_per_partition"])
    for name, overrides in (("spills", []), ("fits", [f"core.sbuf.bytes_per_partition={2 * sbuf}"])):
        _runtime.set_target("trn2", overrides)
        try:
            kernel = _kernel(columns)
            kernel(x)
        finally:
            _runtime._default_target.update(config=None, overrides=[])
        runs[name] = kernel
    assert "spill" in runs["spills"].last_program and "spill" not in runs["fits"].last_program
    spilled = next(iter(runs["spills"]._cache.values())).trace.spill_bytes
    extra = runs["spills"].last_summary.hbm_bytes - runs["fits"].last_summary.hbm_bytes
    assert extra == spilled == 2 * 128 * columns * 4
    assert runs["spills"].last_latency_ns > runs["fits"].last_latency_ns


def test_strict_allocation_keeps_the_capacity_error(rng, trn2):
    columns = _quarter_columns()
    x = rng.standard_normal((4, 128, columns)).astype(np.float32)
    with pytest.raises(KernelError, match=r"\[sbuf-capacity\]"):
        _kernel(columns, strict_allocation=True)(x)
