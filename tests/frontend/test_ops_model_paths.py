"""Ops real models reach that used to fall back to the CPU (issue 40 item 5): autocast's fp32 sums of
bf16 tensors, mixed-dtype in-place arithmetic, the static KV cache's index_copy_, the activations of
vision and RL models, grad clipping, RoPE's base ** x, BCE with logits, _assert_async. Each runs with
TRNSIM_FALLBACK=error (a fallback raises) and is checked against the CPU, forward and backward.
(softmax(dtype=) of bf16 did not fall back with torch 2.13, forward or backward: no test here.)"""
import pytest
import torch
import torch.nn.functional as F

from test_ops import strict_lowering, tolerance, trnsim  # noqa: F401

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(autouse=True)
def fallback_is_an_error(strict_lowering):
    trnsim.set_fallback_mode("error")
    yield
    trnsim.set_fallback_mode("allow")


def rand(shape, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def close(got, expected, dtype=None, k=1):
    assert got.device.type == "neuron"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if not expected.is_floating_point():
        torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)
        return
    rtol, atol = tolerance(dtype or expected.dtype, k)
    torch.testing.assert_close(got.cpu().float(), expected.float(), rtol=rtol, atol=atol)


def forward_backward(fn, *inputs, dtype):
    """fn's output and the inputs' gradients (for a fixed cotangent) on the device and on the CPU."""
    results = []
    for device in ("neuron", "cpu"):
        leaves = [t.to(device).requires_grad_() for t in inputs]
        out = fn(*leaves)
        cot = rand(out.shape, out.dtype, seed=99).to(device)
        grads = torch.autograd.grad(out, leaves, cot)
        results.append([out.detach()] + [g for g in grads])
    for got, expected in zip(*results):
        close(got, expected, dtype)


@pytest.mark.parametrize("dims", [(-1,), (0, 2), None])
@pytest.mark.parametrize("fn", [torch.sum, torch.mean])
def test_reduction_with_a_float_dtype_argument(fn, dims):
    x = rand((4, 6, 40), torch.bfloat16)
    for source in (x, x.to(torch.int32)):
        if fn is torch.mean and not source.is_floating_point():
            args = (dims,) if dims else ()
            close(fn(source.to("neuron"), *args, dtype=torch.float32), fn(source, *args, dtype=torch.float32), k=240)
            continue
        args = (dims,) if dims else ()
        expected = fn(source, *args, dtype=torch.float32)
        close(fn(source.to("neuron"), *args, dtype=torch.float32), expected, k=240)
    with torch.autocast("neuron", dtype=torch.bfloat16):  # autocast's sum asks for fp32
        close(torch.sum(x.to("neuron") * 2, dim=-1, dtype=torch.float32), torch.sum(x * 2, dim=-1, dtype=torch.float32), k=40)


@pytest.mark.parametrize("op", ["add_", "sub_", "mul_", "div_"])
@pytest.mark.parametrize("other_shape", [(5, 8), (8,)])
def test_inplace_arithmetic_with_a_wider_operand_rounds_once_into_self(op, other_shape):
    self_ = rand((5, 8), torch.bfloat16, seed=1)
    other = rand(other_shape, torch.float32, seed=2) + (3.0 if op == "div_" else 0.0)
    kwargs = {"alpha": 0.5} if op in ("add_", "sub_") and other.dim() else {}
    expected = getattr(self_.clone(), op)(other, **kwargs)
    d = self_.to("neuron")
    out = getattr(d, op)(other.to("neuron") if other.dim() else other, **kwargs)
    assert out is d and d.dtype == torch.bfloat16
    close(d, expected)
    # a result torch cannot cast into self still raises (through the CPU's kernel)
    trnsim.set_fallback_mode("allow")
    for integers in (torch.arange(4), torch.arange(4, device="neuron")):
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            getattr(integers, op)(torch.full((4,), 0.5, device=integers.device))


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_copy_updates_a_static_kv_cache_in_place(dtype):
    cache = rand((2, 3, 16, 8), dtype, seed=3)
    new = rand((2, 3, 2, 8), dtype, seed=4)
    pos = torch.tensor([5, 6])
    expected = cache.clone().index_copy_(2, pos, new)
    d = cache.to("neuron")
    ptr = d.data_ptr()
    d.index_copy_(2, pos.to("neuron"), new.to("neuron"))
    assert d.data_ptr() == ptr
    close(d, expected)
    rows = rand((1, 3, 16, 8), dtype, seed=5)
    close(torch.index_copy(cache.to("neuron"), 0, torch.tensor([1]).to("neuron"), rows.to("neuron")),
          torch.index_copy(cache, 0, torch.tensor([1]), rows))
    trnsim.set_fallback_mode("allow")  # an out-of-range position goes to the CPU, which raises its error
    with pytest.raises(IndexError, match="out of bounds"):
        d.index_copy_(2, torch.tensor([16, 0]).to("neuron"), new.to("neuron"))


