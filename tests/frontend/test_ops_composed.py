"""Ops the device runs as a few of its kernels in sequence (issue 10: they fell back to the CPU):
clamp with tensor bounds, roll, softplus, var / std (and _mean), dot / mv / addmv, matmuls with an
empty operand, adaptive average pooling by whole windows, 1-D nearest upsampling, and bf16 addmm /
baddbmm with alpha / beta computed in fp32 and rounded once as torch does."""
import pytest
import torch
import torch.nn.functional as F

from test_ops import strict_lowering, trnsim  # noqa: F401

g = torch.Generator().manual_seed(11)
X = torch.randn(5, 9, generator=g)
LO = torch.randn(5, 9, generator=g) - 1
V = torch.randn(9, generator=g)
IMG = torch.randn(2, 3, 8, 9, generator=g)
SEQ = torch.randn(2, 3, 7, generator=g)

CASES = {
    "clamp_tensor_bounds": (lambda x, lo: torch.clamp(x, lo, lo + 1.5), (X, LO)),
    "clamp_min_tensor": (lambda x, lo: torch.clamp_min(x, lo), (X, LO)),
    "clamp_max_0d_tensor": (lambda x: torch.clamp(x, max=torch.tensor(0.3)), (X,)),
    "roll_one_dim": (lambda x: torch.roll(x, 2, 1), (X,)),
    "roll_two_dims_negative": (lambda x: torch.roll(x, (1, -4), (0, 1)), (X,)),
    "roll_flattened": (lambda x: torch.roll(x, 7), (X,)),
    "roll_empty": (lambda x: torch.roll(x, (1, 2), (0, 2)), (torch.empty(0, 4, 3),)),
    "roll_empty_flattened": (lambda x: torch.roll(x, 3), (torch.empty(2, 0),)),
    "softplus_beta_threshold": (lambda x: F.softplus(x * 10, beta=2, threshold=5), (X,)),
    "softplus_default": (lambda x: F.softplus(x), (X,)),
    "softplus_bf16": (lambda x: F.softplus(x.bfloat16() * 3), (X,)),
    "var_dim": (lambda x: torch.var(x, 1), (X,)),
    "var_all": (lambda x: torch.var(x), (X,)),
    "var_mean_keepdim": (lambda x: torch.var_mean(x, 0, keepdim=True), (X,)),
    "std_correction0": (lambda x: torch.std(x, 1, correction=0), (X,)),
    "std_mean": (lambda x: torch.std_mean(x, (0, 1)), (X,)),
    "var_mean_bf16": (lambda x: torch.var_mean(x.bfloat16(), 1), (X,)),
    "dot": (lambda a, b: torch.dot(a, b), (V, V * 2)),
    "mv": (lambda m, v: torch.mv(m, v), (X, V)),
    "addmv": (lambda s, m, v: torch.addmv(s, m, v, beta=0.5, alpha=2.0), (X[:, 0], X, V)),
    "mm_empty_k": (lambda a, b: a @ b, (torch.randn(3, 0), torch.randn(0, 4))),
    "mm_empty_m": (lambda a, b: a @ b, (torch.randn(0, 3), torch.randn(3, 4))),
    "addmm_empty_k": (lambda s, a, b: torch.addmm(s, a, b, beta=2.0), (torch.randn(3, 4), torch.randn(3, 0), torch.randn(0, 4))),
    "adaptive_avg_pool2d_whole_windows": (lambda x: F.adaptive_avg_pool2d(x, (2, 3)), (IMG,)),
    "nearest_1d": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (SEQ,)),
    "addmm_one_element_bias": (lambda s, a, b: torch.addmm(s, a, b), (torch.randn(1), torch.randn(4, 6), torch.randn(6, 3))),
    "index_select_last_dim": (lambda x: torch.index_select(x, -1, torch.tensor([4, 0, 4, 2], device=x.device)), (X,)),
    "index_select_0d": (lambda x: torch.index_select(x, 0, torch.tensor([0], device=x.device)), (torch.tensor(2.5),)),
    "index_select_0d_by_0d_index": (lambda x: torch.index_select(x, -1, torch.tensor(0, device=x.device)), (torch.tensor(-1.5),)),
    "argmax_0d": (lambda x: torch.argmax(x, dim=0, keepdim=True), (torch.tensor(2.5),)),
    "max_dim_0d": (lambda x: torch.max(x, 0), (torch.tensor(-1.5),)),
    "pow_tensor_tensor_positive_base": (lambda x, y: torch.pow(x, y), (X.abs() + 0.1, LO)),
    "baddbmm_bf16_alpha_beta": (lambda s, a, b: torch.baddbmm(s, a, b, beta=0.5, alpha=1.7),
                                (torch.randn(2, 5, 3, generator=g).bfloat16() * 30, torch.randn(2, 5, 70, generator=g).bfloat16() * 3,
                                 torch.randn(2, 70, 3, generator=g).bfloat16() * 3)),
    "addmm_bf16_alpha_beta": (lambda s, a, b: torch.addmm(s, a, b, beta=2.0, alpha=0.5),
                              (torch.randn(5, 3, generator=g).bfloat16(), torch.randn(5, 40, generator=g).bfloat16(),
                               torch.randn(40, 3, generator=g).bfloat16())),
}


