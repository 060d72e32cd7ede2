"""The PyTorch device "neuron": conv2d forward / backward on the conv kernels (through
convolution_overrideable) and optimizer steps (torch.optim's foreach `_foreach_*` ops on the
element-wise kernels, `_fused_adamw_` on the AdamW kernel), against the same on the CPU."""
import random

import pytest
import torch
import torch.nn.functional as F

from test_ops import DTYPES, check, no_fallback, rand, strict_lowering, trnsim  # noqa: F401


def conv_cases():
    """Randomised conv2d shapes: ragged channels and sizes, stride 1 / 2, padding 0 / 1 / "same",
    bias on / off (a fixed seed, so a failure reproduces)."""
    rng = random.Random(2024)
    cases = []
    for stride, padding, bias in [(1, 0, True), (1, 1, False), (2, 1, True), (2, 0, False), (1, "same", True),
                                  (1, "same", False)]:
        k = rng.choice([1, 3]) if padding == "same" else rng.choice([1, 2, 3])
        c, o = rng.randint(1, 20), rng.randint(1, 40)
        n, h, w = rng.randint(1, 3), rng.randint(k + 1, 13), rng.randint(k + 1, 13)
        cases.append((n, c, h, w, o, k, stride, padding, bias))
    cases.append((2, 130, 12, 11, 150, 3, 1, 1, True))  # more than one 128-partition tile each way
    return cases


def conv_reference(x, w, b, stride, padding, dilation=1):
    """Output and input / weight / bias gradients on the CPU for a fixed grad_output."""
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    br = b.clone().requires_grad_() if b is not None else None
    y = F.conv2d(xr, wr, br, stride=stride, padding=padding, dilation=dilation)
    dy = rand(y.shape, x.dtype, 99)
    y.backward(dy)
    return y.detach(), dy, xr.grad, wr.grad, br.grad if b is not None else None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias", conv_cases())
