"""Regression tests for wrong answers and crashes a new user found on the device "neuron"
(issue 10): tied weights after Module.to, mixed-device operands, integer matmuls, conj() copies.
Each failed before its fix."""
import copy

import pytest
import torch

from test_ops import no_fallback, strict_lowering, trnsim  # noqa: F401


class TiedLM(torch.nn.Module):
    """An embedding whose table is also the output projection (GPT-2's wte / lm_head)."""

    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.proj(self.embed(ids))))


def test_module_to_keeps_parameter_identity_and_ties():
    torch.manual_seed(0)
    model = TiedLM()
    params_before = [id(p) for p in model.parameters()]
    model.to("neuron")
    assert [id(p) for p in model.parameters()] == params_before  # as on CUDA: param.data is swapped
    assert model.head.weight is model.embed.weight
    assert model.embed.weight.device.type == "neuron"
    model.to("cpu")
    assert model.head.weight is model.embed.weight and model.head.weight.device.type == "cpu"


def test_tied_weights_train_like_the_cpu():
    torch.manual_seed(0)
    cpu = TiedLM()
    dev = copy.deepcopy(cpu).to("neuron")
    ids = torch.randint(0, 50, (4, 7))
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=0.1)
    for _ in range(3):
        for model, opt, x in ((cpu, opt_cpu, ids), (dev, opt_dev, ids.to("neuron"))):
            opt.zero_grad()
            logits = model(x)
            torch.nn.functional.cross_entropy(logits.reshape(-1, 50), x.reshape(-1)).backward()
            opt.step()
        # the tied table's gradient sums both uses: it differed by 40-90 % when .to() untied them
        torch.testing.assert_close(dev.embed.weight.grad.cpu(), cpu.embed.weight.grad, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(dev.embed.weight.detach().cpu(), cpu.embed.weight.detach(), rtol=1e-4, atol=1e-6)
    assert dev.head.weight is dev.embed.weight


def test_grad_moves_with_the_parameter():
    lin = torch.nn.Linear(3, 2)
    lin(torch.randn(4, 3)).sum().backward()
    grad = lin.weight.grad.clone()
    lin.to("neuron")
    assert lin.weight.grad.device.type == "neuron"
    torch.testing.assert_close(lin.weight.grad.cpu(), grad)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: a + b,
        lambda a, b: a * b,
        lambda a, b: torch.where(a > 0, a, b),
        lambda a, b: torch.maximum(a, b),
        lambda a, b: torch.cat([a, b]),
        lambda a, b: torch.atan2(a, b),  # an op that falls back: its CPU fallback must not hide the mix
    ],
)
def test_mixed_devices_raise_like_cuda(fn):
    a = torch.randn(5, device="neuron")
    for other in (torch.randn(5), torch.randn(5, device="neuron:1")):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn(a, other)
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn(other, a)


def test_matmul_with_a_cpu_operand_raises():
    a = torch.randn(4, 3, device="neuron")
    with pytest.raises(RuntimeError, match="same device"):
        a @ torch.randn(3, 2)


def test_cpu_scalar_tensors_are_accepted_like_cuda():
    a = torch.randn(5)
    out = a.to("neuron") * torch.tensor(3.0) + torch.tensor(1)
    torch.testing.assert_close(out.cpu(), a * 3.0 + 1)
    assert out.device.type == "neuron"


def test_indexing_with_host_indices_is_allowed():
    a = torch.randn(6, 4)
    idx = torch.tensor([4, 0, 2])
    torch.testing.assert_close(a.to("neuron")[idx].cpu(), a[idx])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("beta,alpha", [(1.5, 2.5), (1, 1), (0, 3), (2, 0.5)])
def test_integer_addmm_and_baddbmm_follow_torch(dtype, beta, alpha):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-5, 5, (3, 4), generator=g, dtype=dtype)
    y = torch.randint(-5, 5, (4, 2), generator=g, dtype=dtype)
    c = torch.randint(-5, 5, (3, 2), generator=g, dtype=dtype)
    expected = torch.addmm(c, x, y, beta=beta, alpha=alpha)
    out = torch.addmm(c.to("neuron"), x.to("neuron"), y.to("neuron"), beta=beta, alpha=alpha)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)
    bx, by, bc = x.expand(2, 3, 4).clone(), y.expand(2, 4, 2).clone(), c.expand(2, 3, 2).clone()
    expected = torch.baddbmm(bc, bx, by, beta=beta, alpha=alpha)
    out = torch.baddbmm(bc.to("neuron"), bx.to("neuron"), by.to("neuron"), beta=beta, alpha=alpha)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)


