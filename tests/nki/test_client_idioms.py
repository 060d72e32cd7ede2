"""Idioms of the published NKI tutorials and samples (aws-neuron/nki-samples, the NKI docs), each in a
kernel of our own written the way those kernels are: the same calls, keyword arguments, index
styles, decorator stacking and test harness (``simulate_kernel``, ``benchmark(...)(kernel)[grid]``,
``baremetal``, NumPy references), checked against NumPy. One test per idiom group; the docstring
names the tutorial or sample it mirrors."""
import math
import os

import ml_dtypes
import numpy as np
import pytest

import nki as nki_current
import nki.isa as nisa_current
import nki.language as nl_current
from neuronxcc import nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc.nki import baremetal, benchmark, simulate_kernel
from trnsim.nki import KernelError


def rand(rng, *shape, dtype=np.float32):
    return rng.random(shape).astype(dtype)


# ---- SPMD tensor addition (tutorials/tensor_addition, beta-1 and current) ---------------------

@nki.jit
def spmd_add_beta1(x, y):
    """Each program adds one [128, 512] block: mgrid unpacked, offsets from nl.program_id."""
    z = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    row0 = nl.program_id(0) * 128
    col0 = nl.program_id(1) * 512
    ip, jf = nl.mgrid[0:128, 0:512]
    rows, cols = row0 + ip, col0 + jf
    xt = nl.load(x[rows, cols])
    yt = nl.load(y[rows, cols])
    nl.store(z[rows, cols], value=xt + yt)
    return z


