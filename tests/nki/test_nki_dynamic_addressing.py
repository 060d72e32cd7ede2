"""Dynamic addressing (NKI scalars): a register read from a tensor (nisa.scalar_load) chooses rows by
``t.ap(..., scalar_offset=)``, by indexing ``t[reg]`` and by ``nl.ds(reg, n)``; scalar arithmetic is traced into
register instructions. And nisa.core_barrier: the two physical cores of an LNC=2 launch run together on shared
HBM and meet, so each reads what the other wrote."""
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import trnsim
import trnsim.nki
from trnsim.nki import KernelError


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@nki.jit
def pick_rows(table, k):
    """Rows k*2+1 .. k*2+4 of table into out: the start row is an NKI scalar."""
    out = nl.ndarray((4, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=k)
    i = nisa.scalar_load(k_sb) * 2 + 1
    d = table.shape[1]
    tile = nl.ndarray((4, d), dtype=table.dtype, buffer=nl.sbuf)
    # scalar_offset is scaled by the stride of indirect_dim (default 0: a row of table).
    nisa.dma_copy(dst=tile, src=table.ap([[d, 4], [1, d]], offset=0, scalar_offset=i))
    nisa.dma_copy(dst=out, src=tile)
    return out



@nki.jit
def pick_expert(weights, expert, column):
    """MoE-style: expert e's [4, D] block of weights [E, 4, D], the expert id a one-element tensor in SBUF
    (scalar_offset scaled by dim 0's stride 4 D); then from a [1, W] lookup table the entry at a register
    (indirect_dim=1); then 8 columns of a row slice shifted by that register (pattern omitted: the view's own)."""
    e_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=e_sb, src=expert)
    d = weights.shape[2]
    block = nl.ndarray((4, d), dtype=weights.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=block, src=weights.ap([[d, 4], [1, d]], offset=0, scalar_offset=e_sb, indirect_dim=0))
    out = nl.ndarray((4, d), dtype=weights.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=block)
    c_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=c_sb, src=column)
    c = nisa.scalar_load(c_sb)
    shifted = nl.ndarray((4, 8), dtype=weights.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=shifted, src=weights[1, :, 0:8].ap(scalar_offset=c, indirect_dim=1))
    cols = nl.ndarray((4, 8), dtype=weights.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=cols, src=shifted)
    return out, cols


def test_scalar_offset_is_scaled_by_the_stride_of_indirect_dim(rng):
    weights = rand(rng, 5, 4, 32)
    for e, c in ((0, 0), (3, 5), (4, 24)):
        out, cols = pick_expert(weights, np.array([[e]], dtype=np.int32), np.array([[c]], dtype=np.int32))
        np.testing.assert_array_equal(out, weights[e])
        np.testing.assert_array_equal(cols, weights[1, :, c:c + 8])
    assert "register_load" in pick_expert.last_program and "register_mul" in pick_expert.last_program


@nki.jit
def gather_batch_rows(table, idx):
    """Rows idx[p] of batch 1 of table [2, N, D] (vector_offset scaled by dim 1's stride D)."""
    n, d = table.shape[1], table.shape[2]
    p = idx.shape[0]
    i_sb = nl.ndarray((p, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=i_sb, src=idx)
    rows = nl.ndarray((p, d), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap([[d, p], [1, d]], offset=n * d, vector_offset=i_sb, indirect_dim=1))
    out = nl.ndarray((p, d), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_vector_offset_along_another_dim(rng):
    table = rand(rng, 2, 40, 16)
    idx = np.array([[7], [0], [39], [7], [12], [3], [21], [30]], dtype=np.int32)
    got = gather_batch_rows(table, idx)
    np.testing.assert_array_equal(got, table[1, idx[:, 0]])


@nki.jit
def index_and_ds(table, k):
    """table[k] (one row) and table[nl.ds(k, 2)] (two rows) with k an NKI scalar."""
    d = table.shape[1]
    out = nl.ndarray((3, d), dtype=table.dtype, buffer=nl.shared_hbm)
    k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=k)
    r = nisa.scalar_load(k_sb)
    one = nl.ndarray((1, d), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=one, src=table[r])
    two = nl.ndarray((2, d), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=two, src=table[nl.ds(r, 2), :])
    nisa.dma_copy(dst=out[0:1, :], src=one)
    nisa.dma_copy(dst=out[1:3, :], src=two)
    return out


@nki.jit
def columns_by_register(x, k):
    """On chip: 64 columns of an SBUF tile from column k (scalar_offset along the free dim)."""
    out = nl.ndarray((x.shape[0], 64), dtype=x.dtype, buffer=nl.shared_hbm)
    k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=k)
    c = nisa.scalar_load(k_sb)
    xt = nl.load(x)
    part = nl.ndarray((x.shape[0], 64), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=part, src=xt[:, nl.ds(c, 64)])
    nl.store(out, part)
    return out


def test_scalar_offset_picks_rows_at_run_time(rng):
    table = rand(rng, 16, 96)
    for k in (0, 3, 5):
        got = pick_rows(table, np.array([[k]], dtype=np.int32))
        np.testing.assert_array_equal(got, table[2 * k + 1:2 * k + 5])
    assert "scalar_offset=r" in pick_rows.last_program
    assert "register_mul" in pick_rows.last_program and "dge_mode=hwdge" in pick_rows.last_program
    assert pick_rows.last_latency_ns > 0


def test_indexing_and_ds_by_a_register(rng):
    table = rand(rng, 10, 32)
    for k in (0, 4, 8):
        got = index_and_ds(table, np.array([[k]], dtype=np.int32))
        np.testing.assert_array_equal(got, np.concatenate([table[k:k + 1], table[k:k + 2]]))


