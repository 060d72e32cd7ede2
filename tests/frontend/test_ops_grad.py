"""The PyTorch device "neuron": activation backward ops (gelu_backward) on the simulator against
the CPU, and autograd through gelu with no fallback."""
import pytest
import torch

from test_ops import DTYPES, no_fallback, rand, strict_lowering, trnsim  # noqa: F401


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(33, 130), (3, 5, 301), (1,)])
def test_gelu_backward(shape, approximate, dtype):
    x, g = rand(shape, dtype, 71) * 2, rand(shape, dtype, 72)
    out = torch.ops.aten.gelu_backward(g.to("neuron"), x.to("neuron"), approximate=approximate)
    expected = torch.ops.aten.gelu_backward(g, x, approximate=approximate)
    assert out.device.type == "neuron" and out.dtype == dtype and out.shape == expected.shape
    # fp32: the exact form is the activation table's gelu_dx (host erf / exp: 1 + erf cancels for
    # negative x); the tanh form is composed of ~16 element-wise kernels. bf16: every composed step
    # rounds to bf16 where torch computes in fp32 and rounds once.
    if dtype == torch.float32:
        rtol, atol = 1e-4, 1e-5
    else:
        rtol, atol = (2e-2, 1e-2) if approximate == "none" else (5e-2, 4e-2)
    torch.testing.assert_close(out.cpu().float(), expected.float(), rtol=rtol, atol=atol)
    no_fallback("gelu_backward")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_autograd_has_no_fallback(approximate):
    a = rand((17, 200), torch.float32, 73)
    x = a.clone().requires_grad_()
    torch.nn.functional.gelu(x, approximate=approximate).sum().backward()
    xd = a.to("neuron").requires_grad_()
    trnsim.set_fallback_mode("error")
    torch.nn.functional.gelu(xd, approximate=approximate).sum().backward()
    trnsim.set_fallback_mode("allow")
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_float_classification(dtype):
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([[1.0, -inf, inf, nan, 0.0, -2.0]] * 3 + [[nan, 5.0, -inf, 1e30, -0.0, inf]], dtype=dtype)
    x = a.to("neuron")
    trnsim.set_fallback_mode("error")
    for fn in (torch.isneginf, torch.isposinf, torch.isinf, torch.isnan):
        out = fn(x)
        assert out.device.type == "neuron" and out.dtype == torch.bool
        assert torch.equal(out.cpu(), fn(a)), fn
    o = torch.empty(0, dtype=torch.bool, device="neuron")
    torch.isneginf(x, out=o)
    assert torch.equal(o.cpu(), torch.isneginf(a))


@pytest.mark.parametrize("src", ["bool", "float"])
@pytest.mark.parametrize("shape", [(5, 7), (3, 130, 4), (6,)])
def test_all_any(src, shape):
    g = torch.Generator().manual_seed(74)
    b = torch.rand(shape, generator=g) > 0.3
    b.view(-1, shape[-1])[0] = True
    b.view(-1, shape[-1])[-1] = False
    a = b if src == "bool" else torch.randn(shape, generator=g) * b
    x = a.to("neuron")
    trnsim.set_fallback_mode("error")
    fns = [lambda t: t.all(), lambda t: t.any(), lambda t: t.all(-1), lambda t: t.any(0, keepdim=True),
           lambda t: t.all(0), lambda t: torch.ones_like(t, dtype=torch.bool).all()]
    for fn in fns:
        out = fn(x)
        assert out.device.type == "neuron"
        assert torch.equal(out.cpu(), fn(a))


def test_where_with_0dim_operand():
    cond = torch.randn(4, 33) > 0
    a = torch.randn(4, 33)
    zero = torch.zeros((), dtype=torch.float32)
    out = torch.where(cond.to("neuron"), zero.to("neuron"), a.to("neuron"))
    assert torch.equal(out.cpu(), torch.where(cond, zero, a))
    no_fallback("where")


def test_transformer_encoder_layer_forward_backward_has_no_fallback():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    device_layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    device_layer.load_state_dict(layer.state_dict())
    device_layer.to("neuron")
    x = torch.randn(2, 10, 64)
    xd = x.to("neuron").requires_grad_()
    x.requires_grad_()
    y = layer(x)
    (y * y).sum().backward()
    trnsim.set_fallback_mode("error")
    yd = device_layer(xd)
    (yd * yd).sum().backward()
    trnsim.set_fallback_mode("allow")
    torch.testing.assert_close(yd.cpu(), y.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-3, atol=1e-3)
    for (name, p), pd in zip(layer.named_parameters(), device_layer.parameters()):
        torch.testing.assert_close(pd.grad.cpu(), p.grad, rtol=1e-3, atol=1e-3, msg=name)
