"""The PyTorch device "neuron": max_pool2d (with indices) and avg_pool2d, forward and backward, on the
pooling kernels (kernels/pooling.h), against the same on the CPU, with no fallback."""
import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from test_ops import DTYPES, check, no_fallback, rand, strict_lowering, trnsim  # noqa: F401

ALL_DTYPES = DTYPES + [torch.float16]


def pool_cases():
    """Randomised shapes (a fixed seed): ragged channels and sizes, kernel 2 / 3, stride 1 / 2 / 3,
    padding 0 / 1, ceil_mode on / off."""
    rng = random.Random(11)
    cases = []
    for k, stride, padding, ceil in [(2, 2, 0, False), (3, 2, 1, False), (3, 1, 1, True), (3, 3, 0, True),
                                     (2, 1, 1, False), (3, 2, 0, True)]:
        n, c = rng.randint(1, 3), rng.randint(1, 40)
        h, w = rng.randint(k + 1, 15), rng.randint(k + 1, 15)
        cases.append((n, c, h, w, k, stride, padding, ceil))
    return cases


def ties(shape, dtype, seed):
    """Small integers: many equal values in a window (torch keeps the first maximum)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


def reference(fn, x, dy_seed=99):
    xr = x.clone().requires_grad_()
    y = fn(xr)
    dy = rand(y.shape, x.dtype, dy_seed)
    y.backward(dy)
    return y.detach(), dy, xr.grad


def run_device(fn, x, dy):
    xn = x.to("neuron").requires_grad_()
    y = fn(xn)
    y.backward(dy.to("neuron"))
    return y.detach(), xn.grad


def kernel_ops():
    return [r["op"] for r in trnsim.op_log("kernel")]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n,c,h,w,k,stride,padding,ceil", pool_cases())
def test_max_pool2d_forward_backward(n, c, h, w, k, stride, padding, ceil, dtype):
    x = ties((n, c, h, w), dtype, n + c)
    fn = lambda t: F.max_pool2d(t, k, stride, padding, ceil_mode=ceil)  # noqa: E731
    y, dy, dx = reference(fn, x)
    yn, dxn = run_device(fn, x, dy)
    check(yn, y, dtype)
    assert torch.equal(yn.cpu(), y)
    check(dxn, dx, dtype, k * k)  # an input element gets the gradients of up to ceil(k / s)^2 windows
    assert trnsim.fallback_report() == {}
    ops = kernel_ops()
    assert "max_pool2d_with_indices" in ops and "max_pool2d_with_indices_backward" in ops


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_max_pool2d_return_indices_and_unbatched(dtype):
    x = ties((5, 9, 11), dtype, 3)  # [C, H, W]
    y, i = F.max_pool2d(x.to("neuron"), 3, 2, 1, return_indices=True)
    ye, ie = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert y.shape == ye.shape and torch.equal(y.cpu(), ye)
    assert i.dtype == torch.int64 and torch.equal(i.cpu(), ie)
    # Unbatched backward too.
    fn = lambda t: F.max_pool2d(t, 3, 2, 1)  # noqa: E731
    _, dy, dx = reference(fn, x)
    _, dxn = run_device(fn, x, dy)
    check(dxn, dx, dtype, 9)
    assert trnsim.fallback_report() == {}


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("n,c,h,w,k,stride,padding,ceil", pool_cases())
def test_avg_pool2d_forward_backward(n, c, h, w, k, stride, padding, ceil, include_pad, dtype):
    x = rand((n, c, h, w), dtype, h + w)
    fn = lambda t: F.avg_pool2d(t, k, stride, padding, ceil_mode=ceil, count_include_pad=include_pad)  # noqa: E731
    y, dy, dx = reference(fn, x)
    yn, dxn = run_device(fn, x, dy)
    check(yn, y, dtype, k * k)
    check(dxn, dx, dtype, k * k)
    assert trnsim.fallback_report() == {}
    ops = kernel_ops()
    assert "avg_pool2d" in ops and "avg_pool2d_backward" in ops


def test_avg_pool2d_divisor_override_and_unbatched():
    x = rand((6, 10, 9), torch.float32, 4)
    fn = lambda t: F.avg_pool2d(t, (3, 2), (2, 1), (1, 1), divisor_override=4)  # noqa: E731
    y, dy, dx = reference(fn, x)
    yn, dxn = run_device(fn, x, dy)
    check(yn, y, torch.float32, 6)
    check(dxn, dx, torch.float32, 6)
    assert trnsim.fallback_report() == {}


@pytest.mark.parametrize("dtype", DTYPES)
def test_resnet_stem_maxpool_module(dtype):
    pool = nn.MaxPool2d(3, 2, 1)
    x = rand((2, 16, 28, 28), dtype, 21)
    y, dy, dx = reference(pool, x)
    yn, dxn = run_device(pool, x, dy)
    assert torch.equal(yn.cpu(), y)
    check(dxn, dx, dtype, 4)
    assert trnsim.fallback_report() == {}
    (fwd,) = [r for r in trnsim.op_log("kernel") if r["op"] == "max_pool2d_with_indices"]
    # Each image row lands in its own row of the padded SBUF plane: chunks of 2 x 28 bytes (under
    # core.dma.min_chunk_bytes, so each takes one 64-byte beat), walked by one descriptor per partition;
    # the windows' compute on the Vector / GpSimd engines is the bottleneck, not the loads.
    assert fwd["ns"] > 0 and fwd["bottleneck"] in ("vector", "gpsimd")


def test_pool_values_equal_on_one_and_two_cores():
    x = rand((4, 48, 30, 26), torch.bfloat16, 23)
    results = {}
    for lnc in (1, 2):
        trnsim.set_config("trn2", chip__default_logical_core_size=lnc)
        trnsim.reset_simulated_time()
        xn = x.to("neuron").requires_grad_()
        y = F.max_pool2d(xn, 3, 2, 1)
        y.backward(torch.ones_like(y))
        xa = x.to("neuron").requires_grad_()
        z = F.avg_pool2d(xa, 3, 2, 1, count_include_pad=False)
        z.backward(torch.ones_like(z))
        (rec,) = [r for r in trnsim.op_log("kernel") if r["op"] == "max_pool2d_with_indices"]
        results[lnc] = (y.cpu(), xn.grad.cpu(), z.cpu(), xa.grad.cpu(), rec["ns"] - rec["launch_ns"])  # the body
    trnsim.set_config("trn2")
    for a, b in zip(results[1][:4], results[2][:4]):
        assert torch.equal(a, b)
    assert results[2][4] < 0.75 * results[1][4], (results[1][4], results[2][4])
    assert trnsim.fallback_report() == {}


@pytest.mark.parametrize(
    "name,call",
    [
        ("float64", lambda x: F.max_pool2d(x.double(), 2)),
        ("padding_too_large", lambda x: F.avg_pool2d(x, 2, 2, 2)),
        ("kernel_wider_than_row", lambda x: F.max_pool2d(x[..., :2], (1, 3), 1, (0, 1))),
        ("avg_float64", lambda x: F.avg_pool2d(x.double(), 2)),
    ],
)
def test_unsupported_pooling_falls_back(name, call):
    x = rand((2, 3, 8, 8), torch.float32, 12)
    try:
        expected = call(x)
    except RuntimeError as e:  # torch's own argument error: the fallback raises the same
        with pytest.raises(RuntimeError, match=str(e).split("\n")[0][:30]):
            call(x.to("neuron"))
        return
    out = call(x.to("neuron"))
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), expected)
    assert trnsim.fallback_report(), "expected a counted fallback"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kwargs,lowered", [({"scale_factor": 2}, True), ({"size": (12, 21)}, True),
                                            ({"scale_factor": (3, 1)}, True), ({"size": (7, 9)}, False)])
def test_upsample_nearest_forward_backward(kwargs, lowered, dtype):
    x = torch.randn(2, 3, 6, 7, generator=torch.Generator().manual_seed(61)).to(dtype)
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    yc = torch.nn.functional.interpolate(xc, mode="nearest", **kwargs)
    yd = torch.nn.functional.interpolate(xd, mode="nearest", **kwargs)
    g = torch.randn(yc.shape, generator=torch.Generator().manual_seed(62)).to(dtype)
    yc.backward(g)
    yd.backward(g.to("neuron"))
    assert torch.equal(yd.detach().cpu(), yc.detach())
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(xd.grad.cpu().float(), xc.grad.float(), rtol=tol, atol=tol * 4)
    # Integer factors run on the device; other ratios fall back (counted).
    assert (trnsim.fallback_report() == {}) == lowered
