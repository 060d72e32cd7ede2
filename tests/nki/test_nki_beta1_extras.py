"""Beta-1 idioms of published kernels: causal masks by nisa.affine_select on index predicates,
nl.load_transpose2d, LNC grids kernel[nl.nc(2)] / nl.spmd_dim, jit(mode="benchmark")."""
import ml_dtypes
import numpy as np
import pytest

import trnsim

from neuronxcc import nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def causal_fill(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:a.shape[1]]
    t = nl.load(a[i_p, i_f])
    masked = nisa.affine_select(pred=(i_p + 64 >= i_f), on_true_tile=t, on_false_value=-30000.0)
    nl.store(out[i_p, i_f], value=masked)
    return out


def test_affine_select_on_an_index_predicate(rng):
    a = rng.standard_normal((128, 256)).astype(np.float32)
    p, f = np.meshgrid(np.arange(128), np.arange(256), indexing="ij")
    np.testing.assert_array_equal(nki.simulate_kernel(causal_fill, a), np.where(p + 64 >= f, a, -30000.0))


@nki.jit
def transpose_load(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load_transpose2d(a))
    return out


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_load_transpose2d(monkeypatch, rng, target, dtype):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    a = rng.standard_normal((256, 128)).astype(dtype)
    np.testing.assert_array_equal(transpose_load(a), a.T)
    used = transpose_load.last_summary.instructions
    # The DMA transposes 2-byte data from trn2 on; otherwise a column-walking copy.
    assert ("dma_transpose" in used) == (target == "trn2" and dtype is ml_dtypes.bfloat16)


@nki.jit
def doubled_rows(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    rows = a.shape[0] // nl.num_programs(axes=0)
    i = nl.program_id(0)
    nl.store(out[i * rows:(i + 1) * rows, :], value=nl.multiply(nl.load(a[i * rows:(i + 1) * rows, :]), 2.0))
    return out


def test_lnc_grid_spellings(monkeypatch, rng):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")   # LNC 2: the two programs run side by side
    a = rng.standard_normal((256, 64)).astype(np.float32)
    latencies = []
    for launch in (doubled_rows[nl.nc(2)], doubled_rows[nl.spmd_dim(nl.nc(2))], doubled_rows[2]):
        np.testing.assert_array_equal(launch(a), 2 * a)
        # One simulation of both cores on shared HBM: no faster than the slower program alone (they contend), and
        # faster than the two in turn.
        programs = doubled_rows.last_programs
        assert len(programs) == 2 and doubled_rows.last_result.stats["cores"] == 2
        alone = [trnsim.run_program(p, timing_only=True, config="trn2").latency_ns for p in programs]
        body = doubled_rows.last_summary.latency_ns   # one launch: its fixed cost once, then the two cores' body
        assert max(alone) <= body < sum(alone)
        assert doubled_rows.last_latency_ns == doubled_rows.last_summary.launch_ns + body
        latencies.append(doubled_rows.last_latency_ns)
    assert latencies[0] == latencies[1] == latencies[2]


def test_jit_mode_benchmark(rng):
    @nki.jit(mode="benchmark")
    def scale(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(a), 3.0))
        return out
    a = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_allclose(scale(a), 3 * a, rtol=1e-6)
    # The figure is the simulator's, for the program the kernel traced to: run_program of that program agrees.
    import trnsim
    # One kernel execution: the launch cost (config chip.kernel_launch_ns) and the body.
    independent = trnsim.run_program(scale.last_program, timing_only=True, config="trn2").execution_ns
    assert scale.benchmark_result.nc_latency.get_latency_percentile(99) == pytest.approx(independent / 1e3)


