"""Beta 1's leading block dims (``nl.zeros((B, nl.par_dim(128), F))``): the compiler allocates each block on its own
(``ncc.sbuf.alloc``: "for each logical block in a tensor"), so the front-end gives an access within one block that
block's own tile. Blocks of a tile an instruction touches as a whole stay inside it, at their offsets."""
import re

import numpy as np

import trnsim
from neuronxcc import nki
import neuronxcc.nki.language as nl

BLOCKS, F = 3, 256


def _decls(program):
    return {m.group(1): (m.group(2), int(m.group(3)))
            for m in re.finditer(r"^sbuf (sb_\d+) : (\w+\[\d+, \d+\]) @ 0:(\d+)$", program, re.M)}


@nki.jit
def per_block_scale(x):
    """x [BLOCKS * 128, F]: block b holds rows 128b.., scaled by b + 1 (zeroed first, as the samples do)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.zeros((BLOCKS, nl.par_dim(128), F), dtype=x.dtype, buffer=nl.sbuf)
    for b in nl.affine_range(BLOCKS):
        t[b] = nl.load(x[b * 128:(b + 1) * 128, :])
        nl.store(out[b * 128:(b + 1) * 128, :], value=nl.multiply(t[b], float(b + 1)))
    return out


@nki.jit
def whole_then_blocks(x):
    """A memset of all blocks at once (one instruction), then the blocks one by one."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((BLOCKS, nl.par_dim(128), F), dtype=x.dtype, buffer=nl.sbuf)
    t[...] = nl.full((BLOCKS, nl.par_dim(128), F), 1.0, dtype=x.dtype)
    for b in nl.affine_range(BLOCKS):
        t[b, :, 0:F // 2] = nl.load(x[b * 128:(b + 1) * 128, 0:F // 2])
        nl.store(out[b * 128:(b + 1) * 128, :], value=t[b])
    return out


def test_each_block_is_a_tile_of_its_own(rng):
    x = rng.standard_normal((BLOCKS * 128, F)).astype(np.float32)
    expected = x * np.repeat(np.arange(1, BLOCKS + 1, dtype=np.float32), 128)[:, None]
    np.testing.assert_allclose(nki.simulate_kernel(per_block_scale, x), expected, rtol=1e-6)
    decls = _decls(per_block_scale.last_program)
    blocks = [name for name, (shape, _) in decls.items() if shape == f"fp32[128, {F}]"]
    assert len(blocks) >= BLOCKS, decls                               # one tile (or more) per block
    assert not any(shape == f"fp32[128, {BLOCKS * F}]" for shape, _ in decls.values()), decls   # none spans them


def test_blocks_of_a_tile_touched_whole_stay_inside_it(rng):
    x = rng.standard_normal((BLOCKS * 128, F)).astype(np.float32)
    expected = np.ones_like(x)
    expected[:, :F // 2] = x[:, :F // 2]
    np.testing.assert_allclose(nki.simulate_kernel(whole_then_blocks, x), expected, rtol=1e-6)
    decls = _decls(whole_then_blocks.last_program)
    wholes = [start for shape, start in decls.values() if shape == f"fp32[128, {BLOCKS * F}]"]
    blocks = {start for shape, start in decls.values() if shape == f"fp32[128, {F}]"}
    # t (and nl.full's temporary, copied whole into it): each has its blocks' tiles at its block offsets.
    assert wholes and all({w + b * F * 4 for b in range(BLOCKS)} <= blocks for w in wholes), (wholes, blocks)


def test_block_tiles_overlap_where_one_tile_would_serialise(rng):
    """A window per block loaded into the block, summed, the sums stored: with the blocks apart, the loads queue
    back to back; all at one address (the kernel's tile as one allocation) each load waits for the previous sum."""
    @nki.jit
    def window_sums(x):
        out = nl.ndarray((128, BLOCKS), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.zeros((BLOCKS, nl.par_dim(128), F), dtype=x.dtype, buffer=nl.sbuf)
        sums = nl.zeros((nl.par_dim(128), BLOCKS), dtype=nl.float32, buffer=nl.sbuf)
        for b in nl.static_range(BLOCKS):
            t[b] = nl.load(x[:, b * F:(b + 1) * F])
            sums[:, b:b + 1] = nl.sum(t[b], axis=1, keepdims=True)
        nl.store(out, value=sums)
        return out

    x = rng.standard_normal((128, BLOCKS * F)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(window_sums, x), x.reshape(128, BLOCKS, F).sum(axis=2),
                               rtol=1e-4, atol=1e-4)
    program = window_sums.last_program
    one_address = re.sub(rf"(^sbuf sb_\d+ : fp32\[128, {F}\] @ 0:)\d+$", r"\g<1>0", program, flags=re.M)
    apart = trnsim.run_program(program, timing_only=True, config="trn2").latency_ns
    together = trnsim.run_program(one_address, timing_only=True, config="trn2").latency_ns
    assert apart < 0.8 * together, (apart, together)


def test_blocks_that_do_not_fit_apart_fall_back_inside_their_tile(rng, monkeypatch):
    """When placing blocks apart does not fit (forced here: that attempt fails), every tile keeps its blocks
    inside it, as one allocation, before the allocator gives up multi-buffering; the values stay right."""
    from trnsim.nki import _trace
    from trnsim.nki._core import KernelError
    tried = []
    allocate = _trace.Trace._allocate

    def first_attempt_fails(self, alternate_buffers, best_fit=False):
        apart = any(t.block_of is not None and not t.tied for t in self.tiles)
        tried.append(apart)
        if apart:
            raise KernelError("forced: blocks apart do not fit")
        return allocate(self, alternate_buffers, best_fit)

    monkeypatch.setattr(_trace.Trace, "_allocate", first_attempt_fails)
    kernel = nki.jit(per_block_scale.fn)   # a fresh kernel: not one already traced (and cached) by another test
    x = rng.standard_normal((BLOCKS * 128, F)).astype(np.float32)
    expected = x * np.repeat(np.arange(1, BLOCKS + 1, dtype=np.float32), 128)[:, None]
    np.testing.assert_allclose(nki.simulate_kernel(kernel, x), expected, rtol=1e-6)
    assert tried[:2] == [True, False], tried
    decls = _decls(kernel.last_program)
    (whole,) = [start for shape, start in decls.values() if shape == f"fp32[128, {BLOCKS * F}]"]
    blocks = {start for shape, start in decls.values() if shape == f"fp32[128, {F}]"}
    assert {whole + b * F * 4 for b in range(BLOCKS)} <= blocks, (whole, blocks)
