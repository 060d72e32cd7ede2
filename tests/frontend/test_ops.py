"""The PyTorch device "neuron", second slice: the first ops that run on the simulator (kernel
library; values from the interpreter, time from the timing model) against the CPU, the simulated
clock and the op log."""
import os
import pathlib
import sys

import pytest
import torch

PYTHON_DIR = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", pathlib.Path(__file__).resolve().parents[2] / "build")) / "python"
if not (PYTHON_DIR / "trnsim").is_dir():
    raise ImportError(f"{PYTHON_DIR}/trnsim is missing: run `make` (the frontend is built with the project)")
sys.path.insert(0, str(PYTHON_DIR))

import trnsim  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16]


def tolerance(dtype, k=1):
    """(rtol, atol) for a result of `dtype` that sums `k` products."""
    eps = {torch.float32: 2e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}[dtype]
    return 4 * eps, 4 * eps * max(1.0, k ** 0.5)


@pytest.fixture(autouse=True)
def strict_lowering():
    """The lowered ops must not fall back: count, and keep the report clean per test."""
    trnsim.set_fallback_mode("allow")
    trnsim.reset_fallback_report()
    trnsim.reset_simulated_time()
    yield
    trnsim.set_fallback_mode("warn")


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def check(out, expected, dtype, k=1):
    assert out.device.type == "neuron"
    assert out.dtype == expected.dtype and out.shape == expected.shape
    rtol, atol = tolerance(dtype, k)
    torch.testing.assert_close(out.cpu().float(), expected.float(), rtol=rtol, atol=atol)


def no_fallback(*names):
    report = trnsim.fallback_report()
    for name in names:
        assert not any(op == f"aten::{name}" or op.startswith(f"aten::{name}.") for op in report), report


