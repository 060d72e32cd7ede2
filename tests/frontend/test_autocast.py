"""torch.autocast("neuron"): the per-op cast policies of frontend/autocast.cpp (CUDA's lists) against
the CPU running the same casts by hand, training under autocast, and torch.amp.GradScaler."""
import pytest
import torch
import torch.nn.functional as F

from test_ops import check, no_fallback, rand, strict_lowering, trnsim  # noqa: F401

LOW = [torch.bfloat16, torch.float16]
SCALAR_NAME = {torch.bfloat16: "BFloat16", torch.float16: "Half"}  # as the op log spells dtypes


def dev(t):
    return t.to("neuron")


def test_supported_dtypes_and_default():
    assert torch.neuron.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.amp.is_autocast_available("neuron")
    # torch's default for a PrivateUse1 device; bf16 has to be asked for.
    assert torch.get_autocast_dtype("neuron") == torch.float16
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("neuron") and torch.neuron.is_autocast_enabled()
        assert torch.neuron.get_autocast_dtype() == torch.bfloat16
    assert not torch.is_autocast_enabled("neuron")


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_matmul_and_linear_lower_precision(dtype):
    x, w, b = rand((33, 70), torch.float32, 1), rand((70, 20), torch.float32, 2), rand((20,), torch.float32, 3)
    with torch.autocast("neuron", dtype=dtype):
        mm = dev(x) @ dev(w)
        lin = F.linear(dev(x), dev(w).t(), dev(b))
        bmm = torch.bmm(dev(x).reshape(3, 11, 70), dev(w).expand(3, 70, 20))
    check(mm, x.to(dtype) @ w.to(dtype), dtype, 70)
    check(lin, F.linear(x.to(dtype), w.t().to(dtype), b.to(dtype)), dtype, 70)
    check(bmm, torch.bmm(x.reshape(3, 11, 70).to(dtype), w.expand(3, 70, 20).to(dtype)), dtype, 70)
    # The casts happen on the device and the matmul runs on the simulator in the low precision.
    no_fallback("mm", "addmm", "bmm")
    kernels = [r for r in trnsim.op_log("kernel") if r["op"] in ("mm", "addmm", "bmm")]
    assert kernels and all(r["dtype"] == SCALAR_NAME[dtype] for r in kernels), kernels


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_nn_linear_module(dtype):
    lin = torch.nn.Linear(64, 16)
    x = rand((8, 64), torch.float32, 4)
    lin_n = lin.to("neuron")
    with torch.autocast("neuron", dtype=dtype):
        out = lin_n(dev(x))
    assert lin_n.weight.dtype == torch.float32  # autocast casts copies, never the parameters
    with torch.no_grad():
        check(out, F.linear(x.to(dtype), lin.weight.cpu().to(dtype), lin.bias.cpu().to(dtype)), dtype, 64)


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_fp32_ops(dtype):
    x = rand((6, 40), torch.float32, 5).to(dtype)  # a low-precision activation, as a matmul leaves it
    y = rand((6, 40), torch.float32, 6).to(dtype)
    xn, yn = dev(x), dev(y)
    with torch.autocast("neuron", dtype=dtype):
        outs = {
            "softmax": (torch.softmax(xn, -1), torch.softmax(x.float(), -1)),
            "log_softmax": (F.log_softmax(xn, -1), F.log_softmax(x.float(), -1)),
            "layer_norm": (F.layer_norm(xn, (40,)), F.layer_norm(x.float(), (40,))),
            "mse_loss": (F.mse_loss(xn, yn), F.mse_loss(x.float(), y.float())),
            "exp": (torch.exp(xn), torch.exp(x.float())),
            "sum": (xn.sum(), x.float().sum()),
            "pow": (xn.pow(2), x.float().pow(2)),
        }
        explicit = torch.softmax(xn, -1, dtype=dtype)  # an explicit dtype wins over the fp32 policy
    for name, (out, expected) in outs.items():
        assert out.dtype == torch.float32, name
        check(out, expected, torch.float32 if name != "sum" else dtype)
    assert explicit.dtype == dtype


def test_cross_entropy_fp32():
    logits = rand((16, 10), torch.float32, 7).bfloat16()
    target = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(0))
    with torch.autocast("neuron", dtype=torch.bfloat16):
        loss = F.cross_entropy(dev(logits), dev(target))
    assert loss.dtype == torch.float32
    check(loss, F.cross_entropy(logits.float(), target), torch.float32)