def test_rsub():
    a, b = rand((4, 7), seed=1), rand((4, 7), seed=2)
    close(torch.rsub(a.to("neuron"), b.to("neuron"), alpha=2), torch.rsub(a, b, alpha=2))
    close(torch.rsub(a.to("neuron"), 3.5), torch.rsub(a, 3.5))
    close(1 - a.to("neuron"), 1 - a)
    ints = torch.arange(-4, 8).reshape(3, 4)
    close(torch.rsub(ints.to("neuron"), 2.5), torch.rsub(ints, 2.5))
    close(torch.rsub(ints.to("neuron"), 7), torch.rsub(ints, 7))


@pytest.mark.parametrize("largest", [True, False])
def test_topk_unsorted(largest):
    x = rand((6, 300), seed=5)
    values, indices = torch.topk(x.to("neuron"), 4, dim=-1, largest=largest, sorted=False)
    ev, ei = torch.topk(x, 4, dim=-1, largest=largest, sorted=True)
    # any order is allowed; the CPU's own order here (k * 64 <= n: a partial sort) is sorted
    close(values.sort(-1, descending=largest).values, ev)
    torch.testing.assert_close(x.gather(-1, indices.cpu()), values.cpu())
    torch.testing.assert_close(torch.topk(x, 4, dim=-1, largest=largest, sorted=False).values, ev)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["hardtanh", "relu6", "leaky_relu", "elu", "selu", "celu", "mish", "logsigmoid"])
def test_activation_forward_and_backward(name, dtype):
    fn = {"hardtanh": lambda x: F.hardtanh(x, -0.5, 1.25), "relu6": F.relu6, "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
          "elu": lambda x: F.elu(x, 0.7), "selu": F.selu, "celu": lambda x: F.celu(x, 1.3), "mish": F.mish,
          "logsigmoid": F.logsigmoid}[name]
    x = rand((6, 50), dtype, seed=6, scale=4.0)
    x[0, :4] = torch.tensor([-0.5, 1.25, 0.0, 6.0]).to(dtype)  # the bounds themselves
    forward_backward(fn, x, dtype=dtype)


@pytest.mark.parametrize("name", ["hardtanh_", "relu6_", "leaky_relu_", "elu_", "hardswish_", "mish_"])
def test_inplace_activations(name):
    fn = {"hardtanh_": lambda x: F.hardtanh_(x, -1.0, 2.0), "relu6_": lambda x: F.relu6(x, inplace=True),
          "leaky_relu_": lambda x: F.leaky_relu_(x, 0.2), "elu_": lambda x: F.elu_(x), "hardswish_": lambda x: F.hardswish(x, inplace=True),
          "mish_": lambda x: F.mish(x, inplace=True)}[name]
    x = rand((4, 33), seed=7, scale=4.0)
    d = x.to("neuron")
    out = fn(d)
    assert out.data_ptr() == d.data_ptr()
    close(d, fn(x.clone()))


def test_leaky_relu_backward_through_the_inplace_result():
    x = rand((4, 9), seed=8)
    grads = []
    for device in ("neuron", "cpu"):
        leaf = x.to(device).requires_grad_()
        F.leaky_relu(leaf * 1.0, 0.01, inplace=True).sum().backward()
        grads.append(leaf.grad)
    close(*grads)