MM_SHAPES = [(130, 77, 300), (1, 1, 1), (128, 128, 512), (64, 300, 17)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", MM_SHAPES)
def test_mm(m, k, n, dtype):
    a, b = rand((m, k), dtype, 1), rand((k, n), dtype, 2)
    out = a.to("neuron") @ b.to("neuron")
    check(out, a @ b, dtype, k)
    no_fallback("mm")
    log = trnsim.op_log("kernel")
    assert [r["op"] for r in log] == ["mm"] and log[0]["shapes"] == [[m, k], [k, n]]
    assert log[0]["flops"] >= 2 * m * k * n and log[0]["ns"] > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_transposed_operands(dtype):
    a, b = rand((77, 130), dtype, 3), rand((300, 77), dtype, 4)  # stored the other way round
    out = a.to("neuron").t() @ b.to("neuron").t()
    check(out, a.t() @ b.t(), dtype, 77)
    no_fallback("mm")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias_shape", [(300,), (1, 300), (130, 300)])
def test_addmm(bias_shape, dtype):
    bias, a, b = rand(bias_shape, dtype, 5), rand((130, 77), dtype, 6), rand((77, 300), dtype, 7)
    out = torch.addmm(bias.to("neuron"), a.to("neuron"), b.to("neuron"))
    check(out, torch.addmm(bias, a, b), dtype, 77)
    no_fallback("addmm")


def test_addmm_scaled_runs_as_matmul_and_elementwise_kernels():
    bias, a, b = rand((8,), torch.float32, 5), rand((4, 6), torch.float32, 6), rand((6, 8), torch.float32, 7)
    out = torch.addmm(bias.to("neuron"), a.to("neuron"), b.to("neuron"), beta=0.5, alpha=2.0)
    check(out, torch.addmm(bias, a, b, beta=0.5, alpha=2.0), torch.float32, 6)
    assert trnsim.fallback_report() == {}
    assert [r["op"] for r in trnsim.op_log("kernel")] == ["mm", "mul.Tensor", "mul.Tensor", "add.Tensor"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch,m,k,n", [(3, 130, 77, 60), (1, 5, 9, 7)])
def test_bmm(batch, m, k, n, dtype):
    a, b = rand((batch, m, k), dtype, 8), rand((batch, k, n), dtype, 9)
    out = torch.bmm(a.to("neuron"), b.to("neuron"))
    check(out, torch.bmm(a, b), dtype, k)
    no_fallback("bmm")


BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("a_shape,b_shape", [((130, 77), (130, 77)), ((130, 77), (77,)), ((5, 1, 33), (4, 1)),
                                             ((1000,), (1000,))])
def test_binary(name, a_shape, b_shape, dtype):
    a, b = rand(a_shape, dtype, 10), rand(b_shape, dtype, 11)
    if name == "div":
        b = b.sign() * (b.abs() + 0.5)  # keep away from zero
    fn = BINARY[name]
    check(fn(a.to("neuron"), b.to("neuron")), fn(a, b), dtype)
    no_fallback(name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_with_python_scalars(dtype):
    a = rand((40, 50), dtype, 12)
    x = a.to("neuron")
    check(x * 0.5, a * 0.5, dtype)
    check(x + 2, a + 2, dtype)
    check(x - 1.5, a - 1.5, dtype)
    check(x / 3.0, a / 3.0, dtype)
    check(2.0 - x, 2.0 - a, dtype)
    no_fallback("add", "sub", "mul", "div")


def test_integer_add_is_exact_and_alpha_is_lowered():
    a = torch.arange(12).reshape(3, 4)
    out = a.to("neuron") + a.to("neuron")  # int64 on the device: exact while the values fit fp32's 2^24
    assert out.dtype == torch.int64 and torch.equal(out.cpu(), a + a)
    no_fallback("add")
    big = a + 2**40  # beyond what the engines' fp32 arithmetic holds exactly: the CPU's kernel, counted
    out = big.to("neuron") + big.to("neuron")
    assert torch.equal(out.cpu(), big + big)
    assert trnsim.fallback_report().get("aten::add.Tensor") == 1
    trnsim.reset_fallback_report()
    f = rand((3, 4), torch.float32, 13)
    out = torch.add(f.to("neuron"), f.to("neuron"), alpha=2)  # other * alpha, then add: two kernels
    check(out, torch.add(f, f, alpha=2), torch.float32)
    out = torch.sub(f.to("neuron"), f.to("neuron"), alpha=0.5)
    check(out, torch.sub(f, f, alpha=0.5), torch.float32)
    assert sum(n for op, n in trnsim.fallback_report().items() if "add" in op or "sub" in op) == 0


UNARY = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
         "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("shape", [(130, 77), (7,), (2, 3, 129)])
def test_unary(name, shape, dtype):
    a = rand(shape, dtype, 14)
    fn = UNARY[name]
    # The activation tables approximate the transcendental functions.
    out, expected = fn(a.to("neuron")), fn(a)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    torch.testing.assert_close(out.cpu().float(), expected.float(), rtol=2e-2, atol=2e-2 if dtype == torch.bfloat16 else 1e-3)
    no_fallback(name)


def test_gelu_tanh():
    a = rand((64, 65), torch.float32, 15)
    out = torch.nn.functional.gelu(a.to("neuron"), approximate="tanh")
    torch.testing.assert_close(out.cpu(), torch.nn.functional.gelu(a, approximate="tanh"), rtol=2e-2, atol=1e-3)
    no_fallback("gelu")


def test_non_contiguous_input():
    a = rand((40, 60), torch.float32, 16)
    x = a.to("neuron")[:, ::2]  # strided view: made contiguous by a device copy
    check(x + x, a[:, ::2] + a[:, ::2], torch.float32)
    assert trnsim.fallback_report() == {}


def test_simulated_clock_and_op_log():
    a, b = rand((256, 256), torch.bfloat16, 17).to("neuron"), rand((256, 256), torch.bfloat16, 18).to("neuron")
    # The two copies crossed the host link (trn2: 2000 ns latency + 131072 bytes at 16 GB/s).
    copies = trnsim.op_log()
    assert [(r["op"], r["kind"], r["bytes"]) for r in copies] == [("copy host->device", "copy", 256 * 256 * 2)] * 2
    assert [r["ns"] for r in copies] == [2000 + 131072 / 16] * 2
    assert trnsim.simulated_ns() == pytest.approx(2 * (2000 + 131072 / 16))
    trnsim.reset_simulated_time()
    c = torch.relu(a @ b + a)
    log = trnsim.op_log()
    assert [r["op"] for r in log] == ["mm", "add.Tensor", "relu"]
    assert all(r["ns"] > 0 and r["dtype"] == "BFloat16" for r in log)
    assert log[0]["bottleneck"] and 0 < log[0]["mfu"] <= 1
    total = trnsim.simulated_ns()
    assert total > 0 and total == pytest.approx(sum(r["ns"] for r in log))
    c + c
    assert trnsim.simulated_ns() > total
    trnsim.reset_simulated_time()
    assert trnsim.simulated_ns() == 0 and trnsim.op_log() == []


def test_same_op_twice_same_time():
    a, b = rand((200, 300), torch.float32, 19).to("neuron"), rand((300, 100), torch.float32, 20).to("neuron")
    c1 = a @ b
    programs = trnsim._C.program_cache_size()
    c2 = a @ b  # the built program is reused
    assert trnsim._C.program_cache_size() == programs
    log = trnsim.op_log("kernel")
    assert len(log) == 2 and log[0]["ns"] == log[1]["ns"]
    assert torch.equal(c1.cpu(), c2.cpu())


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp_forward_backward(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(77, 130), torch.nn.ReLU(), torch.nn.Linear(130, 10)).to(dtype)
    x = torch.randn(33, 77).to(dtype)
    device_model = torch.nn.Sequential(torch.nn.Linear(77, 130), torch.nn.ReLU(), torch.nn.Linear(130, 10)).to(dtype)
    device_model.load_state_dict(model.state_dict())
    device_model.to("neuron")
    out_cpu = model(x)
    out_dev = device_model(x.to("neuron"))
    check(out_dev, out_cpu, dtype, 130)
    out_cpu.float().square().sum().backward()
    out_dev.float().square().sum().backward()
    for (name, p_cpu), p_dev in zip(model.named_parameters(), device_model.parameters()):
        assert p_dev.grad is not None and p_dev.grad.device.type == "neuron", name
        rtol, atol = (1e-4, 1e-4) if dtype == torch.float32 else (5e-2, 5e-2 * p_cpu.grad.abs().max().item())
        torch.testing.assert_close(p_dev.grad.cpu().float(), p_cpu.grad.float(), rtol=rtol, atol=atol, msg=name)
    ops = {r["op"] for r in trnsim.op_log()}
    assert {"addmm", "relu", "mm"} <= ops  # backward matmuls ran on the simulator too
    no_fallback("addmm", "mm", "relu")
