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


def check_on_device(case, float_tol=1e-5, bf16_tol=2e-2):
    """Runs case = (fn, inputs, op) on the CPU and on the device: same dtype and shape, integer and
    bool results equal, float results within the tolerance, and `op` never fell back."""
    fn, inputs, op = case
    expected = fn(*inputs)
    got = fn(*[t.to("neuron") for t in inputs])
    assert got.device.type == "neuron"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if expected.dtype.is_floating_point:
        tol = bf16_tol if expected.dtype == torch.bfloat16 else float_tol
        torch.testing.assert_close(got.cpu(), expected, rtol=tol, atol=tol)
    else:
        assert torch.equal(got.cpu(), expected)
    no_fallback(op)


@pytest.mark.parametrize("name", list(CASES))
def test_elementwise_promotion_on_the_device(name):
    check_on_device(CASES[name], bf16_tol=1e-2)


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


MORE = {
    "bitwise_and_bool": (lambda a, b: a & b, (BOOL, BOOL2), "bitwise_and"),
    "bitwise_or_bool": (lambda a, b: a | b, (BOOL, BOOL2), "bitwise_or"),
    "bitwise_xor_bool": (lambda a, b: a ^ b, (BOOL, BOOL2), "bitwise_xor"),
    "bitwise_not_bool": (lambda a: ~a, (BOOL,), "bitwise_not"),
    "logical_not_int": (lambda a: torch.logical_not(a), (INT % 3,), "logical_not"),
    "logical_and_int_float": (lambda a, b: torch.logical_and(a, b), (INT % 3, FP32), "logical_and"),
    "logical_or_bool": (lambda a, b: torch.logical_or(a, b), (BOOL, BOOL2), "logical_or"),
    "tril_bool_mask": (lambda a: torch.tril(a), (BOOL,), "tril"),
    "triu_bool_diag": (lambda a: torch.triu(a, 1), (BOOL,), "triu"),
    "sum_int64": (lambda a: a.sum(), (INT,), "sum"),
    "sum_int64_dim": (lambda a: a.sum(1, keepdim=True), (INT,), "sum"),
    "sum_bool": (lambda a: a.sum(), (BOOL,), "sum"),
    "sum_int32_dtype": (lambda a: a.sum(0, dtype=torch.int32), (INT.int(),), "sum"),
    "cast_int64_float": (lambda a: a.float(), (INT,), "_to_copy"),
    "cast_bool_bf16": (lambda a: a.bfloat16(), (BOOL,), "_to_copy"),
    "cat_promotes": (lambda a, b: torch.cat([a, b]), (BF16, FP32), "cat"),
    "cat_zero_width": (lambda a, b: torch.cat([a[:, :0], b], 1), (FP32, FP32), "cat"),
    "cat_int64": (lambda a, b: torch.cat([a, b], 1), (INT, POS), "cat"),
    "cat_bool": (lambda a, b: torch.cat([a, b]), (BOOL, BOOL2), "cat"),
    "masked_fill_in_place": (lambda a, m: a.clone().masked_fill_(m, 2.0), (FP32, BOOL), "masked_fill_"),
    "masked_fill_tensor_value": (lambda a, m: a.masked_fill(m, torch.tensor(-4.0)), (FP32, BOOL), "masked_fill"),
    "vector_norm_2": (lambda a: torch.linalg.vector_norm(a), (FP32,), "linalg_vector_norm"),
    "vector_norm_inf_dim": (lambda a: torch.linalg.vector_norm(a, float("inf"), dim=1), (FP32,), "linalg_vector_norm"),
    "vector_norm_1_keepdim": (lambda a: torch.linalg.vector_norm(a, 1, dim=0, keepdim=True), (FP32,), "linalg_vector_norm"),
    "vector_norm_bf16": (lambda a: torch.linalg.vector_norm(a, dim=-1), (BF16,), "linalg_vector_norm"),
    "hardswish": (torch.nn.functional.hardswish, (FP32 * 4,), "hardswish"),
    "hardsigmoid": (torch.nn.functional.hardsigmoid, (FP32 * 4,), "hardsigmoid"),
    "hardswish_bf16": (torch.nn.functional.hardswish, (BF16 * 4,), "hardswish"),
}


@pytest.mark.parametrize("name", list(MORE))
def test_bool_int_and_composed_ops_on_the_device(name):
    check_on_device(MORE[name])


@pytest.mark.parametrize("fn", [torch.nn.functional.hardswish, torch.nn.functional.hardsigmoid])
def test_hard_activation_backward(fn):
    x = torch.linspace(-5, 5, 203).reshape(7, 29)  # both kinks and the flat parts
    xc = x.clone().requires_grad_()
    fn(xc).pow(2).sum().backward()
    xd = x.to("neuron").requires_grad_()
    fn(xd).pow(2).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    no_fallback("hardswish_backward", "hardsigmoid_backward")


def test_fallback_results_stay_on_the_device():
    # cpu_fallback returns results on its first tensor argument's device: 1 - x is sub(1, x), whose
    # first argument is the wrapped scalar (greedy generate() then mixed devices).
    x = torch.full((3,), 2**40)
    got = 1 - x.to("neuron")
    assert got.device.type == "neuron" and torch.equal(got.cpu(), 1 - x)


