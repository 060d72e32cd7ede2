"""cumsum / cumprod (kernels/scan.h scan_program) and prod over the last dim (prod_program) against
PyTorch on the CPU.

Each case builds the kernel with build/bin/kernel_runner (--tasm), runs it with `trnsim run` and
compares with torch on the values the kernel sees (bf16 inputs rounded first):
 - bf16 cumsum / cumprod: torch's CPU kernel accumulates in fp32 in element order and rounds each
   output once, as the kernel does, so the results must be equal bit for bit, except for few long
   rows (< 64 rows of >= 8192 columns), which the kernel spreads over the partitions (a prefix op a
   local scan): those within one bf16 rounding (2^-8 relative) of the fp32 bound below;
 - fp32 cumsum: torch accumulates in double, the kernel in fp32, so the bound is the fp32 rounding
   error of a running sum: 1e-5 of the running sum of magnitudes (the worst case is n * 2^-24 of it,
   4e-3 at n = 70000; random rounding errors grow like sqrt(n) * 2^-24 ~ 1.6e-5 at most), plus 1e-6
   relative;
 - prod / fp32 cumprod: 1e-3 relative against the float64 product (n * 2^-24 = 4e-4 at n = 5000);
 - int32 cumsum: exact (every partial sum is far inside +-2^24).
"""
import numpy as np
import pytest
import torch

from elementwise_test import TORCH, rounded, run_kernel, shape_text

RNG = np.random.default_rng(1010)

SUM_SHAPES = [(1, 1), (1, 7), (1, 70000), (127, 513), (129, 5000), (300, 7), (300, 513), (127, 1), (129, 70000),
              (300, 5000),
              # spread over the partitions: a tail of cols % 128, several 128 x w blocks per row (fp32: 4096
              # columns per partition per block, bf16: 8192), the split by rows
              (3, 20000), (1, 600000), (2, 1100000), (63, 8192),
              # short rows packed several to a partition (blocks of 128 x k rows, then the rest)
              (3000, 7), (100000, 7), (20000, 300),
              # full row tiles, then the 44 rows left spread
              (300, 9000)]


def spread_from(shape):
    """The first row the kernel spreads over the partitions (rows of >= 8192 columns: all of < 64
    rows, or the < 64 rows after the full 128-row tiles)."""
    rows, cols = shape
    if cols < 8192:
        return rows
    rest = rows if rows < 64 else rows % 128
    return rows - rest if rest < 64 else rows


def spreads(shape):
    return spread_from(shape) < shape[0]


def assert_running_sum_close(y, xt, expected, dtype):
    magnitude = torch.cumsum(xt.abs().double(), dim=1).numpy()
    rel = 2.0 ** -8 if dtype == "bf16" else 1e-6
    err = np.abs(np.asarray(y, np.float64) - expected)
    assert np.all(err <= rel * np.abs(expected) + 1e-5 * magnitude), err.max()


def scan(run_trnsim, tmp_path, x, op, dtype, out_dtype=None):
    params = {"shape": shape_text(x.shape), "op": op, "dtype": dtype, "out_dtype": out_dtype or dtype}
    (y,) = run_kernel(run_trnsim, tmp_path, "scan", params, {"x": x}, ["y"])
    return np.asarray(y)


@pytest.mark.parametrize("shape", SUM_SHAPES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_cumsum(run_trnsim, tmp_path, shape, dtype):
    if dtype == "fp32" and shape[0] * shape[1] > 2_000_000 and not spreads(shape):
        pytest.skip("the bf16 case of this shape covers the chunking; fp32 doubles the run time")
    x = RNG.standard_normal(shape).astype(np.float32)
    y = scan(run_trnsim, tmp_path, x, "sum", dtype)
    xt = rounded(x, dtype)
    assert y.shape == shape
    if dtype == "bf16":
        seq = spread_from(shape)  # rows scanned in element order: torch's bits exactly
        expected = torch.cumsum(xt[:seq].to(torch.bfloat16), dim=1).float().numpy()
        np.testing.assert_array_equal(np.asarray(y[:seq], np.float32), expected)
        if seq == shape[0]:
            return
        y, xt = y[seq:], xt[seq:]
    assert_running_sum_close(y, xt, torch.cumsum(xt.double(), dim=1).numpy(), dtype)


def test_cumsum_bf16_input_fp32_output_rounds_nothing(run_trnsim, tmp_path):
    # A bf16 input summed into an fp32 output: the fp32 running sums themselves (torch's
    # x.float().cumsum order: sequential, fp32).
    x = RNG.standard_normal((129, 5000)).astype(np.float32)
    y = scan(run_trnsim, tmp_path, x, "sum", "bf16", "fp32")
    xt = rounded(x, "bf16")
    running = np.zeros(129, np.float32)
    expected = np.empty_like(xt.numpy())
    for j in range(5000):
        running = running + xt.numpy()[:, j]
        expected[:, j] = running
    np.testing.assert_array_equal(y, expected)


def test_cumsum_int32_exact(run_trnsim, tmp_path):
    x = RNG.integers(-1000, 1000, (300, 5000)).astype(np.int32)  # partial sums within +-5e6 < 2^24
    y = scan(run_trnsim, tmp_path, x, "sum", "int32")
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.cumsum(x.astype(np.int64), axis=1))