def test_promote():
    a = rand((4, 5), torch.float32, 8)
    b = rand((4, 5), torch.float32, 9).bfloat16()
    with torch.autocast("neuron", dtype=torch.bfloat16):
        cat = torch.cat([dev(a), dev(b)])
        stack = torch.stack([dev(b), dev(a)])
        addcmul = torch.addcmul(dev(b), dev(b), dev(a))
        # index_copy itself requires equal dtypes: only the promote policy makes this legal.
        copied = dev(b).index_copy(0, dev(torch.tensor([2, 0])), dev(a[:2]))
        same = torch.cat([dev(b), dev(b)])
    check(cat, torch.cat([a, b.float()]), torch.float32)
    check(stack, torch.stack([b.float(), a]), torch.float32)
    check(addcmul, torch.addcmul(b.float(), b.float(), a), torch.float32)
    check(copied, b.float().index_copy(0, torch.tensor([2, 0]), a[:2]), torch.float32)
    assert same.dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="same dtype|expected"):
        dev(b).index_copy(0, dev(torch.tensor([2, 0])), dev(a[:2]))


def test_ops_without_policy_fall_through():
    x = dev(rand((5, 7), torch.float32, 10))
    xb = x.bfloat16()
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert torch.relu(x).dtype == torch.float32
        assert torch.relu(xb).dtype == torch.bfloat16
        assert (x + 1).dtype == torch.float32
        assert torch.sin(xb).dtype == torch.bfloat16
        assert x.argmax().dtype == torch.int64
        assert (torch.ones(3, device="neuron", dtype=torch.int32) * 2).dtype == torch.int32
        # A neuron autocast region leaves CPU tensors alone.
        assert (torch.ones(2, 3) @ torch.ones(3, 2)).dtype == torch.float32


def test_nested_disabled():
    x, w = dev(rand((8, 16), torch.float32, 11)), dev(rand((16, 4), torch.float32, 12))
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert (x @ w).dtype == torch.bfloat16
        with torch.autocast("neuron", enabled=False):
            assert not torch.is_autocast_enabled("neuron")
            inner = x @ w
            assert inner.dtype == torch.float32
            assert torch.softmax(inner.bfloat16(), -1).dtype == torch.bfloat16
        assert (x @ w).dtype == torch.bfloat16
    check(inner, x.cpu() @ w.cpu(), torch.float32, 16)


def test_binary_cross_entropy_banned():
    p = dev(torch.rand(4))
    with torch.autocast("neuron", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, p)
        out = F.binary_cross_entropy_with_logits(p, p)
    assert out.dtype == torch.float32


@pytest.mark.parametrize("dtype", LOW, ids=str)
def test_mlp_forward_backward(dtype):
    torch.manual_seed(0)
    w1, b1 = rand((32, 24), torch.float32, 13) * 0.2, rand((32,), torch.float32, 14) * 0.1
    w2, b2 = rand((3, 32), torch.float32, 15) * 0.2, rand((3,), torch.float32, 16) * 0.1
    x, target = rand((10, 24), torch.float32, 17), rand((10, 3), torch.float32, 18)

    # CPU: the casts autocast makes, written out.
    ref = [t.clone().requires_grad_() for t in (w1, b1, w2, b2)]
    h = F.relu(F.linear(x.to(dtype), ref[0].to(dtype), ref[1].to(dtype)))
    out_ref = F.linear(h, ref[2].to(dtype), ref[3].to(dtype))
    loss_ref = F.mse_loss(out_ref.float(), target)
    loss_ref.backward()

    params = [dev(t).requires_grad_() for t in (w1, b1, w2, b2)]
    with torch.autocast("neuron", dtype=dtype):
        h = F.relu(F.linear(dev(x), params[0], params[1]))
        out = F.linear(h, params[2], params[3])
        assert h.dtype == dtype and out.dtype == dtype
        loss = F.mse_loss(out, dev(target))
    assert loss.dtype == torch.float32
    loss.backward()

    check(loss, loss_ref.detach(), dtype, 32)
    for p, r in zip(params, ref):
        assert p.grad is not None and p.grad.dtype == torch.float32 and p.grad.device.type == "neuron"
        torch.testing.assert_close(p.grad.cpu(), r.grad, rtol=3e-2, atol=3e-2)


def test_grad_scaler():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("neuron", init_scale=2.0 ** 10)
    x, target = dev(rand((32, 16), torch.float32, 19)), dev(rand((32, 4), torch.float32, 20) * 0.1)

    def step(poison=False):
        opt.zero_grad()
        with torch.autocast("neuron", dtype=torch.float16):
            loss = F.mse_loss(model(x), target)
        scaler.scale(loss).backward()
        if poison:
            with torch.no_grad():
                model[0].weight.grad[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        return loss.item()

    losses = [step() for _ in range(4)]
    assert losses[-1] < losses[0]
    assert scaler.get_scale() == 2.0 ** 10
    assert all(p.grad.dtype == torch.float32 and torch.isfinite(p.grad.cpu()).all() for p in model.parameters())

    before = [p.detach().cpu().clone() for p in model.parameters()]
    step(poison=True)  # an inf gradient: the step is skipped and the scale backs off
    assert scaler.get_scale() == 2.0 ** 9
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach().cpu(), b)
