"""Element-wise ops across dtypes on the device (issue 10): PyTorch's type promotion (bf16 with
fp32, integers with floats), integer and bool tensors on the device's kernels (exact while values
stay within fp32's 2^24; beyond it the counted CPU fallback), 0-dim and empty operands, and result
layouts as TensorIterator gives them. Each case ran through the CPU fallback (or gave another
dtype) before."""
import pytest
import torch

from test_ops import no_fallback, strict_lowering, trnsim  # noqa: F401

g = torch.Generator().manual_seed(7)
BF16 = torch.randn(6, 37, generator=g).bfloat16()
FP32 = torch.randn(6, 37, generator=g)
INT = torch.randint(-1000, 1000, (6, 37), generator=g)
POS = torch.randint(1, 50, (6, 37), generator=g)
BOOL = torch.rand(6, 37, generator=g) > 0.5
BOOL2 = torch.rand(6, 37, generator=g) > 0.3

CASES = {
    "bf16_add_fp32": (lambda a, b: a + b, (BF16, FP32), "add"),
    "fp32_mul_bf16": (lambda a, b: a * b, (FP32, BF16), "mul"),
    "bf16_sub_fp32_broadcast": (lambda a, b: a - b, (BF16, FP32[0]), "sub"),
    "bf16_div_fp32": (lambda a, b: a / b, (BF16, FP32.abs() + 0.5), "div"),
    "int64_add": (lambda a, b: a + b, (INT, INT.flip(0)), "add"),
    "int64_sub_scalar": (lambda a: a - 7, (INT,), "sub"),
    "int64_mul_scalar": (lambda a: a * 3, (INT,), "mul"),
    "int64_true_div": (lambda a, b: a / b, (INT, POS), "div"),
    "int64_add_float_tensor": (lambda a, b: a + b, (POS, FP32), "add"),
    "int64_maximum": (lambda a, b: torch.maximum(a, b), (INT, INT.flip(1)), "maximum"),
    "int32_add": (lambda a, b: a + b, (INT.int(), POS.int()), "add"),
    "int64_gt": (lambda a, b: a > b, (INT, INT.flip(0)), "gt"),
    "int64_le_scalar": (lambda a: a <= 3, (INT,), "le"),
    "int64_eq_float_scalar": (lambda a: a == 2.0, (POS,), "eq"),
    "bool_mul_is_and": (lambda a, b: a * b, (BOOL, BOOL2), "mul"),
    "bool_add_is_or": (lambda a, b: a + b, (BOOL, BOOL2), "add"),
    "bool_eq": (lambda a, b: a == b, (BOOL, BOOL2), "eq"),
    "where_fp32_cpu_scalar": (lambda c, a: torch.where(c, a, torch.tensor(-1e9)), (BOOL, FP32), "where"),
    "where_two_scalars": (lambda c: torch.where(c, 0.0, -3.5), (BOOL,), "where"),
    "where_bf16_fp32": (lambda c, a, b: torch.where(c, a, b), (BOOL, BF16, FP32), "where"),
    "where_int64": (lambda c, a, b: torch.where(c, a, b), (BOOL, INT, POS), "where"),
    "where_bf16_min_scalar": (lambda c, a: torch.where(c, a, torch.finfo(torch.bfloat16).min), (BOOL, BF16), "where"),
    "masked_fill_int64": (lambda a, m: a.masked_fill(m, -5), (INT, BOOL), "masked_fill"),
    "zero_dim_both": (lambda a, b: a * b, (torch.tensor(3.0), torch.tensor(2.5)), "mul"),
    "zero_dim_and_python_scalar": (lambda a: a + 2, (torch.tensor(3.0),), "add"),
    "zero_dim_int_counter": (lambda a: a + 1, (torch.tensor(41),), "add"),
    "empty": (lambda a: a * 2, (torch.randn(0, 3),), "mul"),
    "empty_broadcast": (lambda a, b: a + b, (torch.randn(0, 3), torch.randn(3)), "add"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_elementwise_promotion_on_the_device(name):
    fn, inputs, op = CASES[name]
    expected = fn(*inputs)
    got = fn(*[t.to("neuron") for t in inputs])
    assert got.device.type == "neuron"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype.is_floating_point:
        tol = 1e-2 if expected.dtype == torch.bfloat16 else 1e-5
        torch.testing.assert_close(got.cpu(), expected, rtol=tol, atol=tol)
    else:
        assert torch.equal(got.cpu(), expected)
    no_fallback(op)


def test_in_place_int64_counter_as_batch_norm_keeps_it():
    counter = torch.tensor(0, dtype=torch.long).to("neuron")
    for _ in range(3):
        counter.add_(1)
    assert counter.dtype == torch.int64 and counter.item() == 3
    no_fallback("add_")


@pytest.mark.parametrize(
    "fn,inputs",
    [
        (lambda a, b: a * b, (INT * 10000, INT)),  # products beyond 2^24: fp32 would round them
        (lambda a: a + 1, (torch.full((5,), 2**40),)),
        (lambda a, b: a + b, (torch.randint(0, 200, (8,), dtype=torch.uint8), torch.randint(100, 200, (8,), dtype=torch.uint8))),  # wraps
        (lambda a, b: a + b, (torch.full((4,), 1000), BF16[0, :4])),  # 1000 is not a bf16: torch rounds it first
    ],
)
def test_values_the_engines_cannot_hold_exactly_fall_back_with_the_cpus_answer(fn, inputs):
    expected = fn(*inputs)
    got = fn(*[t.to("neuron") for t in inputs])
    assert got.dtype == expected.dtype
    assert torch.equal(got.cpu(), expected)
    assert trnsim.fallback_report()  # counted, not silently approximated


def test_results_keep_the_operands_layout():
    a, b = FP32.t(), (FP32 * 2).t()  # both transposed: TensorIterator keeps the layout
    for got, expected in (((a.to("neuron") + b.to("neuron")), a + b), ((a.to("neuron") * 3), a * 3)):
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got.cpu(), expected)
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    got = x.to("neuron") * 2
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got.cpu(), x * 2)
    no_fallback("add", "mul")
