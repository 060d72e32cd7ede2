"""The PyTorch device "neuron": reductions, comparisons / where, relu's backward and MSE loss on
the simulator (kernel library) against the CPU, and an MLP training step with no fallback op."""
import pytest
import torch

from test_ops import DTYPES, check, no_fallback, rand, strict_lowering, tolerance, trnsim  # noqa: F401

REDUCTIONS = {
    "sum_dim": (lambda t: t.sum(1), "sum"),
    "sum_dims_keepdim": (lambda t: t.sum((0, 2), keepdim=True), "sum"),
    "sum_all": (lambda t: t.sum(), "sum"),
    "mean_last": (lambda t: t.mean(-1), "mean"),
    "mean_dim0_keepdim": (lambda t: t.mean(0, keepdim=True), "mean"),
    "mean_all": (lambda t: t.mean(), "mean"),
    "amax_last": (lambda t: t.amax(-1), "amax"),
    "amin_dims": (lambda t: t.amin((0, 1)), "amin"),
    "max_all": (lambda t: t.max(), "max"),
    "min_all": (lambda t: t.min(), "min"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("shape", [(33, 130, 7), (3, 5, 300), (2, 1, 1)])
def test_reduction(name, shape, dtype):
    fn, op = REDUCTIONS[name]
    a = rand(shape, dtype, 30)
    out, expected = fn(a.to("neuron")), fn(a.float()).to(dtype)  # fp32 accumulation, rounded once
    k = a.numel() // max(1, expected.numel())
    check(out, expected, dtype, k if op in ("sum",) else 1)
    assert out.dtype == fn(a).dtype
    no_fallback(op)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False), (2, True)])
def test_max_min_dim_and_argmax(dim, keepdim, dtype):
    a = rand((17, 130, 9), dtype, 31)
    x = a.to("neuron")
    for fn in (torch.max, torch.min):
        values, indices = fn(x, dim, keepdim=keepdim)
        ev, ei = fn(a, dim, keepdim=keepdim)
        assert indices.dtype == torch.int64 and torch.equal(indices.cpu(), ei)
        assert torch.equal(values.cpu(), ev)
    for fn in (torch.argmax, torch.argmin):
        out = fn(x, dim, keepdim=keepdim)
        assert out.dtype == torch.int64 and torch.equal(out.cpu(), fn(a, dim, keepdim=keepdim))
    assert torch.equal(torch.argmax(x).cpu(), torch.argmax(a))
    assert torch.equal(torch.argmin(x, keepdim=True).cpu(), torch.argmin(a, keepdim=True))
    no_fallback("max", "min", "argmax", "argmin")


def test_sum_with_other_dtype_casts_on_the_device():
    a = rand((4, 6), torch.bfloat16, 32)
    out = a.to("neuron").sum(1, dtype=torch.float32)
    check(out, a.sum(1, dtype=torch.float32), torch.float32, 6)
    assert not any("sum" in op for op in trnsim.fallback_report())  # (issue 40: it fell back)


COMPARE = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "gt": torch.gt, "le": torch.le, "ge": torch.ge}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(COMPARE))
def test_comparisons(name, dtype):
    fn = COMPARE[name]
    a = rand((130, 77), dtype, 33)
    b = a.clone()
    b[::3] = rand((44, 77), dtype, 34)  # some equal elements
    x, y = a.to("neuron"), b.to("neuron")
    for out, expected in [(fn(x, y), fn(a, b)), (fn(x, 0), fn(a, 0)), (fn(x, 0.5), fn(a, 0.5)),
                          (fn(x, y[0]), fn(a, b[0]))]:
        assert out.device.type == "neuron" and out.dtype == torch.bool
        assert torch.equal(out.cpu(), expected)
    no_fallback(name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_where(dtype):
    a, b = rand((65, 129), dtype, 35), rand((65, 129), dtype, 36)
    x, y = a.to("neuron"), b.to("neuron")
    out = torch.where(x > y, x, y)
    assert out.dtype == dtype and torch.equal(out.cpu(), torch.where(a > b, a, b))
    no_fallback("where", "gt")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(33, 130), (7,), (2, 3, 129)])
