"""Row-wise kernels at extreme values through the PyTorch device, against torch on the CPU (issue 10 item 3).

log_softmax / cross_entropy used to fold the row max into one fp32 bias -max - log(sum), which rounds
log(sum) to an ulp of the max (0.03 at an offset of 1e6, 0.48 at 1e7, all of it for a row of 1e30);
layer_norm normalised as x * rstd - mean * rstd (an ulp of x * rstd lost to cancellation) and gave 0 where
the CPU's Welford statistics give NaN. Values are compared at PyTorch's device-vs-CPU tolerance (fp32
1e-3 abs/rel, bf16 1.6e-2) with NaN in exactly the CPU's positions. Where torch's fp32 CPU result is itself
off by more than that (layer_norm at an offset of 1e4: its x * rstd - mean * rstd form), the device is
checked against float64 instead.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import trnsim  # noqa: F401  (registers the device)

TOL = {torch.float32: dict(atol=1e-3, rtol=1e-3), torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2)}


@pytest.fixture(autouse=True)
def lowered_only():
    """Every device op of these tests runs on its kernel: a fallback would compare the CPU with itself."""
    trnsim.set_fallback_mode("allow")
    trnsim.reset_fallback_report()
    yield
    report = trnsim.fallback_report()
    trnsim.set_fallback_mode("warn")
    assert not report, f"ops fell back to the CPU: {report}"


def close(dev, ref, dtype=torch.float32):
    """Device values within the dtype's tolerance of the reference, NaN exactly where the reference has it."""
    dev = dev.detach().cpu().float()
    ref = ref.detach().float()
    assert torch.equal(torch.isnan(dev), torch.isnan(ref)), (
        f"NaN positions differ: device {torch.isnan(dev).nonzero()[:4].tolist()} cpu {torch.isnan(ref).nonzero()[:4].tolist()}")
    torch.testing.assert_close(dev, ref, equal_nan=True, **TOL[dtype])


def on_both(x):
    """x on the CPU and an equal leaf on the device, both requiring grad."""
    cpu = x.detach().clone().requires_grad_(True)
    dev = x.detach().to("neuron").requires_grad_(True)
    return cpu, dev


# ---- log_softmax / softmax / cross_entropy at large logit offsets ----

def check_row_fn_and_grad(fn, seed, offset, cols):
    """fn(x, -1) and its gradient for 4 rows of N(offset, 9) logits, device against the CPU."""
    torch.manual_seed(seed)
    x = torch.randn(4, cols) * 3 + offset
    xc, xd = on_both(x)
    yc, yd = fn(xc, -1), fn(xd, -1)
    close(yd, yc)
    dy = torch.randn(4, cols)
    yc.backward(dy)
    yd.backward(dy.to("neuron"))
    close(xd.grad, xc.grad)


@pytest.mark.parametrize("offset", [1e4, 1e6, 1e7])
@pytest.mark.parametrize("cols", [64, 50000])  # one pass / column chunks (rows longer than SBUF)
def test_log_softmax_large_offset(offset, cols):
    check_row_fn_and_grad(F.log_softmax, 0, offset, cols)


@pytest.mark.parametrize("offset", [1e4, 1e7])
@pytest.mark.parametrize("cols", [64, 50000])
def test_softmax_large_offset(offset, cols):
    check_row_fn_and_grad(F.softmax, 1, offset, cols)


@pytest.mark.parametrize("offset", [1e4, 1e6, 1e7])
@pytest.mark.parametrize("cols", [64, 50000])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_large_offset(offset, cols, reduction):
    torch.manual_seed(2)
    x = torch.randn(6, cols) * 3 + offset
    t = torch.randint(0, cols, (6,))
    xc, xd = on_both(x)
    lc = F.cross_entropy(xc, t, reduction=reduction)
    ld = F.cross_entropy(xd, t.to("neuron"), reduction=reduction)
    close(ld, lc)
    lc.sum().backward()
    ld.sum().backward()
    close(xd.grad, xc.grad)


def test_cross_entropy_row_of_1e30():
    # Every logit equal: the loss is log(row length) whatever their size.
    x = torch.full((2, 64), 1e30)
    t = torch.tensor([0, 5])
    ld = F.cross_entropy(x.to("neuron"), t.to("neuron"))
    assert math.isclose(ld.item(), math.log(64), rel_tol=1e-6)
    close(ld, F.cross_entropy(x, t))
    close(F.log_softmax(x.to("neuron"), -1), F.log_softmax(x, -1))