def test_on_chip_dynamic_columns(rng):
    x = rand(rng, 128, 256)
    for k in (0, 100, 192):
        np.testing.assert_array_equal(columns_by_register(x, np.array([[k]], dtype=np.int32)), x[:, k:k + 64])


def test_an_offset_past_the_tensor_is_an_error_at_the_kernel_line(rng):
    table = rand(rng, 16, 96)
    with pytest.raises(KernelError) as info:
        pick_rows(table, np.array([[7]], dtype=np.int32))   # rows 15..18 of 16
    message = str(info.value)
    assert "test_nki_dynamic_addressing.py:" in message and "[dynamic-offset-bounds]" in message


def test_a_dynamic_transfer_waits_for_its_register(rng):
    """The register comes from a tensor: the row transfer cannot start before the one-element load and the
    register instructions, where a static transfer overlaps that load."""
    @nki.jit
    def static_rows(table, k):
        d = table.shape[1]
        out = nl.ndarray((4, d), dtype=table.dtype, buffer=nl.shared_hbm)
        k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k)
        tile = nl.ndarray((4, d), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=table[7:11, :], dge_mode=nisa.dge_mode.hwdge)
        nisa.dma_copy(dst=out, src=tile)
        return out
    table, k = rand(rng, 16, 96), np.array([[3]], dtype=np.int32)
    np.testing.assert_array_equal(pick_rows(table, k), static_rows(table, k))
    load_only = trnsim.run_program(
        "target trn2\nhbm k : int32[1, 1] input\nsbuf s : int32[1, 1]\ndma_copy dst=s, src=k\n",
        timing_only=True).latency_ns
    assert pick_rows.last_latency_ns > static_rows.last_latency_ns + 0.9 * load_only


def test_register_arithmetic_wraps_and_registers_are_reused(rng):
    @nki.jit
    def arith(k):
        out = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.shared_hbm)
        k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k)
        x = nisa.scalar_load(k_sb)
        res = nl.ndarray((1, 4), dtype=nl.int32, buffer=nl.sbuf)
        nisa.scalar_store(res[0:1, 0:1], x * 100000)
        nisa.scalar_store(res[0:1, 1:2], 7 - x)
        nisa.scalar_store(res[0:1, 2:3], -x + x * 3)
        for _ in range(100):   # 100 temporaries: their registers are freed as they go
            y = x + 1
        nisa.scalar_store(res[0:1, 3:4], y)
        nl.store(out, res)
        return out
    got = arith(np.array([[100000]], dtype=np.int32))
    assert got.tolist() == [[1410065408, 7 - 100000, 200000, 100001]]


@nki.jit
def exchange_halves(a):
    """LNC=2: each core doubles its half into a shared HBM tensor, the cores meet, each then reads the
    other's half (out[my half] = 2 * a[other half])."""
    n, d = a.shape
    half = n // 2
    me = nl.program_id(0)
    other = 1 - me
    shared = nl.ndarray((n, d), dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((n, d), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a[me * half:(me + 1) * half, :])
    for _ in range(me * 20):   # core 1 is slower to write: without the barrier core 0 would read zeros
        x = nl.add(x, 0.0)
    nl.store(shared[me * half:(me + 1) * half, :], nl.multiply(x, 2.0))
    nisa.core_barrier(shared, (0, 1))
    nl.store(out[me * half:(me + 1) * half, :], nl.load(shared[other * half:(other + 1) * half, :]))
    return out


def test_core_barrier_lets_each_core_read_the_others_writes(monkeypatch, rng):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    a = rand(rng, 256, 128)
    got = exchange_halves[2](a)
    np.testing.assert_array_equal(got, np.concatenate([2 * a[128:], 2 * a[:128]]))
    assert exchange_halves.last_result.stats["instructions"]["core_barrier"] == 2
    assert len(exchange_halves.last_programs) == 2


def test_core_barrier_needs_both_cores(monkeypatch, rng):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    with pytest.raises(KernelError, match="meets core 1, which this simulation does not run"):
        exchange_halves(rand(rng, 256, 128))


def test_a_scalar_offset_along_an_on_chip_partition_dim_is_refused(rng):
    @nki.jit
    def bad(x, k):
        k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k)
        t = nl.load(x)
        out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(t.ap([[8, 8], [1, 8]], scalar_offset=nisa.scalar_load(k_sb))))
        return out
    with pytest.raises(KernelError, match="partition dim: a scalar offset moves along the free dims only"):
        bad(rand(rng, 8, 8), np.array([[1]], dtype=np.int32))


@nki.jit
def load_or_keep(table, k):
    """A tile first loaded with rows 0..3, then reloaded whole from rows 2k..2k+3 with oob_mode=skip: past the
    table the second load moves nothing and the first rows remain (as nki-library's blockwise MoE skips a block's
    weights), so that whole write must not get a tile of its own."""
    out = nl.ndarray((4, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=k)
    i = nisa.scalar_load(k_sb) * 2
    d = table.shape[1]
    tile = nl.ndarray((4, d), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=table[0:4, :])
    nisa.dma_copy(dst=tile, src=table.ap([[d, 4], [1, d]], offset=0, scalar_offset=i), oob_mode=nisa.oob_mode.skip)
    nisa.dma_copy(dst=out, src=tile)
    return out


def test_a_skipped_whole_load_keeps_the_earlier_values(rng):
    table = rand(rng, 16, 32)
    np.testing.assert_array_equal(load_or_keep(table, np.array([[3]], dtype=np.int32)), table[6:10])
    np.testing.assert_array_equal(load_or_keep(table, np.array([[7]], dtype=np.int32)), table[0:4])
