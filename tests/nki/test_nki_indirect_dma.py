"""Indirect DMA through the NKI 0.5+ tensor views (``t.vector_select(dim, idx)``,
``t.ap(pattern, vector_offset=idx, indirect_dim=0)``) and ``nisa.dma_copy``'s ``oob_mode``,
``view(dtype)`` of HBM tensors, and block grids (``nl.blocks`` / ``nl.alloc_blocks``), all checked
against NumPy."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import trnsim.nki
from nki.isa import oob_mode


@pytest.fixture(autouse=True)
def trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def column(values, dtype=np.int32):
    return np.asarray(values, dtype=dtype).reshape(-1, 1)


# ---- gathers -------------------------------------------------------------------------------------

@nki.jit
def gather_rows(table, idx, skip=False):
    """dma_copy from table.vector_select(0, idx): partition p gets row idx[p]. With skip, an offset
    outside the table leaves its row as memset it (-1) instead of failing."""
    p, width = idx.shape[0], table.shape[1]
    out = nl.ndarray((p, width), dtype=table.dtype, buffer=nl.shared_hbm)
    ids = nl.ndarray((p, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    rows = nl.ndarray((p, width), dtype=table.dtype, buffer=nl.sbuf)
    if skip:
        nisa.memset(rows, -1.0)
    nisa.dma_copy(dst=rows, src=table.vector_select(0, ids), oob_mode=oob_mode.skip if skip else oob_mode.error)
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_vector_select_gathers_rows(rng):
    table = rng.standard_normal((300, 48)).astype(np.float32)
    idx = column(rng.integers(0, 300, 96))
    np.testing.assert_array_equal(gather_rows(table, idx), table[idx[:, 0]])
    assert gather_rows.last_latency_ns > 0


@nki.jit
def gather_blocks_unsigned(blocks, idx):
    """A 3-d table picked along dim 0 (one [BLK, D] block per partition), the offsets an int32 tile
    read as uint32 (idx.view(nl.uint32), as published kernels pass them)."""
    nb, blk, d = blocks.shape
    p = idx.shape[0]
    out = nl.ndarray((p, blk, d), dtype=blocks.dtype, buffer=nl.shared_hbm)
    ids = nl.ndarray((p, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    got = nl.ndarray((p, blk, d), dtype=blocks.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=got, src=blocks.vector_select(0, ids.view(nl.uint32)), dge_mode=nisa.dge_mode.swdge)
    nisa.dma_copy(dst=out, src=got)
    return out


def test_vector_select_of_a_3d_table_gathers_blocks(rng):
    blocks = rng.standard_normal((10, 4, 16)).astype(np.float32)
    idx = column([9, 0, 3, 3, 7, 1, 2, 8])
    np.testing.assert_array_equal(gather_blocks_unsigned(blocks, idx), blocks[idx[:, 0]])


@nki.jit
def gather_strided_runs(v, rowstart, nb, rstride):
    """ap(pattern, vector_offset=, indirect_dim=0): partition p reads nb rows of v starting at row
    rowstart[p], every rstride-th row (a strided run per partition, one descriptor each)."""
    dv = v.shape[1]
    p = rowstart.shape[0]
    out = nl.ndarray((p, nb, dv), dtype=v.dtype, buffer=nl.shared_hbm)
    starts = nl.ndarray((p, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=starts, src=rowstart)
    got = nl.ndarray((p, nb, dv), dtype=v.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=got, src=v.ap(pattern=[[dv, p], [rstride * dv, nb], [1, dv]],
                                    vector_offset=starts.view(nl.uint32), indirect_dim=0),
                  dge_mode=nisa.dge_mode.swdge)
    nisa.dma_copy(dst=out, src=got)
    return out


def test_ap_vector_offset_reads_a_pattern_from_each_offset(rng):
    v = rng.standard_normal((64, 40)).astype(np.float32)
    nb, rstride = 3, 4
    starts = rng.integers(0, 64 - (nb - 1) * rstride, 32)
    expected = np.stack([v[s + rstride * np.arange(nb)] for s in starts])
    np.testing.assert_array_equal(gather_strided_runs(v, column(starts), nb, rstride), expected)


def test_ap_vector_offset_past_the_tensor_is_an_error(rng):
    v = rng.standard_normal((64, 40)).astype(np.float32)
    with pytest.raises(trnsim.nki.KernelError, match="out of range"):
        gather_strided_runs(v, column([0, 60]), 3, 4)   # 60 + 2*4 = row 68 of 64


def test_oob_mode_skip_leaves_out_of_range_rows(rng):
    table = rng.standard_normal((20, 8)).astype(np.float32)
    idx = column([3, 20, -1, 19, 1000, 0])
    got = gather_rows(table, idx, skip=True)
    for p, i in enumerate(idx[:, 0]):
        np.testing.assert_array_equal(got[p], table[i] if 0 <= i < 20 else np.full(8, -1.0, np.float32))
    with pytest.raises(trnsim.nki.KernelError, match="index 20 .*out of range"):
        gather_rows(table, idx)   # oob_mode.error (the default)


# ---- scatters ------------------------------------------------------------------------------------

@nki.jit
def scatter_rows(base, idx, rows_in, accumulate=False):
    """dma_copy into out.vector_select(0, idx): row p of rows_in goes to row idx[p] of a copy of base
    (with dst_rmw_op=nl.add, repeated rows sum in partition order)."""
    p, width = rows_in.shape
    out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
    staged = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=staged, src=base)
    nisa.dma_copy(dst=out, src=staged)
    ids = nl.ndarray((p, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ids, src=idx)
    rows = nl.ndarray((p, width), dtype=rows_in.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=rows_in)
    if accumulate:
        nisa.dma_copy(dst=out.vector_select(0, ids), src=rows, dst_rmw_op=nl.add)
    else:
        nisa.dma_copy(dst=out.vector_select(0, ids), src=rows)
    return out


def test_vector_select_scatters_rows(rng):
    base = rng.standard_normal((40, 16)).astype(np.float32)
    rows = rng.standard_normal((6, 16)).astype(np.float32)
    idx = column([5, 39, 0, 12, 7, 21])
    expected = base.copy()
    expected[idx[:, 0]] = rows
    np.testing.assert_array_equal(scatter_rows(base, idx, rows), expected)


def test_scatter_add_sums_repeated_rows_in_partition_order(rng):
    base = rng.standard_normal((40, 16)).astype(np.float32)
    rows = rng.standard_normal((6, 16)).astype(np.float32)
    idx = column([5, 5, 0, 12, 5, 0])
    expected = base.copy()
    for p, i in enumerate(idx[:, 0]):
        expected[i] = (expected[i] + rows[p]).astype(np.float32)
    np.testing.assert_array_equal(scatter_rows(base, idx, rows, accumulate=True), expected)


@nki.jit
def store_indirect(base, idx, rows_in):
    """nl.store into an indirect view: a dma_scatter, the value cast to the table's dtype first."""
    p, width = rows_in.shape
    out = nl.ndarray(base.shape, dtype=base.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(base))
    ids = nl.load(idx)
    nl.store(out.vector_select(0, ids), nl.load(rows_in))
    return out