def test_conv2d_forward_backward(n, c, h, w, o, k, stride, padding, bias, dtype):
    x, wt = rand((n, c, h, w), dtype, 1), rand((o, c, k, k), dtype, 2)
    b = rand((o,), dtype, 3) if bias else None
    y, dy, dx, dw, db = conv_reference(x, wt, b, stride, padding)
    xn, wn = x.to("neuron").requires_grad_(), wt.to("neuron").requires_grad_()
    bn = b.to("neuron").requires_grad_() if bias else None
    yn = F.conv2d(xn, wn, bn, stride=stride, padding=padding)
    yn.backward(dy.to("neuron"))
    # Each output sums c*k*k products; dX sums o*k*k, dW and db sum over n * output pixels.
    check(yn.detach(), y, dtype, c * k * k)
    check(xn.grad, dx, dtype, o * k * k)
    check(wn.grad, dw, dtype, n * y.shape[2] * y.shape[3])
    if bias:
        check(bn.grad, db, dtype, n * y.shape[2] * y.shape[3])
    assert trnsim.fallback_report() == {}
    ops = [r["op"] for r in trnsim.op_log("kernel")]
    assert ops.count("convolution_overrideable") == 1 and ops.count("convolution_backward_overrideable") == 1
    assert all(r["ns"] > 0 for r in trnsim.op_log("kernel") if r["op"].startswith("convolution"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv2d_dilation_and_unbatched(dtype):
    x, wt = rand((6, 11, 9), dtype, 4), rand((7, 6, 3, 3), dtype, 5)
    out = F.conv2d(x.to("neuron"), wt.to("neuron"), padding=2, dilation=2)
    check(out, F.conv2d(x, wt, padding=2, dilation=2), dtype, 6 * 9)
    # at::convolution insists on a batch; the overrideable op itself takes an unbatched input.
    xs = torch.ops.aten.convolution_overrideable(x.to("neuron"), wt.to("neuron"), None, [1, 1], [1, 1], [1, 1], False,
                                                 [0, 0], 1)
    check(xs, F.conv2d(x, wt, padding=1), dtype, 6 * 9)
    assert trnsim.fallback_report() == {}


def test_conv1d_runs_as_a_2d_conv():
    """torch hands a 1-D convolution to the backend as a 2-D one of height 1 (view1d_as_2d), which the
    kernels take."""
    x, wt, b = rand((2, 5, 40), torch.float32, 14), rand((6, 5, 3), torch.float32, 15), rand((6,), torch.float32, 16)
    xr, wr, br = x.clone().requires_grad_(), wt.clone().requires_grad_(), b.clone().requires_grad_()
    y = F.conv1d(xr, wr, br, stride=2, padding=1)
    dy = rand(y.shape, torch.float32, 17)
    y.backward(dy)
    xn, wn, bn = (t.to("neuron").requires_grad_() for t in (x, wt, b))
    yn = F.conv1d(xn, wn, bn, stride=2, padding=1)
    yn.backward(dy.to("neuron"))
    check(yn.detach(), y.detach(), torch.float32, 15)
    check(xn.grad, xr.grad, torch.float32, 18)
    check(wn.grad, wr.grad, torch.float32, 40)
    check(bn.grad, br.grad, torch.float32, 40)
    assert trnsim.fallback_report() == {}
    assert [r["op"] for r in trnsim.op_log("kernel") if r["op"].startswith("conv")] == [
        "convolution_overrideable", "convolution_backward_overrideable"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv2d_weight_grad_only(dtype):
    """A first layer (input without grad): output_mask asks for weight and bias only."""
    x, wt, b = rand((2, 3, 10, 10), dtype, 6), rand((8, 3, 3, 3), dtype, 7), rand((8,), dtype, 8)
    y, dy, _, dw, db = conv_reference(x, wt, b, 1, 1)
    wn, bn = wt.to("neuron").requires_grad_(), b.to("neuron").requires_grad_()
    F.conv2d(x.to("neuron"), wn, bn, padding=1).backward(dy.to("neuron"))
    check(wn.grad, dw, dtype, 200)
    check(bn.grad, db, dtype, 200)
    assert trnsim.fallback_report() == {}


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv2d_module(dtype):
    torch.manual_seed(11)
    cpu = torch.nn.Conv2d(5, 12, 3, stride=2, padding=1).to(dtype)
    dev = torch.nn.Conv2d(5, 12, 3, stride=2, padding=1).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("neuron")
    x = rand((3, 5, 15, 14), dtype, 9)
    y = cpu(x)
    y.float().square().sum().backward()
    yn = dev(x.to("neuron"))
    yn.float().square().sum().backward()
    check(yn.detach(), y.detach(), dtype, 45)
    # The loss gradient 2y carries the forward's rounding, so the backward tolerances are wider.
    check(dev.weight.grad, cpu.weight.grad, dtype, 3 * 8 * 7 * 45)
    check(dev.bias.grad, cpu.bias.grad, dtype, 3 * 8 * 7 * 45)
    no_fallback("convolution", "convolution_backward", "convolution_overrideable", "convolution_backward_overrideable")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,c,h,w,o,k,groups,stride,padding", [
    (2, 4, 9, 8, 6, 3, 2, 1, 1), (1, 12, 10, 11, 12, 3, 12, 2, 1), (3, 32, 8, 8, 64, 3, 32, 1, 1),
    (2, 6, 7, 7, 9, 1, 3, 1, 0)])
def test_grouped_and_depthwise_conv2d(n, c, h, w, o, k, groups, stride, padding, dtype):
    x, wt, b = rand((n, c, h, w), dtype, 21), rand((o, c // groups, k, k), dtype, 22), rand((o,), dtype, 23)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, wt, b))
    y = F.conv2d(xr, wr, br, stride=stride, padding=padding, groups=groups)
    dy = rand(y.shape, dtype, 24)
    y.backward(dy)
    xn, wn, bn = (t.to("neuron").requires_grad_() for t in (x, wt, b))
    yn = F.conv2d(xn, wn, bn, stride=stride, padding=padding, groups=groups)
    yn.backward(dy.to("neuron"))
    pixels = n * y.shape[2] * y.shape[3]
    check(yn.detach(), y.detach(), dtype, c // groups * k * k)
    check(xn.grad, xr.grad, dtype, o // groups * k * k)
    check(wn.grad, wr.grad, dtype, pixels)
    check(bn.grad, br.grad, dtype, pixels)
    assert trnsim.fallback_report() == {}


def test_conv2d_splits_across_the_logical_cores_physical_cores():
    x, wt = rand((8, 64, 28, 28), torch.bfloat16, 25), rand((64, 64, 3, 3), torch.bfloat16, 26)
    times = {}
    for lnc in (1, 2):
        trnsim.set_config("trn2", chip__default_logical_core_size=lnc)
        trnsim.reset_simulated_time()
        y = F.conv2d(x.to("neuron"), wt.to("neuron"), padding=1)
        (rec,) = [r for r in trnsim.op_log("kernel") if r["op"] == "convolution_overrideable"]
        times[lnc] = rec["ns"] - rec["launch_ns"]   # the body: the launch cost does not split
        check(y, F.conv2d(x, wt, padding=1), torch.bfloat16, 64 * 9)
    trnsim.set_config("trn2")
    assert times[2] < 0.75 * times[1], times


@pytest.mark.parametrize(
    "name,call",
    [
        ("transposed", lambda x, w: F.conv_transpose2d(x, w.transpose(0, 1)[:, :, :, :].contiguous())),
        ("conv3d", lambda x, w: F.conv3d(x.unsqueeze(2), w.unsqueeze(2))),
        ("float64", lambda x, w: F.conv2d(x.double(), w.double())),
    ],
)
def test_conv_unsupported_falls_back(name, call):
    x, wt = rand((2, 4, 8, 8), torch.float32, 12), rand((6, 4, 3, 3), torch.float32, 13)
    if name == "transposed":
        wt = rand((4, 6, 3, 3), torch.float32, 13)  # conv_transpose2d's weight is [C_in, C_out, kh, kw]
        call = lambda x, w: F.conv_transpose2d(x, w)  # noqa: E731
    xn, wn = x.to("neuron").requires_grad_(), wt.to("neuron").requires_grad_()
    xr, wr = x.clone().requires_grad_(), wt.clone().requires_grad_()
    out, expected = call(xn, wn), call(xr, wr)
    assert out.device.type == "neuron"
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert trnsim.fallback_report().get("aten::convolution", 0) == 1
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wn.grad.cpu(), wr.grad, rtol=1e-5, atol=1e-5)
    assert trnsim.fallback_report().get("aten::convolution_backward", 0) == 1
    assert not any(r["op"].startswith("convolution") for r in trnsim.op_log("kernel"))


# ------------------------------------------------------------------------------------------------
# Optimizer steps


def small_model(dtype, seed=21):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 7)).to(dtype)


OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2),
    "adamw_wd0": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.0, betas=(0.8, 0.95)),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "adamw_fused": lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),
}

