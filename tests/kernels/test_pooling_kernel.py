"""The pooling kernel builders (max / avg pool2d and their backwards on Vector + GpSimd) against
torch on the CPU. Each case builds the kernel with build/bin/kernel_runner (--tasm) and runs it with
`trnsim run` (values from the interpreter). Inputs are rounded to the kernel's dtype first. Max pooling
is exact (values and the int32 flat indices, first occurrence on ties); average pooling sums in fp32
(kh-major like torch) and divides once; the backwards accumulate in fp32 and round once."""
import random
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from elementwise_test import run_kernel, runner, shape_text

TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ULP = {"fp32": 2.0**-22, "bf16": 2.0**-7, "fp16": 2.0**-10}


def pool_cases():
    """Randomised shapes (a fixed seed): ragged planes (N*C not a multiple of 128, more than one
    plane tile), odd sizes, kernel 2 / 3, stride 1 / 2 / 3, padding 0 / 1, ceil_mode."""
    rng = random.Random(7)
    cases = []
    for k, stride, padding, ceil in [(2, 2, 0, False), (3, 2, 1, False), (3, 1, 1, False), (3, 3, 0, True),
                                     (2, 1, 1, True), (3, 2, 0, True), (3, 2, 1, True), (2, 3, 1, False)]:
        n, c = rng.randint(1, 3), rng.randint(1, 70)
        h, w = rng.randint(k + 1, 17), rng.randint(k + 1, 17)
        cases.append((n, c, h, w, k, stride, padding, ceil))
    cases.append((2, 100, 9, 11, 3, 2, 1, False))  # 200 planes: two plane tiles
    return cases


def inputs(shape, dtype, seed, ties=False):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=shape).astype(np.float32) if ties else rng.standard_normal(shape).astype(np.float32)
    return torch.from_numpy(x).to(TORCH[dtype]).float()


def params_of(x, k, stride, padding, ceil, dtype, **extra):
    p = {"input": shape_text(x.shape), "kernel": k, "stride": stride, "padding": padding, "ceil_mode": int(ceil),
         "dtype": dtype}
    p.update(extra)
    return p


def close(got, expected, dtype, scale=None):
    got = torch.from_numpy(np.asarray(got, dtype=np.float32)).double()
    expected = expected.double()
    assert got.shape == expected.shape
    scale = expected.abs() if scale is None else scale
    tol = 2 * ULP[dtype] * scale + 1e-6
    excess = (got - expected).abs() - tol
    assert float(excess.max()) <= 0, f"max excess {float(excess.max())}"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("n,c,h,w,k,stride,padding,ceil", pool_cases())
def test_max_pool2d_values_and_indices(run_trnsim, tmp_path, n, c, h, w, k, stride, padding, ceil, dtype):
    x = inputs((n, c, h, w), dtype, n * 1000 + c, ties=True)
    (out, idx) = run_kernel(run_trnsim, tmp_path, "max_pool2d", params_of(x, k, stride, padding, ceil, dtype),
                            {"input": x.numpy()}, ["output", "indices"])
    y, i = F.max_pool2d(x.to(TORCH[dtype]), k, stride, padding, ceil_mode=ceil, return_indices=True)
    assert np.array_equal(np.asarray(out, dtype=np.float32), y.float().numpy())
    assert np.asarray(idx).dtype == np.int32
    assert np.array_equal(np.asarray(idx).astype(np.int64), i.numpy())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("n,c,h,w,k,stride,padding,ceil", pool_cases())
def test_max_pool2d_backward(run_trnsim, tmp_path, n, c, h, w, k, stride, padding, ceil, dtype):
    x = inputs((n, c, h, w), dtype, c, ties=True)
    y, i = F.max_pool2d(x, k, stride, padding, ceil_mode=ceil, return_indices=True)
    go = inputs(tuple(y.shape), dtype, 5)
    expected = torch.ops.aten.max_pool2d_with_indices_backward(go.double(), x.double(), [k, k], [stride, stride],
                                                               [padding, padding], [1, 1], ceil, i)
    (gi,) = run_kernel(run_trnsim, tmp_path, "max_pool2d", params_of(x, k, stride, padding, ceil, dtype, backward=1),
                       {"grad_output": go.numpy(), "indices": i.numpy().astype(np.int32)}, ["grad_input"])
    magnitude = torch.ops.aten.max_pool2d_with_indices_backward(go.abs().double(), x.double(), [k, k],
                                                                [stride, stride], [padding, padding], [1, 1], ceil, i)
    close(gi, expected, dtype, magnitude)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("n,c,h,w,k,stride,padding,ceil", pool_cases())