def test_grad_clipping_runs_on_the_device():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    dev = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x = rand((8, 16), seed=9)
    for model, inp in ((cpu, x), (dev, x.to("neuron"))):
        model(inp).square().sum().backward()
    for max_norm in (0.05, 1e6):  # clipped, and a coefficient clamped to 1
        n_cpu = torch.nn.utils.clip_grad_norm_(cpu.parameters(), max_norm)
        n_dev = torch.nn.utils.clip_grad_norm_(dev.parameters(), max_norm)
        close(n_dev, n_cpu, k=16)
        for p, q in zip(cpu.parameters(), dev.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)
    torch.nn.utils.clip_grad_value_(dev.parameters(), 1e-3)
    torch.nn.utils.clip_grad_value_(cpu.parameters(), 1e-3)
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad)


def test_zero_dim_tensors_with_python_numbers_keep_their_dtype():
    """A clamp / comparison of a 0-dim tensor (a loss, a norm) by a Python number: the number is a wrapped
    scalar in torch's promotion (internally it was an unwrapped double, which made the result double and
    sent clip_grad_norm_'s clamp to the CPU)."""
    for dtype in DTYPES:
        t = torch.tensor(3.0, dtype=dtype)
        d = t.to("neuron")
        for fn in (lambda x: torch.clamp(x, max=1.0), lambda x: torch.clamp(x, -1, 0.5), lambda x: x > 2.5,
                   lambda x: torch.isinf(x), lambda x: x.clamp_min(4)):
            close(fn(d), fn(t))
    ints = torch.arange(-3, 5)
    close(ints.to("neuron") > 1.5, ints > 1.5)


def test_cat_out_casts_into_the_out_dtype():
    parts = [rand((2, 4), seed=10), rand((3, 4), seed=11)]
    out = torch.empty(5, 4, dtype=torch.bfloat16, device="neuron")
    torch.cat([p.to("neuron") for p in parts], out=out)
    close(out, torch.cat(parts, out=torch.empty(5, 4, dtype=torch.bfloat16)))
    empty = torch.cat([torch.empty(0, device="neuron"), torch.empty(0, device="neuron")])
    assert empty.shape == (0,) and empty.device.type == "neuron"
    trnsim.set_fallback_mode("allow")
    with pytest.raises(TypeError, match="can't be cast to the desired output"):  # as on the CPU
        torch.cat([p.to("neuron") for p in parts], out=torch.empty(5, 4, dtype=torch.int64, device="neuron"))


@pytest.mark.parametrize("base", [10000.0, 2, 0.5, 1.0])
def test_scalar_base_pow(base):
    e = torch.arange(0, 64, 2).float() / 64
    close(base ** e.to("neuron"), base ** e)
    ints = torch.arange(-3, 9)
    close(torch.pow(float(base), ints.to("neuron")), torch.pow(float(base), ints))
    # RoPE's inverse frequencies, as transformers computes them
    dim = 64
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to("neuron").float() / dim))
    close(inv, 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weights", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_with_logits(weights, reduction, dtype):
    x = rand((6, 10), dtype, seed=12, scale=3.0)
    target = torch.rand(6, 10, generator=torch.Generator().manual_seed(13)).to(dtype)
    weight = (torch.rand(10, generator=torch.Generator().manual_seed(14)) + 0.5).to(dtype) if weights[0] else None
    pos_weight = (torch.rand(10, generator=torch.Generator().manual_seed(15)) * 3).to(dtype) if weights[1] else None

    def loss(x):
        def on(t):
            return t.to(x.device) if t is not None else None
        return F.binary_cross_entropy_with_logits(x, on(target), on(weight), reduction=reduction, pos_weight=on(pos_weight))

    forward_backward(loss, x, dtype=dtype)


def test_assert_async():
    torch._assert_async(torch.tensor(True, device="neuron"))
    torch._assert_async(torch.tensor(3.0, device="neuron"), "fine")
    with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value, but got zero"):
        torch._assert_async(torch.tensor(0, device="neuron"))
    with pytest.raises(RuntimeError, match="custom message"):
        torch._assert_async(torch.tensor(False, device="neuron"), "custom message")
