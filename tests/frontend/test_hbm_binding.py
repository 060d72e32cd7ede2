"""Device tensors' storage read and written in place by the interpreter (no staging copies, isa::HbmBuffer::
bind in frontend/kernel_executor.cpp) only where that is exact: in-place ops, outputs aliasing an input,
the same tensor as two operands, several launches on one storage. Every case against the CPU."""
import os
import pathlib
import sys

import pytest
import torch

PYTHON_DIR = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", pathlib.Path(__file__).resolve().parents[2] / "build")) / "python"
sys.path.insert(0, str(PYTHON_DIR))

import trnsim  # noqa: E402


@pytest.fixture(autouse=True)
def device():
    trnsim.set_config("trn2")
    trnsim.set_fallback_mode("allow")
    yield


def test_in_place_ops_update_the_tensor_once():
    torch.manual_seed(0)
    a_cpu, b_cpu = torch.randn(300, 257), torch.randn(300, 257)
    a, b = a_cpu.to("neuron"), b_cpu.to("neuron")
    a.add_(b)
    a.mul_(0.5)
    a_cpu.add_(b_cpu)
    a_cpu.mul_(0.5)
    torch.testing.assert_close(a.cpu(), a_cpu, rtol=0, atol=0)


def test_out_aliasing_an_input_is_staged():
    torch.manual_seed(1)
    a_cpu, b_cpu = torch.randn(256, 256), torch.randn(256, 256)
    a, b = a_cpu.to("neuron"), b_cpu.to("neuron")
    expected = a_cpu @ b_cpu
    torch.mm(a, b, out=a)     # the result overwrites an operand the matmul still reads
    torch.testing.assert_close(a.cpu(), expected, rtol=1e-4, atol=1e-4)
    t_cpu = torch.randn(128, 384)
    t = t_cpu.to("neuron")
    torch.add(t, t, out=t)
    torch.testing.assert_close(t.cpu(), t_cpu + t_cpu, rtol=0, atol=0)


def test_one_tensor_as_both_operands_and_a_fresh_output():
    torch.manual_seed(2)
    x_cpu = torch.randn(513, 129)
    x = x_cpu.to("neuron")
    for _ in range(3):   # the same storages launch after launch
        y = x * x
        z = torch.exp(y) - x
    torch.testing.assert_close(y.cpu(), x_cpu * x_cpu, rtol=0, atol=0)
    torch.testing.assert_close(z.cpu(), torch.exp(x_cpu * x_cpu) - x_cpu, rtol=2e-6, atol=2e-6)


def test_views_and_dtype_changes_keep_their_values():
    torch.manual_seed(3)
    x_cpu = torch.randn(64, 200)
    x = x_cpu.to("neuron")
    s = x[:, 10:150] + 1.0            # a strided view as input
    h = x.to(torch.bfloat16) * 2      # a cast then an op on the new storage
    torch.testing.assert_close(s.cpu(), x_cpu[:, 10:150] + 1.0, rtol=0, atol=0)
    torch.testing.assert_close(h.cpu(), x_cpu.to(torch.bfloat16) * 2, rtol=0, atol=0)
    assert torch.equal(x.cpu(), x_cpu)   # inputs are never written