def test_nl_store_into_vector_select(rng):
    base = rng.standard_normal((128, 32)).astype(np.float32)
    rows = rng.standard_normal((4, 32)).astype(np.float32)
    idx = column([127, 64, 1, 2])
    expected = base.copy()
    expected[idx[:, 0]] = rows
    np.testing.assert_array_equal(store_indirect(base, idx, rows), expected)


# ---- errors --------------------------------------------------------------------------------------

def test_vector_select_of_an_on_chip_tensor_is_a_clear_error(rng):
    @nki.jit
    def onchip(a, idx):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        ids = nl.load(idx)
        u = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=u, src=t.vector_select(1, ids))
        nl.store(out, u)
        return out
    with pytest.raises(trnsim.nki.KernelError, match="on-chip tensor.*not supported"):
        onchip(rng.standard_normal((4, 8)).astype(np.float32), column([0, 1, 2, 3]))


@nki.jit
def gathered_transpose(a, idx, skip=False):
    """Rows idx[p] of a, transposed by one DMA: out = a[idx].T (the published block-sparse attention kernels
    load K^T so)."""
    p = idx.shape[0]
    d = a.shape[1]
    out = nl.ndarray((d, p), dtype=a.dtype, buffer=nl.shared_hbm)
    ids = nl.load(idx)
    t = nl.ndarray((d, p), dtype=a.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0)
    nisa.dma_transpose(dst=t, src=a.vector_select(0, ids.view(nl.uint32)), dge_mode=nisa.dge_mode.swdge,
                       oob_mode=nisa.oob_mode.skip if skip else nisa.oob_mode.error)
    nl.store(out, t)
    return out


