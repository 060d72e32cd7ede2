"""``nki.language`` in the current namespace (``import nki, nki.language as nl``): every family of
conveniences, each kernel checked against NumPy."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.language as nl


def f32(rng, *shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


# ---- loads and stores -----------------------------------------------------------------------

@nki.jit
def slice_copy(a):
    """out[0:64] = a[64:128, 16:48]; out[64:128] = a[0:64, 0:32] (plain slices and nl.ds)."""
    out = nl.ndarray((128, 32), a.dtype, buffer=nl.shared_hbm)
    top = nl.load(a[64:128, 16:48])
    bottom = nl.load(a[nl.ds(0, 64), nl.ds(0, 32)])
    nl.store(out[0:64, :], top)
    nl.store(out[nl.ds(64, 64), 0:32], value=bottom)
    return out


def test_load_store_slices_and_ds(rng, check_timing):
    a = f32(rng, 128, 64)
    out = slice_copy(a)
    expected = np.concatenate([a[64:128, 16:48], a[0:64, 0:32]])
    np.testing.assert_array_equal(out, expected)
    check_timing(slice_copy, a)


@nki.jit
def load_1d(v):
    out = nl.ndarray(v.shape, v.dtype, buffer=nl.shared_hbm)
    t = nl.load(v)
    nl.store(out, t * 2.0)
    return out


def test_load_store_1d(rng):
    v = f32(rng, 96)
    np.testing.assert_allclose(load_1d(v), v * 2.0, rtol=1e-6)


# ---- tensor creation ------------------------------------------------------------------------

@nki.jit
def buffers(a):
    """zeros in SBUF, an nl.ndarray in SBUF filled by assignment, a scratch tensor in HBM, zeros
    in PSUM accumulated into."""
    out = nl.ndarray((3, 128, 64), nl.float32, buffer=nl.shared_hbm)
    z = nl.zeros((128, 64), nl.float32, buffer=nl.sbuf)
    nl.store(out[0], z)
    t = nl.ndarray((128, 64), nl.float32, buffer=nl.sbuf)
    t[...] = nl.load(a)
    scratch = nl.ndarray((128, 64), nl.float32, buffer=nl.hbm)
    nl.store(scratch, t + 1.0)
    nl.store(out[1], nl.load(scratch))
    ones = nl.full((128, 128), 1.0, nl.float32)
    acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
    acc += nl.matmul(ones, t, transpose_x=True)
    acc += nl.matmul(ones, t, transpose_x=True)
    nl.store(out[2], acc)
    return out


def test_ndarray_zeros_in_sbuf_psum_hbm(rng, check_timing):
    a = f32(rng, 128, 64)
    out = buffers(a)
    check_timing(buffers, a)
    np.testing.assert_array_equal(out[0], 0)
    np.testing.assert_allclose(out[1], a + 1.0, rtol=1e-6)
    np.testing.assert_allclose(out[2], 2 * np.broadcast_to(a.sum(0), (128, 64)), rtol=1e-4, atol=1e-4)


# ---- loops ----------------------------------------------------------------------------------

LOOPS = {"range": range, "affine_range": nl.affine_range, "sequential_range": nl.sequential_range,
         "static_range": nl.static_range}


def make_loop_kernel(loop):
    @nki.jit
    def scale_rows(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in loop(a.shape[0] // 128):
            t = nl.load(a[i * 128:(i + 1) * 128, :])
            nl.store(out[i * 128:(i + 1) * 128, :], t * float(i + 1))
        return out
    return scale_rows


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_loops(loop, rng, check_timing):
    a = f32(rng, 512, 32)
    kernel = make_loop_kernel(LOOPS[loop])
    out = kernel(a)
    np.testing.assert_allclose(out, a * np.repeat(np.arange(1, 5, dtype=np.float32), 128)[:, None], rtol=1e-6)
    check_timing(kernel, a)


def test_sequential_accumulation_loop(rng):
    @nki.jit
    def row_block_sum(a):
        out = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.shared_hbm)
        acc = nl.zeros((128, a.shape[1]), nl.float32)
        for i in nl.sequential_range(a.shape[0] // 128):
            acc[...] = acc + nl.load(a[i * 128:(i + 1) * 128, :])
        nl.store(out, acc)
        return out
    a = f32(rng, 384, 16)
    np.testing.assert_allclose(row_block_sum(a), a.reshape(3, 128, 16).sum(0), rtol=1e-5, atol=1e-6)


# ---- element-wise ---------------------------------------------------------------------------

BINARY = {
    "add": (nl.add, np.add), "subtract": (nl.subtract, np.subtract), "multiply": (nl.multiply, np.multiply),
    "divide": (nl.divide, np.divide), "maximum": (nl.maximum, np.maximum), "minimum": (nl.minimum, np.minimum),
}


@nki.jit
def tile_tile(a, b, op):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, op(nl.load(a), nl.load(b)))
    return out


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_tile_tile(name, rng):
    nki_op, np_op = BINARY[name]
    a, b = f32(rng, 128, 48), f32(rng, 128, 48, lo=0.5, hi=2.0)
    np.testing.assert_allclose(tile_tile(a, b, nki_op), np_op(a, b), rtol=1e-5, atol=1e-6)


@nki.jit
def operators(a, b):
    """Python operators on tiles: tile-tile, tile-scalar, reversed scalar, a [P, 1] column."""
    out = nl.ndarray((10, 128, 32), a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    col = nl.load(b[:, 0:1])
    nl.store(out[0], x + y)
    nl.store(out[1], x * y - x)
    nl.store(out[2], x + 2.5)
    nl.store(out[3], x * -3.0)
    nl.store(out[4], 2.0 - x)
    nl.store(out[5], 1.0 / y)
    nl.store(out[6], x * col)
    nl.store(out[7], nl.subtract(col, x))
    nl.store(out[8], nl.divide(2.0, y))
    nl.store(out[9], x / nl.sum(y, axis=1, keepdims=True))
    return out


def test_binary_operators_scalars_and_columns(rng):
    a, b = f32(rng, 128, 32), f32(rng, 128, 32, lo=0.5, hi=2.0)
    out = operators(a, b)
    col = b[:, :1]
    expected = [a + b, a * b - a, a + 2.5, a * -3.0, 2.0 - a, 1.0 / b, a * col, col - a, 2.0 / b,
                a / b.sum(1, keepdims=True)]
    for i, e in enumerate(expected):
        np.testing.assert_allclose(out[i], e, rtol=1e-5, atol=1e-6, err_msg=f"expression {i}")


def test_comparisons(rng):
    @nki.jit
    def compare(a, b):
        out = nl.ndarray((3, 128, 16), nl.float32, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        nl.store(out[0], nl.greater(x, y, dtype=nl.float32))
        nl.store(out[1], nl.less_equal(x, 0.0, dtype=nl.float32))
        nl.store(out[2], nl.equal(x, x, dtype=nl.float32))
        return out
    a, b = f32(rng, 128, 16), f32(rng, 128, 16)
    out = compare(a, b)
    np.testing.assert_array_equal(out[0], (a > b).astype(np.float32))
    np.testing.assert_array_equal(out[1], (a <= 0).astype(np.float32))
    np.testing.assert_array_equal(out[2], 1.0)


# ---- activations ----------------------------------------------------------------------------

def _gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


ACTIVATIONS = {
    "exp": (nl.exp, np.exp, (-2, 2)), "tanh": (nl.tanh, np.tanh, (-3, 3)),
    "sigmoid": (nl.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-4, 4)),
    "relu": (nl.relu, lambda x: np.maximum(x, 0), (-1, 1)),
    "gelu": (nl.gelu, _gelu, (-3, 3)), "silu": (nl.silu, lambda x: x / (1 + np.exp(-x)), (-4, 4)),
    "sqrt": (nl.sqrt, np.sqrt, (0.01, 4)), "rsqrt": (nl.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 4)),
    "log": (nl.log, np.log, (0.1, 4)), "sin": (nl.sin, np.sin, (-3, 3)),
    "abs": (nl.abs, np.abs, (-1, 1)), "square": (nl.square, np.square, (-2, 2)),
    "negative": (nl.negative, np.negative, (-1, 1)), "reciprocal": (nl.reciprocal, np.reciprocal, (0.5, 2)),
}


@nki.jit
def unary(a, fn):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, fn(nl.load(a)))
    return out


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(name, rng):
    fn, ref, (lo, hi) = ACTIVATIONS[name]
    a = f32(rng, 128, 64, lo=lo, hi=hi)
    np.testing.assert_allclose(unary(a, fn), ref(a.astype(np.float64)), rtol=2e-3, atol=2e-3)


# ---- reductions -----------------------------------------------------------------------------

REDUCTIONS = {"sum": (nl.sum, np.sum), "max": (nl.max, np.max), "min": (nl.min, np.min), "mean": (nl.mean, np.mean)}


@nki.jit
def reduce_2d(a, fn, keepdims):
    out = nl.ndarray((a.shape[0], 1), a.dtype, buffer=nl.shared_hbm)
    nl.store(out, fn(nl.load(a), axis=1, keepdims=keepdims))
    return out


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_free_axis(name, keepdims, rng):
    fn, ref = REDUCTIONS[name]
    a = f32(rng, 128, 40)
    np.testing.assert_allclose(reduce_2d(a, fn, keepdims), ref(a, axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_reduction_shapes_3d(rng):
    @nki.jit
    def reduce_3d(a):
        t = nl.load(a)                         # [128, 4, 8]
        inner = nl.sum(t, axis=2)              # [128, 4]
        outer = nl.max(t, axis=1, keepdims=True)   # [128, 1, 8]
        both = nl.mean(t, axis=(1, 2))         # [128]
        assert inner.shape == (128, 4) and outer.shape == (128, 1, 8)
        out_inner = nl.ndarray((128, 4), a.dtype, buffer=nl.shared_hbm)
        out_outer = nl.ndarray((128, 1, 8), a.dtype, buffer=nl.shared_hbm)
        out_both = nl.ndarray((128, 1), a.dtype, buffer=nl.shared_hbm)
        nl.store(out_inner, inner)
        nl.store(out_outer, outer)
        nl.store(out_both, both)
        return out_inner, out_outer, out_both
    a = f32(rng, 128, 4, 8)
    inner, outer, both = reduce_3d(a)
    np.testing.assert_allclose(inner, a.sum(2), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outer, a.max(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(both, a.mean((1, 2))[:, None], rtol=1e-5, atol=1e-6)


# ---- matmul, transpose, softmax, rms_norm, where --------------------------------------------

@nki.jit
def matmul_k(x, y, transpose_x):
    out = nl.ndarray((x.shape[1] if transpose_x else x.shape[0], y.shape[1]), nl.float32, buffer=nl.shared_hbm)
    r = nl.matmul(nl.load(x), nl.load(y), transpose_x=transpose_x)
    nl.store(out, nl.copy(r))
    return out


@pytest.mark.parametrize("transpose_x", [True, False])
def test_matmul(transpose_x, rng, check_timing):
    x, y = f32(rng, 128, 96), f32(rng, 128, 256)
    lhs = x if transpose_x else x.T.copy()
    out = matmul_k(lhs, y, transpose_x)
    np.testing.assert_allclose(out, x.T @ y, rtol=1e-4, atol=1e-4)
    check_timing(matmul_k, lhs, y, transpose_x)


@nki.jit
def transpose_k(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.transpose(nl.load(a)))
    return out


def test_transpose(rng):
    a = f32(rng, 64, 128)
    np.testing.assert_allclose(transpose_k(a), a.T, rtol=1e-6)


@nki.jit
def softmax_k(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.softmax(nl.load(a), axis=1))
    return out


def test_softmax(rng, check_timing):
    a = f32(rng, 128, 100, lo=-4, hi=4)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(softmax_k(a), e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)
    check_timing(softmax_k, a)


@nki.jit
def rms_norm_k(a, w):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    wt = nl.load(w.broadcast(0, a.shape[0]))
    nl.store(out, nl.rms_norm(nl.load(a), wt, axis=1, epsilon=1e-5))
    return out


def test_rms_norm(rng, check_timing):
    a, w = f32(rng, 128, 64), f32(rng, 1, 64)
    expected = a / np.sqrt((a * a).mean(1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(rms_norm_k(a, w), expected, rtol=1e-4, atol=1e-5)
    check_timing(rms_norm_k, a, w)


@nki.jit
def where_k(a, b):
    out = nl.ndarray((2, 128, 32), a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    cond = nl.greater(x, y, dtype=nl.uint8)
    nl.store(out[0], nl.where(cond, x, y))
    nl.store(out[1], nl.where(cond, x, 0.0))
    return out


def test_where(rng):
    a, b = f32(rng, 128, 32), f32(rng, 128, 32)
    out = where_k(a, b)
    np.testing.assert_array_equal(out[0], np.where(a > b, a, b))
    np.testing.assert_array_equal(out[1], np.where(a > b, a, 0.0))


# ---- copies and casts -----------------------------------------------------------------------

@nki.jit
def cast_k(a):
    out_bf = nl.ndarray(a.shape, nl.bfloat16, buffer=nl.shared_hbm)
    out_back = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    bf = nl.copy(t, dtype=nl.bfloat16)
    nl.store(out_bf, bf)
    nl.store(out_back, nl.copy(bf, dtype=nl.float32))
    return out_bf, out_back


def test_copy_casts_bf16(rng):
    a = f32(rng, 128, 64, lo=-100, hi=100)
    bf, back = cast_k(a)
    assert bf.dtype == ml_dtypes.bfloat16
    expected = a.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(bf.astype(np.float32), expected.astype(np.float32))
    np.testing.assert_array_equal(back, expected.astype(np.float32))


def test_bf16_inputs_compute(rng):
    a = f32(rng, 128, 64).astype(ml_dtypes.bfloat16)
    out = unary(a, nl.exp)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(out.astype(np.float32), np.exp(a.astype(np.float32)), rtol=2e-2, atol=2e-2)


# ---- tensor views ---------------------------------------------------------------------------

@nki.jit
def views_k(a, row):
    """a: [128, 64]; row: [1, 32]."""
    out = nl.ndarray((6, 128, 32), a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0], nl.load(a.slice(1, 32, 64)))                        # a[:, 32:64]
    nl.store(out[1], nl.load(a.reshape((128, 2, 32)).select(1, 0)))      # a[:, 0:32]
    t = nl.load(a.reshape((128, 32, 2)))                                 # [128, 32, 2]
    nl.store(out[2], nl.copy(t.permute(0, 2, 1)).reshape((128, 64)).slice(1, 0, 32))  # even columns
    nl.store(out[3], nl.load(row.broadcast(0, 128)))                     # the row on all partitions
    nl.store(out[4], nl.load(a.ap([[64, 128], [2, 32]], offset=1)))      # odd columns
    tile = nl.load(a)
    nl.store(out[5], tile.ap([[1, 128], [1, 32]], offset=16))             # columns 16:48 of the tile
    return out


def test_tensor_views(rng):
    a, row = f32(rng, 128, 64), f32(rng, 1, 32)
    out = views_k(a, row)
    np.testing.assert_array_equal(out[0], a[:, 32:64])
    np.testing.assert_array_equal(out[1], a[:, 0:32])
    np.testing.assert_array_equal(out[2], a[:, 0::2])
    np.testing.assert_array_equal(out[3], np.broadcast_to(row, (128, 32)))
    np.testing.assert_array_equal(out[4], a[:, 1::2])
    np.testing.assert_array_equal(out[5], a[:, 16:48])


def test_tile_indexing_and_assignment(rng):
    @nki.jit
    def pack(a):
        out = nl.ndarray((128, 64), a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 2, 32), nl.float32, buffer=nl.sbuf)
        t[:, 0, :] = nl.load(a[:, 32:64])
        t[:, 1, :] = nl.load(a[:, 0:32])
        t[0:64, 1, 0:8] = 7.0
        nl.store(out, t.reshape((128, 64)))
        return out
    a = f32(rng, 128, 64)
    expected = np.concatenate([a[:, 32:], a[:, :32]], axis=1)
    expected[0:64, 32:40] = 7.0
    np.testing.assert_array_equal(pack(a), expected)


def test_views_of_tiles(rng):
    @nki.jit
    def tile_views(a):
        out = nl.ndarray((3, 128, 32), a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)                                        # [128, 64]
        nl.store(out[0], nl.add(t[:, 32:64], t[:, 0:1].broadcast(1, 32)))   # a column broadcast on the free axis
        nl.store(out[1], t.expand_dim(1).squeeze_dim(1)[:, 0:32])
        nl.store(out[2], t[:, 0:64:2])                        # a strided slice of a tile
        return out
    a = f32(rng, 128, 64)
    out = tile_views(a)
    np.testing.assert_allclose(out[0], a[:, 32:] + a[:, :1], rtol=1e-6)
    np.testing.assert_array_equal(out[1], a[:, :32])
    np.testing.assert_array_equal(out[2], a[:, 0::2])


def test_hbm_permute_load(rng):
    @nki.jit
    def transposed_load(a):
        out = nl.ndarray((a.shape[1], a.shape[0]), a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a.permute(1, 0)))
        return out
    a = f32(rng, 128, 64)
    np.testing.assert_array_equal(transposed_load(a), a.T)


def test_assignment_keeps_a_named_value(rng):
    """t[...] = x copies x; x stays usable (only a temporary is folded into its producer)."""
    @nki.jit
    def keep(a):
        out = nl.ndarray((2, 128, 64), a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 64), a.dtype, buffer=nl.sbuf)
        x = nl.exp(nl.load(a))
        t[...] = x
        y = nl.multiply(x, 2.0)
        nl.store(out[0], t)
        nl.store(out[1], y)
        return out
    a = f32(rng, 128, 64)
    out = keep(a)
    np.testing.assert_allclose(out[0], np.exp(a), rtol=1e-3)
    np.testing.assert_allclose(out[1], 2 * np.exp(a), rtol=1e-3)


def test_psum_tiles_in_a_loop(rng, check_timing):
    """16 PSUM tiles of a loop, one live at a time: the 8 banks are reused."""
    @nki.jit
    def per_step(a, b):
        out = nl.ndarray((16, 128, 64), nl.float32, buffer=nl.shared_hbm)
        x, y = nl.load(a), nl.load(b)
        for i in nl.affine_range(16):
            acc = nl.zeros((128, 64), nl.float32, buffer=nl.psum)
            acc += nl.matmul(x, y, transpose_x=True)
            nl.store(out[i], nl.multiply(acc, float(i)))
        return out
    a, b = f32(rng, 128, 128), f32(rng, 128, 64)
    np.testing.assert_allclose(per_step(a, b), np.arange(16)[:, None, None] * (a.T @ b), rtol=1e-4, atol=1e-4)
    check_timing(per_step, a, b)


def test_psum_zeros_read_before_any_matmul():
    @nki.jit
    def zeros_out(a):
        out = nl.ndarray((128, 512), nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.zeros((128, 512), nl.float32, buffer=nl.psum))
        return out
    np.testing.assert_array_equal(zeros_out(np.zeros((1, 1), np.float32)), 0)


@pytest.mark.parametrize("dtype", [nl.float8_e4m3, nl.int32, nl.float16])
def test_copy_casts(dtype, rng):
    @nki.jit
    def round_trip(a):
        out = nl.ndarray(a.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(out, nl.copy(nl.copy(nl.load(a), dtype=dtype), dtype=nl.float32))
        return out
    a = f32(rng, 128, 32, lo=-20, hi=20)
    expected = np.rint(a) if dtype == nl.int32 else a.astype(dtype.numpy).astype(np.float32)
    np.testing.assert_array_equal(round_trip(a), expected)


def test_integer_arithmetic(rng):
    @nki.jit
    def int_ops(a):
        out = nl.ndarray(a.shape, nl.int32, buffer=nl.shared_hbm)
        sums = nl.ndarray((a.shape[0], 1), nl.int32, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(out, nl.add(t, 3))
        nl.store(sums, nl.sum(t, axis=1))
        return out, sums
    a = rng.integers(-100, 100, size=(128, 16)).astype(np.int32)
    out, sums = int_ops(a)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a + 3)
    np.testing.assert_array_equal(sums, a.sum(1, keepdims=True))


def test_returns_a_dict_and_lists(rng):
    @nki.jit
    def two_outputs(a):
        pos = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        neg = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.store(pos, t)
        nl.store(neg, nl.negative(t))
        return {"pos": pos, "neg": [neg]}
    a = f32(rng, 64, 8)
    r = two_outputs(a)
    np.testing.assert_array_equal(r["pos"], a)
    np.testing.assert_array_equal(r["neg"][0], -a)