def test_conj_clone_does_not_recurse():
    x = torch.randn(4, dtype=torch.cfloat)
    out = x.to("neuron").conj().clone()
    torch.testing.assert_close(out.cpu(), x.conj().clone())
    assert not out.is_conj()
    torch.testing.assert_close(x.to("neuron").conj().cpu(), x.conj())
    torch.testing.assert_close(torch.conj_physical(x.to("neuron")).cpu(), x.conj_physical())


def test_fft_on_device_falls_back_without_crashing():
    x = torch.randn(8, dtype=torch.cfloat)
    for fn in (torch.fft.ifft, torch.fft.hfft, torch.fft.fft):
        torch.testing.assert_close(fn(x.to("neuron")).cpu(), fn(x), rtol=1e-5, atol=1e-5)
    r = torch.randn(8)
    torch.testing.assert_close(torch.fft.ihfft(r.to("neuron")).cpu(), torch.fft.ihfft(r), rtol=1e-5, atol=1e-5)


def test_negative_view_copy():
    x = torch.randn(4, dtype=torch.cfloat)
    y = x.to("neuron").conj().imag  # a view with the negative bit
    torch.testing.assert_close(y.clone().cpu(), x.conj().imag.clone())


def test_native_group_norm_statistics_are_differentiable_like_the_cpu():
    """The OpInfo sweep found the device's mean / rstd outputs detached (the CPU's backward takes
    their gradients too)."""
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(2, 6, 5, 4, generator=g), torch.randn(6, generator=g), torch.randn(6, generator=g)

    def run(device):
        leaves = [t.to(device).requires_grad_() for t in (x, w, b)]
        outs = torch.native_group_norm(*leaves, 2, 6, 20, 3, 1e-5)
        assert all(o.requires_grad for o in outs)
        cot = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i)).to(device) for i, o in enumerate(outs)]
        return [t.cpu() for t in (*outs, *torch.autograd.grad(outs, leaves, cot))]

    for got, expected in zip(run("neuron"), run("cpu")):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert not trnsim.fallback_report(), trnsim.fallback_report()


@pytest.mark.parametrize("make", [lambda: torch.randn(3, 3).to_sparse().to("neuron"),
                                  lambda: torch.randn(3, 3).to_sparse_csr().to("neuron"),
                                  lambda: torch.randn(3, 3).to("neuron").to_sparse()])
def test_sparse_layouts_are_a_clear_error(make):
    # A CSR tensor's .to() is assembled from its dense parts without a device kernel: the error then
    # comes with the first op on it.
    with pytest.raises(NotImplementedError, match="sparse tensors are not supported on the device"):
        make().to_dense()


# ---- issue 40: wrong values and crashes a new user found (each failed before its fix) ----

LAYOUT_CASES = [
    # (operands, fn): the result's strides are TensorIterator's, as on the CPU and in the meta function
    (lambda g: (torch.randn(2, 64, 256, generator=g).view(2, 64, 4, 64).transpose(1, 2),
                torch.randn(1, 1, 64, 64, generator=g)), lambda a, b: a * b),  # was (16384, 4096, 64, 1)
    (lambda g: (torch.randn(2, 3, 4, 5, generator=g).contiguous(memory_format=torch.channels_last),
                torch.randn(3, 1, 1, generator=g)), lambda a, b: a + b),
    (lambda g: (torch.randn(5, 7, generator=g).t(), torch.randn(7, 1, generator=g)), lambda a, b: a - b),
    (lambda g: (torch.randn(6, 8, generator=g).t(),), lambda a: a[:, ::2].exp()),  # not dense (sliced on the device)
    (lambda g: (torch.randn(6, 8, generator=g).t(),), lambda a: a[:, ::2] * 2),
    (lambda g: (torch.randn(4, 6, generator=g).t() > 0, torch.randn(6, 4, generator=g), torch.randn(6, 1, generator=g)),
     lambda c, a, b: torch.where(c, a, b)),
]