def test_avg_pool2d_forward_backward(run_trnsim, tmp_path, n, c, h, w, k, stride, padding, ceil, include_pad, dtype):
    x = inputs((n, c, h, w), dtype, h * 31 + w)
    args = (k, stride, padding, ceil, include_pad)
    extra = {"count_include_pad": int(include_pad)}
    (out,) = run_kernel(run_trnsim, tmp_path, "avg_pool2d", params_of(x, k, stride, padding, ceil, dtype, **extra),
                        {"input": x.numpy()}, ["output"])
    y = F.avg_pool2d(x.double(), *args)
    close(out, y, dtype, F.avg_pool2d(x.abs().double(), *args))
    go = inputs(tuple(y.shape), dtype, 9)
    expected = torch.ops.aten.avg_pool2d_backward(go.double(), x.double(), [k, k], [stride, stride],
                                                  [padding, padding], ceil, include_pad, None)
    magnitude = torch.ops.aten.avg_pool2d_backward(go.abs().double(), x.double(), [k, k], [stride, stride],
                                                   [padding, padding], ceil, include_pad, None)
    (tmp_path / "bwd").mkdir()
    (gi,) = run_kernel(run_trnsim, tmp_path / "bwd", "avg_pool2d",
                       params_of(x, k, stride, padding, ceil, dtype, backward=1, **extra), {"grad_output": go.numpy()},
                       ["grad_input"])
    close(gi, expected, dtype, magnitude)


def test_max_pool_dilation_rectangular_and_fp16(run_trnsim, tmp_path):
    x = inputs((2, 5, 13, 12), "fp16", 3, ties=True)
    params = {"input": "2x5x13x12", "kernel": "3x2", "stride": "2x1", "padding": "1x1", "dilation": "2x3",
              "dtype": "fp16"}
    (out, idx) = run_kernel(run_trnsim, tmp_path, "max_pool2d", params, {"input": x.numpy()}, ["output", "indices"])
    y, i = F.max_pool2d(x.half(), (3, 2), (2, 1), (1, 1), dilation=(2, 3), return_indices=True)
    assert np.array_equal(np.asarray(out, dtype=np.float32), y.float().numpy())
    assert np.array_equal(np.asarray(idx).astype(np.int64), i.numpy())


def test_avg_pool_divisor_override(run_trnsim, tmp_path):
    x = inputs((1, 7, 10, 9), "fp32", 4)
    params = params_of(x, 3, 2, 1, False, "fp32", divisor_override=5)
    (out,) = run_kernel(run_trnsim, tmp_path, "avg_pool2d", params, {"input": x.numpy()}, ["output"])
    close(out, F.avg_pool2d(x.double(), 3, 2, 1, divisor_override=5), "fp32")


def test_large_plane_in_row_bands(run_trnsim, tmp_path):
    # 2 planes of 200x300: the forward splits the output rows into bands (each band's input rows,
    # the overlap loaded twice, -inf rows only at the first band).
    x = inputs((1, 2, 200, 300), "bf16", 11, ties=True)
    (out, idx) = run_kernel(run_trnsim, tmp_path, "max_pool2d", params_of(x, 3, 2, 1, False, "bf16"),
                            {"input": x.numpy()}, ["output", "indices"])
    y, i = F.max_pool2d(x.bfloat16(), 3, 2, 1, return_indices=True)
    assert np.array_equal(np.asarray(out, dtype=np.float32), y.float().numpy())
    assert np.array_equal(np.asarray(idx).astype(np.int64), i.numpy())


