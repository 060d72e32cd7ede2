"""NKI beta 1 (``from neuronxcc import nki``): ``nl.arange`` / ``nl.mgrid`` index expressions,
``mask=``, value-returning ``nki.isa``, ``psum[...] += nisa.nc_matmul(...)``, ``nl.loop_reduce``,
and the beta-1 entry points (``simulate_kernel``, ``benchmark``, ``baremetal``, ``profile``)."""
import json
import os

import ml_dtypes
import numpy as np
import pytest

from neuronxcc import nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


def f32(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


@nki.jit
def arange_shift(a):
    """out[p, f] = a[p, f + 16] for f < 32, by nl.arange index tiles."""
    out = nl.ndarray((128, 32), a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(32)[None, :]
    t = nl.load(a[i_p, i_f + 16])
    nl.store(out[i_p, i_f], value=t)
    return out


def test_arange_index_expressions(rng):
    a = f32(rng, 128, 64)
    np.testing.assert_array_equal(arange_shift(a), a[:, 16:48])


@nki.jit
def mgrid_tiles(a):
    """a: [256, 64] -> out [128, 128]: the two row tiles side by side (mgrid + affine offsets)."""
    out = nl.ndarray((128, 128), a.dtype, buffer=nl.shared_hbm)
    ix = nl.mgrid[0:128, 0:64]
    for k in nl.affine_range(2):
        t = nl.load(a[k * 128 + ix.p, ix.x])
        nl.store(out[ix.p, k * 64 + ix.x], value=t)
    return out


def test_mgrid_index_expressions(rng):
    a = f32(rng, 256, 64)
    np.testing.assert_array_equal(mgrid_tiles(a), np.concatenate([a[:128], a[128:]], axis=1))


@nki.jit
def masked_exp(a):
    """Rows of a that do not fill a last 128-row tile: masked load, compute and store."""
    rows, cols = a.shape
    out = nl.ndarray((rows, cols), a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(cols)[None, :]
    for t in nl.affine_range((rows + 127) // 128):
        keep = t * 128 + i_p < rows
        x = nl.load(a[t * 128 + i_p, i_f], mask=keep)
        y = nl.exp(x, mask=keep)
        nl.store(out[t * 128 + i_p, i_f], value=y, mask=keep)
    return out


def test_mask_on_load_compute_store(rng, check_timing):
    a = f32(rng, 200, 24)
    np.testing.assert_allclose(masked_exp(a), np.exp(a), rtol=1e-3)
    check_timing(masked_exp, a)


def test_mask_on_free_axis(rng):
    @nki.jit
    def first_cols(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(a.shape[0])[:, None], nl.arange(a.shape[1])[None, :]
        z = nl.zeros(a.shape, a.dtype)
        nl.store(out[i_p, i_f], value=z)
        x = nl.load(a[i_p, i_f])
        nl.store(out[i_p, i_f], value=x, mask=(i_f < 10))
        return out
    a = f32(rng, 64, 32)
    expected = np.zeros_like(a)
    expected[:, :10] = a[:, :10]
    np.testing.assert_array_equal(first_cols(a), expected)


@nki.jit
def matmul_psum(at, b):
    """at: [K, 128] (A transposed), b: [K, 256]; K in 128-row tiles accumulated by +=."""
    K, M = at.shape
    out = nl.ndarray((M, b.shape[1]), nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, b.shape[1]), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        a_t = nl.load(at[k * 128:(k + 1) * 128, :])
        b_t = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(a_t, b_t)
    nl.store(out, value=nl.copy(acc))
    return out


def test_psum_accumulation(rng, check_timing):
    at, b = f32(rng, 384, 128), f32(rng, 384, 256)
    np.testing.assert_allclose(matmul_psum(at, b), at.T @ b, rtol=1e-4, atol=1e-4)
    check_timing(matmul_psum, at, b)


def test_psum_slice_accumulation(rng):
    @nki.jit
    def two_halves(at, b):
        out = nl.ndarray((128, 128), nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 128), nl.float32, buffer=nl.psum)
        a_t, b_t = nl.load(at), nl.load(b)
        for h in nl.affine_range(2):
            acc[:, h * 64:(h + 1) * 64] += nisa.nc_matmul(a_t, b_t[:, h * 64:(h + 1) * 64])
            acc[:, h * 64:(h + 1) * 64] += nisa.nc_matmul(a_t, b_t[:, h * 64:(h + 1) * 64])
        nl.store(out, value=acc)
        return out
    at, b = f32(rng, 128, 128), f32(rng, 128, 128)
    np.testing.assert_allclose(two_halves(at, b), 2 * at.T @ b, rtol=1e-4, atol=1e-4)


def test_mask_on_a_partial_free_tile(rng):
    @nki.jit
    def double_cols(a):
        n = a.shape[1]
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        for k in nl.affine_range((n + 63) // 64):
            keep = k * 64 + i_f < n
            t = nl.load(a[i_p, k * 64 + i_f], mask=keep)
            nl.store(out[i_p, k * 64 + i_f], value=nl.multiply(t, 2.0, mask=keep), mask=keep)
        return out
    a = f32(rng, 128, 100)
    np.testing.assert_allclose(double_cols(a), 2 * a, rtol=1e-6)


def test_psum_index_expression_accumulation(rng):
    @nki.jit
    def indexed(at, b):
        out = nl.ndarray((128, 64), nl.float32, buffer=nl.shared_hbm)
        i_k, i_m, i_n = nl.arange(128)[:, None], nl.arange(128)[None, :], nl.arange(64)[None, :]
        acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
        x, y = nl.load(at[i_k, i_m]), nl.load(b[i_k, i_n])
        acc[i_k, i_n] += nisa.nc_matmul(x[i_k, i_m], y[i_k, i_n])
        acc[i_k, i_n] += nisa.nc_matmul(x[i_k, i_m], y[i_k, i_n], mask=(i_k < 64))   # K rows 0..63 again
        nl.store(out[i_k, i_n], value=nl.copy(acc[i_k, i_n]))
        return out
    at, b = f32(rng, 128, 128), f32(rng, 128, 64)
    np.testing.assert_allclose(indexed(at, b), at.T @ b + at[:64].T @ b[:64], rtol=1e-4, atol=1e-4)


@nki.jit
def value_returning(a, b):
    """Beta-1 nisa calls return their result tile."""
    out = nl.ndarray((6, 128, 64), nl.float32, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    nl.store(out[0], value=nisa.tensor_tensor(x, y, op=nl.add))
    nl.store(out[1], value=nisa.activation(op=nl.tanh, data=x, scale=2.0))
    nl.store(out[2], value=nisa.tensor_scalar(x, np.multiply, 2.0, op1=np.add, operand1=1.0))
    red = nisa.tensor_reduce(np.add, x, axis=(1,), keepdims=True)
    nl.store(out[3], value=nisa.tensor_scalar(y, np.multiply, red))   # y * row sums
    nl.store(out[4], value=nisa.memset((128, 64), 3.0, nl.float32))
    mm = nisa.nc_matmul(x[:, 0:64], y)                               # [64, 64] in PSUM, used as an operand
    nl.store(out[5, 0:64, :], value=nl.copy(mm))
    nl.store(out[5, 64:128, :], value=nl.copy(nisa.nc_transpose(x[0:64, :])))
    return out


def test_value_returning_isa(rng):
    a, b = f32(rng, 128, 64), f32(rng, 128, 64)
    out = value_returning(a, b)
    np.testing.assert_allclose(out[0], a + b, rtol=1e-6)
    np.testing.assert_allclose(out[1], np.tanh(2 * a), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(out[2], 2 * a + 1, rtol=1e-6)
    np.testing.assert_allclose(out[3], b * a.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[4], 3.0)
    np.testing.assert_allclose(out[5, :64], a[:, :64].T @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(out[5, 64:], a[:64].T)


@nki.jit
def loop_reduce_k(a):
    """Sum of the 128-row tiles of a, by nl.loop_reduce over a sequential loop."""
    out = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((128, a.shape[1]), nl.float32)
    for k in nl.sequential_range(a.shape[0] // 128):
        t = nl.load(a[k * 128:(k + 1) * 128, :])
        acc[...] = nl.loop_reduce(t, op=np.add, loop_indices=[k])
    nl.store(out, value=acc)
    return out


def test_loop_reduce(rng):
    a = f32(rng, 512, 32)
    np.testing.assert_allclose(loop_reduce_k(a), a.reshape(4, 128, 32).sum(0), rtol=1e-5, atol=1e-6)


@nki.jit
def iota_expr():
    out = nl.ndarray((128, 16), nl.int32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(16)[None, :]
    nl.store(out, value=nisa.iota(i_p * 16 + i_f * 2 + 3, dtype=nl.int32))
    return out


def test_iota_index_expression():
    p, f = np.meshgrid(np.arange(128), np.arange(16), indexing="ij")
    np.testing.assert_array_equal(iota_expr(), p * 16 + f * 2 + 3)


def test_par_dim_block_tiles(rng):
    @nki.jit
    def blocks(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((2, nl.par_dim(128), a.shape[1]), a.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(2):
            t[k] = nl.load(a[k * 128:(k + 1) * 128, :])
        for k in nl.affine_range(2):
            nl.store(out[(1 - k) * 128:(2 - k) * 128, :], value=t[k])
        return out
    a = f32(rng, 256, 16)
    np.testing.assert_array_equal(blocks(a), np.concatenate([a[128:], a[:128]]))


def test_static_cast():
    x = np.array([1.0, 1.00390625, 3.14159], np.float32)
    bf = nl.static_cast(x, nl.bfloat16)
    assert bf.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bf.astype(np.float32), x.astype(ml_dtypes.bfloat16).astype(np.float32))


def plain_add(a, b, out):
    """A beta-1 kernel in the style that writes its output argument (no @nki.jit)."""
    x = nl.load(a)
    y = nl.load(b)
    nl.store(out, value=nl.add(x, y))


def test_simulate_kernel_in_place_output(rng):
    a, b = f32(rng, 128, 32), f32(rng, 128, 32)
    out = np.zeros_like(a)
    nki.simulate_kernel(plain_add, a, b, out)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_simulate_kernel_returns(rng):
    a = f32(rng, 128, 64)
    np.testing.assert_array_equal(nki.simulate_kernel(arange_shift, a), a[:, 16:48])


def test_benchmark(rng):
    bench = nki.benchmark(warmup=2, iters=5)(matmul_psum)
    at, b = f32(rng, 256, 128), f32(rng, 256, 256)
    out = bench(at, b)
    np.testing.assert_allclose(out, at.T @ b, rtol=1e-4, atol=1e-4)
    p50 = bench.benchmark_result.nc_latency.get_latency_percentile(50)
    assert p50 > 0
    assert p50 == pytest.approx(bench.last_latency_ns / 1e3)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(99) == p50


def test_benchmark_decorator_with_trace(tmp_path, rng):
    @nki.benchmark(warmup=1, iters=1, save_trace_name=str(tmp_path / "bench.ntff"))
    def bench(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(a)))
        return out
    a = f32(rng, 128, 64)
    np.testing.assert_allclose(bench(a), np.exp(a), rtol=1e-3)
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) > 0
    trace = tmp_path / "bench.json"
    assert trace.exists() and trace.stat().st_size > 0


def test_baremetal(rng):
    a, b = f32(rng, 128, 32), f32(rng, 128, 32)
    out = np.zeros_like(a)
    kernel = nki.baremetal(plain_add)
    kernel(a, b, out)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    assert kernel.last_latency_ns > 0


def test_profile_writes_trace(tmp_path, rng):
    kernel = nki.profile(working_directory=str(tmp_path), save_trace_name="add.ntff")(plain_add)
    a, b = f32(rng, 128, 32), f32(rng, 128, 32)
    out = np.zeros_like(a)
    kernel(a, b, out)
    np.testing.assert_allclose(out, a + b, rtol=1e-6)
    files = sorted(os.listdir(tmp_path))
    assert "add.json" in files, files
    with open(tmp_path / "add.json") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    # Instruction slices name the kernel's line that issued them.
    assert any("test_nki_legacy.py:" in str(ev.get("name", "")) for ev in events)
    summaries = [f for f in files if f.endswith("_summary.json")]
    assert summaries
    with open(tmp_path / summaries[0]) as f:
        assert json.load(f)["latency_ns"] > 0
    with pytest.raises(FileExistsError):
        kernel(a, b, out)   # overwrite=False keeps the first profile


def test_two_axis_mask(rng):
    @nki.jit
    def corner(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        nl.store(out[i_p, i_f], value=nl.zeros((128, 64), a.dtype))
        t = nl.load(a[i_p, i_f], mask=(i_p < 100) & (i_f < 10))
        nl.store(out[i_p, i_f], value=t, mask=(i_p < 100) & (i_f < 10))
        return out
    a = f32(rng, 128, 64)
    expected = np.zeros_like(a)
    expected[:100, :10] = a[:100, :10]
    np.testing.assert_array_equal(corner(a), expected)


def test_masked_reduce_and_value_returning_stats(rng):
    @nki.jit
    def stats(a):
        sums = nl.ndarray((128, 1), nl.float32, buffer=nl.shared_hbm)
        mv = nl.ndarray((128, 2), nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        t = nl.load(a)
        nl.store(sums, nl.sum(t[i_p, i_f], axis=1, mask=(i_f < 16)))
        nl.store(mv, value=nisa.bn_aggr(nisa.bn_stats(t)))
        return sums, mv
    a = f32(rng, 128, 64)
    sums, mv = stats(a)
    np.testing.assert_allclose(sums, a[:, :16].sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mv, np.stack([a.mean(1), a.var(1)], axis=1), rtol=1e-4, atol=1e-5)


def test_iota_of_one_axis():
    @nki.jit
    def ramps():
        row = nl.ndarray((1, 8), nl.int32, buffer=nl.shared_hbm)
        col = nl.ndarray((16, 1), nl.int32, buffer=nl.shared_hbm)
        nl.store(row, value=nisa.iota(nl.arange(8)[None, :] * 3, dtype=nl.int32))
        nl.store(col, value=nisa.iota(nl.arange(16)[:, None] + 2, dtype=nl.int32))
        return row, col
    row, col = ramps()
    np.testing.assert_array_equal(row, 3 * np.arange(8)[None, :])
    np.testing.assert_array_equal(col, 2 + np.arange(16)[:, None])


def spmd_add(a, out):
    """Program i adds i to its 64 rows (beta-1 SPMD, output argument)."""
    i = nl.program_id(0)
    t = nl.load(a[i * 64:(i + 1) * 64, :])
    nl.store(out[i * 64:(i + 1) * 64, :], value=nl.add(t, float(i)))


@pytest.mark.parametrize("wrap", ["simulate_kernel", "benchmark", "baremetal"])
def test_spmd_grid_through_the_beta1_entry_points(wrap, rng):
    a = f32(rng, 128, 8)
    out = np.zeros_like(a)
    if wrap == "simulate_kernel":
        nki.simulate_kernel(nki.jit(spmd_add)[2], a, out)
    else:
        kernel = getattr(nki, wrap)(spmd_add)
        kernel[2](a, out)
        assert kernel.benchmark_result.nc_latency.get_latency_percentile(50) > 0
    np.testing.assert_allclose(out, a + np.repeat([0.0, 1.0], 64)[:, None].astype(np.float32), rtol=1e-6)


@nki.jit
def beta1_families(a, b, w):
    """The nl families under beta-1 idioms: arange-indexed loads, mask-free compute, value-returning
    nisa, results stored through index expressions."""
    out = nl.ndarray((9, 128, 64), nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
    x = nl.load(a[i_p, i_f])
    y = nl.load(b[i_p, i_f])
    wt = nl.load(w.broadcast(0, 128))
    results = [
        nl.softmax(x, axis=1),
        nl.rms_norm(x, wt, axis=1),
        nl.where(nl.greater(x, y, dtype=nl.uint8), x, y),
        nl.copy(nl.copy(x, dtype=nl.bfloat16), dtype=nl.float32),
        nl.multiply(x, nl.max(y, axis=1)),
        nl.subtract(1.0, nl.sigmoid(x)),
        nisa.tensor_scalar(x, np.multiply, nl.sum(y, axis=1, keepdims=True), op1=np.add, operand1=0.5),
        nl.maximum(x, y),
        nl.copy(nl.matmul(x[:, 0:64], y, transpose_x=True)),
    ]
    for k in nl.static_range(8):
        nl.store(out[k, i_p, i_f], value=results[k])
    nl.store(out[8, 0:64, :], value=results[8])
    return out


def test_language_families_in_beta1_idioms(rng):
    a, b, w = f32(rng, 128, 64), f32(rng, 128, 64), f32(rng, 1, 64)
    out = beta1_families(a, b, w)
    e = np.exp(a - a.max(1, keepdims=True))
    expected = [
        e / e.sum(1, keepdims=True),
        a / np.sqrt((a * a).mean(1, keepdims=True) + 1e-6) * w,
        np.where(a > b, a, b),
        a.astype(ml_dtypes.bfloat16).astype(np.float32),
        a * b.max(1, keepdims=True),
        1 - 1 / (1 + np.exp(-a)),
        a * b.sum(1, keepdims=True) + 0.5,
        np.maximum(a, b),
    ]
    for k, ref in enumerate(expected):
        np.testing.assert_allclose(out[k], ref, rtol=2e-3, atol=2e-4, err_msg=f"result {k}")
    np.testing.assert_allclose(out[8, :64], a[:, :64].T @ b, rtol=1e-4, atol=1e-4)