def test_threshold_backward(shape, dtype):
    a, g = rand(shape, dtype, 37), rand(shape, dtype, 38)
    a.view(-1)[::5] = 0  # relu's backward at exactly the threshold is 0
    x = a.to("neuron").requires_grad_()
    torch.relu(x).backward(g.to("neuron"))
    expected = torch.ops.aten.threshold_backward(g, a, 0)
    assert x.grad.dtype == dtype and torch.equal(x.grad.cpu(), expected)
    out = torch.ops.aten.threshold_backward(g.to("neuron"), a.to("neuron"), 0.25)
    assert torch.equal(out.cpu(), torch.ops.aten.threshold_backward(g, a, 0.25))
    no_fallback("threshold_backward")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_forward_backward(reduction, dtype):
    a, t = rand((33, 10), dtype, 39), rand((33, 10), dtype, 40)
    x = a.to("neuron").requires_grad_()
    xc = a.clone().requires_grad_()
    loss = torch.nn.functional.mse_loss(x, t.to("neuron"), reduction=reduction)
    expected = torch.nn.functional.mse_loss(xc, t, reduction=reduction)
    check(loss.detach(), expected.detach(), dtype, 330)
    grad = torch.ones_like(expected)
    loss.backward(grad.to("neuron"))
    expected.backward(grad)
    check(x.grad, xc.grad, dtype)
    no_fallback("mse_loss", "mse_loss_backward")