@pytest.mark.parametrize("name", list(CASES))
def test_composed_op_matches_the_cpu_without_fallback(name):
    fn, inputs = CASES[name]
    expected = fn(*inputs)
    got = fn(*[t.to("neuron") for t in inputs])
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for gt, ex in zip(got, expected):
        assert gt.dtype == ex.dtype and gt.shape == ex.shape
        if not ex.dtype.is_floating_point:
            assert torch.equal(gt.cpu(), ex)
        elif ex.dtype == torch.bfloat16:
            # torch rounds once from fp32: so must the device (one bf16 ulp apart at most)
            torch.testing.assert_close(gt.cpu().float(), ex.float(), rtol=8e-3, atol=1e-5)
        else:
            torch.testing.assert_close(gt.cpu(), ex, rtol=1e-5, atol=1e-5)
    assert not trnsim.fallback_report(), trnsim.fallback_report()


@pytest.mark.parametrize("fn", [lambda x: F.adaptive_avg_pool2d(x, (4, 3)),
                                lambda x: F.interpolate(x.flatten(2), scale_factor=3, mode="nearest")])
def test_composed_backward(fn):
    xc = IMG.clone().requires_grad_()
    fn(xc).pow(2).sum().backward()
    xd = IMG.to("neuron").requires_grad_()
    fn(xd).pow(2).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    assert not trnsim.fallback_report(), trnsim.fallback_report()


def test_adaptive_pool_with_uneven_windows_falls_back_correctly():
    expected = F.adaptive_avg_pool2d(IMG, (3, 4))  # 8 / 3: windows overlap, not an average pool
    got = F.adaptive_avg_pool2d(IMG.to("neuron"), (3, 4))
    torch.testing.assert_close(got.cpu(), expected)
    assert trnsim.fallback_report()


def test_pow_with_a_non_positive_base_falls_back_correctly():
    x = torch.tensor([-2.0, 0.0, 3.0]), torch.tensor([3.0, 0.0, 0.5])
    got = torch.pow(x[0].to("neuron"), x[1].to("neuron"))
    torch.testing.assert_close(got.cpu(), torch.pow(*x))
    assert trnsim.fallback_report()


SCANS = {
    "cumsum_last": (lambda x: torch.cumsum(x, -1), (X,)),
    "cumsum_dim0": (lambda x: torch.cumsum(x, 0), (X,)),
    "cumsum_int64_positions": (lambda m: torch.cumsum(m, -1) - 1, (torch.ones(3, 12, dtype=torch.long),)),
    "cumsum_bool": (lambda m: torch.cumsum(m, 1), (X > 0,)),
    "cumsum_int32_dtype": (lambda m: torch.cumsum(m, 0, dtype=torch.int32), (torch.randint(-9, 9, (7, 5), generator=g),)),
    "cumsum_bf16": (lambda x: torch.cumsum(x.bfloat16(), 1), (X,)),
    "cumprod_last": (lambda x: torch.cumprod(x, -1), (X.abs() + 0.5,)),
    "prod_dim": (lambda x: torch.prod(x, 1), (X.abs() + 0.5,)),
    "prod_dim_keepdim": (lambda x: torch.prod(x, 0, keepdim=True), (X + 0.2,)),
    "prod_all": (lambda x: torch.prod(x), (X[:2] * 0.5 + 1,)),
    "prod_empty": (lambda x: torch.prod(x, 1), (torch.randn(3, 0),)),
}


@pytest.mark.parametrize("name", list(SCANS))
def test_scans_and_products_on_the_device(name):
    fn, inputs = SCANS[name]
    expected, got = fn(*inputs), fn(*[t.to("neuron") for t in inputs])
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if not expected.dtype.is_floating_point:
        assert torch.equal(got.cpu(), expected)
    else:
        tol = 1e-2 if expected.dtype == torch.bfloat16 else 1e-5
        torch.testing.assert_close(got.cpu(), expected, rtol=tol, atol=tol)
    assert not trnsim.fallback_report(), trnsim.fallback_report()