@nki.jit
def summed_over_programs(x, op):
    """Each program of an LNC launch holds its row block; nl.all_reduce gives every program the reduction of all
    of them, which each stores at its own rows."""
    pid = nl.program_id(0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    rows = x.shape[0] // 2
    t = nl.load(x[pid * rows:(pid + 1) * rows, :])
    total = nl.all_reduce(t, op=op, program_axes=0)
    nl.store(out[pid * rows:(pid + 1) * rows, :], value=total)
    return out


@pytest.mark.parametrize("op, reduce", [(np.add, np.add), (np.maximum, np.maximum)])
def test_all_reduce_over_the_programs_of_an_lnc_launch(monkeypatch, rng, op, reduce):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    x = rng.standard_normal((256, 96)).astype(np.float32)
    want = reduce(x[:128], x[128:])
    np.testing.assert_allclose(summed_over_programs[nl.nc(2)](x, op), np.concatenate([want, want]), rtol=1e-6)
    # Programs that run one after another cannot meet.
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    with pytest.raises(trnsim.nki.KernelError, match="run one after another"):
        summed_over_programs[2](x, op)


@nki.jit
def published_sample_idioms(a, b, s, n):
    """Idioms of AWS's nki-samples reference kernels (beta 1): ``t.reshape(shape=...)``, a Tensor-engine transpose
    result (PSUM) passed straight to nc_matmul, one element loaded as ``t[i, j]``, a mask that ands index bounds
    with a Python condition, ``nl.finfo``."""
    out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    flat = b.reshape(shape=(128, 128))
    bt = nisa.nc_transpose(nl.load(flat))                  # in PSUM
    at = nl.load(a)
    prod = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    prod[...] = nisa.nc_matmul(bt, at)                     # = b.T.T @ a = b @ a
    one = nl.load(s[0, 1])                                 # [1, 1]
    scaled = nl.multiply(prod, nl.finfo(nl.bfloat16).max / nl.finfo(nl.bfloat16).max)
    i_p, i_f = nl.mgrid[0:128, 0:128]
    nl.store(out[i_p, i_f], value=scaled, mask=(i_f < n) & (one.shape[0] == 1))
    nl.store(out[i_p, i_f], value=scaled * 0.0, mask=(i_f >= n) & True)
    nl.store(out[i_p, i_f], value=scaled * 2.0, mask=(i_f < 1) & False)
    return out


def test_published_sample_idioms(rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((2, 64, 128)).astype(np.float32)
    s = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = nki.simulate_kernel(published_sample_idioms, a, b, s, 96)
    want = b.reshape(128, 128) @ a
    want[:, 96:] = 0.0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    # nl.finfo gives the dtype's limits as Python floats (the kernel above only divides max by itself).
    assert nl.finfo(nl.bfloat16).max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) == 3.3895313892515355e38
    assert nl.finfo(nl.float16).min == -65504.0 and nl.finfo(nl.bfloat16).bits == 16


@nki.jit
def broadcast_binaries(a, b, s):
    """NumPy broadcasting in nl binary ops (nki-samples' pooling compares a [P, H, 1, 1] max with [P, H, 3, 3]
    windows; its attention adds a [1, 1] tile to a [P, 1] one)."""
    out = nl.ndarray((128, 4, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    col = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    eq = nl.equal(nl.load(a), nl.load(b), dtype=nl.float32)          # [128, 4, 1] vs [128, 4, 3]
    nl.store(out, value=eq)
    plane = nl.add(nl.zeros((128, 1), dtype=nl.float32), nl.load(s[0, 2]), dtype=nl.float32)
    nl.store(col, value=plane)
    return out, col


def test_numpy_broadcasting_in_binary_ops(rng):
    a = rng.integers(0, 3, size=(128, 4, 1)).astype(np.float32)
    b = rng.integers(0, 3, size=(128, 4, 3)).astype(np.float32)
    s = np.arange(6, dtype=np.float32).reshape(2, 3)
    out, col = nki.simulate_kernel(broadcast_binaries, a, b, s)
    np.testing.assert_array_equal(out, (a == b).astype(np.float32))
    np.testing.assert_array_equal(col, np.full((128, 1), 2.0, np.float32))


@nki.jit
def partition_sum(x):
    """Beta 1's value-returning nisa.tensor_partition_reduce (nki-samples' flash-attention backward sums its sink
    gradients this way)."""
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_partition_reduce(np.add, nl.load(x)))
    return out


def test_value_returning_partition_reduce(rng):
    x = rng.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(partition_sum, x), x.sum(axis=0, keepdims=True), rtol=1e-5,
                               atol=1e-5)


@nki.jit
def row_tiles_under_a_condition(xT, w):
    """nki-samples' fused RMSNorm-QKV idiom: rows in pairs of 128-row tiles, the second loaded, multiplied and
    stored under ``mask=(tile * 128 < rows)``, which is a false Python condition (with indices past the end)
    when there are only 128 rows."""
    k, rows = xT.shape
    n = w.shape[1]
    out = nl.ndarray((rows, n), dtype=nl.float32, buffer=nl.shared_hbm)
    ik, im = nl.mgrid[0:k, 0:128]
    jk, jn = nl.mgrid[0:k, 0:n]
    ip, iq = nl.mgrid[0:128, 0:n]
    weights = nl.load(w[jk, jn])
    for pair in nl.affine_range((rows + 255) // 256):
        for half in nl.affine_range(2):
            tile = pair * 2 + half
            xt = nl.load(xT[ik, tile * 128 + im], mask=(tile * 128 < rows))
            res = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.psum)
            res[...] = nisa.nc_matmul(xt, weights, mask=(tile * 128 < rows))
            nl.store(out[tile * 128 + ip, iq], value=nl.copy(res), mask=(tile * 128 < rows))
    return out


def test_a_false_condition_mask_skips_loads_matmuls_and_stores_past_the_end(rng):
    xT = rng.standard_normal((64, 128)).astype(np.float32)
    w = rng.standard_normal((64, 96)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(row_tiles_under_a_condition, xT, w), xT.T @ w, rtol=1e-4,
                               atol=1e-4)


@nki.jit
def floor_and_ceil(x):
    down = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    up = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(down, value=nl.floor(t))
    nl.store(up, value=nl.ceil(t, dtype=nl.int32))
    return down, up


def test_floor_and_ceil_match_numpy(rng):
    """nki-samples' resize_nearest takes nl.floor of scaled indices (as int32)."""
    x = (rng.standard_normal((128, 64)) * 50).astype(np.float32)
    x[0, :9] = [3.7, -3.2, -4.0, 5.0, -0.5, 0.5, -0.0, 2.0**24 + 2, -(2.0**23) - 0.5]
    down, up = nki.simulate_kernel(floor_and_ceil, x)
    np.testing.assert_array_equal(down, np.floor(x))
    np.testing.assert_array_equal(up, np.ceil(x).astype(np.int32))


@nki.jit
def window_iota(out_shape):
    """nki-samples' select_and_scatter: ``nisa.iota(3 * window.y + window.z)`` over a 4-axis mgrid is a tile of the
    whole grid's shape (mgrid is dense), constant along the axes the expression leaves out."""
    p, w = out_shape.shape[0], out_shape.shape[1]
    out = nl.ndarray((p, w, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    window = nl.mgrid[0:p, 0:w, 0:3, 0:3]
    idx = nisa.iota(3 * window.y + window.z, dtype=nl.uint32)
    nl.store(out, value=nl.copy(idx, dtype=nl.float32))
    return out


def test_iota_of_some_mgrid_vars_spans_the_whole_grid():
    got = nki.simulate_kernel(window_iota, np.zeros((16, 5), np.float32))
    assert got.shape == (16, 5, 3, 3)
    np.testing.assert_array_equal(got, np.broadcast_to(np.arange(9, dtype=np.float32).reshape(3, 3), (16, 5, 3, 3)))


@nki.jit
def partial_last_tile(x):
    """nki-samples' adaptive_avg_pool2d: the last 128-row tile of a 288-row tensor is sliced 256:384 and loaded
    under ``mask=(i_p < rows)``; the slice past the end is legal because the mask keeps the access inside."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range((rows + 127) // 128):
        i_p = nl.arange(128)[:, None] + t * 128
        tile = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=x[t * 128:(t + 1) * 128, 0:cols], dst=tile, mask=(i_p < rows))
        nl.store(out[t * 128:(t + 1) * 128, 0:cols], value=tile, mask=(i_p < rows))
    return out


@nki.jit
def unmasked_overhang(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x[160:288, :]))
    return out


def test_a_slice_past_the_end_is_legal_only_under_a_mask_that_keeps_it_inside(rng):
    x = rng.standard_normal((288, 24)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(partial_last_tile, x), x)
    with pytest.raises(Exception, match=r"slice 160:288 exceeds dim 0 of size 288|slice 160:288"):
        nki.simulate_kernel(unmasked_overhang, x[:200])


@nki.jit
def gather_from_a_batch_under_a_mask(data, count):
    """nki-samples' resize_nearest: ``data[b, idx_tile, i_f]`` (a leading integer picks the table, the index tile
    its rows), loaded under ``mask=(i_p < count)`` on a partial tile: the mask keeps as many index rows as rows."""
    _, rows, cols = data.shape
    n = count.shape[0]
    out = nl.ndarray((n, cols), dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(cols)[None, :]
    idx = nisa.iota(i_p * 3, dtype=nl.int32)
    rows_tile = nl.load(data[1, idx, i_f], mask=(i_p < n))
    nl.store(out[i_p, i_f], value=rows_tile, mask=(i_p < n))
    return out


def test_indirect_rows_after_a_leading_index_and_under_a_mask(rng):
    data = rng.standard_normal((2, 400, 16)).astype(np.float32)
    got = nki.simulate_kernel(gather_from_a_batch_under_a_mask, data, np.zeros(66, np.float32))
    np.testing.assert_array_equal(got, data[1, 0:198:3])


@nki.jit
def psum_blocks_beyond_the_psum(a, b):
    """nki-samples' allocated attention: a [2, 8, 128, 512] fp32 PSUM tile (16 one-bank blocks, twice the PSUM's 8
    banks), used a block at a time: its blocks are placed as they live, so it fits."""
    out = nl.ndarray((16, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((2, 8, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    at = nl.load(a)
    bt = nl.load(b)
    for i in nl.affine_range(2):
        for j in nl.affine_range(8):
            acc[i, j, :, :] = nisa.nc_matmul(at, bt)
            nl.store(out[i * 8 + j], value=nl.multiply(acc[i, j, :, :], float(i * 8 + j + 1)))
    return out


def test_a_psum_tile_of_more_blocks_than_banks_is_placed_block_by_block(rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    got = nki.simulate_kernel(psum_blocks_beyond_the_psum, a, b)
    product = a.T @ b
    for k in range(16):
        np.testing.assert_allclose(got[k], product * (k + 1), rtol=2e-5, atol=2e-3)


@nki.jit
def scaled_rows_and_their_max(x):
    """Beta 1's value-returning nisa.tensor_scalar_reduce with dtype= (allocated attention's softmax)."""
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    peak = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    y = nisa.tensor_scalar_reduce(data=nl.load(x), op0=np.multiply, operand0=2.0, reduce_op=np.max, reduce_res=r,
                                  dtype=nl.bfloat16)
    nl.store(out, value=y)
    nl.store(peak, value=r)
    return out, peak


def test_value_returning_tensor_scalar_reduce_with_a_dtype(rng):
    x = rng.standard_normal((128, 96)).astype(np.float32)
    out, peak = nki.simulate_kernel(scaled_rows_and_their_max, x)
    np.testing.assert_array_equal(out, (2 * x).astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(peak, (2 * x).max(axis=1, keepdims=True))


@nki.jit
def column_broadcast(s):
    """``t[i_p, 0]`` is one element per partition; broadcast_to((P, F)) repeats it along the free dim."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    t = nl.load(s)
    nl.store(out, value=nl.copy(t[i_p, 0].broadcast_to((128, 64))))
    return out


def test_broadcast_of_a_partition_narrowed_tile(rng):
    s = rng.standard_normal((128, 3)).astype(np.float32)
    np.testing.assert_array_equal(nki.simulate_kernel(column_broadcast, s), np.repeat(s[:, :1], 64, axis=1))
