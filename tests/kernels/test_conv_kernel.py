"""The conv2d kernel builder (implicit GEMM on the Tensor engine) against torch.nn.functional.conv2d
on the CPU. Each case builds the kernel with build/bin/kernel_runner (--tasm) and runs it with
`trnsim run` (values from the interpreter). Inputs are rounded to the kernel's dtype first, so both
sides multiply the same numbers; the difference is fp32 accumulation order (a few K ulps of the
magnitude sum |x| * |w|) plus one rounding of a bf16 output."""
import numpy as np
import pytest
import torch

from elementwise_test import run_kernel, shape_text

TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16}


def rounded_randn(seed, dtype):
    """rand(*shape): standard normal draws of one generator, rounded to the kernel's dtype, as fp32 tensors."""
    rng = np.random.default_rng(seed)
    return lambda *shape: torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(TORCH[dtype]).float()


def run_conv(run_trnsim, tmp_path, n, c, h, w, o, k, stride=1, padding=0, dilation=1, bias=False, dtype="bf16",
             out_dtype="fp32", seed=0, groups=1):
    kh, kw = (k, k) if isinstance(k, int) else k
    rand = rounded_randn(seed, dtype)
    x, wt = rand(n, c, h, w), rand(o, c // groups, kh, kw)
    inputs = {"input": x.numpy(), "weight": wt.numpy()}
    b = None
    if bias:
        b = rand(o)
        inputs["bias"] = b.numpy()
    params = {"input": shape_text((n, c, h, w)), "weight": shape_text((o, c // groups, kh, kw)), "stride": stride,
              "padding": padding, "dilation": dilation, "has_bias": int(bias), "dtype": dtype, "out_dtype": out_dtype,
              "groups": groups}
    (got,) = run_kernel(run_trnsim, tmp_path, "conv2d", params, inputs, ["output"])
    got = torch.from_numpy(np.asarray(got, dtype=np.float32))
    expected = torch.nn.functional.conv2d(x.double(), wt.double(), b.double() if bias else None, stride=stride,
                                          padding=padding, dilation=dilation, groups=groups)
    magnitude = torch.nn.functional.conv2d(x.abs().double(), wt.abs().double(), b.abs().double() if bias else None,
                                           stride=stride, padding=padding, dilation=dilation, groups=groups)
    tolerance = 4 * (c // groups * kh * kw + 1) * 2.0**-24 * magnitude + 1e-6
    if out_dtype == "bf16":
        tolerance = tolerance + expected.abs() * 2.0**-8
    assert got.shape == expected.shape
    excess = (got.double() - expected).abs() - tolerance
    assert float(excess.max()) <= 0, f"max excess {float(excess.max())}"


# (n, c, h, w, o, k, stride, padding, bias, dtype): odd sizes, the replica paths (C <= 32, <= 64),
# multi-chunk C > 128, O > 128, strides 1/2, padding 0/1/2, kernels 1x1/3x3/5x5.
CASES = [
    (1, 3, 7, 9, 5, 3, 1, 1, True, "bf16"),
    (2, 16, 11, 10, 20, 3, 2, 1, False, "bf16"),
    (2, 64, 8, 8, 64, 3, 1, 1, True, "bf16"),
    (1, 40, 9, 13, 7, 5, 1, 2, True, "fp32"),
    (3, 130, 6, 5, 140, 3, 1, 0, True, "bf16"),
    (2, 33, 12, 12, 9, 1, 1, 0, False, "fp32"),
    (1, 8, 13, 13, 4, 1, 2, 2, True, "bf16"),
    (2, 24, 10, 7, 129, 5, 2, 2, False, "fp32"),
    (1, 200, 5, 5, 16, (3, 1), 1, 1, True, "bf16"),
]


@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias,dtype", CASES)
def test_conv2d_matches_torch(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias, dtype):
    run_conv(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias=bias, dtype=dtype)


def test_bf16_output_and_dilation(run_trnsim, tmp_path):
    run_conv(run_trnsim, tmp_path, 2, 48, 12, 11, 32, 3, stride=1, padding=2, dilation=2, bias=True, out_dtype="bf16")


def test_resnet_like_batch_blocks(run_trnsim, tmp_path):
    # Several images per block and several blocks (double-buffered input, PSUM bank reuse).
    run_conv(run_trnsim, tmp_path, 8, 64, 14, 14, 64, 3, stride=1, padding=1, bias=True)


def test_groups_must_divide_channels(tmp_path):
    import subprocess
    from elementwise_test import runner
    for args in (["input=1x4x5x5", "weight=6x2x3x3", "groups=3"], ["input=1x6x5x5", "weight=4x2x3x3", "groups=3"]):
        for backward in ("0", "1"):
            result = subprocess.run([str(runner()), "conv2d", *args, f"backward={backward}", "--tasm",
                                     str(tmp_path / "k.tasm")], capture_output=True, text=True, timeout=60)
            assert result.returncode != 0 and "groups must be >= 1 and divide" in result.stderr


# (n, c, h, w, o, k, stride, padding, dilation, groups, bias, dtype): grouped convs are dense convs over
# blocks of groups that fit 128 partitions (block-diagonal weights): groups 2 (ResNeXt-like), one
# block of several groups, several blocks, a group wider than 128 channels, depthwise (MobileNet /
# ConvNeXt: groups == C == O, 3x3 and 7x7) and depthwise with a channel multiplier (O = 2C).
GROUPED_CASES = [
    (2, 16, 9, 10, 24, 3, 1, 1, 1, 2, True, "bf16"),
    (1, 40, 11, 7, 20, 3, 2, 1, 1, 4, False, "fp32"),
    (2, 64, 8, 8, 64, 3, 1, 1, 1, 64, True, "bf16"),
    (1, 200, 7, 9, 200, 3, 2, 1, 1, 200, False, "bf16"),
    (1, 96, 10, 10, 96, 7, 1, 3, 1, 96, True, "bf16"),
    (2, 300, 5, 6, 150, 1, 1, 0, 1, 2, True, "bf16"),
    (1, 24, 9, 9, 48, 3, 1, 2, 2, 24, False, "fp32"),
    (1, 384, 6, 6, 384, 3, 1, 1, 1, 3, False, "bf16"),
]


# Depthwise (groups == C == O) runs with the N*C planes on partitions (kernels/depthwise_conv.h): ragged
# plane tiles whose channels wrap (N*C not a multiple of 128 or of C), stride 2 with odd sizes, dilation,
# C > 128, padding beyond k - 1 (dX crops dY), 1x1, 7x7, small planes (several kernel rows per grad_weight
# instruction), planes of several pixel tiles (the forward shares them between the PE, Scalar + GpSimd and
# Vector), fp32 and bf16 outputs.
DEPTHWISE_CASES = [
    (3, 48, 9, 11, 48, 3, 1, 1, 1, 48, True, "bf16"),
    (2, 40, 13, 12, 40, 3, 2, 1, 1, 40, True, "bf16"),
    (2, 72, 10, 9, 72, 3, 1, 2, 2, 72, False, "fp32"),
    (1, 160, 11, 11, 160, 5, 2, 2, 1, 160, True, "bf16"),
    (2, 24, 8, 8, 24, 3, 1, 3, 1, 24, True, "bf16"),
    (5, 7, 6, 5, 7, 1, 1, 0, 1, 7, True, "fp32"),
    (1, 130, 5, 7, 130, 7, 1, 3, 1, 130, False, "bf16"),
    (2, 33, 12, 7, 33, 3, 2, 0, 2, 33, True, "fp32"),
    (3, 20, 5, 6, 20, 3, 1, 1, 1, 20, True, "bf16"),
    (2, 36, 7, 7, 36, 5, 1, 4, 2, 36, True, "fp32"),
    (2, 40, 48, 45, 40, 3, 1, 1, 1, 40, True, "bf16"),
    (1, 24, 50, 50, 24, 5, 2, 4, 2, 24, True, "fp32"),
    (1, 24, 50, 50, 24, 5, 1, 4, 2, 24, False, "bf16"),
]


@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,dilation,groups,bias,dtype", DEPTHWISE_CASES)
def test_depthwise_conv2d_forward_and_backward(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, dilation,
                                               groups, bias, dtype):
    run_conv(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, dilation, bias=bias, dtype=dtype, groups=groups)
    run_conv_backward(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, dilation, bias=bias, dtype=dtype,
                      groups=groups)


def test_depthwise_bf16_outputs(run_trnsim, tmp_path):
    run_conv(run_trnsim, tmp_path, 2, 64, 9, 9, 64, 3, 1, 1, 1, bias=True, out_dtype="bf16", groups=64)
    run_conv_backward(run_trnsim, tmp_path, 2, 64, 9, 9, 64, 3, 1, 1, 1, bias=True, out_dtype="bf16", groups=64)


@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,dilation,groups,bias,dtype", GROUPED_CASES)
def test_grouped_conv2d_matches_torch(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, dilation, groups, bias,
                                      dtype):
    run_conv(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, dilation, bias=bias, dtype=dtype, groups=groups)


def test_large_image_in_row_bands_and_wide_rows(run_trnsim, tmp_path):
    # 200x200 images do not fit SBUF whole (double-buffered, staged): bands of output rows with
    # zero rows re-set per band; 600-wide rows split a row over two PSUM tiles.
    run_conv(run_trnsim, tmp_path, 1, 3, 200, 200, 4, 3, stride=1, padding=1, bias=True)
    (tmp_path / "wide").mkdir()
    run_conv(run_trnsim, tmp_path / "wide", 1, 2, 4, 600, 3, 3, stride=1, padding=1)


RANDOM = np.random.default_rng(2024)
RANDOM_CASES = [
    (int(RANDOM.integers(1, 4)), int(RANDOM.integers(1, 150)), int(RANDOM.integers(5, 16)), int(RANDOM.integers(5, 16)),
     int(RANDOM.integers(1, 150)), int(RANDOM.choice([1, 3, 5])), int(RANDOM.integers(1, 3)),
     int(RANDOM.integers(0, 3)),
     bool(RANDOM.integers(0, 2)), str(RANDOM.choice(["bf16", "fp32"])))
    for _ in range(8)
]


@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias,dtype", RANDOM_CASES)
def test_conv2d_random_shapes(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias, dtype):
    run_conv(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias=bias, dtype=dtype, seed=c * 7 + o)


# ---- backward: grad_input, grad_weight, grad_bias against torch autograd ----

def run_conv_backward(run_trnsim, tmp_path, n, c, h, w, o, k, stride=1, padding=0, dilation=1, bias=False,
                      dtype="bf16", out_dtype="fp32", seed=0, groups=1):
    kh, kw = (k, k) if isinstance(k, int) else k
    rand = rounded_randn(seed, dtype)

    x, wt = rand(n, c, h, w), rand(o, c // groups, kh, kw)
    ho = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    wo = (w + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    dy = rand(n, o, ho, wo)
    params = {"input": shape_text((n, c, h, w)), "weight": shape_text((o, c // groups, kh, kw)), "stride": stride,
              "padding": padding, "dilation": dilation, "has_bias": int(bias), "dtype": dtype, "out_dtype": out_dtype,
              "backward": 1, "groups": groups}
    outputs = ["grad_input", "grad_weight"] + (["grad_bias"] if bias else [])
    got = run_kernel(run_trnsim, tmp_path, "conv2d", params,
                     {"input": x.numpy(), "weight": wt.numpy(), "grad_output": dy.numpy()}, outputs)

    def grads(xv, wv, dyv):
        xv, wv = xv.double().requires_grad_(), wv.double().requires_grad_()
        bv = torch.zeros(o, dtype=torch.float64, requires_grad=True)
        y = torch.nn.functional.conv2d(xv, wv, bv if bias else None, stride=stride, padding=padding, dilation=dilation,
                                       groups=groups)
        return torch.autograd.grad(y, [xv, wv, bv] if bias else [xv, wv], dyv.double())

    expected = grads(x, wt, dy)
    magnitude = grads(x.abs(), wt.abs(), dy.abs())  # every product positive: the sum of |terms|
    contraction = [o // groups * kh * kw, n * ho * wo, n * ho * wo]
    for name, g, e, m, k_len in zip(outputs, got, expected, magnitude, contraction):
        g = torch.from_numpy(np.asarray(g, dtype=np.float32)).double()
        assert g.shape == e.shape, name
        tolerance = 4 * (k_len + 1) * 2.0**-24 * m + 1e-6
        if out_dtype == "bf16":
            tolerance = tolerance + e.abs() * 2.0**-8
        excess = (g - e).abs() - tolerance
        assert float(excess.max()) <= 0, f"{name}: max excess {float(excess.max())}"


# (n, c, h, w, o, k, stride, padding, bias, dtype): replica paths (dX's input channels are O),
# C/O > 128 (several dW accumulator passes), stride 2 with odd sizes (the remainder row), padding
# larger than k-1 (a cropped dY), 1x1 / 3x3 / 5x5.
BACKWARD_CASES = [
    (1, 3, 7, 9, 5, 3, 1, 1, True, "bf16"),
    (2, 16, 11, 10, 20, 3, 2, 1, False, "bf16"),
    (2, 64, 8, 8, 64, 3, 1, 1, True, "bf16"),
    (1, 40, 9, 13, 7, 5, 1, 2, True, "fp32"),
    (2, 130, 6, 5, 140, 3, 1, 0, True, "bf16"),
    (1, 8, 13, 13, 4, 1, 2, 2, True, "bf16"),
    (2, 24, 10, 7, 129, 5, 2, 2, False, "fp32"),
    (1, 20, 9, 9, 12, 1, 1, 1, False, "fp32"),
]


@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias,dtype", BACKWARD_CASES)
def test_conv2d_backward_matches_autograd(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias, dtype):
    run_conv_backward(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias=bias, dtype=dtype)


def test_conv2d_backward_bf16_grads_dilation_and_bands(run_trnsim, tmp_path):
    run_conv_backward(run_trnsim, tmp_path, 2, 48, 12, 11, 32, 3, stride=1, padding=2, dilation=2, bias=True,
                      out_dtype="bf16")
    # 200x200 does not fit SBUF whole: row bands, for dY dilated by the stride too.
    (tmp_path / "bands").mkdir()
    run_conv_backward(run_trnsim, tmp_path / "bands", 1, 3, 200, 200, 4, 3, stride=2, padding=1, bias=True)


# dW whose buffers do not fit SBUF at once goes in rounds ([O tiles x column tiles] <= the PSUM banks, the rows
# gathered in SBUF): fp32 512->512 3x3 (issue 10.12: it fell back to the CPU), C*KH*KW of 9270 in bf16 with
# a ragged last O tile, the ones column alone in its accumulator (C*KH*KW a multiple of 512), stride 2.
@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias,dtype", [
    (2, 512, 2, 2, 512, 3, 1, 1, True, "fp32"),
    (1, 1030, 3, 2, 140, 3, 2, 1, True, "bf16"),
    (1, 2048, 2, 3, 130, 2, 1, 0, True, "fp32"),
    (1, 2048, 5, 6, 3, 5, 1, 1, True, "fp32"),  # one row (51201 fp32 columns) too large: groups of chunks
])
def test_conv2d_backward_large_weights_in_rounds(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias, dtype):
    run_conv_backward(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias=bias, dtype=dtype)


# Weights too large to keep raw and transposed for one 128-channel O tile (fp32 512 x 5x5: ~100 KiB a
# partition; the device fell back to the CPU): the raw rows one channel chunk at a time, O blocks of 128, or
# of 32 (1030 x 5x5: three O blocks, the last of 6 channels, each with its bias column); dX likewise.
@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias,dtype", [
    (1, 512, 6, 5, 200, 5, 1, 2, True, "fp32"),
    (1, 1030, 5, 5, 70, 5, 1, 1, True, "fp32"),
    (2, 130, 5, 4, 1100, 3, 1, 1, True, "fp32"),  # dX's weights (1100 x 9 per partition) in O blocks of 64
])
def test_conv2d_large_weights_forward_and_backward(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias,
                                                   dtype):
    run_conv(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias=bias, dtype=dtype)
    (tmp_path / "bwd").mkdir()
    run_conv_backward(run_trnsim, tmp_path / "bwd", n, c, h, w, o, k, stride, padding, bias=bias, dtype=dtype)


BACKWARD_RANDOM = np.random.default_rng(77)
BACKWARD_RANDOM_CASES = [
    (int(BACKWARD_RANDOM.integers(1, 4)), int(BACKWARD_RANDOM.integers(1, 150)), int(BACKWARD_RANDOM.integers(5, 16)),
     int(BACKWARD_RANDOM.integers(5, 16)), int(BACKWARD_RANDOM.integers(1, 150)), int(BACKWARD_RANDOM.choice([1, 3, 5])),
     int(BACKWARD_RANDOM.integers(1, 3)), int(BACKWARD_RANDOM.integers(0, 3)), bool(BACKWARD_RANDOM.integers(0, 2)),
     str(BACKWARD_RANDOM.choice(["bf16", "fp32"])))
    for _ in range(8)
]


@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias,dtype", BACKWARD_RANDOM_CASES)
def test_conv2d_backward_random_shapes(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias, dtype):
    if (h + 2 * padding - k) < 0 or (w + 2 * padding - k) < 0:
        pytest.skip("kernel larger than the padded input")
    run_conv_backward(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias=bias, dtype=dtype, seed=c * 7 + o)


@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,dilation,groups,bias,dtype", GROUPED_CASES)
def test_grouped_conv2d_backward_matches_autograd(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, dilation,
                                                  groups, bias, dtype):
    run_conv_backward(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, dilation, bias=bias, dtype=dtype,
                      groups=groups)


# Randomized: ragged channel counts (a random group count dividing both), stride 1/2, padding, dilation.
GROUPED_RANDOM = np.random.default_rng(5)


def _grouped_random_case():
    groups = int(GROUPED_RANDOM.choice([1, 2, 3, 5, 7]))
    c = groups * int(GROUPED_RANDOM.integers(1, 40))
    o = groups * int(GROUPED_RANDOM.integers(1, 40))
    k = int(GROUPED_RANDOM.choice([1, 3, 5]))
    dilation = int(GROUPED_RANDOM.integers(1, 3))
    padding = int(GROUPED_RANDOM.integers(0, 3))
    h = int(GROUPED_RANDOM.integers(dilation * (k - 1) + 1, 14))
    w = int(GROUPED_RANDOM.integers(dilation * (k - 1) + 1, 14))
    return (int(GROUPED_RANDOM.integers(1, 3)), c, h, w, o, k, int(GROUPED_RANDOM.integers(1, 3)), padding, dilation,
            groups, bool(GROUPED_RANDOM.integers(0, 2)), str(GROUPED_RANDOM.choice(["bf16", "fp32"])))


GROUPED_RANDOM_CASES = [_grouped_random_case() for _ in range(6)]


@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,dilation,groups,bias,dtype", GROUPED_RANDOM_CASES)
def test_conv2d_random_grouped_forward_and_backward(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding,
                                                    dilation, groups, bias, dtype):
    seed = c * 7 + o
    run_conv(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, dilation, bias=bias, dtype=dtype, seed=seed,
             groups=groups)
    (tmp_path / "bwd").mkdir()
    run_conv_backward(run_trnsim, tmp_path / "bwd", n, c, h, w, o, k, stride, padding, dilation, bias=bias,
                      dtype=dtype, seed=seed, groups=groups)


# ---- split across cores: each core's program alone, outputs preset to NaN ----

def run_conv_split(run_trnsim, tmp_path, n, c, h, w, o, k, stride=1, padding=0, bias=False, cores=2, groups=1,
                   dtype="fp32", seed=0, backward=True):
    """The backward (or forward) split over `cores` cores (kernel_runner cores=N tasm_core=K), each core's program run on its
    own with the outputs preset to NaN, merged: every output element must be written by exactly the cores
    that own it and all together must equal torch autograd in float64. The parts share no partial sums, so a
    core's program runs the same alone as next to the others."""
    kh, kw = (k, k) if isinstance(k, int) else k
    rand = rounded_randn(seed, dtype)

    x, wt = rand(n, c, h, w), rand(o, c // groups, kh, kw)
    ho, wo = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    dy, b = rand(n, o, ho, wo), rand(o)
    if backward:
        outputs = {"grad_input": x.shape, "grad_weight": wt.shape}
        if bias:
            outputs["grad_bias"] = (o,)
        inputs = {"input": x.numpy(), "weight": wt.numpy(), "grad_output": dy.numpy()}
    else:
        outputs = {"output": (n, o, ho, wo)}
        inputs = {"input": x.numpy(), "weight": wt.numpy()}
        if bias:
            inputs["bias"] = b.numpy()
    for name, shape in outputs.items():  # never-written elements stay NaN
        inputs[name] = np.full(shape, np.nan, dtype=np.float32)
    params = {"input": shape_text((n, c, h, w)), "weight": shape_text((o, c // groups, kh, kw)), "stride": stride,
              "padding": padding, "has_bias": int(bias), "dtype": dtype, "out_dtype": "fp32",
              "backward": int(backward), "groups": groups, "cores": cores}
    merged = {name: np.full(shape, np.nan) for name, shape in outputs.items()}
    for core in range(cores):
        (tmp_path / f"core{core}").mkdir()
        parts = run_kernel(run_trnsim, tmp_path / f"core{core}", "conv2d", {**params, "tasm_core": core}, inputs,
                           list(outputs))
        for name, part in zip(outputs, parts):
            part = part.astype(np.float64)
            written = ~np.isnan(part)
            both = written & ~np.isnan(merged[name])
            assert np.array_equal(part[both], merged[name][both]), f"{name}: cores disagree on shared elements"
            merged[name][written] = part[written]
    xv, wv = x.double().requires_grad_(), wt.double().requires_grad_()
    bv = b.double().requires_grad_()
    y = torch.nn.functional.conv2d(xv, wv, bv if bias else None, stride=stride, padding=padding, groups=groups)
    expected = torch.autograd.grad(y, [xv, wv, bv] if bias else [xv, wv], dy.double()) if backward else [y.detach()]
    for (name, got), e in zip(merged.items(), expected):
        missing = np.isnan(got)
        assert not missing.any(), f"{name}: {int(missing.sum())} elements written by no core, e.g. at " \
                                  f"{np.argwhere(missing)[0].tolist()} .. {np.argwhere(missing)[-1].tolist()}"
        tolerance = 1e-4 * (e.abs().max().item() + 1)
        err = float((torch.from_numpy(got) - e).abs().max())
        assert err <= tolerance, f"{name}: max error {err} > {tolerance}"


# dW split by accumulators ([O tile <= 128, 512-column tile] of dW viewed as [O, (tap, C) + ones]): a core's
# run of columns of an O tile that starts on a tap and ends inside it (C > 512) was never stored (issue 10.2:
# 576->96, 1280->320, 2048->128 1x1 gave an all-zero block). Also runs that start inside a tap, cross taps,
# end on the ones column; 3x3 with C > 512; one accumulator (all on core 0); a wide group (a dense block).
SPLIT_CASES = [
    (2, 576, 3, 3, 96, 1, 1, 0, False, 1, "fp32"),
    (1, 1280, 2, 3, 320, 1, 1, 0, True, 1, "fp32"),
    (1, 2048, 2, 2, 128, 1, 1, 0, False, 1, "bf16"),
    (1, 600, 3, 3, 20, 3, 1, 1, True, 1, "bf16"),
    (1, 700, 3, 3, 24, 3, 2, 1, False, 1, "bf16"),
    (2, 512, 3, 3, 96, 1, 1, 0, True, 1, "fp32"),
    (2, 40, 6, 5, 70, 5, 1, 2, True, 1, "fp32"),
    (1, 1152, 2, 2, 64, 1, 1, 0, True, 2, "fp32"),
    # dW in rounds (its buffers do not fit SBUF at once): O tiles split between the cores, rows gathered.
    (2, 512, 2, 2, 512, 3, 1, 1, True, 1, "fp32"),
    (1, 1030, 2, 2, 40, 3, 2, 1, False, 1, "bf16"),
    (1, 2048, 1, 2, 300, 3, 1, 1, True, 1, "bf16"),
    (1, 2048, 3, 3, 200, 5, 1, 1, True, 1, "fp32"),
]


@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias,groups,dtype", SPLIT_CASES)
def test_conv2d_backward_split_across_cores_writes_every_element(run_trnsim, tmp_path, n, c, h, w, o, k, stride,
                                                                  padding, bias, groups, dtype):
    run_conv_split(run_trnsim, tmp_path, n, c, h, w, o, k, stride, padding, bias=bias, groups=groups, dtype=dtype)


# The forward split by (O block, input block, pixel tile) items, with O blocks of 32 channels (large fp32
# C*KH*KW: raw weight rows by channel chunk) and of 128.
@pytest.mark.parametrize("n,c,h,w,o,k,cores", [(2, 1030, 4, 5, 70, 5, 2), (1, 600, 5, 5, 130, 5, 3)])
def test_conv2d_forward_large_weights_split_across_cores(run_trnsim, tmp_path, n, c, h, w, o, k, cores):
    run_conv_split(run_trnsim, tmp_path, n, c, h, w, o, k, 1, 1, bias=True, cores=cores, backward=False)
