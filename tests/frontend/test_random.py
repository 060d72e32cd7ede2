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


def _seed_and_offset(state):
    assert state.dtype == torch.uint8 and state.numel() == 16
    seed, offset = state.view(torch.int64).tolist()
    return seed, offset


def test_the_state_is_seed_and_offset_as_cudas():
    torch.manual_seed(7)
    assert _seed_and_offset(torch.neuron.get_rng_state()) == (7, 0)
    torch.rand(10, device="neuron")
    torch.randn(4, 4, device="neuron")
    # Each op moves the offset past its elements, rounded up to 4 (as Philox's offset moves on CUDA).
    assert _seed_and_offset(torch.neuron.get_rng_state()) == (7, 12 + 16)
    g = torch.Generator("neuron").manual_seed(2)
    assert (g.initial_seed(), g.get_offset()) == (2, 0)
    torch.rand(6, device="neuron", generator=g)
    assert g.get_offset() == 8
    assert _seed_and_offset(g.get_state()) == (2, 8)


def test_a_state_set_again_gives_the_numbers_that_followed_it():
    torch.manual_seed(3)
    torch.randn(5, device="neuron")
    state = torch.neuron.get_rng_state()
    a, b = torch.randn(100, device="neuron").cpu(), torch.rand(7, device="neuron").cpu()
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.randn(100, device="neuron").cpu(), a)
    assert torch.equal(torch.rand(7, device="neuron").cpu(), b)
    # Any (seed, offset) names one stream: the same at every set, another at another offset or seed.
    def draw(seed, offset):
        torch.neuron.set_rng_state(torch.tensor([seed, offset], dtype=torch.int64).view(torch.uint8))
        return torch.rand(64, device="neuron").cpu()
    assert torch.equal(draw(3, 1000), draw(3, 1000))
    assert not torch.equal(draw(3, 1000), draw(3, 1004))
    assert not torch.equal(draw(3, 1000), draw(4, 1000))
    # Offset 0 is the seed's own stream: the CPU's.
    torch.manual_seed(3)
    assert torch.equal(draw(3, 0), torch.rand(64))


def test_fork_rng_leaves_the_cpu_stream_outside_it():
    torch.manual_seed(5)
    with torch.random.fork_rng(devices=[0], device_type="neuron"):
        inside = torch.rand(3, device="neuron").cpu()
    after = torch.rand(4, device="neuron").cpu()
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(4))
    assert torch.equal(inside, after[:3])  # the region drew from the same state, and it was restored


def test_checkpointed_dropout_recomputes_the_same_mask():
    from torch.utils.checkpoint import checkpoint
    x = torch.randn(32, 40)

    def block(t):
        return torch.nn.functional.dropout(t.tanh(), 0.4, training=True).square()

    grads = []
    for checkpointed in (False, True):
        xd = x.to("neuron").requires_grad_()
        torch.manual_seed(9)
        y = checkpoint(block, xd, use_reentrant=False) if checkpointed else block(xd)
        y.sum().backward()
        grads.append(xd.grad.cpu())
    assert torch.equal(grads[0], grads[1])
    assert (grads[0] == 0).float().mean() > 0.2  # the mask dropped some


def test_a_state_of_another_size_is_refused():
    with pytest.raises(RuntimeError, match="16 uint8 bytes"):
        torch.neuron.set_rng_state(torch.zeros(5056, dtype=torch.uint8))