STEPS = 5


def run_steps(model, make_opt, grads):
    """STEPS optimizer steps with the given gradients (the same on both devices, so the comparison
    is of the optimizer alone)."""
    device = next(model.parameters()).device
    opt = make_opt(model.parameters())
    for step_grads in grads:
        for p, g in zip(model.parameters(), step_grads):
            p.grad = g.to(device)
        opt.step()
        opt.zero_grad()
    return [p.detach().cpu() for p in model.parameters()]


def param_tolerance(dtype, expected):
    """fp32: a few ulp (operation order; torch's CPU kernels use FMA). bf16: both sides round the
    parameter once per step from fp32 values that differ by an fp32 ulp, so a step can flip one
    bf16 ulp of the value it had then; over a few steps that is a few ulps of the parameters'
    magnitude (still far below what one step moves them)."""
    if dtype == torch.float32:
        return 2e-6, 2e-6
    return 2 ** -7, 2 ** -7 * float(expected.abs().max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps_match_cpu(name, dtype):
    cpu = small_model(dtype)
    dev = small_model(dtype).to("neuron")
    initial = [p.detach().clone() for p in cpu.parameters()]
    grads = [[rand(p.shape, dtype, 100 * s + i) for i, p in enumerate(cpu.parameters())] for s in range(STEPS)]
    expected = run_steps(cpu, OPTIMIZERS[name], grads)
    trnsim.reset_fallback_report()
    trnsim.reset_simulated_time()
    got = run_steps(dev, OPTIMIZERS[name], grads)
    assert trnsim.fallback_report() == {}
    for g, e, p0 in zip(got, expected, initial):
        assert g.dtype == dtype
        rtol, atol = param_tolerance(dtype, e)
        torch.testing.assert_close(g.float(), e.float(), rtol=rtol, atol=atol)
        assert not torch.equal(e, p0)  # the steps moved the parameters
    ops = {r["op"] for r in trnsim.op_log("kernel")}
    if name == "adamw_fused":
        assert "_fused_adamw_" in ops
    elif name.startswith("adam"):
        assert {"_foreach_lerp_", "_foreach_addcmul_", "_foreach_sqrt", "_foreach_addcdiv_"} <= ops
    assert trnsim.simulated_ns() > 0


def test_adamw_bf16_tracks_cpu_closely():
    """Most bf16 parameters equal the CPU's exactly: the per-step roundings agree."""
    cpu, dev = small_model(torch.bfloat16), small_model(torch.bfloat16).to("neuron")
    grads = [[rand(p.shape, torch.bfloat16, 7 * s + i) for i, p in enumerate(cpu.parameters())] for s in range(STEPS)]
    expected = run_steps(cpu, OPTIMIZERS["adamw"], grads)
    got = run_steps(dev, OPTIMIZERS["adamw"], grads)
    same = sum(int((g == e).sum()) for g, e in zip(got, expected))
    total = sum(e.numel() for e in expected)
    assert same >= 0.99 * total, (same, total)


@pytest.mark.parametrize("name", ["adamw", "sgd_momentum", "adamw_fused"])
def test_training_loop_matches_cpu(name):
    """Forward, backward and optimizer step on the device, against the same loop on the CPU."""
    cpu, dev = small_model(torch.float32), small_model(torch.float32).to("neuron")
    x, target = rand((16, 24), torch.float32, 31), rand((16, 7), torch.float32, 32)
    opt_cpu, opt_dev = OPTIMIZERS[name](cpu.parameters()), OPTIMIZERS[name](dev.parameters())
    xd, td = x.to("neuron"), target.to("neuron")
    for _ in range(3):
        for model, opt, a, t in [(cpu, opt_cpu, x, target), (dev, opt_dev, xd, td)]:
            opt.zero_grad()
            F.mse_loss(model(a), t).backward()
            opt.step()
    assert trnsim.fallback_report() == {}
    for p, q in zip(dev.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_foreach_ops_match_cpu(dtype):
    """The foreach overloads the optimizers use, and their out-of-place forms, one by one."""
    shapes = [(3, 5), (130,), ()]
    a = [rand(s, dtype, 40 + i) for i, s in enumerate(shapes)]
    b = [rand(s, dtype, 50 + i) for i, s in enumerate(shapes)]
    c = [rand(s, dtype, 60 + i).abs() + 0.5 for i, s in enumerate(shapes)]
    dev = lambda ts: [t.to("neuron") for t in ts]  # noqa: E731
    calls = [
        ("_foreach_add.Scalar", lambda x, y, z: torch._foreach_add(x, 0.25)),
        ("_foreach_add.List", lambda x, y, z: torch._foreach_add(x, y, alpha=-0.3)),
        ("_foreach_sub.List", lambda x, y, z: torch._foreach_sub(x, y)),
        ("_foreach_mul.ScalarList", lambda x, y, z: torch._foreach_mul(x, [0.5, -2.0, 3.0])),
        ("_foreach_div.List", lambda x, y, z: torch._foreach_div(x, z)),
        ("_foreach_mul.Tensor", lambda x, y, z: torch._foreach_mul(x, torch.tensor(1.5))),
        ("_foreach_maximum.List", lambda x, y, z: torch._foreach_maximum(x, y)),
        ("_foreach_sqrt", lambda x, y, z: torch._foreach_sqrt(z)),
        ("_foreach_neg", lambda x, y, z: torch._foreach_neg(x)),
        ("_foreach_lerp.Scalar", lambda x, y, z: torch._foreach_lerp(x, y, 0.1)),
        ("_foreach_lerp.Scalar(w>=0.5)", lambda x, y, z: torch._foreach_lerp(x, y, 0.7)),
        ("_foreach_addcmul.Scalar", lambda x, y, z: torch._foreach_addcmul(x, y, z, value=0.3)),
        ("_foreach_addcdiv.ScalarList", lambda x, y, z: torch._foreach_addcdiv(x, y, z, [0.1, -1.0, 2.0])),
        ("_foreach_addcdiv.Tensor", lambda x, y, z: torch._foreach_addcdiv(x, y, z, torch.tensor([0.1, -1.0, 2.0]))),
    ]
    def tol(e):
        # bf16: one ulp (2^-8 .. 2^-7 relative) of the result, and where a sum cancels, an ulp of the
        # operands: torch's CPU kernels round a product to bf16 first in their scalar tail loop and
        # not in the vectorised one; the kernels keep it in fp32.
        if dtype == torch.float32:
            return 1e-6, 1e-6
        return 2 ** -7, 2 ** -8 * float(e.abs().max()) + 1e-5

    for name, fn in calls:
        expected = fn(a, b, c)
        got = fn(dev(a), dev(b), dev(c))
        for g, e in zip(got, expected):
            assert g.device.type == "neuron" and g.dtype == e.dtype and g.shape == e.shape, name
            rtol, atol = tol(e)
            torch.testing.assert_close(g.cpu().float(), e.float(), rtol=rtol, atol=atol, msg=name)
    # In place: the device tensors themselves are updated.
    x, y = dev(a), dev(b)
    torch._foreach_mul_(x, 0.9)
    torch._foreach_add_(x, y, alpha=0.1)
    xe = [t.clone() for t in a]
    torch._foreach_mul_(xe, 0.9)
    torch._foreach_add_(xe, b, alpha=0.1)
    for g, e in zip(x, xe):
        rtol, atol = tol(e)
        torch.testing.assert_close(g.cpu().float(), e.float(), rtol=rtol, atol=atol)
    assert trnsim.fallback_report() == {}


def test_foreach_unsupported_falls_back():
    """Tensor-weighted lerp has no lowering: counted by the fallback, values still right."""
    a, b, w = [rand((4, 4), torch.float32, 70)], [rand((4, 4), torch.float32, 71)], [rand((4, 4), torch.float32, 72)]
    x = [t.to("neuron") for t in a]
    torch._foreach_lerp_(x, [t.to("neuron") for t in b], [t.to("neuron") for t in w])
    torch._foreach_lerp_(a, b, w)
    torch.testing.assert_close(x[0].cpu(), a[0])
    assert trnsim.fallback_report() == {"aten::_foreach_lerp_.List": 1}


def test_fused_adamw_unsupported_falls_back():
    """amsgrad has no fused lowering (the kernel keeps no max state): counted by the fallback."""
    cpu, dev = small_model(torch.float32), small_model(torch.float32).to("neuron")
    grads = [[rand(p.shape, torch.float32, 80 + i) for i, p in enumerate(cpu.parameters())] for _ in range(2)]
    make = lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, fused=True)  # noqa: E731
    expected = run_steps(cpu, make, grads)
    got = run_steps(dev, make, grads)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert trnsim.fallback_report().get("aten::_fused_adamw_", 0) == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_single_tensor_lerp_addcmul_addcdiv(dtype):
    a, b, c = rand((37, 41), dtype, 31), rand((37, 41), dtype, 32), rand((37, 41), dtype, 33)
    c = (c.float().abs() + 0.5).to(dtype)
    d = [t.to("neuron") for t in (a, b, c)]
    check(torch.lerp(d[0], d[1], 0.3), torch.lerp(a, b, 0.3), dtype, 4)
    check(torch.lerp(d[0], d[1], 0.8), torch.lerp(a, b, 0.8), dtype, 4)
    check(torch.addcmul(d[0], d[1], d[2], value=0.5), torch.addcmul(a, b, c, value=0.5), dtype, 4)
    check(torch.addcdiv(d[0], d[1], d[2], value=-2), torch.addcdiv(a, b, c, value=-2), dtype, 4)
    inplace, ref = d[0].clone(), a.clone()
    inplace.addcmul_(d[1], d[2], value=0.1)
    ref.addcmul_(b, c, value=0.1)
    check(inplace, ref, dtype, 4)
    out = torch.empty(0, dtype=dtype).to("neuron")
    assert torch.addcdiv(d[0], d[1], d[2], out=out) is out
    check(out, torch.addcdiv(a, b, c), dtype, 4)
    assert trnsim.fallback_report() == {}


def test_for_loop_adamw_runs_on_the_device():
    """AdamW(foreach=False): torch's per-tensor path (lerp_, addcmul_, addcdiv_, sqrt, ...)."""
    torch.manual_seed(0)
    cpu = torch.nn.Linear(20, 5)
    dev = torch.nn.Linear(20, 5)
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x = torch.randn(4, 20)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=False) for m in (cpu, dev)]
    for _ in range(3):
        for model, opt, inp in ((cpu, opts[0], x), (dev, opts[1], x.to("neuron"))):
            opt.zero_grad()
            model(inp).square().sum().backward()
            opt.step()
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-5)
    assert trnsim.fallback_report() == {}