def spmd_add_caller(x, y):
    return spmd_add_beta1[x.shape[0] // 128, x.shape[1] // 512](x, y)


@nki_current.jit
def spmd_add_current(x, y):
    """Current API: dst-first nisa calls on explicit SBUF tensors, slices from nl.program_id."""
    z = nl_current.ndarray(x.shape, dtype=x.dtype, buffer=nl_current.shared_hbm)
    r = nl_current.program_id(0) * 128
    c = nl_current.program_id(axis=1) * 512
    xt = nl_current.ndarray((128, 512), dtype=x.dtype, buffer=nl_current.sbuf)
    yt = nl_current.ndarray((128, 512), dtype=y.dtype, buffer=nl_current.sbuf)
    nisa_current.dma_copy(dst=xt, src=x[r:r + 128, c:c + 512])
    nisa_current.dma_copy(dst=yt, src=y[r:r + 128, c:c + 512])
    zt = nl_current.ndarray((128, 512), dtype=x.dtype, buffer=nl_current.sbuf)
    nisa_current.tensor_tensor(dst=zt, data1=xt, data2=yt, op=nl_current.add)
    nisa_current.dma_copy(dst=z[r:r + 128, c:c + 512], src=zt)
    return z


def test_spmd_tensor_add(rng):
    x, y = rand(rng, 256, 1024, dtype=np.float16), rand(rng, 256, 1024, dtype=np.float16)
    expected = x + y
    assert np.allclose(spmd_add_caller(x, y), expected, atol=1e-4, rtol=1e-2)
    assert np.allclose(simulate_kernel(spmd_add_beta1[2, 2], x, y), expected, atol=1e-4, rtol=1e-2)
    assert np.allclose(spmd_add_current[2, 2](x, y), expected, atol=1e-4, rtol=1e-2)


# ---- transpose2d (tutorials/transpose2d): an SBUF-to-SBUF copy with permuted index expressions -

@nki.jit
def flat_transpose(t, shape2d):
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    parts, _ = t.shape
    tile = nl.load(t)
    n1, n2 = shape2d
    p, a, b = nl.mgrid[0:parts, 0:n1, 0:n2]
    res = nl.ndarray(shape=(parts, n2 * n1), dtype=out.dtype)
    res[p, b * n1 + a] = nl.copy(tile[p, a * n2 + b])
    nl.store(out, value=res)
    return out


def test_transpose2d():
    P, X, Y = 6, 3, 5
    t = np.arange(P * X * Y, dtype=np.int8).reshape(P, X * Y)
    got = flat_transpose(t, (X, Y))
    np.testing.assert_array_equal(got, t.reshape(P, X, Y).transpose(0, 2, 1).reshape(P, X * Y))


# ---- layernorm / rmsnorm (tutorials/layernorm v1 + v2, tutorials/rmsnorm) ----------------------

@nki.jit
def layernorm_lang(x, eps, gamma, beta):
    """nki.language only: 3-var mgrid (a [1, F] parameter row by a size-1 index), broadcast_to,
    nl.mean, nl.rsqrt, masked partial last tile."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf, one = nl.mgrid[0:nl.tile_size.pmax, 0:x.shape[1], 0:1]
    n = x.shape[0]
    g = nl.load(gamma.reshape((1, gamma.shape[0]))[one, jf])
    b = nl.load(beta.reshape((1, beta.shape[0]))[one, jf])
    g_all = g.broadcast_to((nl.tile_size.pmax, gamma.shape[0]))
    b_all = b.broadcast_to((nl.tile_size.pmax, beta.shape[0]))
    for i in nl.affine_range(math.ceil(n / nl.tile_size.pmax)):
        rows = i * nl.tile_size.pmax + ip
        xt = nl.load(x[rows, jf], mask=(rows < n))
        mu = nl.mean(xt, axis=1)
        var = nl.mean(nl.square(xt), axis=1) - mu * mu
        y = (xt - mu) * nl.rsqrt(var + eps)
        nl.store(out[rows, jf], value=y * g_all + b_all, mask=(rows < n))
    return out


@nki.jit
def layernorm_isa(x, eps, gamma, beta):
    """bn_stats per bn_stats_fmax chunk (masked last chunk) into a stats row, bn_aggr, then one
    tensor_scalar with two ALU ops (np.subtract, np.multiply)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip, jf, one = nl.mgrid[0:nl.tile_size.pmax, 0:x.shape[1], 0:1]
    n, width = x.shape
    g_all = nl.load(gamma.reshape((1, width))[one, jf]).broadcast_to((nl.tile_size.pmax, width))
    b_all = nl.load(beta.reshape((1, width))[one, jf]).broadcast_to((nl.tile_size.pmax, width))
    for i in nl.affine_range(math.ceil(n / nl.tile_size.pmax)):
        rows = i * nl.tile_size.pmax + ip
        xt = nl.load(x[rows, jf], mask=(rows < n))
        chunk, k6 = nl.mgrid[0:nl.tile_size.bn_stats_fmax, 0:6]
        chunks = math.ceil(width / nl.tile_size.bn_stats_fmax)
        stats = nl.ndarray((nl.tile_size.pmax, 6 * chunks), dtype=np.float32)
        for j in nl.affine_range(chunks):
            stats[ip, j * 6 + k6] = nisa.bn_stats(
                xt[ip, j * nl.tile_size.bn_stats_fmax + chunk],
                mask=(j * nl.tile_size.bn_stats_fmax + chunk < width), dtype=np.float32)
        agg = nisa.bn_aggr(stats[ip, nl.arange(6 * chunks)[None, :]])
        mu, var = agg[ip, 0], agg[ip, 1]
        inv = nl.rsqrt(var + eps)
        y = nisa.tensor_scalar(data=xt, op0=np.subtract, operand0=mu, op1=np.multiply, operand1=inv)
        nl.store(out[rows, jf], value=y * g_all + b_all, mask=(rows < n))
    return out


@nki.jit
def rmsnorm_tutorial(a, g):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iw, iy = nl.mgrid[0:128, 0:1, 0:a.shape[1]]
    n = a.shape[0]
    g_tile = nl.load(g.reshape((1, g.shape[0]))[iw, iy])
    for i in nl.affine_range(math.ceil(n / 128)):
        at = nl.load(a[i * 128 + ix, iy], mask=(i * 128 + ix < n))
        ms = nl.sum(nl.square(at), axis=[1]) / a.shape[1]
        o = nl.multiply(at, nl.rsqrt(ms))
        o[...] = nl.multiply(o, g_tile.broadcast_to((128, g.shape[0])), mask=(i * 128 + ix < n))
        nl.store(out[i * 128 + ix, iy], value=o, mask=(i * 128 + ix < n))
    return out


def np_layernorm(x, eps, g, b):
    mu = x.mean(1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(1, keepdims=True) + eps) * g + b


def test_layernorm_and_rmsnorm(rng):
    x = rand(rng, 300, 640)
    g, b = rand(rng, 640), rand(rng, 640)
    expected = np_layernorm(x, 1e-5, g, b)
    np.testing.assert_allclose(layernorm_lang(x, 1e-5, g, b), expected, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(layernorm_isa(x, 1e-5, g, b), expected, rtol=2e-3, atol=2e-3)
    a = rand(rng, 200, 256)
    w = rand(rng, 256)
    ref = a / np.sqrt(np.mean(a * a, axis=1, keepdims=True)) * w
    assert np.allclose(rmsnorm_tutorial(a, w), ref, atol=1e-4, rtol=1e-2)


# ---- average pooling (tutorials/average_pool2d: beta-1 5-d index expressions, current .ap view) -

def avgpool_beta1(src, dst, pool):
    """No @nki.jit: run by nki.baremetal with the result tensor passed in and written in place."""
    c, h, w = src.shape
    _, ho, wo = dst.shape
    ic = nl.arange(c)[:, None, None]
    ih, iw = nl.arange(h)[None, :, None], nl.arange(w)[None, None, :]
    oh, ow = nl.arange(ho)[None, :, None], nl.arange(wo)[None, None, :]
    i0 = nl.arange(c)[:, None, None, None, None]
    i1 = nl.arange(h // pool)[None, :, None, None, None]
    i2 = nl.arange(pool)[None, None, :, None, None]
    i3 = nl.arange(w // pool)[None, None, None, :, None]
    i4 = nl.arange(pool)[None, None, None, None, :]
    tile = nl.ndarray([c, h, w], dtype=src.dtype)
    tile[:, :, :] = nl.load(src[ic, ih, iw])
    pooled = nl.sum(tile[i0, pool * i1 + i2, pool * i3 + i4], axis=[2, 4]) / (pool * pool)
    nl.store(dst[ic, oh, ow], value=pooled)


@nki_current.jit
def avgpool_current(src, pool):
    c, h, w = src.shape
    dst = nl_current.ndarray((c, h // pool, w // pool), dtype=src.dtype, buffer=nl_current.shared_hbm)
    tile = nl_current.ndarray(src.shape, dtype=src.dtype, buffer=nl_current.sbuf)
    nisa_current.dma_copy(dst=tile, src=src)
    windows = tile.ap([[h * w, c], [pool * w, h // pool], [pool, w // pool], [w, pool], [1, pool]])
    sums = nl_current.sum(windows, axis=[3, 4])
    res = nl_current.ndarray(sums.shape, dtype=sums.dtype, buffer=nl_current.sbuf)
    nisa_current.tensor_scalar(dst=res, data=sums, op0=nl_current.multiply, operand0=1.0 / (pool * pool))
    nisa_current.dma_copy(dst=dst, src=res)
    return dst


def np_avgpool(x, pool):
    c, h, w = x.shape
    return x.reshape(c, h // pool, pool, w // pool, pool).mean(axis=(2, 4))


def test_average_pool2d():
    x = np.arange(3 * 8 * 12, dtype=np.float16).reshape(3, 8, 12)
    out = np.zeros((3, 4, 6), dtype=np.float16)
    baremetal(avgpool_beta1)(x, out, 2)
    np.testing.assert_array_equal(out, np_avgpool(x.astype(np.float32), 2).astype(np.float16))
    y = np.arange(4 * 6 * 6, dtype=np.float32).reshape(4, 6, 6)
    np.testing.assert_allclose(avgpool_current(y, 3), np_avgpool(y, 3), rtol=1e-6)


# ---- softmax with masks on a partial last tile (tutorials/softmax) ------------------------------

@nki.jit
def masked_softmax(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:128, 0:a.shape[1]]
    n = a.shape[0]
    for i in nl.affine_range(math.ceil(n / 128)):
        keep = (i * 128 + ix < n)
        t = nl.load(a[i * 128 + ix, iy], mask=keep)
        top = nl.max(t, axis=[1], keepdims=True, mask=keep)
        e = nl.exp(nl.subtract(t, top, mask=keep))
        sm = e / nl.sum(e, axis=[1])
        nl.store(out[i * 128 + ix, iy], value=sm, mask=keep)
    return out


def test_softmax_partial_tile(rng):
    a = rand(rng, 200, 96)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(masked_softmax(a), e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)


# ---- matrix multiplication tutorial and its benchmark harness -----------------------------------

@nki_current.jit
def matmul_tiled(lhsT, rhs):
    """tutorials/matrix_multiplication (current API): uninitialised PSUM accumulated by repeated
    nisa.nc_matmul(dst=...), tensor_copy out of PSUM, tile sizes from nl.tile_size."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TM, TK, TN = nl_current.tile_size.gemm_stationary_fmax, nl_current.tile_size.pmax, \
        nl_current.tile_size.gemm_moving_fmax
    result = nl_current.ndarray((M, N), dtype=lhsT.dtype, buffer=nl_current.shared_hbm)
    for m in nl_current.affine_range(M // TM):
        for n in nl_current.affine_range(N // TN):
            acc = nl_current.ndarray((TM, TN), nl_current.float32, buffer=nl_current.psum)
            for k in nl_current.affine_range(K // TK):
                lt = nl_current.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl_current.sbuf)
                rt = nl_current.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl_current.sbuf)
                nisa_current.dma_copy(dst=lt, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                nisa_current.dma_copy(dst=rt, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa_current.nc_matmul(dst=acc, stationary=lt, moving=rt)
            res = nl_current.ndarray(acc.shape, dtype=result.dtype, buffer=nl_current.sbuf)
            nisa_current.tensor_copy(dst=res, src=acc)
            nisa_current.dma_copy(dst=result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return result


@nki_current.jit
def matmul_sbuf_accumulate(lhsT, rhs):
    """The tutorial's fully optimised kernel's pattern: SBUF result tiles zeroed by nisa.memset,
    a sequential_range over K blocks, each block's PSUM tile added into SBUF by tensor_tensor."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl_current.ndarray((M, N), dtype=lhsT.dtype, buffer=nl_current.shared_hbm)
    total = nl_current.ndarray((M, N), dtype=nl_current.float32, buffer=nl_current.sbuf)
    nisa_current.memset(dst=total, value=0)
    for k in nl_current.sequential_range(K // 128):
        lt = nl_current.ndarray((128, M), dtype=lhsT.dtype, buffer=nl_current.sbuf)
        rt = nl_current.ndarray((128, N), dtype=rhs.dtype, buffer=nl_current.sbuf)
        nisa_current.dma_copy(dst=lt[0:128, 0:M], src=lhsT[k * 128:(k + 1) * 128, 0:M])
        nisa_current.dma_copy(dst=rt[0:128, 0:N], src=rhs[k * 128:(k + 1) * 128, 0:N])
        part = nl_current.ndarray((M, N), dtype=nl_current.float32, buffer=nl_current.psum)
        nisa_current.nc_matmul(dst=part, stationary=lt[0:128, 0:M], moving=rt[0:128, 0:N])
        nisa_current.tensor_tensor(dst=total, data1=total, data2=part, op=nl_current.add)
    out = nl_current.ndarray((M, N), dtype=lhsT.dtype, buffer=nl_current.sbuf)
    nisa_current.tensor_copy(dst=out, src=total)
    nisa_current.dma_copy(dst=result, src=out)
    return result


@nki.benchmark(warmup=2, iters=10)
@nki.jit
def matmul_benchmarked(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        acc += nl.matmul(nl.load(lhsT[k * 128:(k + 1) * 128, :]), nl.load(rhs[k * 128:(k + 1) * 128, :]),
                         transpose_x=True)
    nl.store(result, value=nl.copy(acc, dtype=result.dtype))
    return result


@nki.jit
def scaled_rows(x):
    """One program per batch row block (launched as bench[bs])."""
    b = nl.program_id(axis=0)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out[b], value=nl.load(x[b]) * 2.0)
    return out


def test_matmul_tutorial_and_benchmark_harness(rng, tmp_path, monkeypatch):
    lhsT, rhs = rand(rng, 256, 128), rand(rng, 256, 1024)
    expected = lhsT.T @ rhs
    np.testing.assert_allclose(matmul_tiled(lhsT, rhs), expected, rtol=1e-4)
    np.testing.assert_allclose(matmul_sbuf_accumulate(lhsT, rhs[:, :512]), expected[:, :512], rtol=1e-4)
    a, b = rand(rng, 256, 128, dtype=ml_dtypes.bfloat16), rand(rng, 256, 512, dtype=ml_dtypes.bfloat16)
    got = matmul_benchmarked(a, b)
    ref = a.astype(np.float32).T @ b.astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=2e-2)
    latency = matmul_benchmarked.benchmark_result.nc_latency
    p50, p99 = latency.get_latency_percentile(50), latency.get_latency_percentile(99)
    assert 0 < p50 <= p99
    # nki-samples' harness: benchmark(warmup=, iters=, save_trace_name=)(kernel), then [grid].
    trace = tmp_path / "local_trace.ntff"
    bench = benchmark(warmup=5, iters=20, save_trace_name=str(trace))(scaled_rows)
    x = rand(rng, 2, 128, 64)
    bench_2 = bench[2]
    np.testing.assert_allclose(bench_2(x), 2 * x)
    assert bench_2.benchmark_result.nc_latency.get_latency_percentile(1) > 0
    assert os.path.getsize(trace) > 0
    # ...and the numeric check: simulate_kernel(baremetal(kernel)[grid], ...).
    np.testing.assert_allclose(simulate_kernel(baremetal(scaled_rows)[2], x), 2 * x)
    # The tutorials' perf mode: nki.benchmark(func, save_neff_name=, save_trace_name=)(args), then
    # the files are renamed by their asked-for names.
    monkeypatch.chdir(tmp_path)
    nki.benchmark(matmul_tiled, save_neff_name="file.neff", save_trace_name="profile.ntff")(lhsT, rhs)
    os.rename("file.neff", "v1_256.neff")
    os.rename("profile.ntff", "v1_256.ntff")
    assert os.path.getsize("v1_256.ntff") > 0 and os.path.getsize("v1_256.neff") > 0


# ---- fused self-attention (reference/attention.py fused_self_attn_for_SD_small_head_size) --------

@nki.jit
def small_head_attention(q_ref, k_ref, v_ref, use_causal_mask=False, mixed_precision=True):
    """q [bs, d, s], k/v [bs, s, d] -> [bs, s, d]; one program per batch: par_dim block tiles,
    loads with dtype= and a scale, load_transpose2d, ``psum[...] += nisa.nc_matmul(moving=,
    stationary=)``, affine_select causal mask, tensor_reduce(np.max, negate=True), activation with a
    bias, (1 / sum).broadcast_to, nisa.nc_transpose, a transposed store."""
    kdt = q_ref.dtype
    pe_dt = nl.bfloat16 if mixed_precision else np.float32
    bs, d, s = q_ref.shape
    out_ref = nl.ndarray((bs, s, d), dtype=q_ref.dtype, buffer=nl.shared_hbm)
    scale = 0.125
    b = nl.program_id(axis=0)
    nt, ts = s // 128, 128
    v_sb = nl.ndarray((nl.par_dim(ts), nt, d), dtype=pe_dt)
    for j in nl.affine_range(nt):
        ip, jf = nl.arange(ts)[:, None], nl.arange(d)[None, :]
        v_sb[ip, j, jf] = nl.load(v_ref[b, j * ts + ip, jf], dtype=pe_dt)
    q_sb = nl.ndarray((nt, nl.par_dim(d), ts), dtype=pe_dt)
    iq, fq = nl.arange(d)[:, None], nl.arange(ts)[None, :]
    for j in nl.affine_range(nt):
        q_sb[j, iq, fq] = nl.load(q_ref[b, iq, j * ts + fq], dtype=pe_dt) * scale
    k_sb = nl.ndarray((nt, nl.par_dim(d), ts), dtype=pe_dt)
    for j in nl.affine_range(nt):
        k_sb[j, iq, fq] = nl.load_transpose2d(
            k_ref[b, j * ts + nl.arange(ts)[:, None], nl.arange(d)[None, :]], dtype=pe_dt)
    for i in nl.affine_range(nt):
        scores = nl.ndarray((nl.par_dim(ts), s), dtype=kdt)
        neg_max = nl.ndarray((nl.par_dim(ts), nt), dtype=kdt)
        ip_m, if_m = nl.arange(ts)[:, None], nl.arange(nt)[None, :]
        for j in nl.affine_range(nt):
            qk = nl.zeros((nl.par_dim(ts), ts), dtype=np.float32, buffer=nl.psum)
            ip, jf = nl.arange(ts)[:, None], nl.arange(ts)[None, :]
            qk[ip, jf] += nisa.nc_matmul(moving=k_sb[j, iq, fq], stationary=q_sb[i, iq, fq])
            if use_causal_mask:
                scores[ip, j * ts + jf] = nisa.affine_select(
                    pred=(i * ts + ip >= j * ts + jf), on_true_tile=qk[ip, jf], on_false_value=-9984.0,
                    dtype=kdt)
            else:
                scores[ip, j * ts + jf] = nl.copy(qk[ip, jf], dtype=kdt)
            neg_max[ip_m, j] = nisa.tensor_reduce(np.max, data=scores[ip, j * ts + jf], axis=(1,),
                                                  dtype=kdt, negate=True)
        neg_max_all = nisa.tensor_reduce(np.min, data=neg_max[ip_m, if_m], axis=(1,), dtype=kdt,
                                         negate=False)
        ip_s, if_s = nl.arange(ts)[:, None], nl.arange(s)[None, :]
        ip_d, if_d = nl.arange(ts)[:, None], nl.arange(d)[None, :]
        probs = nl.ndarray((nl.par_dim(ts), s), dtype=pe_dt)
        divisor = nl.ndarray((nl.par_dim(ts), d), dtype=kdt)
        e = nisa.activation(np.exp, data=scores[ip_s, if_s], bias=neg_max_all, scale=1.0)
        total = nisa.tensor_reduce(np.add, data=e, axis=(1,), dtype=kdt)
        probs[ip_s, if_s] = nl.copy(e, dtype=pe_dt)
        divisor[ip_d, if_d] = nl.copy((1.0 / total).broadcast_to((ts, d)), dtype=kdt)
        probs_t = nl.ndarray((nl.par_dim(ts), nt, ts), dtype=pe_dt)
        acc = nl.zeros((nl.par_dim(d), ts), dtype=np.float32, buffer=nl.psum)
        ip_t, if_t = nl.arange(ts)[:, None], nl.arange(ts)[None, :]
        for j in nl.affine_range(nt):
            probs_t[ip_t, j, if_t] = nisa.nc_transpose(probs[ip_t, j * ts + if_t])
        ip_o, if_o = nl.arange(d)[:, None], nl.arange(ts)[None, :]
        for j in nl.affine_range(nt):
            acc[ip_o, if_o] += nisa.nc_matmul(moving=probs_t[ip_t, j, if_t],
                                             stationary=v_sb[ip_t, j, nl.arange(d)[None, :]])
        res = nl.copy(acc[ip_o, if_o], dtype=kdt)
        res = res * nisa.nc_transpose(divisor[ip_d, if_d])
        nl.store(out_ref[b, i * ts + if_o, ip_o], value=res)
    return out_ref


def np_attention(q, k, v, causal):
    s = np.matmul((q * 0.125).transpose(0, 2, 1), k.transpose(0, 2, 1))
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -9984.0)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.matmul(p / p.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("causal,dtype", [(False, np.float32), (True, np.float32), (False, nl.bfloat16)])
def test_fused_attention_small_head(rng, causal, dtype):
    bs, s, d = 2, 256, 64
    q, k, v = rand(rng, bs, d, s), rand(rng, bs, s, d), rand(rng, bs, s, d)
    run = baremetal(small_head_attention)
    q_dev, k_dev, v_dev = (nl.static_cast(t, dtype) for t in (q, k, v))
    out = simulate_kernel(run[bs], q_dev, k_dev, v_dev, use_causal_mask=causal)
    out = nl.static_cast(out, np.float32)
    assert np.allclose(out, np_attention(q, k, v, causal), atol=1e-2)


# ---- fused mamba (tutorials/fused_mamba v2/v3) ---------------------------------------------------

@nki.jit
def mamba_like(delta, u, A, B, C, seq_tile=None):
    """Column loads A[c0:c1, s] as a per-partition activation scale, [1, L] rows broadcast_to all
    partitions, tensor_tensor_scan with an initial column carried across static_range chunks, a
    Vector result parked in PSUM and ``+=`` into an nl.zeros par_dim accumulator."""
    bsz, ch, L = delta.shape
    out = nl.ndarray((bsz, ch, L), dtype=delta.dtype, buffer=nl.shared_hbm)
    _, states = A.shape
    P = nl.tile_size.pmax
    F = seq_tile or L
    for ib in nl.affine_range(bsz):
        for ic in nl.affine_range(ch // P):
            c0 = ic * P
            acc = nl.zeros((nl.par_dim(P), L), dtype=delta.dtype)
            d_i = nl.load(delta[ib, c0:c0 + P, 0:L])
            u_i = nl.load(u[ib, c0:c0 + P, 0:L])
            for st in nl.affine_range(states):
                a_i = nl.load(A[c0:c0 + P, st])
                init = nl.zeros((P, 1), dtype=d_i.dtype)
                for t in nl.static_range(L // F):
                    f0 = t * F
                    dA = nisa.activation(op=nl.exp, data=d_i[0:P, f0:f0 + F], scale=a_i)
                    b_i = nl.load(B[ib, st:st + 1, f0:f0 + F])
                    dU = nisa.tensor_tensor(d_i[0:P, f0:f0 + F], u_i[0:P, f0:f0 + F], op=nl.multiply)
                    dBu = nisa.tensor_tensor(dU, b_i.broadcast_to((P, F)), op=nl.multiply)
                    scan = nki.isa.tensor_tensor_scan(dA, dBu, initial=init, op0=np.multiply, op1=np.add)
                    init[...] = scan[0:P, F - 1]
                    c_i = nl.load(C[ib, st:st + 1, f0:f0 + F])
                    sc = nl.ndarray((P, F), dtype=delta.dtype, buffer=nl.psum)
                    sc[...] = nisa.tensor_tensor(scan, c_i.broadcast_to((P, F)), op=nl.multiply)
                    acc[0:P, f0:f0 + F] += sc
            nl.store(out[ib, c0:c0 + P, 0:L], acc[0:P, 0:L])
    return out


def np_mamba(delta, u, A, B, C):
    bsz, ch, L = delta.shape
    out = np.zeros_like(delta)
    for s in range(A.shape[1]):
        dA = np.exp(delta * A[None, :, s, None])
        dBu = delta * u * B[:, None, s, :]
        h = np.zeros((bsz, ch), np.float32)
        for t in range(L):
            h = dA[:, :, t] * h + dBu[:, :, t]
            out[:, :, t] += h * C[:, s, t][:, None]
    return out


def test_fused_mamba(rng):
    bsz, ch, L, states = 1, 128, 256, 2
    delta, u = rand(rng, bsz, ch, L) * 0.1, rand(rng, bsz, ch, L)
    A = -rand(rng, ch, states)
    B, C = rand(rng, bsz, states, L), rand(rng, bsz, states, L)
    ref = np_mamba(delta, u, A, B, C)
    np.testing.assert_allclose(mamba_like(delta, u, A, B, C), ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(mamba_like(delta, u, A, B, C, seq_tile=128), ref, rtol=1e-3, atol=1e-4)


# ---- constants, integer tiles, iota, invert, transposes by engine (common sample idioms) --------

@nki.jit
def identity_transpose(x):
    """reference kernels' idiom: an identity from nl.shared_constant (int8 host array, bf16 tile)
    as the moving operand of nc_matmul transposes x on the Tensor engine; then both engine choices
    of nisa.nc_transpose (Tensor into PSUM, Vector on 32 x 32 blocks)."""
    out = nl.ndarray((3, 128, 128), dtype=np.float32, buffer=nl.shared_hbm)
    ident = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=nl.bfloat16)
    ip, jf = nl.mgrid[0:128, 0:128]
    ident_sb = nl.ndarray((nl.par_dim(128), 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    ident_sb[ip, jf] = nl.load(ident[ip, jf])
    xt = nl.load(x[ip, jf], dtype=nl.bfloat16)
    res = nl.ndarray((nl.par_dim(128), 128), dtype=np.float32, buffer=nl.psum)
    res[ip, jf] = nisa.nc_matmul(xt, ident_sb)
    nl.store(out[0, ip, jf], value=nl.copy(res, dtype=np.float32))
    pe = nisa.nc_transpose(xt, engine=nisa.tensor_engine)
    nl.store(out[1, ip, jf], value=nl.copy(pe, dtype=np.float32))
    blk = nl.ndarray((nl.par_dim(128), 128), dtype=nl.bfloat16)
    for r in nl.static_range(4):
        for c in nl.static_range(4):
            i32, j32 = nl.mgrid[0:32, 0:32]
            blk[c * 32 + i32, r * 32 + j32] = nisa.nc_transpose(xt[r * 32 + i32, c * 32 + j32],
                                                               engine=nisa.vector_engine)
    nl.store(out[2, ip, jf], value=nl.copy(blk, dtype=np.float32))
    return out


@nki.jit
def int_tiles(x):
    """nl.ndarray of int dtypes: beta-1 nisa.iota of an affine nl.arange expression, nl.invert,
    bitwise ops with numbers, an int32 memset, integer loads and stores."""
    out = nl.ndarray((4, 128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    idx = nisa.iota(nl.arange(128)[:, None] * 64 + nl.arange(64)[None, :], dtype=nl.int32)
    nl.store(out[0], value=idx)
    xt = nl.load(x)
    nl.store(out[1], value=nl.invert(xt))
    nl.store(out[2], value=nl.bitwise_and(xt, 0xFF))
    sevens = nl.ndarray((128, 64), dtype=nl.int32)
    sevens[...] = 7
    nl.store(out[3], value=sevens)
    return out


def test_constants_int_tiles_and_transposes(rng):
    x = rand(rng, 128, 128)
    got = identity_transpose(x)
    xb = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    for k in range(3):
        np.testing.assert_array_equal(got[k], xb.T)
    xi = rng.integers(-1000, 1000, size=(128, 64)).astype(np.int32)
    ints = int_tiles(xi)
    np.testing.assert_array_equal(ints[0], np.arange(128 * 64).reshape(128, 64))
    np.testing.assert_array_equal(ints[1], ~xi)
    np.testing.assert_array_equal(ints[2], xi & 0xFF)
    np.testing.assert_array_equal(ints[3], np.full((128, 64), 7))


@nki_current.jit
def index_tiles(index_tensor):
    """tutorials/tensor_indirection's index preparation (current API): uint16 tiles, SBUF-to-SBUF
    dma_copy row by row, nc_transpose(dst=, data=, engine=nisa.engine.vector), replication."""
    _, n = index_tensor.shape
    out = nl_current.ndarray((64, n // 16), dtype=nl_current.uint16, buffer=nl_current.shared_hbm)
    it = nl_current.load(index_tensor)
    rows = nl_current.ndarray((n // 16, 16), dtype=nl_current.uint16, buffer=nl_current.sbuf)
    for k in nl_current.static_range(n // 16):
        nisa_current.dma_copy(dst=rows[k:k + 1, :], src=it[0:1, k * 16:(k + 1) * 16])
    cols = nl_current.ndarray((16, n // 16), dtype=nl_current.uint16, buffer=nl_current.sbuf)
    nisa_current.nc_transpose(dst=cols, data=rows, engine=nisa_current.engine.vector)
    rep = nl_current.ndarray((64, n // 16), dtype=nl_current.uint16, buffer=nl_current.sbuf)
    for g in nl_current.static_range(4):
        nisa_current.dma_copy(dst=rep[16 * g:16 * (g + 1), :], src=cols)
    nl_current.store(out, value=rep)
    return out


@nki_current.jit
def indirect_gather(index_tensor, data_tensor):
    """The tutorial's gather proper: ``data_tile.indirect(idx_tile, num_elem=)`` read by tensor_copy."""
    p, _ = data_tensor.shape
    _, n = index_tensor.shape
    out = nl_current.ndarray((p, n), dtype=data_tensor.dtype, buffer=nl_current.shared_hbm)
    data = nl_current.load(data_tensor)
    idx = nl_current.load(index_tensor.broadcast(0, p))
    res = nl_current.ndarray((p, n), dtype=data_tensor.dtype, buffer=nl_current.sbuf)
    nisa_current.tensor_copy(res, data.indirect(idx, num_elem=n), engine=nisa_current.engine.vector)
    nl_current.store(out, value=res)
    return out


def test_tensor_indirection_index_tiles(rng):
    idx = rng.permutation(64).astype(np.uint16).reshape(1, 64)
    expected = np.tile(idx.reshape(4, 16).T, (4, 1))
    np.testing.assert_array_equal(index_tiles(idx), expected)


@pytest.mark.xfail(strict=True, raises=AttributeError,
                   reason="Tensor.indirect (tensor indirection views) is not in trnsim's front-end: it needs an "
                          "indirect access-pattern operand kind in the ISA table and the engines' gather reads")
def test_tensor_indirection_gather(rng):
    idx = rng.permutation(64).astype(np.uint16).reshape(1, 64)
    data = rand(rng, 64, 64)
    np.testing.assert_array_equal(indirect_gather(idx, data), data[:, idx[0]])


# ---- attention forward, current API (tutorials/attention_fwd_performance v1 / v3 / v4) ----------

@nki_current.jit
def attn_lang(q, k, v):
    """v1 style: nl.matmul(x=, y=, transpose_x=True), tensor_copy out of PSUM, keepdims nl.max as a
    tensor_scalar operand0, nl.reciprocal, nl.transpose into PSUM, nl.store(dst=, value=)."""
    d, s = q.shape
    out = nl_current.ndarray((s, d), dtype=q.dtype, buffer=nl_current.shared_hbm)
    qs, ks, vs = nl_current.load(q), nl_current.load(k), nl_current.load(v)
    qk_ps = nl_current.matmul(x=qs, y=ks, transpose_x=True)
    qk = nl_current.ndarray(qk_ps.shape, dtype=nl_current.float32, buffer=nl_current.sbuf)
    nisa_current.tensor_copy(dst=qk, src=qk_ps)
    top = nl_current.max(qk, axis=1, keepdims=True)
    shifted = nl_current.ndarray(qk.shape, dtype=nl_current.float32, buffer=nl_current.sbuf)
    nisa_current.tensor_scalar(dst=shifted, data=qk, op0=nl_current.subtract, operand0=top)
    e = nl_current.exp(shifted)
    inv = nl_current.reciprocal(nl_current.sum(e, axis=1, keepdims=True))
    p = nl_current.ndarray(e.shape, dtype=nl_current.float32, buffer=nl_current.sbuf)
    nisa_current.tensor_scalar(dst=p, data=e, op0=nl_current.multiply, operand0=inv)
    vt_ps = nl_current.transpose(vs)
    vt = nl_current.ndarray(vt_ps.shape, dtype=vs.dtype, buffer=nl_current.sbuf)
    nisa_current.tensor_copy(dst=vt, src=vt_ps)
    pt_ps = nl_current.transpose(p)
    pt = nl_current.ndarray(pt_ps.shape, dtype=nl_current.float32, buffer=nl_current.sbuf)
    nisa_current.tensor_copy(dst=pt, src=pt_ps)
    o_ps = nl_current.matmul(pt, vt, transpose_x=True)
    o = nl_current.ndarray(o_ps.shape, dtype=nl_current.float32, buffer=nl_current.sbuf)
    nisa_current.tensor_copy(dst=o, src=o_ps)
    nl_current.store(dst=out, value=o)
    return out


@nki_current.jit
def attn_fused(q, k, v):
    """v3/v4 style: nl.ds tiles, a list of fresh PSUM tiles, tensor_reduce(dst=t[:, nl.ds(i, 1)],
    op=nl.maximum, data=psum_tile, axis=(1,)), activation(dst=, op=nl.exp, data=), nisa.reciprocal,
    operand0=t[:, i] (an int index on a free dim), an HBM scratch tensor stored and loaded back,
    tensor_copy into the middle index of a 3-d tile."""
    d, s = q.shape
    P, FM = nl_current.tile_size.pmax, nl_current.tile_size.gemm_moving_fmax
    out = nl_current.ndarray((s, d), dtype=q.dtype, buffer=nl_current.shared_hbm)
    qs, ks, vs = nl_current.load(q), nl_current.load(k), nl_current.load(v)
    vt = nl_current.ndarray((P, s // P, d), dtype=nl_current.float32, buffer=nl_current.sbuf)
    for j in nl_current.affine_range(s // P):
        t_ps = nl_current.ndarray((P, d), dtype=vs.dtype, buffer=nl_current.psum)
        nisa_current.nc_transpose(dst=t_ps, data=vs[:, nl_current.ds(j * P, P)])
        nisa_current.tensor_copy(dst=vt[:, j, :], src=t_ps)
    probs = nl_current.ndarray((s // P, P, s), dtype=nl_current.float32, buffer=nl_current.shared_hbm)
    nkv = s // FM
    for i in nl_current.affine_range(s // P):
        tiles = [nl_current.ndarray((P, FM), dtype=nl_current.float32, buffer=nl_current.psum)
                 for _ in range(nkv)]
        for j in range(nkv):
            nisa_current.nc_matmul(dst=tiles[j], stationary=qs[0:P, nl_current.ds(i * P, P)],
                                   moving=ks[0:P, nl_current.ds(j * FM, FM)])
        part_max = nl_current.ndarray((P, nkv), dtype=nl_current.float32, buffer=nl_current.sbuf)
        for j in range(nkv):
            nisa_current.tensor_reduce(dst=part_max[:, nl_current.ds(j, 1)], op=nl_current.maximum,
                                       data=tiles[j], axis=(1,))
        top = nl_current.ndarray((P, 1), dtype=nl_current.float32, buffer=nl_current.sbuf)
        nisa_current.tensor_reduce(dst=top[:, :], op=nl_current.maximum, data=part_max[:, :], axis=(1,))
        e = nl_current.ndarray((P, s), dtype=nl_current.float32, buffer=nl_current.sbuf)
        for j in range(nkv):
            shifted = nl_current.ndarray((P, FM), dtype=nl_current.float32, buffer=nl_current.sbuf)
            nisa_current.tensor_scalar(dst=shifted, data=tiles[j], op0=nl_current.subtract, operand0=top)
            nisa_current.activation(dst=e[:, nl_current.ds(j * FM, FM)], op=nl_current.exp, data=shifted)
        sums = nl_current.ndarray((P, 2), dtype=nl_current.float32, buffer=nl_current.sbuf)
        nisa_current.tensor_reduce(dst=sums[:, nl_current.ds(0, 1)], op=nl_current.add, data=e, axis=(1,))
        nisa_current.reciprocal(dst=sums[:, nl_current.ds(1, 1)], data=sums[:, nl_current.ds(0, 1)])
        pb = nl_current.ndarray((P, s), dtype=nl_current.float32, buffer=nl_current.sbuf)
        nisa_current.tensor_scalar(dst=pb[:, :], data=e, op0=nl_current.multiply, operand0=sums[:, 1])
        nl_current.store(probs[i], pb[:, :])
    for i in nl_current.affine_range(s // P):
        acc = nl_current.zeros((P, d), dtype=nl_current.float32, buffer=nl_current.psum)
        for j in nl_current.affine_range(s // P):
            blk = nl_current.load(probs[i, :, nl_current.ds(j * P, P)])
            bt_ps = nl_current.ndarray((P, P), dtype=nl_current.float32, buffer=nl_current.psum)
            nisa_current.nc_transpose(dst=bt_ps, data=blk)
            bt = nl_current.ndarray((P, P), dtype=nl_current.float32, buffer=nl_current.sbuf)
            nisa_current.tensor_copy(dst=bt[:, :], src=bt_ps)
            nisa_current.nc_matmul(dst=acc, stationary=bt, moving=vt[:, j, :])
        o = nl_current.ndarray((P, d), dtype=nl_current.float32, buffer=nl_current.sbuf)
        nisa_current.tensor_copy(dst=o, src=acc)
        nl_current.store(dst=out[nl_current.ds(i * P, P), :], value=o[:, :])
    return out


def np_attn_fwd(q, k, v):
    s = q.T @ k
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v.T


def test_attention_fwd_current_api(rng):
    q, k, v = rand(rng, 128, 128), rand(rng, 128, 128), rand(rng, 128, 128)
    np.testing.assert_allclose(attn_lang(q, k, v), np_attn_fwd(q, k, v), rtol=2e-3, atol=2e-4)
    q, k, v = rand(rng, 128, 512), rand(rng, 128, 512), rand(rng, 128, 512)
    np.testing.assert_allclose(attn_fused(q, k, v), np_attn_fwd(q, k, v), rtol=2e-3, atol=2e-4)


# ---- flash attention core (reference/attention.py flash_fwd / _flash_attention_core) -------------

@nki.jit(mode='trace')
def transpose_blocks(dst, src, width):
    """A helper kernel in mode='trace', called from the kernel with keyword arguments."""
    for i in nl.affine_range(width // 128):
        t = nl.ndarray((nl.par_dim(128), 128), buffer=nl.psum, dtype=np.float32)
        t[:, :] = nisa.nc_transpose(src[:, nl.ds(i * 128, 128)])
        dst[:, nl.ds(i * 128, 128)] = nl.copy(t, dtype=dst.dtype)


@nki.jit
def flash_like(q, k, v, use_causal_mask=True):
    """Online softmax over large kv tiles: nl.fp32.min as -inf, Python-bool masks (diagonal / left /
    right tile selections), affine_select on a PSUM matmul result, positional tensor_reduce(np.max),
    activation(np.exp, x, bias=, scale=-1.0), activation_reduce(reduce_op=, reduce_res=),
    ``-1 * m`` bias, nl.zeros(lazy_initialization=True) accumulated by ``+= nl.matmul``."""
    d, s = q.shape
    out = nl.ndarray((s, d), dtype=q.dtype, buffer=nl.shared_hbm)
    NEG = nl.fp32.min
    LARGE, BF, BP = 256, 128, 128
    acc_t = np.float32
    for qi in nl.affine_range(s // BP):
        q_tile = nl.multiply(nl.load(q[:, nl.ds(qi * BP, BP)]), 1.0 / d ** 0.5)
        o_buf = nl.zeros((nl.par_dim(BP), d), dtype=acc_t)
        m_buf = nl.full((nl.par_dim(BP), 1), NEG, dtype=acc_t)
        l_buf = nl.full((nl.par_dim(BP), 1), NEG, dtype=acc_t)
        n_large = (qi * BP + BP - 1) // LARGE + 1 if use_causal_mask else s // LARGE
        for jt in nl.sequential_range(n_large):
            k_blk = nl.load(k[:, nl.ds(jt * LARGE, LARGE)])
            v_blk = nl.ndarray((LARGE // BP, nl.par_dim(BP), d), dtype=q.dtype)
            for vi in nl.affine_range(LARGE // BP):
                v_blk[vi, :, :] = nl.load(v[nl.ds(jt * LARGE + vi * BP, BP), :], dtype=v_blk.dtype)
            qk_res = nl.ndarray((nl.par_dim(BP), LARGE), buffer=nl.sbuf, dtype=acc_t)
            max_local = nl.ndarray((nl.par_dim(BP), LARGE // BF), dtype=acc_t)
            for ki in nl.affine_range(LARGE // BF):
                sl = nl.ds(ki * BF, BF)
                qk_psum = nl.ndarray((nl.par_dim(BP), BF), dtype=np.float32, buffer=nl.psum)
                k0 = jt * LARGE + ki * BF
                if not use_causal_mask or qi * BP + BP - 1 >= k0:
                    qk_psum[:, :] = nl.matmul(q_tile, k_blk[:, sl], transpose_x=True)
                else:
                    qk_psum[:, :] = 0
                if use_causal_mask:
                    i_p, i_f = nl.mgrid[0:BP, 0:BF]
                    pred = qi * BP + i_p >= k0 + i_f
                    diagonal = (qi * BP < k0 + BF) & ((qi + 1) * BP > k0)
                    left = qi * BP >= k0 + BF
                    qk_res[:, sl] = nisa.affine_select(pred=pred, on_true_tile=qk_psum, on_false_value=NEG,
                                                       dtype=acc_t, mask=diagonal)
                    qk_res[:, sl] = nl.copy(qk_psum, dtype=acc_t, mask=left)
                    qk_res[:, sl] = nisa.affine_select(pred=pred, on_true_tile=qk_psum, on_false_value=NEG,
                                                       dtype=acc_t, mask=not (diagonal or left))
                else:
                    qk_res[:, sl] = nl.copy(qk_psum, dtype=acc_t)
                max_local[:, ki] = nisa.tensor_reduce(np.max, qk_res[:, sl], axis=(1,), dtype=acc_t,
                                                      negate=False)
            max_ = nisa.tensor_reduce(np.max, max_local[:, :], axis=(1,), dtype=acc_t, negate=False)
            m_prev = nl.copy(m_buf[:, 0])
            m_buf[:, 0] = nl.maximum(m_prev, max_)
            m_cur = m_buf[:, 0]
            alpha = nisa.activation(np.exp, m_cur, bias=m_prev, scale=-1.0)
            o_scaled = nl.ndarray((nl.par_dim(BP), d), dtype=acc_t)
            o_scaled[...] = nl.multiply(o_buf[:, :], alpha)
            p_local = nl.ndarray((nl.par_dim(BP), LARGE), dtype=q.dtype)
            RT = LARGE // 2
            p_part = nl.ndarray((nl.par_dim(BP), LARGE // RT), dtype=acc_t)
            for ri in nl.affine_range(LARGE // RT):
                rs = nl.ds(ri * RT, RT)
                p_local[:, rs] = nisa.activation_reduce(np.exp, qk_res[:, rs], bias=-1 * m_cur, scale=1.0,
                                                        reduce_op=nl.add, reduce_res=p_part[:, ri],
                                                        dtype=q.dtype)
            ps = nl.sum(p_part, axis=1, dtype=acc_t)
            p_t = nl.ndarray((nl.par_dim(BP), LARGE), dtype=q.dtype)
            transpose_blocks(dst=p_t, src=p_local, width=LARGE)
            pv = nl.zeros((nl.par_dim(BP), d), dtype=np.float32, buffer=nl.psum, lazy_initialization=True)
            for ki in nl.affine_range(LARGE // BP):
                pv[:, :] += nl.matmul(p_t[:, nl.ds(ki * BP, BP)], v_blk[ki, :, :], transpose_x=True)
            o_buf[:, :] = nl.add(o_scaled, pv)
            e = nisa.activation(nl.exp, m_cur, bias=l_buf[:, 0], scale=-1.0)
            l_buf[:, 0] = nl.add(m_cur, nisa.activation(nl.log, e, bias=ps))
        norm = nisa.activation(np.exp, l_buf[:, 0], bias=m_buf[:, 0], scale=-1.0)
        nl.store(out[nl.ds(qi * BP, BP), :], value=nl.multiply(o_buf, norm, dtype=out.dtype))
    return out


def np_flash(q, k, v, causal):
    s = (q.T / np.sqrt(q.shape[0])) @ k
    if causal:
        s = np.where(np.tril(np.ones(s.shape, bool)), s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    return (p / p.sum(1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_core(rng, causal):
    q, k, v = rand(rng, 128, 512), rand(rng, 128, 512), rand(rng, 512, 128)
    np.testing.assert_allclose(flash_like(q, k, v, use_causal_mask=causal), np_flash(q, k, v, causal),
                               rtol=2e-3, atol=2e-4)


# ---- version-gated DMA transpose, dropout with per-tile seeds (reference/attention.py helpers) ----

@nki.jit
def load_v_tiles(v, seed):
    """load_v_tile: nisa.dma_transpose where get_nc_version() >= gen3, else nl.load_transpose2d, then
    nisa.tensor_copy(x, dtype=); dropout_p_local: nl.add(seed, offset, dtype=nl.int32),
    nl.random_seed(seed=), nl.dropout(x, rate=tile[:, 0]), scaled by 1 / (1 - p)."""
    d, s = v.shape
    out = nl.ndarray((s // 128 + 1, 128, d), dtype=np.float32, buffer=nl.shared_hbm)
    cur = nl.ndarray((s // 128, nl.par_dim(128), d), dtype=np.float32)
    for vi in nl.affine_range(s // 128):
        if nisa.get_nc_version() >= nisa.nc_version.gen3:
            t = nisa.dma_transpose(v[:, nl.ds(vi * 128, 128)])
            cur[vi, :, :] = nisa.tensor_copy(t, dtype=cur.dtype)
        else:
            cur[vi, :, :] = nl.load_transpose2d(v[:, nl.ds(vi * 128, 128)], dtype=cur.dtype)
        nl.store(out[vi], value=cur[vi, :, :])
    seed_t = nl.load(seed)
    rate = nl.full((128, 1), 0.25, dtype=np.float32)
    ones = nl.full((128, d), 1.0, dtype=np.float32)
    kept = nl.ndarray((128, d), dtype=np.float32)
    for j in nl.sequential_range(2):
        nl.random_seed(seed=nl.add(seed_t, j, dtype=nl.int32))
        kept[:, nl.ds(j * (d // 2), d // 2)] = nl.multiply(
            nl.dropout(ones[:, nl.ds(j * (d // 2), d // 2)], rate=rate[:, 0]), 1 / (1 - 0.25))
    nl.store(out[s // 128], value=kept)
    return out


@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_dma_transpose_gate_and_dropout(rng, monkeypatch, target):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    v = rand(rng, 64, 256, dtype=ml_dtypes.bfloat16)
    got = load_v_tiles(v, np.array([[7]], dtype=np.int32))
    vt = v.astype(np.float32).T
    np.testing.assert_array_equal(got[:2].reshape(256, 64), vt)
    drop = got[2]
    assert set(np.unique(drop)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.1 < (drop == 0).mean() < 0.4


# ---- rotary embedding (tutorials/rotary): a jit kernel called on tiles, torch tensors in and out -

@nki.jit
def rotate_core(q_tile, k_tile, cos_tile, sin_tile, output_tile):
    """Called from the kernel below on SBUF tiles (no mode='trace'): its writes land in output_tile."""
    h = q_tile.shape[-1] // 2
    for slot, x in ((0, q_tile), (1, k_tile)):
        output_tile[slot, :, :] = x * cos_tile
        output_tile[slot, :, :h] = output_tile[slot, :, :h] + (-1 * x[:, h:] * sin_tile[:, :h])
        output_tile[slot, :, h:] = output_tile[slot, :, h:] + (x[:, :h] * sin_tile[:, h:])


@nki.jit
def rotary(q, k, cos, sin):
    """One program per (batch, head); int-indexed HBM views indexed again by masked index
    expressions (a sequence shorter than, or not a multiple of, 128), list shapes with nl.par_dim,
    nl.affine_range(0, n), positional nl.store(dst, value, mask=)."""
    b, hd = nl.program_id(axis=0), nl.program_id(axis=1)
    seq = q.shape[2]
    out = nl.ndarray([2] + list(q.shape), dtype=q.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(q.shape[-1])[None, :]
    for t in nl.affine_range(0, (seq + 127) // 128):
        rows = t * nl.tile_size.pmax + i_p
        q_h, k_h, c_h, s_h = q[b, hd], k[b, hd], cos[b], sin[b]
        qt = nl.load(q_h[rows, i_f], mask=(rows < seq))
        kt = nl.load(k_h[rows, i_f], mask=(rows < seq))
        ot = nl.ndarray([2] + [nl.par_dim(kt.shape[0]), kt.shape[1]], dtype=kt.dtype, buffer=nl.sbuf)
        ct = nl.load(c_h[rows, i_f], mask=(rows < seq))
        st = nl.load(s_h[rows, i_f], mask=(rows < seq))
        rotate_core(qt, kt, ct, st, ot)
        nl.store(out[0, b, hd][rows, i_f], ot[0, :, :], mask=(rows < seq))
        nl.store(out[1, b, hd][rows, i_f], ot[1, :, :], mask=(rows < seq))
    return out


@pytest.mark.parametrize("seq", [64, 192])
def test_rotary_torch(seq):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    bs, nh, hdim = 2, 2, 64
    q, k = torch.randn(bs, nh, seq, hdim), torch.randn(bs, nh, seq, hdim)
    inv = 1.0 / (10000 ** (torch.arange(0, hdim, 2) / hdim))
    freqs = torch.arange(seq)[:, None].float() * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)[None].expand(bs, -1, -1).contiguous()
    cos, sin = emb.cos(), emb.sin()
    out = rotary[bs, nh](q, k, cos, sin)
    assert isinstance(out, torch.Tensor) and out.shape == (2, bs, nh, seq, hdim)

    def rot(x):
        return torch.cat((-x[..., hdim // 2:], x[..., :hdim // 2]), dim=-1)
    c, s = cos[:, None], sin[:, None]
    torch.testing.assert_close(out[0], q * c + rot(q) * s, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out[1], k * c + rot(k) * s, rtol=1e-4, atol=1e-4)


# ---- nl.gather_flattened (nki.language docs' example: per-partition gather by uint32 indices) -----

@nki_current.jit
def gather_rows(data_tensor, indices_tensor):
    out = nl_current.ndarray(indices_tensor.shape, dtype=data_tensor.dtype, buffer=nl_current.shared_hbm)
    data = nl_current.load(data_tensor[0:128, 0:512])
    idx = nl_current.load(indices_tensor[0:128, 0:256])
    nl_current.store(out[0:128, 0:256], nl_current.gather_flattened(data, idx))
    return out


def test_gather_flattened(rng):
    data = rand(rng, 128, 512)
    idx = rng.integers(0, 512, size=(128, 256)).astype(np.uint32)
    np.testing.assert_array_equal(gather_rows(data, idx), np.take_along_axis(data, idx.astype(np.int64), axis=1))
    # The docs' 3-d example: free dims flattened for indexing.
    d3 = np.arange(1, 9, dtype=np.float32).reshape(2, 2, 2)
    i3 = np.array([[[0, 1], [1, 3]], [[3, 3], [1, 0]]], dtype=np.uint32)

    @nki_current.jit
    def gather3(d, i):
        o = nl_current.ndarray(i.shape, dtype=d.dtype, buffer=nl_current.shared_hbm)
        nl_current.store(o, nl_current.gather_flattened(nl_current.load(d), nl_current.load(i)))
        return o
    np.testing.assert_array_equal(gather3(d3, i3), [[[1, 2], [2, 4]], [[8, 8], [6, 5]]])


# ---- direct allocation (reference/allocated_fused_linear.py: fused RMSNorm + QKV matmul) ----------

import neuronxcc.nki.compiler as ncc  # noqa: E402


@nki.jit
def allocated_rmsnorm_qkv(hidden, weights, norm_dtype=nl.float32, eps=1e-6):
    """ncc.sbuf.mod_alloc / ncc.psum.mod_alloc buffers, mgrid .p / .x attributes, & of two masks,
    activation_reduce(op=nl.square, reduce_res=t[...], bias=zero column), positional
    tensor_scalar(t, np.multiply, scale, op1=, operand1=), activation(op=nl.rsqrt), version equality,
    nc_matmul(x, identity, is_transpose=True) into a block-indexed PSUM tile, ``res[0] +=``."""
    batch, seqlen, dim = hidden.shape
    _, head_dim = weights.shape
    out_tensor = nl.ndarray((batch, seqlen, head_dim), dtype=hidden.dtype, buffer=nl.shared_hbm)
    pmax, fmax = nl.tile_size.pmax, nl.tile_size.psum_fmax
    ix, iy = nl.mgrid[0:pmax, 0:dim]
    i_lhs, i_rhs = nl.mgrid[0:pmax, 0:pmax], nl.mgrid[0:pmax, 0:fmax]
    M, NT, TILES = math.ceil(dim / pmax), math.ceil(dim / fmax), math.ceil(seqlen / pmax)
    ident = nl.shared_constant(np.identity(n=128, dtype=np.int8), dtype=hidden.dtype)
    ident_sb = nl.ndarray((nl.par_dim(pmax), 128), dtype=weights.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    iden_x, iden_y = nl.mgrid[0:pmax, 0:128]
    ident_sb[iden_x, iden_y] = nl.load(ident, dtype=weights.dtype)
    zero = nl.ndarray((nl.par_dim(pmax), 1), dtype=np.float32, buffer=ncc.sbuf.mod_alloc(base_addr=256))
    zero[...] = 0
    for b in nl.affine_range(batch):
        w_buf = nl.ndarray((M, nl.par_dim(pmax), fmax), dtype=weights.dtype,
                           buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(M,)))
        for m in nl.affine_range(M):
            w_buf[m, i_rhs.p, i_rhs.x] = nl.load(weights[m * pmax + i_rhs.p, i_rhs.x],
                                                 mask=(m * pmax + i_rhs.p < dim) & (i_rhs.x < head_dim))
        for t in nl.affine_range(TILES):
            x = nl.ndarray((1, nl.par_dim(pmax), dim), dtype=hidden.dtype,
                           buffer=ncc.sbuf.mod_alloc(base_addr=4096, num_free_tiles=(1,)))
            x[0] = nl.load(hidden[b, t * pmax + ix, iy], mask=t * pmax + ix < seqlen)
            act = nl.ndarray((nl.par_dim(pmax), dim), dtype=norm_dtype, buffer=ncc.sbuf.mod_alloc(base_addr=8192))
            ss = nl.ndarray((nl.par_dim(pmax), 1), dtype=norm_dtype, buffer=ncc.sbuf.mod_alloc(base_addr=12288))
            xn = nl.ndarray((nl.par_dim(pmax), dim), dtype=weights.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=16384))
            act[...] = nisa.activation_reduce(op=nl.square, data=x[0], reduce_op=np.add, reduce_res=ss[...],
                                              bias=zero[...])
            ss[...] = nisa.tensor_scalar(ss[...], np.multiply, 1 / dim, op1=np.add, operand1=eps)
            ss[...] = nisa.activation(op=nl.rsqrt, data=ss[...], bias=zero[...])
            pe_dt = weights.dtype if nisa.get_nc_version() == nisa.nc_version.gen3 else np.float32
            tr = nl.ndarray((NT, nl.par_dim(pmax), 4 * pmax), dtype=pe_dt,
                            buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(1,)))
            for m in nl.affine_range(NT):
                xn[i_rhs.p, m * fmax + i_rhs.x] = nl.multiply(x[0, i_rhs.p, m * fmax + i_rhs.x], ss[...],
                                                             dtype=weights.dtype)
                for j in nl.affine_range(4):
                    tr[m, i_lhs.p, j * pmax + i_lhs.x] = nisa.nc_matmul(
                        xn[i_lhs.p, (m * 4 + j) * pmax + i_lhs.x], ident_sb[...], is_transpose=True)
                xn[i_rhs.p, m * 4 * pmax + i_rhs.x] = nl.copy(tr[m], dtype=hidden.dtype)
            res = nl.ndarray((1, nl.par_dim(pmax), fmax), dtype=nl.float32,
                             buffer=ncc.psum.mod_alloc(base_bank=7, num_bank_tiles=(1,)))
            for m in nl.affine_range(M):
                res[0] += nisa.nc_matmul(xn[i_lhs.p, m * pmax + i_lhs.x], w_buf[m, i_rhs.p, i_rhs.x])
            o = nl.ndarray((nl.par_dim(pmax), fmax), dtype=weights.dtype,
                           buffer=ncc.sbuf.mod_alloc(base_addr=20480))
            o[...] = nl.copy(res[0], dtype=out_tensor.dtype)
            nl.store(out_tensor[b, t * pmax + i_rhs.p, i_rhs.x], value=o,
                     mask=(t * pmax + i_rhs.p < seqlen) & (i_rhs.x < head_dim))
    return out_tensor


def test_allocated_rmsnorm_qkv(rng):
    hidden = rand(rng, 1, 200, 512, dtype=ml_dtypes.bfloat16)
    weights = (rand(rng, 512, 384) * 0.1).astype(ml_dtypes.bfloat16)
    got = allocated_rmsnorm_qkv(hidden, weights).astype(np.float32)
    h = hidden.astype(np.float32)
    normed = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + 1e-6)
    ref = normed @ weights.astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=3e-2, atol=3e-2)


# ---- tile grids (NKI docs: tiled-grid fundamentals, nl.tiles / nl.alloc_tiles / NkiTileGrid) -----

@nki_current.jit
def grid_scale(src, factor=2.0):
    """Per tile: nl.empty_like(grid[i, j], buffer=nl.sbuf), dma_copy of .data, a positional
    tensor_scalar(dst, data, op0, operand0); the last row of tiles is clipped at the tensor's edge."""
    shape = (128, 128)
    dst = nl_current.ndarray(src.shape, dtype=src.dtype, buffer=nl_current.shared_hbm)
    src_tiles, dst_tiles = nl_current.tiles(src, tile_shape=shape), nl_current.tiles(dst, tile_shape=shape)
    for i in range(src_tiles.shape[0]):
        for j in range(src_tiles.shape[1]):
            t = nl_current.empty_like(src_tiles[i, j], buffer=nl_current.sbuf)
            nisa_current.dma_copy(t.data, src_tiles[i, j].data)
            nisa_current.tensor_scalar(t.data, t.data, nl_current.multiply, factor)
            nisa_current.dma_copy(dst_tiles[i, j].data, t.data)
    return dst


@nki_current.jit
def grid_rows_matmul(lhsT, rhs):
    """A row of tiles per DMA (grid[i, :]), nl.ndarray(grid.element_shape, ...), nl.alloc_tiles for
    the result, and a K-loop over tile coordinates into one PSUM tile."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl_current.ndarray((M, N), dtype=nl_current.float32, buffer=nl_current.shared_hbm)
    lt = nl_current.tiles(lhsT, tile_shape=(128, 128))
    rt = nl_current.tiles(rhs, tile_shape=(128, 512))
    ot = nl_current.tiles(out, tile_shape=(128, 512))
    for m in range(lt.shape[1]):
        for n in range(rt.shape[1]):
            acc = nl_current.ndarray((128, 512), dtype=nl_current.float32, buffer=nl_current.psum)
            for k in range(lt.shape[0]):
                a = nl_current.ndarray(lt[k, m].element_shape, dtype=lhsT.dtype, buffer=nl_current.sbuf)
                b = nl_current.ndarray(rt[k, n].element_shape, dtype=rhs.dtype, buffer=nl_current.sbuf)
                nisa_current.dma_copy(dst=a.data, src=lt[k, m].data)
                nisa_current.dma_copy(dst=b.data, src=rt[k, n].data)
                nisa_current.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl_current.alloc_tiles(tile_shape=(128, 512), element_shape=(128, 512),
                                         buffer=nl_current.sbuf, dtype=nl_current.float32)
            nisa_current.tensor_copy(dst=res.data, src=acc)
            nisa_current.dma_copy(dst=ot[m, n].data, src=res[0, 0].data)
    rows = nl_current.tiles(lhsT, tile_shape=(128, 128))[0, :]
    assert rows.shape == (lt.shape[1],) and rows.element_shape == (128, M)
    return out


def test_tile_grids(rng):
    x = rand(rng, 300, 384)
    np.testing.assert_array_equal(grid_scale(x), 2 * x)
    lhsT, rhs = rand(rng, 256, 256), rand(rng, 256, 1024)
    np.testing.assert_allclose(grid_rows_matmul(lhsT, rhs), lhsT.T @ rhs, rtol=1e-4)


@nki_current.jit
def add_constant(a):
    out = nl_current.ndarray(a.shape, dtype=a.dtype, buffer=nl_current.shared_hbm)
    c = nl_current.shared_constant(np.arange(128 * 32, dtype=np.float32).reshape(128, 32))
    nl_current.store(out, value=nl_current.add(nl_current.load(a), nl_current.load(c)))
    return out


def test_shared_constant_cpu_and_neuron_device():
    torch = pytest.importorskip("torch")
    a = torch.randn(128, 32)
    ref = a + torch.arange(128 * 32, dtype=torch.float32).reshape(128, 32)
    torch.testing.assert_close(add_constant(a), ref)
    out = add_constant(a.to("neuron"))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), ref)


# ---- indirect DMA (nl.load docs: rows of an HBM tensor picked by an SBUF index tile) -------------

@nki.jit
def gather_even_rows(table):
    out = nl.ndarray((64, 512), dtype=table.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:64, 0:512]
    idx_tile = nisa.iota(2 * nl.arange(64)[:, None], dtype=np.int32)
    rows = nl.load(table[idx_tile, i_f])
    nl.store(out[i_p, i_f], value=rows)
    return out


def test_indirect_dma_load(rng):
    table = rand(rng, 256, 640)
    np.testing.assert_array_equal(gather_even_rows(table), table[0:128:2, 0:512])
