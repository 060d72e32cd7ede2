"""Idioms of AWS's NKI kernel library (nki-library) that its kernels use as written: enums passed as NKI's numbers
(dge_mode=3), nl.NKIObject configs, nl.shared_identity_matrix, nl.tile_size.total_available_sbuf_size,
nki.isa.constants, nki.dtype annotations, nl.range, and nisa.tensor_reduce over the trailing dim of a contiguous
[P, B, H] tile. Our own kernels in that style, checked against NumPy."""
from dataclasses import dataclass

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki.isa.constants import dge_mode, oob_mode


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@dataclass
class TileConfig(nl.NKIObject):
    rows: int
    cols: int


@nki.jit
def transpose_by_identity(x, out_dtype: nki.dtype = nl.float32):
    """x.T through the PE array against the library's cached identity; the load names its DGE mode by number."""
    cfg = TileConfig(rows=x.shape[0], cols=x.shape[1])
    x_sb = nl.ndarray((cfg.rows, cfg.cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x_sb, src=x, dge_mode=3)            # dge_mode.none, as nki-library's _DGE_MODE_NONE
    ident = nl.shared_identity_matrix(cfg.rows, dtype=x.dtype)
    t_ps = nl.ndarray((cfg.cols, cfg.rows), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=t_ps, stationary=x_sb, moving=ident)
    t_sb = nl.ndarray((cfg.cols, cfg.rows), dtype=out_dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t_sb, src=t_ps)
    out = nl.ndarray((cfg.cols, cfg.rows), dtype=out_dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t_sb, dge_mode=dge_mode.hwdge)
    return out


def test_identity_transpose_with_numbered_enums(rng):
    x = rand(rng, 96, 128)
    got = transpose_by_identity(x)
    np.testing.assert_allclose(got, x.T, rtol=1e-6, atol=1e-6)
    program = transpose_by_identity.last_program
    assert "dge_mode=none" in program and "dge_mode=hwdge" in program
    assert program.count("dma_copy") == 3   # x in, the identity loaded once, the result out
    assert dge_mode.none.value == 3 and dge_mode.unknown.value == 0 and oob_mode.skip._isa_name == "skip"


@nki.jit
def row_sums(x):
    """[P, B, H] -> [P, B]: tensor_reduce over the trailing dim of a contiguous tile (kept B, reduced H)."""
    p, b, h = x.shape
    t = nl.ndarray((p, b, h), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    s = nl.ndarray((p, b), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(s, nl.add, t, axis=2)
    out = nl.ndarray((p, b), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=s)
    return out


def test_tensor_reduce_of_the_trailing_dim_of_a_contiguous_tile(rng):
    x = rand(rng, 128, 6, 40)
    np.testing.assert_allclose(row_sums(x), x.sum(axis=2), rtol=1e-5, atol=1e-5)


def test_tile_sizes_ranges_and_activation_names(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    seen = {}

    @nki.jit
    def probe(x):
        seen["sbuf"] = nl.tile_size.total_available_sbuf_size
        seen["range"] = list(nl.range(3))
        t = nl.load(x)
        nl.store(x, nl.gelu_apprx_sigmoid_dx(t))
        return x
    probe(np.zeros((8, 8), np.float32))
    assert seen["sbuf"] == 229376 and seen["range"] == [0, 1, 2]   # trn2: 224 KiB per partition (A-V3)
    assert nisa.reduce_cmd.load_reduce.value == 4
    with pytest.raises(AttributeError):
        nl.not_an_nki_name


def test_dtypes_behave_as_numpy_names():
    """nki-library compares dtypes by str(), builds host arrays with them and deep-copies configs holding them."""
    import copy
    import pickle
    import nki.dtype as nt
    assert str(nl.float32) == "float32" and str(nl.bfloat16) == "bfloat16" and repr(nl.float32) == "nl.float32"
    assert np.zeros(3, dtype=nl.bfloat16).dtype.name == "bfloat16" and np.ones(2).astype(nl.float16).dtype == np.float16
    assert copy.deepcopy(nl.bfloat16) is nl.bfloat16 and pickle.loads(pickle.dumps(nl.int32)) is nl.int32
    assert nt.float8_e4m3 is nl.float8_e4m3 and nl.float8_e4m3fn_x4.size_bytes == 4 and nl.float4_e2m1fn_x4
    assert nisa.nc_version.gen3.name == "gen3"

    class Section(nl.NKIObject):
        index = None
        offset = None
    section = Section(index=2, offset=64)
    assert (section.index, section.offset, Section().index) == (2, 64, None)

    @dataclass
    class Params(nl.NKIObject):   # bare class attributes as fields, as nki-library's SectionParams
        idx = None
        size = 4
    p = Params(idx=1)
    assert (p.idx, p.size) == (1, 4)


@nki.jit
def reshaped_output(x, bias=None):
    """Returns its output reshaped ([8, 32] written, [2, 4, 32] returned); `if bias:` asks whether one was given."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    if bias:
        t = nl.add(t, nl.load(bias))
    nl.store(out, t)
    return out.reshape((2, 4, 32))


def test_a_kernel_returns_a_reshaped_tensor_and_tests_an_optional_one(rng, tmp_path):
    x, b = rand(rng, 8, 32), rand(rng, 8, 32)
    np.testing.assert_array_equal(reshaped_output(x), x.reshape(2, 4, 32))
    np.testing.assert_allclose(reshaped_output(x, b), (x + b).reshape(2, 4, 32), rtol=1e-6)
    path = tmp_path / "table.npy"
    np.save(path, x)

    @nki.jit
    def from_file(y):
        c = nl.load(nl.shared_constant(str(path), dtype=nl.float32))
        out = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(c, nl.load(y)))
        return out
    np.testing.assert_allclose(from_file(b), x + b, rtol=1e-6)


@nki.jit
def quarter_rows(x):
    """On chip, ap()'s offset counts the tile's flat [partition, free] elements (nki-library's output projection
    writes head n at offset n * d * F): each 32-partition block of t gets its own row block of x."""
    p, f = x.shape
    t = nl.ndarray((4 * p, f), dtype=x.dtype, buffer=nl.sbuf)
    xs = nl.load(x)
    for n in range(4):
        nisa.tensor_copy(dst=t.ap(pattern=[[f, p], [1, f]], offset=n * p * f), src=xs)
    out = nl.ndarray((4 * p, f), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, t)
    return out


def test_an_on_chip_ap_offset_moves_whole_partitions(rng):
    x = rand(rng, 32, 16)
    np.testing.assert_array_equal(quarter_rows(x), np.concatenate([x] * 4))
    assert "offset=0" in quarter_rows.last_program and "offset=512" not in quarter_rows.last_program


@nki.jit
def packed_tiles(x):
    """Two tiles placed 4 bytes apart in each partition (nki-library's allocators pack tiles so): the dependency
    tracking is byte-exact, so each keeps its own values."""
    a = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
    b = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4))
    nisa.dma_copy(dst=b, src=x)
    nisa.memset(dst=a, value=3.0)
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.tensor_scalar(dst=b, data=b, op0=nl.add, operand0=a)
    nisa.dma_copy(dst=out, src=b)
    return out


def test_tiles_placed_at_element_boundaries(rng):
    x = rand(rng, 128, 8)
    np.testing.assert_allclose(packed_tiles(x), x + 3.0, rtol=1e-6)
    assert "@ 0:4" in packed_tiles.last_program


@nki.jit
def softmax_over_column_tiles(x):
    """Softmax of [P, 2F] rows in two F-wide tiles: the row maxima by range_select (reset_reduce on the first tile,
    reduce on the second, nki-library attention_cte's masking pattern with an always-true range), then exp sums in the
    Scalar accumulator (reset_reduce, then reduce), as nki-library's router_topk writes activation."""
    p, f2 = x.shape
    f = f2 // 2
    t = nl.ndarray((p, f2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    lo = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    hi = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=lo, value=0.0)
    nisa.memset(dst=hi, value=float(f2))
    masked = nl.ndarray((p, f2), dtype=nl.float32, buffer=nl.sbuf)
    row_max = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    for k, cmd in ((0, nisa.reduce_cmd.reset_reduce), (1, nisa.reduce_cmd.reduce)):
        nisa.range_select(masked[:, nl.ds(k * f, f)], on_true_tile=t[:, nl.ds(k * f, f)], comp_op0=nl.greater_equal,
                          comp_op1=nl.less, bound0=lo, bound1=hi, reduce_op=nl.maximum, reduce_res=row_max,
                          reduce_cmd=cmd, range_start=k * f)
    neg_max = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=neg_max, data=row_max, op0=nl.multiply, operand0=-1.0)
    e = nl.ndarray((p, f2), dtype=nl.float32, buffer=nl.sbuf)
    sums = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    for k, cmd in ((0, nisa.reduce_cmd.reset_reduce), (1, nisa.reduce_cmd.reduce)):
        nisa.activation(dst=e[:, nl.ds(k * f, f)], op=nl.exp, data=masked[:, nl.ds(k * f, f)], bias=neg_max,
                        reduce_op=nl.add, reduce_res=sums, reduce_cmd=cmd)
    nisa.reciprocal(dst=sums, data=sums)
    y = nl.ndarray((p, f2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=sums)
    out = nl.ndarray((p, f2), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=y)
    return out


def test_reduce_cmd_accumulates_across_tiles(rng):
    x = rand(rng, 128, 256) * 4
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(softmax_over_column_tiles(x), e / e.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)
    program = softmax_over_column_tiles.last_program
    assert program.count("reduce_cmd=reduce") == 2 and program.count("reduce_cmd=reset_reduce") == 2


def _bf16(rng, *shape):
    import ml_dtypes
    return rand(rng, *shape).astype(ml_dtypes.bfloat16)


@nki.jit
def transpose_nd(x, from_hbm: bool = True, axes=None):
    """NKI's N-d DMA transpose (dst dim i = src dim perm[i]: (2, 1, 0) for 3-d, (3, 1, 2, 0) for 4-d), as nki-library's
    attention_cte moves [num_p, 1, tiles, 128] score blocks; from HBM or from an SBUF copy."""
    perm = {3: (2, 1, 0), 4: (3, 1, 2, 0)}[len(x.shape)]
    out_shape = tuple(x.shape[a] for a in perm)
    src = x
    if not from_hbm:
        src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=src, src=x)
    t = nl.ndarray(out_shape, dtype=x.dtype, buffer=nl.sbuf)
    if axes is None:
        nisa.dma_transpose(dst=t, src=src)
    else:
        nisa.dma_transpose(dst=t, src=src, axes=axes)
    out = nl.ndarray(out_shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("shape", [(8, 3, 16), (16, 2, 3, 32), (4, 1, 5, 128)])
@pytest.mark.parametrize("from_hbm", [True, False])
def test_dma_transpose_of_three_and_four_dims(rng, shape, from_hbm):
    x = _bf16(rng, *shape)
    perm = (2, 1, 0) if len(shape) == 3 else (3, 1, 2, 0)
    got = transpose_nd(x, from_hbm=from_hbm, axes=perm if from_hbm else None)
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float32), x.transpose(perm).astype(np.float32))
    assert "axes=[" in transpose_nd.last_program
    assert transpose_nd.last_latency_ns > 0


def test_dma_transpose_axes_nki_does_not_support_is_an_error(rng):
    with pytest.raises(nki.KernelError, match=r"test_nki_library_idioms.py:\d+.*axes=\(0, 2, 1\)"):
        transpose_nd(_bf16(rng, 8, 3, 16), axes=(0, 2, 1))


@nki.jit
def per_batch_scores(q, k, placed: bool = False):
    """scores[b] = k[b].T @ q[b] into column slices of a PSUM tensor made anew per batch, as nki-library's
    attention_tkg fills one bank with a matmul per K tile: the first matmul into each slice of a new tensor
    overwrites what the previous batch left there (the bank was left accumulating by the slice before it); a
    second matmul into the same slice accumulates: out[b] = [k.T @ q, 2 k.T @ q]."""
    b_count, d, n = q.shape
    m = k.shape[2]
    out = nl.ndarray((b_count, m, 2 * n), dtype=nl.float32, buffer=nl.shared_hbm)
    for b in range(b_count):
        q_sb = nl.ndarray((d, n), dtype=q.dtype, buffer=nl.sbuf)
        k_sb = nl.ndarray((d, m), dtype=k.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_sb, src=q[b])
        nisa.dma_copy(dst=k_sb, src=k[b])
        ps = nl.ndarray((m, 2 * n), dtype=nl.float32, buffer=nl.psum, address=(0, 0) if placed else None)
        nisa.nc_matmul(ps[:, 0:n], stationary=k_sb, moving=q_sb)
        nisa.nc_matmul(ps[:, n:2 * n], stationary=k_sb, moving=q_sb)
        nisa.nc_matmul(ps[:, n:2 * n], stationary=k_sb, moving=q_sb)
        s_sb = nl.ndarray((m, 2 * n), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s_sb, src=ps)
        nisa.dma_copy(dst=out[b], src=s_sb)
    return out


@pytest.mark.parametrize("placed", [False, True])
def test_a_new_psum_tensor_starts_a_new_accumulation(rng, placed):
    q, k = rand(rng, 4, 64, 20), rand(rng, 4, 64, 96)
    kq = np.einsum("bdm,bdn->bmn", k.astype(np.float64), q.astype(np.float64))
    want = np.concatenate([kq, 2 * kq], axis=2)
    np.testing.assert_allclose(per_batch_scores(q, k, placed=placed), want, rtol=1e-4, atol=1e-4)


@nki.jit
def gather_transpose_blocks(table, idx, block_len: int):
    """nki-library attention_tkg's block-KV load: rows idx[p] of a [blocks, block_len * d] cache gathered and
    transposed in one 4-d indirect DMA transpose, dst[dd, 0, j, p] = table[idx[p], j * d + dd]."""
    nb, row = table.shape
    d = row // block_len
    p = idx.shape[0]
    idx_sb = nl.ndarray((p, 1), dtype=idx.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx_sb, src=idx)
    t = nl.ndarray((d, 1, block_len, p), dtype=table.dtype, buffer=nl.sbuf)
    src = table.ap([[row, p], [1, 1], [d, block_len], [1, d]], offset=0, vector_offset=idx_sb, indirect_dim=0)
    nisa.dma_transpose(dst=t, src=src)
    out = nl.ndarray((d, 1, block_len, p), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_gathered_four_dim_dma_transpose(rng):
    block_len, d, nb, p = 4, 32, 50, 48
    table = _bf16(rng, nb, block_len * d)
    idx = rng.permutation(nb)[:p].astype(np.uint32).reshape(p, 1)
    got = np.asarray(gather_transpose_blocks(table, idx, block_len), dtype=np.float32)
    rows = table[idx[:, 0]].reshape(p, 1, block_len, d).astype(np.float32)
    np.testing.assert_array_equal(got, rows.transpose(3, 1, 2, 0))


def test_fp32_dma_transpose(rng):
    """A-V3: the DMA transposes 4-byte dtypes bit-accurately too (nki-library's fp32 attention_tkg)."""
    x = rand(rng, 8, 3, 16)
    np.testing.assert_array_equal(transpose_nd(x), x.transpose(2, 1, 0))


@nki.jit
def column_as_bound(x, bounds, col: int):
    """A column of an on-chip [P, G] tile taken by an integer index is [P]; indexed again as ``[:n, :1]`` it is the
    [P, 1] per-partition operand range_select wants (nki-library's attention_cte bounds)."""
    p, f = x.shape
    t = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    b = nl.ndarray(bounds.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=bounds)
    upper = b[:p, col]
    assert tuple(upper.shape) == (p,)
    zero = nl.ndarray((p, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    y = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.sbuf)
    nisa.range_select(y, on_true_tile=t, comp_op0=nl.greater_equal, comp_op1=nl.less, bound0=zero,
                      bound1=upper[:p, :1], on_false_value=-1.0)
    out = nl.ndarray((p, f), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=y)
    return out


def test_a_partition_column_indexed_as_p_by_one(rng):
    x = rand(rng, 64, 32)
    bounds = rng.integers(0, 33, size=(64, 3)).astype(np.float32)
    want = np.where(np.arange(32)[None, :] < bounds[:, 1:2], x, -1.0)
    np.testing.assert_array_equal(column_as_bound(x, bounds, 1), want)


@nki.jit
def zero_then_store_shard(x):
    """LNC2, as nki-library's cascaded_max utilities write it: every program zeroes the whole shared output, then
    stores its own half of the rows (loaded and transformed first). On hardware the zeroing DMAs issue long before
    either store."""
    b, n = x.shape
    pid, half = nl.program_id(0), b // 2
    out = nl.ndarray((b, n), dtype=x.dtype, buffer=nl.shared_hbm)
    zero = nl.ndarray((b, n), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zero, value=0.0)
    nisa.dma_copy(dst=out, src=zero)
    t = nl.ndarray((half, n), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[nl.ds(pid * half, half), :])
    nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.dma_copy(dst=out[nl.ds(pid * half, half), :], src=t)
    return out


def test_cores_sharing_hbm_see_each_others_accesses_in_issue_order(rng):
    x = rand(rng, 64, 96)
    np.testing.assert_allclose(zero_then_store_shard[2](x), np.exp(x), rtol=1e-5)


@nki.jit
def bounce_through_private_hbm(x, buffer_name):
    """LNC2, as nki-library's topk reshapes a tile: each program writes its shard to an HBM scratch tensor, waits,
    and reads it back. Program 1 writes later (it first does more work), so with one scratch for both cores,
    program 0 would read program 1's rows."""
    b, n = x.shape
    pid, half = nl.program_id(0), b // 2
    out = nl.ndarray((b, n), dtype=x.dtype, buffer=nl.shared_hbm)
    scratch = nl.ndarray((half, n), dtype=x.dtype, buffer=getattr(nl, buffer_name))
    t = nl.ndarray((half, n), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[nl.ds(pid * half, half), :])
    for _ in range(pid * 8):
        nisa.activation(dst=t, op=nl.copy, data=t)
    nisa.dma_copy(dst=scratch, src=t)
    back = nl.ndarray((half, n), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=back, src=scratch)
    nisa.dma_copy(dst=out[nl.ds(pid * half, half), :], src=back)
    return out


@pytest.mark.parametrize("buffer_name", ["private_hbm", "hbm"])
def test_private_hbm_is_each_programs_own(rng, buffer_name):
    x = rand(rng, 64, 96)
    np.testing.assert_array_equal(bounce_through_private_hbm[2](x, buffer_name), x)
    tasm = bounce_through_private_hbm.last_programs[0]
    assert any(line.startswith("hbm ") and line.endswith(" private") for line in tasm.splitlines()), tasm[:400]