def train_norm_module_like_cpu(make, shape, dtype, affine, seed):
    """One training forward / backward of a norm module on the CPU and on the device from the same
    parameters (affine ones randomised so they matter); checks the output and the gradients, and
    returns (cpu module, device module, input, per-channel element count)."""
    torch.manual_seed(seed)
    cpu = make().to(dtype)
    if affine:
        with torch.no_grad():
            cpu.weight.uniform_(0.5, 1.5)
            cpu.bias.uniform_(-1, 1)
    dev = make().to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x, g = rand(shape, dtype, seed + 40), rand(shape, dtype, seed + 41)
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    yc, yd = cpu(xc), dev(xd)
    yc.backward(g)
    yd.backward(g.to("neuron"))
    count = x.numel() // shape[1]  # elements summed per channel by the parameter gradients
    check(yd.detach(), yc.detach(), dtype, 4)
    check(xd.grad, xc.grad, dtype, count)
    if affine:
        check(dev.weight.grad, cpu.weight.grad, dtype, count)
        check(dev.bias.grad, cpu.bias.grad, dtype, count)
    return cpu, dev, x, count


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,affine", [((4, 6, 5, 7), True), ((3, 130, 4, 4), False), ((33, 20), True)])
def test_batch_norm_train_and_eval(shape, affine, dtype):
    module = torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d
    cpu, dev, x, count = train_norm_module_like_cpu(lambda: module(shape[1], affine=affine), shape, dtype, affine, 1)
    check(dev.running_mean, cpu.running_mean, dtype, count)
    check(dev.running_var, cpu.running_var, dtype, count)
    # Only the int64 batch counter (num_batches_tracked += 1) falls back: no int64 kernels.
    assert set(trnsim.fallback_report()) <= {"aten::add_.Tensor"}
    cpu.eval()
    dev.eval()
    check(dev(x.to("neuron")).detach(), cpu(x).detach(), dtype, 4)
    assert not any("batch_norm" in op for op in trnsim.fallback_report())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,groups", [((2, 16, 8, 8), 4), ((3, 12, 5, 7), 12), ((4, 6, 33), 2)])
def test_group_norm_forward_backward(shape, groups, dtype):
    train_norm_module_like_cpu(lambda: torch.nn.GroupNorm(groups, shape[1]), shape, dtype, True, 11)
    assert trnsim.fallback_report() == {}