def test_an_indirect_dma_transpose_gathers_rows_then_transposes(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    a = rng.standard_normal((40, 64)).astype(ml_dtypes.bfloat16)
    rows = [7, 0, 39, 7, 12, 3, 21, 30]
    got = gathered_transpose(a, column(rows))
    np.testing.assert_array_equal(got, a[rows].T)
    assert "dma_transpose" in gathered_transpose.last_program and "indices=" in gathered_transpose.last_program
    with_values = gathered_transpose.last_latency_ns
    gathered_transpose.values = False
    try:
        gathered_transpose(a, column(rows))
    finally:
        gathered_transpose.values = True
    assert gathered_transpose.last_latency_ns == with_values
    # An index outside the table: an error, or with oob_mode=skip that column keeps its zeros.
    with pytest.raises(trnsim.nki.KernelError,
                       match=r"gather-transpose index 40 \(partition 2\) is out of range for a table of 40 rows"):
        gathered_transpose(a, column([7, 0, 40, 7, 12, 3, 21, 30]))
    got = gathered_transpose(a, column([7, 0, 40, 7, 12, 3, 21, 30]), skip=True)
    expected = a[rows].T.copy()
    expected[:, 2] = 0
    np.testing.assert_array_equal(got, expected)


def test_a_transpose_into_an_indirect_tensor_is_a_clear_error(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")

    @nki.jit
    def scattered(a, idx):
        out = nl.ndarray((16, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        ids = nl.load(idx)
        t = nl.load(a)
        nisa.dma_transpose(dst=out.vector_select(0, ids), src=t)
        return out
    with pytest.raises(trnsim.nki.KernelError, match="dma_transpose into an indirect"):
        scattered(rng.standard_normal((8, 4)).astype(np.float16), column([0, 1, 2, 3]))


# ---- view(dtype) of HBM tensors --------------------------------------------------------------------

@nki.jit
def hbm_bits(a):
    """An fp32 input read as int32 words and as bf16 halves; an output written through its int32
    view and another returned as a uint16 view."""
    p, f = a.shape
    words = nl.load(a.view(nl.int32))                          # [p, f] int32: the bit patterns
    halves = nl.load(a.view(nl.bfloat16))                      # [p, 2f] bf16 (little-endian halves)
    wide = nl.ndarray((p, 2 * f), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=wide, src=halves)
    as_int = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=as_int.view(nl.int32), src=words)         # fp32 tensor holding a's bits
    halves_out = nl.ndarray((p, 2 * f), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(halves_out, wide)
    raw = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(raw, nl.load(a))
    return as_int, halves_out, raw.view(nl.uint16)


def test_view_dtype_of_hbm_tensors(rng):
    import ml_dtypes
    a = rng.standard_normal((64, 24)).astype(np.float32)
    as_int, halves, raw16 = hbm_bits(a)
    np.testing.assert_array_equal(as_int.view(np.int32), a.view(np.int32))
    np.testing.assert_array_equal(halves, a.view(ml_dtypes.bfloat16).astype(np.float32))
    assert raw16.dtype == np.uint16 and raw16.shape == (64, 48)
    np.testing.assert_array_equal(raw16, a.view(np.uint16))


def test_view_dtype_of_hbm_is_one_tensor_in_the_program(rng):
    a = rng.standard_normal((64, 24)).astype(np.float32)
    hbm_bits(a)
    text = hbm_bits.last_program
    declared = [line for line in text.splitlines() if line.startswith("hbm ")]
    assert len(declared) == 4, declared   # a and the three outputs: the views declare nothing
    assert "dtype=bf16" in text and "dtype=int32" in text


# ---- block grids -----------------------------------------------------------------------------------

@nki.jit
def copy_by_blocks(src, scale):
    """Blocks of 2x2 (128, 256) tiles move in one DMA each; compute walks each block's tiles.
    The last block row and column are partial (the tensor is 300 x 700)."""
    tile_shape, block_shape = (128, 256), (2, 2)
    src_blocks = nl.blocks(src, tile_shape=tile_shape, block_shape=block_shape)
    dst = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    dst_blocks = nl.blocks(dst, tile_shape=tile_shape, block_shape=block_shape)
    for i in range(src_blocks.shape[0]):
        for j in range(src_blocks.shape[1]):
            tiles = nl.tiles(src_blocks[i, j])
            for ti in range(tiles.shape[0]):
                for tj in range(tiles.shape[1]):
                    t = nl.empty_like(tiles[ti, tj], buffer=nl.sbuf)
                    nisa.dma_copy(dst=t.data, src=tiles[ti, tj].data)
                    nisa.tensor_scalar(dst=t.data, data=t.data, op0=nl.multiply, operand0=scale)
                    nisa.dma_copy(dst=nl.tiles(dst_blocks[i, j])[ti, tj].data, src=t.data)
    return dst


def test_block_grid_copies_with_partial_blocks(rng):
    x = rng.standard_normal((300, 700)).astype(np.float32)
    np.testing.assert_array_equal(copy_by_blocks(x, 3.0), (x * np.float32(3.0)).astype(np.float32))


@nki.jit
def block_geometry(src):
    g = nl.blocks(src, tile_shape=(128, 256), block_shape=(2, 2))
    assert isinstance(g, nl.NkiBlockGrid) and isinstance(g, nl.NkiGrid)
    assert g.shape == (2, 2) and g.block_shape == (2, 2) and g.tile_shape == (128, 256)
    assert g.index_step_elements == (256, 512)
    assert g[0, 0].element_shape == (256, 512) and not g[0, 0].is_remainder
    assert g[1, 1].element_shape == (44, 188) and g[1, 1].is_remainder
    assert g[1, :].shape == (2,) and g[1, :].element_shape == (44, 700)
    assert nl.tiles(g[1, 1]).shape == (1, 1)
    assert nl.tiles(g[0, 1]).shape == (2, 1) and nl.tiles(g[0, 1])[1, 0].element_shape == (128, 188)
    assert g[1, 1].data.shape == (44, 188) and g[1, 1].is_data_representable
    tiles = nl.tiles(src, tile_shape=(128, 256))
    assert tiles[2, 2].is_remainder and not tiles[0, 0].is_remainder and tiles.index_step_elements == (128, 256)
    regrouped = nl.blocks(g[0, :], block_shape=(1, 1))
    assert regrouped.shape == (2, 3)
    # A block of a block grid, staged whole in SBUF (one DMA), its tiles computed on in place.
    staged = nl.alloc_blocks(tile_shape=(128, 256), block_shape=(1, 2), element_shape=(128, 512),
                             buffer=nl.sbuf, dtype=src.dtype)
    assert staged.shape == (1, 1) and nl.tiles(staged).shape == (1, 2)
    out = nl.ndarray((128, 512), dtype=src.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=staged.data, src=g[0, 0].data[0:128, :])
    for tj in range(2):
        t = nl.tiles(staged)[0, tj].data
        nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.dma_copy(dst=out, src=staged.data)
    return out


def test_block_grid_geometry_and_one_dma_per_block(rng):
    x = rng.standard_normal((300, 700)).astype(np.float32)
    got = block_geometry(x)
    np.testing.assert_allclose(got, np.exp(x[:128, :512]), rtol=1e-5, atol=1e-6)


def test_missing_api_no_longer_lists_what_works():
    missing = " ".join(trnsim.nki.missing_api()["nki.language"])
    assert "NkiBlockGrid" not in missing and "view(dtype) of an HBM tensor" not in missing
    assert "Tensor.indirect" in missing   # trn3 tensor indirection of compute operands: not yet