@pytest.mark.parametrize("loss_name", ["mse", "sum"])
def test_mlp_training_step_has_no_fallback(loss_name):
    """nn.Linear + ReLU + MSE (or sum) loss, forward and backward in fp32: every op on the simulator."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(77, 130), torch.nn.ReLU(), torch.nn.Linear(130, 10))
    device_model = torch.nn.Sequential(torch.nn.Linear(77, 130), torch.nn.ReLU(), torch.nn.Linear(130, 10))
    device_model.load_state_dict(model.state_dict())
    device_model.to("neuron")
    x, target = torch.randn(33, 77), torch.randn(33, 10)
    trnsim.set_fallback_mode("error")
    out_dev = device_model(x.to("neuron"))
    if loss_name == "mse":
        loss_dev = torch.nn.functional.mse_loss(out_dev, target.to("neuron"))
    else:
        loss_dev = out_dev.sum()
    loss_dev.backward()
    trnsim.set_fallback_mode("allow")
    assert trnsim.fallback_report() == {}
    out = model(x)
    loss = torch.nn.functional.mse_loss(out, target) if loss_name == "mse" else out.sum()
    loss.backward()
    torch.testing.assert_close(loss_dev.cpu(), loss.detach(), rtol=1e-4, atol=1e-4)
    for (name, p), p_dev in zip(model.named_parameters(), device_model.parameters()):
        torch.testing.assert_close(p_dev.grad.cpu(), p.grad, rtol=1e-4, atol=1e-4, msg=name)
    ops = {r["op"] for r in trnsim.op_log()}
    assert {"addmm", "mm", "relu", "threshold_backward", "sum.dim_IntList"} <= ops


F = torch.nn.functional


def close(out, expected, dtype, scale_to_max=False):
    rtol, atol = (1e-4, 1e-4) if dtype == torch.float32 else (3e-2, 3e-2)
    if scale_to_max:  # bf16 column sums over many rows: relative to the largest value
        atol *= max(1.0, expected.abs().max().item())
    assert out.device.type == "neuron" and out.dtype == expected.dtype and out.shape == expected.shape
    torch.testing.assert_close(out.cpu().float(), expected.float(), rtol=rtol, atol=atol)


def forward_backward(fn, tensors, grad, dtype, names):
    cpu = [t.clone().requires_grad_() for t in tensors]
    dev = [t.to("neuron").requires_grad_() for t in tensors]
    out, out_dev = fn(*cpu), fn(*dev)
    out.backward(grad)
    out_dev.backward(grad.to("neuron"))
    close(out_dev.detach(), out.detach(), dtype)
    for i, (a, b) in enumerate(zip(cpu, dev)):
        close(b.grad, a.grad, dtype, scale_to_max=i > 0)
    no_fallback(*names)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(5, 33, 130), (7,), (130, 1000)])
def test_softmax_forward_backward(shape, log, dtype):
    fn = (lambda x: F.log_softmax(x, -1)) if log else (lambda x: F.softmax(x, dim=len(shape) - 1))
    name = "_log_softmax" if log else "_softmax"
    forward_backward(fn, [rand(shape, dtype, 41)], rand(shape, dtype, 42), dtype, [name, name + "_backward_data"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,dim", [((6, 5), 0), ((3, 40, 7), 1), ((4, 130, 5, 9), -3)])
def test_softmax_other_dims(shape, dim, log, dtype):
    fn = (lambda x: F.log_softmax(x, dim)) if log else (lambda x: F.softmax(x, dim))
    name = "_log_softmax" if log else "_softmax"
    forward_backward(fn, [rand(shape, dtype, 43)], rand(shape, dtype, 44), dtype, [name, name + "_backward_data"])
    assert trnsim.fallback_report() == {}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(5, 33, 130), (3, 64)])
def test_layer_norm_forward_backward(shape, affine, dtype):
    c = shape[-1]
    tensors = [rand(shape, dtype, 44)] + ([rand((c,), dtype, 45), rand((c,), dtype, 46)] if affine else [])
    fn = (lambda x, w, b: F.layer_norm(x, (c,), w, b)) if affine else (lambda x: F.layer_norm(x, (c,)))
    forward_backward(fn, tensors, rand(shape, dtype, 47), dtype, ["native_layer_norm", "native_layer_norm_backward"])
    x = tensors[0]
    out, mean, rstd = torch.ops.aten.native_layer_norm(x.to("neuron"), [c], None, None, 1e-5)
    e_out, e_mean, e_rstd = torch.ops.aten.native_layer_norm(x, [c], None, None, 1e-5)
    close(mean, e_mean, dtype)
    close(rstd, e_rstd, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm_forward_backward(eps, dtype):
    assert hasattr(torch.ops.aten, "_fused_rms_norm")
    shape, c = (4, 33, 130), 130
    fn = lambda x, w: F.rms_norm(x, (c,), w, eps=eps)  # noqa: E731
    forward_backward(fn, [rand(shape, dtype, 48), rand((c,), dtype, 49)], rand(shape, dtype, 50), dtype,
                     ["_fused_rms_norm", "_fused_rms_norm_backward"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_in_place_binary(dtype):
    a, b, c = rand((33, 130), dtype, 51), rand((33, 130), dtype, 52), rand((130,), dtype, 53)
    x = a.to("neuron")
    y = x.clone()
    y += b.to("neuron")
    check(y, a + b, dtype)
    y = x.clone()
    y.mul_(c.to("neuron")).div_(2.0)
    check(y, a * c / 2.0, dtype)
    y, z = x.clone(), a.clone()
    y[:, :7].sub_(1.5)  # a strided view of self
    z[:, :7].sub_(1.5)
    check(y, z, dtype)
    no_fallback("add_", "mul_", "div_", "sub_")


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat(dtype):
    a, b = rand((33, 130), dtype, 54), rand((5, 130), dtype, 55)
    x, y = a.to("neuron"), b.to("neuron")
    assert torch.equal(torch.cat([x, y, x[:3]]).cpu(), torch.cat([a, b, a[:3]]))
    assert torch.equal(torch.cat([x, x[:, :9]], -1).cpu(), torch.cat([a, a[:, :9]], -1))
    no_fallback("cat")


@pytest.mark.parametrize("dtype", DTYPES)
def test_pow_scalar_exponents(dtype):
    a = rand((40, 50), dtype, 56).abs() + 0.25
    x = a.to("neuron")
    for e in (2, 1, 0.5, -1, -0.5, 2):  # one shape: each exponent its own program
        out = x ** e
        assert out.dtype == dtype
        torch.testing.assert_close(out.cpu().float(), (a ** e).float(), rtol=2e-2, atol=2e-2)
    no_fallback("pow")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_activation_backward(name, dtype):
    a, g = rand((33, 130), dtype, 57), rand((33, 130), dtype, 58)
    y = getattr(torch, name)(a)
    op = getattr(torch.ops.aten, name + "_backward")
    check(op(g.to("neuron"), y.to("neuron")), op(g, y), dtype)
    no_fallback(name + "_backward")


class Block(torch.nn.Module):
    """Pre-norm transformer block: attention (bmm, softmax) + ReLU MLP."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h, hd = self.heads, d // self.heads
        q, k, v = self.qkv(self.norm1(x)).split(d, -1)
        q, k, v = [z.reshape(b, t, h, hd).transpose(1, 2).reshape(b * h, t, hd) for z in (q, k, v)]
        att = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * hd ** -0.5, -1)
        y = torch.bmm(att, v).reshape(b, h, t, hd).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(torch.relu(self.fc1(self.norm2(x))))