def test_sdpa_outputs_and_grads_have_the_meta_strides():
    """Hugging Face attention passes q/k/v as [B, S, H, D] buffers viewed as [B, H, S, D]; the op's
    meta function promises those strides for the output and the gradients (torch.compile relies on it)."""
    g = torch.Generator().manual_seed(3)
    base = [torch.randn(2, 16, 4, 64, generator=g).bfloat16() for _ in range(3)]
    cpu = [b.transpose(1, 2).requires_grad_() for b in base]
    dev = [b.to("neuron").transpose(1, 2).requires_grad_() for b in base]
    out_cpu = torch.nn.functional.scaled_dot_product_attention(*cpu, is_causal=True)
    out_dev = torch.nn.functional.scaled_dot_product_attention(*dev, is_causal=True)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in dev]
        out_fake = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(*fake, is_causal=True)[0]
    assert out_dev.stride() == out_fake.stride()
    torch.testing.assert_close(out_dev.float().cpu(), out_cpu.float(), rtol=2e-2, atol=2e-2)
    out_dev.float().sum().backward()
    out_cpu.float().sum().backward()
    for d, c in zip(dev, cpu):
        assert d.grad.stride() == c.grad.stride()
        torch.testing.assert_close(d.grad.float().cpu(), c.grad.float(), rtol=5e-2, atol=5e-2)
    no_fallback("_scaled_dot_product_fused_attention_overrideable")


def test_sdpa_with_a_boolean_causal_mask_runs_on_the_device():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 4, 12, 32, generator=g) for _ in range(3))
    mask = torch.ones(12, 12, dtype=torch.bool).tril()
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = torch.nn.functional.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"),
                                                           attn_mask=mask.to("neuron"))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
    assert not trnsim.fallback_report(), trnsim.fallback_report()


UNARY_INT = {
    "abs_int64": (torch.abs, INT),
    "neg_int64": (torch.neg, INT),
    "sign_int64": (torch.sign, INT),
    "relu_int32": (torch.relu, INT.int()),
    "exp_int64_promotes": (torch.exp, INT % 5),
    "sqrt_int64_promotes": (torch.sqrt, POS),
    "sigmoid_int64_promotes": (torch.sigmoid, INT % 7),
}


@pytest.mark.parametrize("name", list(UNARY_INT))
def test_unary_ops_on_integers(name):
    fn, x = UNARY_INT[name]
    expected = fn(x)
    got = fn(x.to("neuron"))
    assert got.dtype == expected.dtype
    if expected.dtype.is_floating_point:
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(got.cpu(), expected)
    assert not trnsim.fallback_report(), trnsim.fallback_report()


def test_unary_on_empty_and_transposed_inputs():
    e = torch.randn(0, 4)
    assert torch.exp(e.to("neuron")).shape == (0, 4)
    t = FP32.t()
    got = torch.exp(t.to("neuron"))
    assert got.stride() == torch.exp(t).stride()
    torch.testing.assert_close(got.cpu(), torch.exp(t))
    assert not trnsim.fallback_report(), trnsim.fallback_report()


def test_channels_last_cat_stays_channels_last():
    a = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    b = torch.randn(2, 6, 4, 5).to(memory_format=torch.channels_last)
    for dim in (0, 1, 2, 3):
        x, y = (a, a) if dim != 1 else (a, b)
        expected = torch.cat([x, y], dim)
        got = torch.cat([x.to("neuron"), y.to("neuron")], dim)
        assert got.stride() == expected.stride()
        torch.testing.assert_close(got.cpu(), expected)
    no_fallback("cat")


SIGNED = torch.randint(1, 9, (6, 37), generator=g) * torch.where(torch.rand(6, 37, generator=g) > 0.5, 1, -1)
INTEGER_OPS = {
    "bitwise_and_int64": (lambda a, b: a & b, (INT, SIGNED), "bitwise_and"),
    "bitwise_or_int64": (lambda a, b: a | b, (INT, SIGNED), "bitwise_or"),
    "bitwise_xor_int64": (lambda a, b: a ^ b, (INT, SIGNED), "bitwise_xor"),
    "bitwise_and_bool_int64": (lambda a, b: a & b, (BOOL, INT), "bitwise_and"),
    "bitwise_and_scalar": (lambda a: a & 6, (INT,), "bitwise_and"),
    "floor_divide_int64": (lambda a, b: torch.floor_divide(a, b), (INT, SIGNED), "floor_divide"),
    "floor_divide_scalar": (lambda a: a // 4, (INT,), "floor_divide"),
    "div_trunc_int64": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), (INT, SIGNED), "div"),
    "div_floor_int64": (lambda a, b: torch.div(a, b, rounding_mode="floor"), (INT, SIGNED), "div"),
    "remainder_int64": (lambda a, b: torch.remainder(a, b), (INT, SIGNED), "remainder"),
    "remainder_scalar": (lambda a: a % 3, (INT,), "remainder"),
    "remainder_float": (lambda a, b: torch.remainder(a, b), (FP32 * 10, FP32.flip(0) * 3), "remainder"),
    "fmod_int64": (lambda a, b: torch.fmod(a, b), (INT, SIGNED), "fmod"),
    "fmod_float": (lambda a, b: torch.fmod(a, b), (FP32 * 10, FP32.flip(0) * 3), "fmod"),
    "isin": (lambda a, t: torch.isin(a, t), (INT % 10, torch.tensor([3, -7, 1])), "isin"),
    "isin_invert": (lambda a, t: torch.isin(a, t, invert=True), (INT % 10, torch.tensor([3])), "isin"),
    "max_int64": (lambda a: a.max(), (INT,), "max"),
    "amin_int64_dim": (lambda a: a.amin(1), (INT,), "amin"),
    "amax_bool": (lambda a: a.amax(0), (BOOL,), "amax"),
}


@pytest.mark.parametrize("name", list(INTEGER_OPS))
def test_integer_division_remainder_bitwise_and_reductions(name):
    check_on_device(INTEGER_OPS[name], float_tol=1e-6)  # fmod is exact, remainder torch's own formula


def test_integer_division_by_zero_is_the_cpus_error():
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.floor_divide(INT.to("neuron"), torch.zeros_like(INT).to("neuron"))