def test_cross_entropy_label_smoothing_large_offset():
    torch.manual_seed(3)
    x = torch.randn(5, 300) + 1e6
    t = torch.randint(0, 300, (5,))
    xc, xd = on_both(x)
    lc = F.cross_entropy(xc, t, label_smoothing=0.1)
    ld = F.cross_entropy(xd, t.to("neuron"), label_smoothing=0.1)
    close(ld, lc)
    lc.backward()
    ld.backward()
    close(xd.grad, xc.grad)


def test_cross_entropy_bf16_large_offset():
    torch.manual_seed(4)
    x = (torch.randn(8, 512) * 3 + 1e4).bfloat16()
    t = torch.randint(0, 512, (8,))
    close(F.cross_entropy(x.to("neuron"), t.to("neuron")), F.cross_entropy(x, t), torch.bfloat16)
    close(F.log_softmax(x.to("neuron"), -1), F.log_softmax(x, -1), torch.bfloat16)


# ---- inf / nan / -inf entries ----

def special_rows(cols):
    x = torch.randn(6, cols)
    x[0, 3] = float("inf")            # +inf: NaN row on the CPU
    x[1, 5] = float("nan")            # NaN: NaN row
    x[2, :] = float("-inf")           # all -inf: NaN row
    x[3, : cols // 2] = float("-inf")  # a masked half (a whole column chunk of -inf when chunked)
    x[4, 7] = float("-inf")           # one masked entry
    return x


@pytest.mark.parametrize("cols", [64, 50000])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_special_values(cols, log):
    torch.manual_seed(5)
    x = special_rows(cols)
    fn = F.log_softmax if log else F.softmax
    close(fn(x.to("neuron"), -1), fn(x, -1))


@pytest.mark.parametrize("cols", [64, 50000])
def test_cross_entropy_special_values(cols):
    torch.manual_seed(6)
    x = special_rows(cols)
    t = torch.tensor([0, 1, 2, cols - 1, 7, 9])  # row 4's target is the -inf entry: loss +inf
    close(F.cross_entropy(x.to("neuron"), t.to("neuron"), reduction="none"), F.cross_entropy(x, t, reduction="none"))


# ---- layer_norm / rms_norm ----

def layer_norm_both(x, weight, bias):
    cols = x.shape[-1]
    torch.manual_seed(7)
    w = torch.randn(cols) if weight else None
    b = torch.randn(cols) if bias else None
    dy = torch.randn(x.shape)
    out = []
    for dev in ("cpu", "neuron", "f64"):
        dt = torch.float64 if dev == "f64" else x.dtype
        place = "cpu" if dev == "f64" else dev
        xx = x.detach().to(place, dt).requires_grad_(True)
        ww = w.detach().to(place, dt).requires_grad_(True) if weight else None
        bb = b.detach().to(place, dt).requires_grad_(True) if bias else None
        y = F.layer_norm(xx, (cols,), ww, bb)
        y.backward(dy.to(place, dt))
        out.append([y, xx.grad] + ([ww.grad] if weight else []) + ([bb.grad] if bias else []))
    return out


@pytest.mark.parametrize("offset", [0.0, 1e3])
@pytest.mark.parametrize("cols", [64, 4096, 40000])  # one pass / dw wider than the PSUM banks / chunked rows
def test_layer_norm_offset_vs_cpu(offset, cols):
    # Offsets where torch's own fp32 result is within the tolerance of float64.
    torch.manual_seed(8)
    x = torch.randn(8, cols) + offset
    cpu, dev, _ = layer_norm_both(x, True, True)
    for d, c in zip(dev, cpu):
        close(d, c)


def error_in_tolerances(out, ref):
    """max |out - ref| / (1e-3 + 1e-3 |ref|): 1 is the edge of PyTorch's fp32 device-vs-CPU tolerance."""
    out, ref = out.detach().cpu().double(), ref.detach().double()
    return ((out - ref).abs() / (1e-3 + 1e-3 * ref.abs())).max().item()


@pytest.mark.parametrize("offset", [1e4, 1e5])
@pytest.mark.parametrize("cols", [64, 4096, 40000])  # one pass / fp32 chunked rows / long rows
@pytest.mark.parametrize("weight", [False, True])
def test_layer_norm_large_offset_vs_float64(offset, cols, weight):
    # x = offset + noise. No fp32 result is within 1e-3 of float64 here (the mean alone rounds by half an
    # ulp of 1e4, 5e-4, times rstd * |w|), and torch's CPU is further off still (its x * rstd - mean * rstd
    # forward and sum(g * x) - mean * sum(g) backward cancel: 2-50x the tolerance). The device subtracts
    # the mean first: within the tolerance or no worse than 1.25x the CPU's own error, output by output.
    torch.manual_seed(9)
    x = torch.randn(8, cols) + offset
    cpu, dev, ref = layer_norm_both(x, weight, weight)
    names = ["y", "dx", "dw", "db"]
    for name, d, c, r in zip(names, dev, cpu, ref):
        assert torch.equal(torch.isnan(d.cpu()), torch.isnan(r)), name
        e_dev, e_cpu = error_in_tolerances(d, r), error_in_tolerances(c, r)
        assert e_dev <= max(1.0, 1.25 * e_cpu), f"{name}: device {e_dev:.2f} tolerances off float64, cpu {e_cpu:.2f}"


def test_layer_norm_overflow_rows_nan_as_cpu():
    # Rows whose mean squared overflows fp32 are NaN on the CPU (its Welford statistics); rows whose
    # variance alone overflows give rstd 0 and y = 0; inf / nan entries make the row NaN.
    torch.manual_seed(10)
    x = torch.randn(8, 64)
    x[0] = 1e30                        # constant row of 1e30: mean^2 overflows -> NaN
    x[1] = torch.randn(64) + 1e30      # offset 1e30 -> NaN
    x[2] = 2e19                        # mean^2 = 4e38 overflows -> NaN
    x[3] = 1e19                        # mean^2 = 1e38 fits: var 0, y = 0
    x[4, 3] = float("inf")
    x[5, 9] = float("nan")
    x[6] = torch.randn(64) * 3e18      # sum of squared deviations overflows: rstd 0, y = 0
    x[7, :2] = torch.tensor([float("inf"), -float("inf")])
    close(F.layer_norm(x.to("neuron"), (64,)), F.layer_norm(x, (64,)))
    w, b = torch.randn(64), torch.randn(64)
    close(F.layer_norm(x.to("neuron"), (64,), w.to("neuron"), b.to("neuron")), F.layer_norm(x, (64,), w, b))
    # The backward from those statistics: NaN rows (and NaN dw / db) where the CPU has them.
    dy = torch.randn(8, 64)
    grads = []
    for dev in ("cpu", "neuron"):
        leaves = [t.detach().clone().to(dev).requires_grad_(True) for t in (x, w, b)]
        F.layer_norm(leaves[0], (64,), leaves[1], leaves[2]).backward(dy.to(dev))
        grads.append([t.grad for t in leaves])
    for d, c in zip(grads[1], grads[0]):
        close(d, c)


@pytest.mark.parametrize("offset", [1e4, 1e6])
@pytest.mark.parametrize("cols", [64, 40000])
def test_rms_norm_large_offset(offset, cols):
    torch.manual_seed(11)
    x = torch.randn(4, cols) + offset
    w = torch.randn(cols)
    xc, xd = on_both(x)
    wc, wd = on_both(w)
    yc, yd = F.rms_norm(xc, (cols,), wc), F.rms_norm(xd, (cols,), wd)
    close(yd, yc)
    dy = torch.randn(4, cols)
    yc.backward(dy)
    yd.backward(dy.to("neuron"))
    close(xd.grad, xc.grad)
    close(wd.grad, wc.grad)


def test_rms_norm_special_values():
    x = torch.randn(4, 64)
    x[0, 1] = float("inf")
    x[1, 2] = float("nan")
    x[2] = 1e30  # squares overflow: rstd 0, y = 0
    close(F.rms_norm(x.to("neuron"), (64,)), F.rms_norm(x, (64,)))


@pytest.mark.parametrize("cols", [64, 4096, 40000])
def test_norms_bf16_offset(cols):
    # bf16 at bf16 tolerance (torch computes in fp32 and rounds once); 1e2 keeps noise above bf16's ulp.
    torch.manual_seed(12)
    x = (torch.randn(8, cols) + 1e2).bfloat16()
    w, b = torch.randn(cols).bfloat16(), torch.randn(cols).bfloat16()
    xd, wd, bd = x.to("neuron"), w.to("neuron"), b.to("neuron")
    close(F.layer_norm(xd, (cols,), wd, bd), F.layer_norm(x, (cols,), w, b), torch.bfloat16)
    close(F.rms_norm(xd, (cols,), wd), F.rms_norm(x, (cols,), w), torch.bfloat16)