def test_cumsum_specials(run_trnsim, tmp_path):
    x = RNG.standard_normal((4, 600)).astype(np.float32)
    x[0, 0] = -0.0  # torch starts from +0, so -0.0 sums to +0.0
    x[1, 10] = np.nan
    x[2, 300] = np.inf
    x[3, 5], x[3, 500] = np.inf, -np.inf
    y = scan(run_trnsim, tmp_path, x, "sum", "fp32")
    expected = torch.cumsum(torch.from_numpy(x), dim=1).numpy()
    assert np.signbit(y[0, 0]) == np.signbit(expected[0, 0])
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(y[finite], expected[finite], rtol=1e-5, atol=1e-4)


def near_one(shape):
    """Factors whose products stay in range over 70000 columns: exp(N(0, 0.01)), random signs."""
    return (np.exp(RNG.standard_normal(shape) * 0.01) * RNG.choice([-1.0, 1.0], shape)).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, 7), (127, 513), (129, 5000), (300, 7), (1, 70000), (3, 600000)])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_cumprod(run_trnsim, tmp_path, shape, dtype):
    x = near_one(shape)
    y = scan(run_trnsim, tmp_path, x, "prod", dtype)
    xt = rounded(x, dtype)
    if dtype == "bf16" and not spreads(shape):
        expected = torch.cumprod(xt.to(torch.bfloat16), dim=1).float().numpy()
        np.testing.assert_array_equal(np.asarray(y, np.float32), expected)
        return
    expected = torch.cumprod(xt.double(), dim=1).numpy()
    rel = (1e-3 if shape[1] > 5000 else 4e-4) + (2.0 ** -8 if dtype == "bf16" else 0)
    np.testing.assert_allclose(y, expected, rtol=rel, atol=0)


PROD_SHAPES = [(1, 1), (1, 7), (1, 70000), (3, 5000), (63, 700), (127, 513), (129, 5000), (300, 7), (64, 600),
               (2, 200000), (3000, 7), (100000, 7), (20000, 300)]


@pytest.mark.parametrize("shape", PROD_SHAPES)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_prod(run_trnsim, tmp_path, shape, dtype):
    x = near_one(shape)
    (y,) = run_kernel(run_trnsim, tmp_path, "prod", {"shape": shape_text(shape), "dtype": dtype}, {"x": x}, ["y"])
    xt = rounded(x, dtype)
    exact = torch.prod(xt.double(), dim=1, keepdim=True)
    assert y.shape == (shape[0], 1)
    out = np.asarray(y, np.float64)
    # fp32: the product's rounding error; bf16: one rounding of the fp32 product (2^-8 relative
    # covers a last-bit difference of rounding the fp32 product rather than the exact one).
    rel = 2.0 ** -8 if dtype == "bf16" else (1e-3 if shape[1] > 5000 else 4e-4)
    np.testing.assert_allclose(out, exact.numpy(), rtol=rel, atol=0)


@pytest.mark.parametrize("shape", [(6, 300), (1, 1000)])
def test_prod_specials_propagate_as_ieee(run_trnsim, tmp_path, shape):
    # Rows layout: a NaN, an inf, a zero, inf * 0 (NaN), a -0.0 factor; spread layout (1 x 1000): an
    # inf in the [1, 1000 % 128] tail.
    x = near_one(shape)
    if shape[0] > 1:
        x[0, 5] = np.nan
        x[1, 100] = np.inf
        x[2, 299] = 0.0
        x[3, 1], x[3, 2] = np.inf, 0.0
        x[4, 7] = -0.0
    else:
        x[0, 999] = np.inf
    (y,) = run_kernel(run_trnsim, tmp_path, "prod", {"shape": shape_text(shape), "dtype": "fp32"}, {"x": x}, ["y"])
    expected = torch.prod(torch.from_numpy(x).double(), dim=1, keepdim=True).numpy()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(y[finite], expected[finite], rtol=4e-4)
    numbers = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(y[numbers]), np.signbit(expected[numbers]))


@pytest.mark.parametrize("config", ["trn1", "trn3"])
def test_other_generations(run_trnsim, tmp_path, config):
    for sub in ("scan", "prod"):
        (tmp_path / sub).mkdir()
    x = near_one((3, 20000))
    xt = rounded(x, "fp32")
    (y,) = run_kernel(run_trnsim, tmp_path / "scan", "scan", {"shape": "3x20000", "op": "sum", "dtype": "fp32",
                                                              "config": config}, {"x": x}, ["y"])
    assert_running_sum_close(y, xt, torch.cumsum(xt.double(), dim=1).numpy(), "fp32")
    (p,) = run_kernel(run_trnsim, tmp_path / "prod", "prod", {"shape": "3x20000", "dtype": "fp32", "config": config},
                      {"x": x}, ["y"])
    np.testing.assert_allclose(p, torch.prod(xt.double(), dim=1, keepdim=True).numpy(), rtol=1e-3)