def test_transformer_block_training_step_has_no_fallback():
    torch.manual_seed(0)
    block, device_block = Block(), Block()
    device_block.load_state_dict(block.state_dict())
    device_block.to("neuron")
    x, target = torch.randn(2, 16, 64), torch.randn(2, 16, 64)
    trnsim.set_fallback_mode("error")
    loss_dev = torch.nn.functional.mse_loss(device_block(x.to("neuron")), target.to("neuron"))
    loss_dev.backward()
    trnsim.set_fallback_mode("allow")
    assert trnsim.fallback_report() == {}
    loss = torch.nn.functional.mse_loss(block(x), target)
    loss.backward()
    torch.testing.assert_close(loss_dev.cpu(), loss.detach(), rtol=1e-4, atol=1e-4)
    for (name, p), p_dev in zip(block.named_parameters(), device_block.parameters()):
        torch.testing.assert_close(p_dev.grad.cpu(), p.grad, rtol=1e-3, atol=1e-4, msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_masked_fill_where_broadcast(dtype):
    a, m = rand((4, 33, 65), dtype, 59), rand((33, 65), dtype, 60) > 0
    x = a.to("neuron")
    for out, expected in [(x.clamp(-0.5, 0.75), a.clamp(-0.5, 0.75)), (x.clamp(min=0.1), a.clamp(min=0.1)),
                          (x.clamp(max=0), a.clamp(max=0)), (torch.clamp_min(x, -1), torch.clamp_min(a, -1)),
                          (x.masked_fill(m.to("neuron"), float("-inf")), a.masked_fill(m, float("-inf"))),
                          (torch.where(m.to("neuron"), x, x[0]), torch.where(m, a, a[0]))]:
        assert out.dtype == dtype and torch.equal(out.cpu(), expected)
    no_fallback("clamp", "clamp_min", "clamp_max", "masked_fill", "where")


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_backward_and_alpha(dtype):
    a, g = rand((33, 130), dtype, 61), rand((33, 130), dtype, 62)
    out = torch.ops.aten.silu_backward(g.to("neuron"), a.to("neuron"))
    # sigmoid comes from the activation table
    torch.testing.assert_close(out.cpu().float(), torch.ops.aten.silu_backward(g, a).float(), rtol=2e-2, atol=2e-2)
    x = a.to("neuron")
    x.add_(g.to("neuron"), alpha=-0.1)  # SGD's update
    check(x, a.add(g, alpha=-0.1), dtype, 2)
    no_fallback("silu_backward", "add_")


def test_sgd_training_steps_have_no_fallback():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(77, 130), torch.nn.ReLU(), torch.nn.Linear(130, 10))
    device_model = torch.nn.Sequential(torch.nn.Linear(77, 130), torch.nn.ReLU(), torch.nn.Linear(130, 10))
    device_model.load_state_dict(model.state_dict())
    device_model.to("neuron")
    opt, device_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(device_model.parameters(), lr=0.1)
    x, target = torch.randn(33, 77), torch.randn(33, 10)
    for _ in range(2):  # the second backward accumulates into .grad after zero_grad(set_to_none=True)
        trnsim.set_fallback_mode("error")
        device_opt.zero_grad()
        torch.nn.functional.mse_loss(device_model(x.to("neuron")), target.to("neuron")).backward()
        device_opt.step()
        trnsim.set_fallback_mode("allow")
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), target).backward()
        opt.step()
    assert trnsim.fallback_report() == {}
    for p, p_dev in zip(model.parameters(), device_model.parameters()):
        torch.testing.assert_close(p_dev.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-4)


def test_argmax_with_nan_falls_back_explicitly():
    a = rand((4, 300), torch.float32, 63)
    a[1, 7] = a[2, 5] = float("nan")
    x = a.to("neuron")
    assert torch.equal(x.argmax(1).cpu(), a.argmax(1))
    values, indices = x.max(1)
    assert torch.equal(indices.cpu(), a.max(1)[1])
    torch.testing.assert_close(values.cpu(), a.max(1)[0], equal_nan=True)
    report = trnsim.fallback_report()
    assert report.get("aten::argmax", 0) + report.get("aten::argmax.out", 0) >= 1, report
    assert any(op.startswith("aten::max") for op in report), report
    torch.testing.assert_close(x.amax(1).cpu(), a.amax(1), equal_nan=True)  # values propagate NaN on the kernel


