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