@pytest.mark.parametrize("args", [["kernel=3", "padding=2"], ["kernel=4", "input=1x1x5x3"], ["dtype=int32"]])
def test_unsupported_shapes_are_rejected(tmp_path, args):
    params = {"input": "1x2x8x8", "kernel": "3", "padding": "0", "dtype": "bf16"}
    for a in args:
        key, value = a.split("=")
        params[key] = value
    result = subprocess.run([str(runner()), "max_pool2d", *[f"{k}={v}" for k, v in params.items()], "--tasm",
                             str(tmp_path / "k.tasm")], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "pool" in result.stderr


def bench(kernel, *args):
    out = subprocess.run([str(runner()), kernel, *args, "--bench"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    import json
    return json.loads(out.stdout)


def test_resnet_stem_pool_splits_across_cores_and_uses_both_engines():
    shape = ["input=8x64x56x56", "kernel=3", "stride=2", "padding=1", "dtype=bf16"]
    one, two = bench("max_pool2d", *shape), bench("max_pool2d", *shape, "cores=2")
    assert two["total_ns"] < 0.6 * one["total_ns"], (one["total_ns"], two["total_ns"])
    # Each channel plane loads with one descriptor per partition that walks the padded SBUF rows (56 x 2 B
    # chunks, above core.dma.min_chunk_bytes), so the DMA engines are not the bound: the windows' compute
    # is, split evenly between the Vector and GpSimd engines.
    for run in (one, bench("max_pool2d", *shape, "backward=1")):
        assert run["core0.dma_busy"] < 0.5, run
        assert run["core0.vector_busy"] > 0.6 and run["core0.gpsimd_busy"] > 0.6, run
        assert 0.7 < run["core0.vector_busy"] / run["core0.gpsimd_busy"] < 1.4, run


# Planes whose backward does not fit SBUF whole (224x224 and larger): bands of output rows, the rows
# two bands' windows share carried into the next band (3x3 stride 2 / 1), none (2x2 stride 2) or gap
# rows no window reaches (2x2 stride 3: zero gradient).
@pytest.mark.parametrize("shape,k,stride,padding,ceil", [((1, 3, 224, 224), 2, 2, 0, False),
                                                         ((1, 2, 230, 226), 3, 2, 1, False),
                                                         ((1, 2, 226, 230), 3, 1, 1, True),
                                                         ((1, 2, 229, 231), 2, 3, 1, True)])
def test_backward_of_large_planes_in_row_bands(run_trnsim, tmp_path, shape, k, stride, padding, ceil):
    x = inputs(shape, "fp32", 17, ties=True)
    y, i = F.max_pool2d(x, k, stride, padding, ceil_mode=ceil, return_indices=True)
    go = inputs(tuple(y.shape), "fp32", 5)
    args = ([k, k], [stride, stride], [padding, padding])
    (gi,) = run_kernel(run_trnsim, tmp_path, "max_pool2d",
                       params_of(x, k, stride, padding, ceil, "fp32", backward=1),
                       {"grad_output": go.numpy(), "indices": i.numpy().astype(np.int32)}, ["grad_input"])
    expected = torch.ops.aten.max_pool2d_with_indices_backward(go.double(), x.double(), *args, [1, 1], ceil, i)
    magnitude = torch.ops.aten.max_pool2d_with_indices_backward(go.abs().double(), x.double(), *args, [1, 1], ceil, i)
    close(gi, expected, "fp32", magnitude)
    (tmp_path / "avg").mkdir()
    (gi,) = run_kernel(run_trnsim, tmp_path / "avg", "avg_pool2d",
                       params_of(x, k, stride, padding, ceil, "fp32", backward=1, count_include_pad=0),
                       {"grad_output": go.numpy()}, ["grad_input"])
    expected = torch.ops.aten.avg_pool2d_backward(go.double(), x.double(), *args, ceil, False, None)
    magnitude = torch.ops.aten.avg_pool2d_backward(go.abs().double(), x.double(), *args, ceil, False, None)
    close(gi, expected, "fp32", magnitude)