@pytest.mark.parametrize("shape,dims", [((3, 5000), (0,)), ((2, 70000), (1,)), ((300, 40, 9), (0, 2)), ((1000, 1000), None)])
def test_reduction_larger_shapes(shape, dims):
    a = rand(shape, torch.bfloat16, 64)
    x = a.to("neuron")
    out = x.sum(dims) if dims else x.sum()
    expected = (a.float().sum(dims) if dims else a.float().sum()).to(torch.bfloat16)
    check(out, expected, torch.bfloat16, a.numel() // max(1, expected.numel()))
    out = x.amax(dims) if dims else x.max()
    assert torch.equal(out.cpu(), a.amax(dims) if dims else a.max())
    no_fallback("sum", "amax", "max")


def test_bf16_comparison_and_clamp_round_the_scalar():
    a = torch.tensor([0.30078125, 0.298828125, 0.3, -0.3], dtype=torch.bfloat16)
    x = a.to("neuron")
    for fn in COMPARE.values():
        assert torch.equal(fn(x, 0.3).cpu(), fn(a, 0.3))
    assert torch.equal(x.clamp(-0.299, 0.299).cpu(), a.clamp(-0.299, 0.299))
    g = torch.ones(4, dtype=torch.bfloat16)
    out = torch.ops.aten.threshold_backward(g.to("neuron"), x, 0.3)
    assert torch.equal(out.cpu(), torch.ops.aten.threshold_backward(g, a, 0.3))


def test_reduction_of_a_0_dim_tensor():
    a = torch.tensor(2.5)
    x = a.to("neuron")
    for out, expected in [(x.sum(), a.sum()), (x.mean(), a.mean()), (x.sum(0), a.sum(0)), (x.amax(), a.amax())]:
        check(out, expected, torch.float32)
    no_fallback("sum", "mean", "amax")


OUT_CASES = {
    "mm": lambda o, d, a, b, m: torch.mm(d(a), d(m), out=o),
    "add": lambda o, d, a, b, m: torch.add(d(a), d(b), alpha=2, out=o),
    "mul": lambda o, d, a, b, m: torch.mul(d(a), d(b), out=o),
    "exp": lambda o, d, a, b, m: torch.exp(d(a), out=o),
    "sum": lambda o, d, a, b, m: torch.sum(d(a), 1, out=o),
    "mean": lambda o, d, a, b, m: torch.mean(d(a), 0, keepdim=True, out=o),
    "amax": lambda o, d, a, b, m: torch.amax(d(a), 1, out=o),
    "tanh": lambda o, d, a, b, m: torch.tanh(d(a), out=o),
    "clamp": lambda o, d, a, b, m: torch.clamp(d(a), -0.5, 0.5, out=o),
    "pow": lambda o, d, a, b, m: torch.pow(d(a), 2, out=o),
    "cat": lambda o, d, a, b, m: torch.cat([d(a), d(b)], 0, out=o),
    "softmax": lambda o, d, a, b, m: torch._softmax(d(a), 1, False, out=o),
}


@pytest.mark.parametrize("name", sorted(OUT_CASES))
@pytest.mark.parametrize("prefilled", [False, True])
def test_out_variants_run_on_the_device(name, prefilled):
    a, b, m = rand((6, 70), torch.float32, 61), rand((6, 70), torch.float32, 62), rand((70, 5), torch.float32, 63)
    fn = OUT_CASES[name]
    expected = fn(torch.empty(0), lambda t: t, a, b, m)
    # An out tensor of the right size is written in place (same storage); an empty one is resized.
    out = torch.empty(expected.shape if prefilled else (0,)).to("neuron")
    storage = out.untyped_storage().data_ptr()
    result = fn(out, lambda t: t.to("neuron"), a, b, m)
    assert result is out
    if prefilled:
        assert out.untyped_storage().data_ptr() == storage
    close(out, expected, torch.float32)
    assert trnsim.fallback_report() == {}


def test_out_variant_with_other_dtypes():
    a, b = rand((9, 33), torch.float32, 64), rand((9, 33), torch.float32, 65)
    gt = torch.empty(0, dtype=torch.bool).to("neuron")
    torch.gt(a.to("neuron"), b.to("neuron"), out=gt)
    idx = torch.empty(0, dtype=torch.long).to("neuron")
    torch.argmax(a.to("neuron"), 1, out=idx)
    assert torch.equal(gt.cpu(), a > b) and torch.equal(idx.cpu(), a.argmax(1))
    assert trnsim.fallback_report() == {}


# Unary functions on the activation table / ALU, with the domain each needs.
MORE_UNARY = {
    "log": (torch.log, lambda x: x.abs() + 0.1), "sqrt": (torch.sqrt, lambda x: x.abs()),
    "rsqrt": (torch.rsqrt, lambda x: x.abs() + 0.1), "abs": (torch.abs, None), "neg": (torch.neg, None),
    "reciprocal": (torch.reciprocal, lambda x: x.sign() * (x.abs() + 0.5)), "sin": (torch.sin, lambda x: 3 * x),
    "cos": (torch.cos, lambda x: 3 * x), "erf": (torch.erf, None), "sign": (torch.sign, None),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(MORE_UNARY))
def test_more_unary_forward_backward_and_in_place(name, dtype):
    fn, domain = MORE_UNARY[name]
    x = rand((33, 130), dtype, 71)
    if domain is not None:
        x = domain(x).to(dtype)
    forward_backward(fn, [x], rand((33, 130), dtype, 72), dtype, [name])
    d = x.to("neuron")
    getattr(d, name + "_")()  # in place
    close(d, fn(x), dtype)
    assert trnsim.fallback_report() == {}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1), (1, -0.25)])
