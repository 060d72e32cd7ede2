"""Random numbers on the device: the device generators (seeded by torch.manual_seed, or a
torch.Generator("neuron")) draw with the CPU's algorithm from their own state, so a seed gives the
CPU's values; dropout runs on the device with them."""
import pytest
import torch

from test_ops import strict_lowering, trnsim  # noqa: F401


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_factories_reproduce_the_cpu_stream(dtype):
    torch.manual_seed(11)
    dev = [torch.randn(300, 7, device="neuron", dtype=dtype), torch.rand(33, device="neuron", dtype=dtype),
           torch.randint(-5, 5, (40,), device="neuron"), torch.empty(50, device="neuron").exponential_(2.0),
           torch.empty(64, device="neuron").bernoulli_(0.25), torch.empty(9, device="neuron").uniform_(-3, 2)]
    torch.manual_seed(11)
    cpu = [torch.randn(300, 7, dtype=dtype), torch.rand(33, dtype=dtype), torch.randint(-5, 5, (40,)),
           torch.empty(50).exponential_(2.0), torch.empty(64).bernoulli_(0.25), torch.empty(9).uniform_(-3, 2)]
    for d, c in zip(dev, cpu):
        assert d.device.type == "neuron" and torch.equal(d.cpu(), c)
    assert trnsim.fallback_report() == {}
    # Each float draw is charged one element-wise pass on the device.
    assert {r["op"] for r in trnsim.op_log("kernel")} >= {"normal_", "uniform_", "exponential_", "bernoulli_"}


def test_device_generator_object_and_state():
    g = torch.Generator("neuron").manual_seed(3)
    a = torch.randn(100, device="neuron", generator=g)
    g.manual_seed(3)
    b = torch.randn(100, device="neuron", generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    torch.manual_seed(4)
    state = torch.neuron.get_rng_state() if hasattr(torch.neuron, "get_rng_state") else None
    c = torch.randn(10, device="neuron")
    d = torch.randn(10, device="neuron")
    assert not torch.equal(c.cpu(), d.cpu())  # the stream advances
    if state is not None:
        torch.neuron.set_rng_state(state)
        assert torch.equal(torch.randn(10, device="neuron").cpu(), c.cpu())


def test_cpu_generator_is_rejected_for_a_device_tensor():
    with pytest.raises(RuntimeError, match="neuron generator"):
        torch.empty(4, device="neuron").normal_(generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_dropout_forward_backward_matches_cpu(p):
    torch.manual_seed(1)
    x = torch.randn(64, 130, requires_grad=True)
    xd = x.detach().to("neuron").requires_grad_()
    torch.manual_seed(9)
    y = torch.nn.functional.dropout(x, p, training=True)
    y.square().sum().backward()
    torch.manual_seed(9)
    yd = torch.nn.functional.dropout(xd, p, training=True)
    yd.square().sum().backward()
    torch.testing.assert_close(yd.cpu(), y)
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    assert trnsim.fallback_report() == {}


def test_dropout_in_eval_is_identity():
    x = torch.randn(10, 10).to("neuron")
    m = torch.nn.Dropout(0.5).eval()
    assert torch.equal(m(x).cpu(), x.cpu())