@pytest.mark.parametrize("case", range(len(LAYOUT_CASES)))
def test_elementwise_results_have_the_cpus_layout(case):
    make, fn = LAYOUT_CASES[case]
    operands = make(torch.Generator().manual_seed(case))
    expected = fn(*operands)
    got = fn(*(t.to("neuron") for t in operands))
    assert got.stride() == expected.stride() == fn(*(t.to("meta") for t in operands)).stride()
    torch.testing.assert_close(got.cpu(), expected)
    assert not trnsim.fallback_report(), trnsim.fallback_report()


def test_compiled_bf16_sdpa_trains_with_the_flash_path():
    """AOT autograd saves the flash op's philox seed / offset for the backward: they were None."""
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 32, 64, generator=g).to(torch.bfloat16) for _ in range(3))

    def attention(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def grads(fn, device):
        leaves = [t.to(device).requires_grad_() for t in (q, k, v)]
        out = fn(*leaves)
        out.float().square().sum().backward()
        return [out.detach().float().cpu()] + [t.grad.float().cpu() for t in leaves]

    compiled = torch.compile(attention, backend=trnsim.compile_backend)
    for got, expected in zip(grads(compiled, "neuron"), grads(attention, "cpu")):
        torch.testing.assert_close(got, expected, rtol=4e-2, atol=4e-2)
    ops = trnsim.op_log("kernel")
    assert any(r["op"] == "_scaled_dot_product_fused_attention_overrideable_backward" for r in ops)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_square_and_pow_keep_the_integer_dtype(dtype):
    x = torch.tensor([[-7, 0, 3], [12, -4095, 4096]], dtype=dtype)
    small = torch.tensor([[-7, 0, 3], [12, -200, 255]], dtype=dtype)
    cases = [(torch.square, x), (lambda t: t.pow(2), x), (lambda t: t.pow(1), x), (lambda t: t ** 3, small),
             (lambda t: t.pow(2.0), x), (lambda t: t.pow(0.5), x)]
    for fn, t in cases:
        for operand in (t, t[:, 1:]):
            expected, got = fn(operand), fn(operand.to("neuron"))
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got.cpu(), expected, equal_nan=True)
    assert not trnsim.fallback_report(), trnsim.fallback_report()


@pytest.mark.parametrize("args", [(3.1,), (0, 5, 3), (1, 10.5, 2), (0, -3.1, -1), (-2, 7, 3), (0, 4, 3), (2.0, 9.99)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_arange_has_the_cpus_length(args, dtype):
    expected = torch.arange(*args, dtype=dtype)
    got = torch.arange(*args, dtype=dtype, device="neuron")
    assert got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected)


def test_int64_extremes_convert_to_float_like_the_cpu():
    x = torch.tensor([torch.iinfo(torch.int64).min, 3, -5, torch.iinfo(torch.int64).max])
    d = x.to("neuron")
    for fn in (lambda t: t.float(), lambda t: t.to(torch.bfloat16), lambda t: t * 0.5, lambda t: t.sigmoid(),
               lambda t: torch.where(t > 0, t, torch.zeros((), dtype=torch.int64)).float(),
               lambda t: t[:2].float()):
        expected = fn(x)
        got = fn(d)
        torch.testing.assert_close(got.cpu(), expected)
    assert d[:1].float().item() == -9.223372036854775808e18
    mask = torch.tensor([True, True, False, True])
    torch.testing.assert_close(torch.masked.logsumexp(d[1:3], 0, mask=mask[1:3].to("neuron")).cpu(),
                               torch.masked.logsumexp(x[1:3], 0, mask=mask[1:3]))


def test_partially_overlapping_inplace_ops_raise_like_the_cpu():
    x = torch.randn(3, 3)
    d = x.to("neuron")
    cases = [lambda t: t.t().add_(t), lambda t: t.t().mul_(t), lambda t: t[1:].sub_(t[:2]),
             lambda t: t[:, :2].unsqueeze(0).expand(2, 3, 2).add_(1), lambda t: torch.add(t, t, out=t.t()),
             lambda t: t.t().div_(t)]
    for case in cases:
        with pytest.raises(RuntimeError, match="unsupported operation") as cpu_error:
            case(x.clone())
        with pytest.raises(RuntimeError, match="unsupported operation") as device_error:
            case(d.clone())
        assert str(device_error.value).split("\n")[0] == str(cpu_error.value).split("\n")[0]
    d.add_(d)  # full overlap is fine
    torch.testing.assert_close(d.cpu(), x + x)