def test_baddbmm_and_addmm_coefficients(beta, alpha, dtype):
    s, a, b = rand((3, 17, 40), dtype, 73), rand((3, 17, 64), dtype, 74), rand((3, 64, 40), dtype, 75)
    out = torch.baddbmm(s.to("neuron"), a.to("neuron"), b.to("neuron"), beta=beta, alpha=alpha)
    close(out, torch.baddbmm(s.float(), a.float(), b.float(), beta=beta, alpha=alpha).to(dtype), dtype, scale_to_max=True)
    out2 = torch.addmm(s[0].to("neuron"), a[0].to("neuron"), b[0].to("neuron"), beta=beta, alpha=alpha)
    close(out2, torch.addmm(s[0].float(), a[0].float(), b[0].float(), beta=beta, alpha=alpha).to(dtype), dtype,
          scale_to_max=True)
    assert trnsim.fallback_report() == {}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 9), (3, 130, 70), (2, 2, 5, 300), (200, 5)])
@pytest.mark.parametrize("diagonal", [0, 1, -2, 40])
def test_triu_tril(shape, diagonal, dtype):
    x = rand(shape, dtype, 81)
    xd = x.to("neuron")
    for fn in (torch.triu, torch.tril):
        assert torch.equal(fn(xd, diagonal).cpu(), fn(x, diagonal))
        inplace = xd.clone()
        getattr(inplace, fn.__name__ + "_")(diagonal)
        assert torch.equal(inplace.cpu(), fn(x, diagonal))
    assert trnsim.fallback_report() == {}


def test_causal_mask_for_multihead_attention_has_no_fallback():
    mask = torch.triu(torch.full((10, 10), float("-inf")), 1)
    dmask = torch.triu(torch.full((10, 10), float("-inf"), device="neuron"), 1)
    assert torch.equal(dmask.cpu(), mask)
    assert trnsim.fallback_report() == {}


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_over_several_trailing_dims(dtype):
    torch.manual_seed(7)
    cpu = torch.nn.LayerNorm([6, 5, 7]).to(dtype)
    with torch.no_grad():
        cpu.weight.uniform_(0.5, 1.5)
        cpu.bias.uniform_(-1, 1)
    dev = torch.nn.LayerNorm([6, 5, 7]).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x, g = rand((3, 6, 5, 7), dtype, 91), rand((3, 6, 5, 7), dtype, 92)
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    yc, yd = cpu(xc), dev(xd)
    yc.backward(g)
    yd.backward(g.to("neuron"))
    close(yd.detach(), yc.detach(), dtype)
    close(xd.grad, xc.grad, dtype, scale_to_max=True)
    close(dev.weight.grad, cpu.weight.grad, dtype, scale_to_max=True)
    close(dev.bias.grad, cpu.bias.grad, dtype, scale_to_max=True)
    assert trnsim.fallback_report() == {}
