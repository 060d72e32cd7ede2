"""NKI kernels on tensors of the `neuron` device: one op of the PyTorch program (simulated clock,
op log, profiler), values equal to NumPy, a user-supplied backward through torch.autograd.Function."""
import numpy as np
import pytest
import torch

import trnsim
import trnsim.nki

nki = pytest.importorskip("nki")
import nki.language as nl  # noqa: E402


@nki.jit
def scaled_product(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128, :])
        y = nl.load(b[i * 128:(i + 1) * 128, :])
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(nl.multiply(x, y), 2.0))
    return out


class ScaledProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return scaled_product(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return scaled_product(grad, b), scaled_product(grad, a)


def test_cpu_tensors_in_cpu_tensors_out():
    a, b = torch.randn(256, 64), torch.randn(256, 64)
    out = scaled_product(a, b)
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu"
    torch.testing.assert_close(out, 2 * a * b)


def test_neuron_tensors_run_as_a_device_op():
    a, b = torch.randn(256, 64), torch.randn(256, 64)
    da, db = a.to("neuron"), b.to("neuron")
    seen = len(trnsim.op_log())
    out = scaled_product(da, db)
    assert out.device.type == "neuron"
    new = trnsim.op_log()[seen:]
    log = [r for r in new if r["op"] == "nki.scaled_product"]
    assert len(log) == 1 and log[0]["ns"] == pytest.approx(scaled_product.last_latency_ns)
    assert log[0]["kind"] == "kernel"
    # Nothing went over the host link: the kernel reads the device tensors in place.
    assert [r["op"] for r in new] == ["nki.scaled_product"]
    np.testing.assert_allclose(out.cpu().numpy(), (2 * a * b).numpy(), rtol=1e-6)
    # The same kernel on the CPU path gives the same simulated time (same program, same config).
    scaled_product(a, b)
    assert scaled_product.last_latency_ns == pytest.approx(log[0]["ns"])


def test_user_backward_through_autograd_function():
    a, b = torch.randn(128, 32), torch.randn(128, 32)
    da = a.to("neuron").requires_grad_()
    db = b.to("neuron").requires_grad_()
    out = ScaledProduct.apply(da, db)
    out.sum().backward()
    torch.testing.assert_close(da.grad.cpu(), 2 * b)
    torch.testing.assert_close(db.grad.cpu(), 2 * a)


def test_in_the_profiler_table():
    a = torch.randn(128, 32).to("neuron")
    with trnsim.profile() as prof:
        scaled_product(a, a)
    assert "nki.scaled_product" in prof.table()


def test_recorded_and_replayed(tmp_path):
    """A kernel on the device is a launch of a recording (its program, no kernel invocation):
    `trnsim replay` re-times it to the recorded time, bit for bit."""
    import json
    import os
    import subprocess
    a = torch.randn(128, 32).to("neuron")
    path = tmp_path / "nki.trnrec"
    with trnsim.record(str(path)):
        scaled_product(a, a)
    recorded = scaled_product.last_latency_ns
    build = os.environ.get("TRNSIM_BUILD_DIR", os.path.join(trnsim._C.source_dir(), "build"))
    out = tmp_path / "replay.json"
    subprocess.run([os.path.join(build, "bin", "trnsim"), "replay", str(path), "--json", str(out)], check=True,
                   capture_output=True)
    report = json.loads(out.read_text())
    (launch,) = report["launches"]
    assert launch["op"] == "nki.scaled_product" and launch["kind"] == "kernel"
    assert launch["recorded_ns"] == recorded and launch["ns"] == recorded   # bit for bit


@nki.jit
def swap_halves(a):
    """LNC=2 on the device: each core writes its half, the cores meet (nisa.core_barrier), each copies the
    other's half: out = a with its halves swapped, as one op of the program."""
    import nki.isa as nisa
    n, d = a.shape
    half = n // 2
    me = nl.program_id(0)
    shared = nl.ndarray((n, d), dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray((n, d), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(shared[me * half:(me + 1) * half, :], nl.load(a[me * half:(me + 1) * half, :]))
    nisa.core_barrier(shared, (0, 1))
    other = 1 - me
    nl.store(out[me * half:(me + 1) * half, :], nl.load(shared[other * half:(other + 1) * half, :]))
    return out


def test_an_lnc_launch_is_one_op_on_both_physical_cores():
    if trnsim._C.device_config_leaves().get("chip.default_logical_core_size") != "2":
        pytest.skip("the device's config has no LNC=2")
    a = torch.randn(256, 64)
    seen = len(trnsim.op_log())
    out = swap_halves[2](a.to("neuron"))
    torch.testing.assert_close(out.cpu(), torch.cat([a[128:], a[:128]]))
    log = [r for r in trnsim.op_log()[seen:] if r["op"] == "nki.swap_halves"]
    assert len(log) == 1
