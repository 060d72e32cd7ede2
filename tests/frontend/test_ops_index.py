"""The PyTorch device "neuron": indexing ops (advanced indexing, index_put_, gather / scatter,
index_add_, histc, bincount, arange, flip) on the indirect-DMA kernels against the CPU: ragged
shapes, int64 / int32 / bool / float dtypes, repeated, negative and empty indices, 0-d tensors,
broadcast index tensors, out-of-range errors (the CPU's exception), no fallback, and the kernel's
time against the cost model's formula."""
import math

import pytest
import torch

from test_ops import no_fallback, rand, strict_lowering, trnsim  # noqa: F401

D = "neuron"
DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool]


def sample(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype in (torch.int64, torch.int32):
        # Values beyond 2^31 and 2^24: the kernels move bytes, so every bit must survive.
        return torch.randint(-(2**40), 2**40, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g).to(dtype)


def ids(high, shape, seed, low=None):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-high if low is None else low, high, shape, generator=g)


def summed(fn, *args):
    """What the device computes for a sum into bf16: fp32 accumulation, one rounding (torch's CPU
    does this for scatter_add and index_add along dim 0; elsewhere it rounds after every add, which
    stays within bf16 tolerance of this)."""
    wide = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    return fn(*wide).to(args[0].dtype)


def same_sum(out, fn, *args):
    expected = fn(*args)
    if expected.dtype == torch.bfloat16:
        same(out, summed(fn, *args))
        # The CPU's per-add rounding drifts by a few bf16 ulps over a handful of adds.
        torch.testing.assert_close(out.cpu().float(), expected.float(), rtol=5e-2, atol=5e-2)
    else:
        same(out, expected)


def same(out, expected):
    assert out.device.type == D
    assert out.dtype == expected.dtype and out.shape == expected.shape, (out.dtype, out.shape, expected.shape)
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0, equal_nan=True)  # exact, NaN where the CPU has NaN


def raises_like_cpu(fn, *cpu_args):
    """fn on the device raises the exception type the CPU raises on the same arguments."""
    with pytest.raises(Exception) as cpu:
        fn(*cpu_args)
    dev_args = [a.to(D) if isinstance(a, torch.Tensor) else a for a in cpu_args]
    with pytest.raises(type(cpu.value)):
        fn(*dev_args)


# ---- histc (the MoE router's count: transformers calls it on int32 expert ids) ----


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("n,bins", [(8192, 8), (130, 60), (1, 2), (4097, 128)])
def test_histc_on_int_expert_ids(n, bins, dtype):
    x = ids(bins + 2, (n,), 1, low=-2).to(dtype)  # some ids outside [0, bins - 1]: not counted
    out = torch.histc(x.to(D), bins=bins, min=0, max=bins - 1)
    # The CPU has no integer histc: the same counts from its fp32 histc, in the input's dtype (as CUDA).
    same(out, torch.histc(x.float(), bins=bins, min=0, max=bins - 1).to(dtype))
    no_fallback("histc")


def test_histc_float_matches_cpu_bins_edges_nan_and_range():
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.randn(3000, generator=g) * 3, torch.tensor([-2.0, 2.5, 2.5, float("nan"), float("inf"),
                                                                      -float("inf"), 0.1, 1e-8])])
    for bins, lo, hi in [(13, -2, 2.5), (100, -10, 10), (7, 0.1, 0.3), (1, -1, 1)]:
        same(torch.histc(x.to(D), bins=bins, min=lo, max=hi), torch.histc(x, bins=bins, min=lo, max=hi))
    # Every edge of a 10-bin histogram over [0, 1] (elements exactly on edges).
    edges = torch.linspace(0, 1, 11)
    same(torch.histc(edges.to(D), bins=10, min=0, max=1), torch.histc(edges, bins=10, min=0, max=1))
    same(torch.histc(torch.zeros(0).to(D), bins=5, min=0, max=1), torch.zeros(5))
    no_fallback("histc")


def test_histc_moe_routing_counts_sum_to_tokens():
    # transformers' grouped-mm experts path: histc(expert_ids.int(), bins=E, min=0, max=E - 1).
    logits = rand((512, 16), torch.float32, 3)
    top = torch.topk(logits, 2, dim=-1).indices.reshape(-1)
    out = torch.histc(top.to(D).int(), bins=16, min=0, max=15)
    same(out, torch.bincount(top, minlength=16).int())
    assert int(out.cpu().sum()) == 1024
    no_fallback("histc")


def test_histc_errors_like_cpu():
    x = torch.randn(10)
    # min == max: the range comes from the data (not on the device): the CPU's values by the fallback.
    same(torch.histc(x.to(D), bins=3), torch.histc(x, bins=3))
    raises_like_cpu(lambda t: torch.histc(t, bins=4, min=3, max=1), x)


# ---- advanced indexing: x[idx], x[mask], several index tensors ----


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_rows_with_repeats_and_negatives(dtype):
    x = sample((37, 19), dtype, 4)
    idx = torch.tensor([3, -1, 0, 3, -37, 36, 3])
    same(x.to(D)[idx.to(D)], x[idx])
    same(x.to(D)[idx.int().to(D)], x[idx.int()])  # int32 indices
    same(x.to(D)[idx], x[idx])  # a CPU index of a device tensor
    no_fallback("index")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_index_forms(dtype):
    x = sample((6, 5, 7), dtype, 5)
    xd = x.to(D)
    i = ids(6, (4, 1), 6)
    j = ids(5, (3,), 7)
    k = ids(7, (2, 4, 3), 8)
    cases = [
        lambda t, dev: t[i.to(dev)],  # 2-D index on dim 0
        lambda t, dev: t[i.to(dev), j.to(dev)],  # broadcast [4, 3], adjacent dims
        lambda t, dev: t[:, j.to(dev)],  # a slice before
        lambda t, dev: t[:, :, k.to(dev)],  # the last dim, 3-D index
        lambda t, dev: t[i.to(dev), :, k[0, :, :1].to(dev)],  # non-adjacent: the broadcast dims go first
        lambda t, dev: t[..., torch.tensor(2).to(dev)],  # 0-d index
        lambda t, dev: t[torch.tensor([], dtype=torch.long).to(dev)],  # empty index
        lambda t, dev: t[1:4, torch.tensor([[0], [4]]).to(dev), 2:],  # a basic slice view and an index
    ]
    for n, fn in enumerate(cases):
        out, expected = fn(xd, D), fn(x, "cpu")
        assert out.shape == expected.shape, n
        same(out, expected)
    no_fallback("index")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_with_masks(dtype):
    x = sample((9, 13, 3), dtype, 9)
    m2 = sample((9, 13), torch.bool, 10)
    m1 = sample((13,), torch.bool, 11)
    same(x.to(D)[m2.to(D)], x[m2])
    same(x.to(D)[:, m1.to(D)], x[:, m1])
    same(x.to(D)[torch.zeros(9, dtype=torch.bool).to(D)], x[torch.zeros(9, dtype=torch.bool)])  # nothing selected
    flat = x.reshape(-1)
    same(flat.to(D)[(flat != 0).to(D)], flat[flat != 0])
    no_fallback("index")


def test_index_out_of_range_raises_index_error():
    x = torch.randn(5, 4)
    for bad in (torch.tensor([0, 5]), torch.tensor([-6])):
        raises_like_cpu(lambda t, i: t[i], x, bad)
    raises_like_cpu(lambda t, i: t[i], x, torch.ones(3, dtype=torch.bool))  # mask shape mismatch
    raises_like_cpu(lambda t, i: t[i], x, torch.tensor([0.0]))  # float index


# ---- index_put_ ----


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_put_without_accumulate(dtype):
    x = sample((23, 6), dtype, 12)
    idx = torch.tensor([4, -1, 0, 9])  # unique: the CPU's order does not matter
    v = sample((4, 6), dtype, 13)
    xd = x.to(D)
    xd[idx.to(D)] = v.to(D)
    x[idx] = v
    same(xd, x)
    # Broadcast values and a scalar.
    xd[idx.to(D), 2] = v[:, 0].to(D)
    x[idx, 2] = v[:, 0]
    same(xd, x)
    m = sample((23, 6), torch.bool, 14)
    xd[m.to(D)] = v[0, 0].to(D)
    x[m] = v[0, 0]
    same(xd, x)
    no_fallback("_index_put_impl_", "index_put_", "index_put")


def test_index_put_repeated_indices_last_value_wins():
    # torch's CPU applies the writes in index order (serial below its parallel grain): the last wins.
    x = torch.zeros(5, 3)
    idx = torch.tensor([1, 3, 1, 1, 3])
    v = torch.arange(15.0).reshape(5, 3)
    xd = x.to(D).index_put_((idx.to(D),), v.to(D))
    same(xd, x.index_put_((idx,), v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_index_put_accumulate_with_repeats(dtype):
    x = sample((40, 33), dtype, 15)
    idx = ids(40, (300,), 16)  # many repeats and negatives
    v = sample((300, 33), dtype, 17)
    out = x.to(D).index_put_((idx.to(D),), v.to(D), accumulate=True)
    # fp32: the CPU adds in index order, and so does the read-add-write DMA (bit-exact).
    same_sum(out, lambda a, b: a.clone().index_put_((idx,), b, accumulate=True), x, v)
    i2, j2 = ids(40, (50, 1), 18), ids(33, (1, 4), 19)
    w = sample((50, 4), dtype, 20)
    out = x.to(D).index_put_((i2.to(D), j2.to(D)), w.to(D), accumulate=True)
    same_sum(out, lambda a, b: a.clone().index_put_((i2, j2), b, accumulate=True), x, w)
    no_fallback("_index_put_impl_")


def test_index_put_errors_like_cpu():
    x = torch.zeros(4, 3)
    raises_like_cpu(lambda t, i, v: t.index_put_((i,), v), x, torch.tensor([4]), torch.ones(1, 3))
    raises_like_cpu(lambda t, i, v: t.index_put_((i,), v), x, torch.tensor([0]), torch.ones(1, 3, dtype=torch.float64))
    raises_like_cpu(lambda t, i, v: t.index_put_((i,), v), x, torch.tensor([0, 1]), torch.ones(3, 3))


# ---- gather / scatter ----


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim, dtype):
    x = sample((17, 9, 5), dtype, 21)
    shape = [12, 9, 4]
    shape[dim] = 6
    index = ids(x.shape[dim], shape, 22, low=0)
    same(torch.gather(x.to(D), dim, index.to(D)), torch.gather(x, dim, index))
    same(torch.gather(x.to(D), dim, index.int().to(D)), torch.gather(x, dim, index.int()))
    no_fallback("gather")


def test_gather_0d_empty_and_errors():
    x = torch.tensor(3.5)
    same(torch.gather(x.to(D), 0, torch.tensor(0).to(D)), torch.gather(x, 0, torch.tensor(0)))
    y = torch.randn(4, 5)
    empty = torch.zeros(0, 5, dtype=torch.long)
    same(torch.gather(y.to(D), 0, empty.to(D)), torch.gather(y, 0, empty))
    no_fallback("gather")
    raises_like_cpu(lambda t, i: torch.gather(t, 1, i), y, torch.tensor([[5]]))
    raises_like_cpu(lambda t, i: torch.gather(t, 1, i), y, torch.tensor([[-1]]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_src_and_value(dtype):
    x = sample((8, 11), dtype, 23)
    src = sample((10, 12), dtype, 24)  # larger than index: only index's block is read
    # A permutation per row, so no two writes meet (torch leaves the winner of a collision unspecified).
    index = torch.stack([torch.randperm(11, generator=torch.Generator().manual_seed(r))[:7] for r in range(6)])
    same(x.to(D).scatter(1, index.to(D), src.to(D)), x.scatter(1, index, src))
    xd = x.to(D)
    xd.scatter_(1, index.to(D), src.to(D))
    same(xd, x.clone().scatter_(1, index, src))
    value = True if dtype == torch.bool else 7
    same(x.to(D).scatter(1, index.to(D), value), x.scatter(1, index, value))
    no_fallback("scatter")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_add_with_repeats(dim, dtype):
    x = sample((13, 7), dtype, 25)
    src = sample((40, 7), dtype, 26) if dim == 0 else sample((13, 30), dtype, 26)
    index = ids(x.shape[dim], src.shape, 27, low=0)
    same_sum(x.to(D).scatter_add(dim, index.to(D), src.to(D)), lambda a, b: a.scatter_add(dim, index, b), x, src)
    xd = x.to(D)
    xd.scatter_add_(dim, index.to(D), src.to(D))
    same_sum(xd, lambda a, b: a.clone().scatter_add_(dim, index, b), x, src)
    no_fallback("scatter_add", "scatter_add_")


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scatter_reduce_sum_mean(reduce, include_self, dtype):
    x = sample((9, 6), dtype, 28)
    src = sample((9, 20), dtype, 29)
    index = ids(6, (9, 20), 30, low=0)
    out = x.to(D).scatter_reduce(1, index.to(D), src.to(D), reduce, include_self=include_self)
    same_sum(out, lambda a, b: a.scatter_reduce(1, index, b, reduce, include_self=include_self), x, src)
    xd = x.to(D)
    xd.scatter_reduce_(1, index.to(D), src.to(D), reduce, include_self=include_self)
    same_sum(xd, lambda a, b: a.clone().scatter_reduce_(1, index, b, reduce, include_self=include_self), x, src)
    no_fallback("scatter_reduce")


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_reduce_amax_amin(reduce, include_self, dtype, dim):
    x = sample((9, 6, 5), dtype, 28)
    shape = [7, 4, 3]
    shape[dim] = 11  # more entries than targets: repeats
    src = sample([s + 1 for s in shape], dtype, 29)  # larger than index: only its block is read
    src.view(-1)[5] = float("nan")  # propagates, as on the CPU
    index = ids(x.shape[dim], shape, 30, low=0)
    out = x.to(D).scatter_reduce(dim, index.to(D), src.to(D), reduce, include_self=include_self)
    same(out, x.scatter_reduce(dim, index, src, reduce, include_self=include_self))
    xd = x.to(D)
    xd.scatter_reduce_(dim, index.to(D), src.to(D), reduce, include_self=include_self)
    same(xd, x.clone().scatter_reduce_(dim, index, src, reduce, include_self=include_self))
    no_fallback("scatter_reduce")


def test_scatter_reduce_prod_falls_back_with_cpu_values():
    x, src, index = torch.randn(5, 4), torch.randn(5, 9), ids(4, (5, 9), 31, low=0)
    same(x.to(D).scatter_reduce(1, index.to(D), src.to(D), "prod"), x.scatter_reduce(1, index, src, "prod"))
    assert "aten::scatter_reduce.two" in trnsim.fallback_report()


def test_scatter_errors_like_cpu():
    x, src = torch.zeros(4, 5), torch.ones(4, 5)
    raises_like_cpu(lambda t, i, s: t.scatter(1, i, s), x, torch.tensor([[5]]), src)
    raises_like_cpu(lambda t, i, s: t.scatter_add(0, i, s), x, torch.tensor([[-1]]), src)
    raises_like_cpu(lambda t, i, s: t.scatter(1, i, s), x, torch.zeros(6, 1, dtype=torch.long), src)


# ---- index_add_ ----


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_add_with_repeats(dim, dtype):
    x = sample((6, 10, 5), dtype, 32)
    n = 17
    shape = list(x.shape)
    shape[dim] = n
    source = sample(shape, dtype, 33)
    index = ids(x.shape[dim], (n,), 34, low=0)
    same_sum(x.to(D).index_add(dim, index.to(D), source.to(D)), lambda a, b: a.index_add(dim, index, b), x, source)
    xd = x.to(D)
    xd.index_add_(dim, index.int().to(D), source.to(D))
    same_sum(xd, lambda a, b: a.clone().index_add_(dim, index.int(), b), x, source)
    # A strided (non-contiguous) self, in place.
    xt = x.transpose(0, 2).to(D).transpose(0, 2)
    xt.index_add_(dim, index.to(D), source.to(D))
    same_sum(xt.contiguous(), lambda a, b: a.clone().index_add_(dim, index, b), x, source)
    no_fallback("index_add", "index_add_")


def test_index_add_alpha_empty_and_errors():
    x, source = torch.randn(5, 3), torch.randn(4, 3)
    index = torch.tensor([0, 4, 0, 2])
    empty = torch.zeros(0, dtype=torch.long)
    same(x.to(D).index_add(0, empty.to(D), torch.zeros(0, 3).to(D)), x.index_add(0, empty, torch.zeros(0, 3)))
    no_fallback("index_add")
    raises_like_cpu(lambda t, i, s: t.index_add(0, i, s), x, torch.tensor([0, 5, 0, 2]), source)
    # alpha != 1: the CPU rounds self + alpha * src once; not lowered (the CPU's values by the fallback).
    same(x.to(D).index_add(0, index.to(D), source.to(D), alpha=-2.5), x.index_add(0, index, source, alpha=-2.5))
    assert "aten::index_add" in trnsim.fallback_report()


# ---- bincount, arange, flip ----


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_bincount(dtype):
    x = ids(50, (1000,), 35, low=0).to(dtype)
    same(torch.bincount(x.to(D)), torch.bincount(x))
    same(torch.bincount(x.to(D), minlength=70), torch.bincount(x, minlength=70))
    w = rand((1000,), torch.float32, 36)
    out = torch.bincount(x.to(D), weights=w.to(D))
    expected = torch.bincount(x, weights=w)
    assert out.dtype == expected.dtype
    # Weighted sums: per-partition partial sums, then across partitions (another fp32 order than the CPU's).
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    same(torch.bincount(torch.zeros(0, dtype=dtype).to(D), minlength=3), torch.bincount(torch.zeros(0, dtype=dtype),
                                                                                       minlength=3))
    no_fallback("bincount")
    raises_like_cpu(lambda t: torch.bincount(t), torch.tensor([1, -1]))


@pytest.mark.parametrize("args,dtype", [((10,), None), ((-3, 20, 4), None), ((5, -7, -3), None),
                                        ((0, 1000), torch.int32), ((-50, 70001, 3), torch.float32), ((2.0, 9.0), None),
                                        ((0,), None), ((-(2**31) + 1, 2**31 - 1, 2**30), None)])
def test_arange(args, dtype):
    same(torch.arange(*args, dtype=dtype, device=D), torch.arange(*args, dtype=dtype))
    no_fallback("arange")


def test_arange_fractional_step_falls_back_with_cpu_values():
    same(torch.arange(0, 1, 0.1, device=D), torch.arange(0, 1, 0.1))
    raises_like_cpu(lambda: torch.arange(0, 5, -1, device=D))


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip(dtype):
    x = sample((5, 130, 3), dtype, 37)
    for dims in ([0], [1], [2], [0, 2], [-1, 0, 1]):
        same(torch.flip(x.to(D), dims), torch.flip(x, dims))
    same(torch.flip(x.to(D)[:, ::2], [1]), torch.flip(x[:, ::2], [1]))  # a strided view
    same(torch.flip(torch.tensor(2.0).to(D), [0]), torch.flip(torch.tensor(2.0), [0]))
    no_fallback("flip")


# ---- nonzero ----


@pytest.mark.parametrize("dtype", DTYPES)
# (3, 100, 77): 64 elements per partition, several tiles and a short last one.
@pytest.mark.parametrize("shape", [(300,), (7, 5, 9), (130, 2), (1, 1), (0, 3), (3, 100, 77)])
def test_nonzero(shape, dtype):
    x = sample(shape, dtype, 70)
    if dtype != torch.bool:
        zero = torch.rand(shape, generator=torch.Generator().manual_seed(71)) < 0.4
        x = torch.where(zero, torch.zeros((), dtype=dtype), x)
    if dtype == torch.int64:
        x[..., :1] = 2**33  # only the high word set: still nonzero
    same(torch.nonzero(x.to(D)), torch.nonzero(x))
    for got, want in zip(torch.nonzero(x.to(D), as_tuple=True), torch.nonzero(x, as_tuple=True)):
        same(got, want)
    no_fallback("nonzero")


def test_nonzero_nan_negative_zero_and_all_zero():
    x = torch.tensor([0.0, float("nan"), -0.0, 1.0, float("-inf")])
    same(torch.nonzero(x.to(D)), torch.nonzero(x))
    same(torch.nonzero(torch.zeros(4, 5).to(D)), torch.nonzero(torch.zeros(4, 5)))
    no_fallback("nonzero")


# ---- topk ----


def distinct(shape, dtype, seed):
    """Values with no ties along the last dim (exact in bf16: integers below 256 in magnitude)."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randperm(shape[-1], generator=g) - shape[-1] // 2 for _ in range(math.prod(shape[:-1]))]
    return (torch.stack(rows).reshape(shape).float() / (1 if dtype == torch.bfloat16 else 7.3)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,k,dim,largest", [((512, 16), 2, -1, True), ((7, 300), 8, 1, False),
                                                 ((5, 3), 3, -1, True), ((4, 9, 6), 2, 1, True),
                                                 ((130, 8), 8, -1, False), ((3, 1), 1, 0, True)])
def test_topk(shape, k, dim, largest, dtype):
    x = distinct(shape, dtype, 50).movedim(-1, dim).contiguous()
    values, indices = torch.topk(x.to(D), k, dim=dim, largest=largest)
    expected = torch.topk(x, k, dim=dim, largest=largest)
    same(values, expected.values)
    same(indices, expected.indices)
    no_fallback("topk")


def test_topk_ties_inside_the_top_k_run_on_the_device():
    # Equal values that are all taken: the same set as the CPU's, equal values at ascending positions
    # (the CPU orders them its own way, so compare the set and the values).
    g = torch.Generator().manual_seed(51)
    x = torch.randint(0, 3, (200, 16), generator=g).float() + torch.arange(16.0) * 10  # ties only below ...
    x[:, 3] = x[:, 5] = 1000.0  # ... and one tie at the top of every row
    for k in (2, 3, 8):
        values, indices = torch.topk(x.to(D), k)
        expected = torch.topk(x, k)
        same(values, expected.values)
        assert torch.equal(indices.cpu().sort(-1).values, expected.indices.sort(-1).values)
        assert torch.equal(indices.cpu()[:, :2], torch.tensor([[3, 5]]).expand(200, 2))
        assert torch.equal(torch.gather(x, 1, indices.cpu()), expected.values)
    no_fallback("topk")


def test_topk_boundary_ties_nan_and_large_k_fall_back_with_cpu_values():
    for x, k in [(torch.tensor([[1.0, 3.0, 3.0, 0.0]]), 1), (torch.tensor([[5.0, 3.0, 3.0, 3.0, 0.0]]), 3),
                 (torch.tensor([[1.0, float("nan"), 2.0]]), 2), (torch.randn(4, 20), 9)]:
        values, indices = torch.topk(x.to(D), k)
        same(values, torch.topk(x, k).values)
        same(indices, torch.topk(x, k).indices)
    assert trnsim.fallback_report()["aten::topk"] == 4


# ---- sort ----


def sort_input(shape, dtype, seed, wide=False):
    g = torch.Generator().manual_seed(seed)
    if wide and not dtype.is_floating_point:  # a key range beyond the counting sort's 512: the rank sort
        return torch.randint(-(2**23) + 1, 2**23, shape, generator=g).to(dtype) // 64
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g) * 4
        x.view(-1)[::7] = 1.5  # ties: a stable sort keeps their order
        x.view(-1)[::11] = -0.0
        x.view(-1)[::13] = float("inf")
        return x.to(dtype)
    return torch.randint(-(2**23), 2**23, shape, generator=g).to(dtype) // (2**20)  # 16 keys: the counting sort


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
@pytest.mark.parametrize("shape,dim,descending", [((3, 300), -1, False), ((200,), 0, True), ((5, 7, 4), 1, False),
                                                  ((1,), 0, True), ((2, 129), 1, True)])
@pytest.mark.parametrize("wide", [False, True])
def test_sort_stable_values_and_int64_indices(shape, dim, descending, dtype, wide):
    if wide and dtype.is_floating_point:
        pytest.skip("key range applies to integers")
    x = sort_input(shape, dtype, 60, wide)
    expected = torch.sort(x, dim=dim, descending=descending, stable=True)
    for stable in (True, False):  # the device's sort is always stable (a valid unstable sort, as on CUDA)
        values, indices = torch.sort(x.to(D), dim=dim, descending=descending, stable=stable)
        same(values, expected.values)
        same(indices, expected.indices)
    values, indices = torch.empty(0, dtype=dtype).to(D), torch.empty(0, dtype=torch.long).to(D)
    torch.sort(x.to(D), dim=dim, descending=descending, stable=True, out=(values, indices))
    same(values, expected.values)
    same(indices, expected.indices)
    no_fallback("sort")


def test_sort_nan_and_empty():
    x = torch.tensor([3.0, float("nan"), -1.0, float("nan")])
    for descending in (False, True):  # NaN: the CPU's order by the fallback
        same(torch.sort(x.to(D), descending=descending, stable=True).indices,
             torch.sort(x, descending=descending, stable=True).indices)
    assert trnsim.fallback_report()["aten::sort.stable"] == 2
    e = torch.zeros(3, 0)
    same(torch.sort(e.to(D), dim=1, stable=True).values, torch.sort(e, dim=1, stable=True).values)


# ---- a Mixtral-style MoE routing step, and the kernels' time ----


def test_moe_routing_runs_without_fallback():
    tokens, hidden, experts, k = 96, 32, 8, 2
    h = rand((tokens, hidden), torch.float32, 40)
    router = rand((hidden, experts), torch.float32, 41)
    w = rand((experts, hidden, hidden), torch.float32, 42) * 0.1

    def moe(x, dev):
        logits = x @ router.to(dev)
        probs = torch.softmax(logits, dim=-1)
        top_w, top_i = torch.topk(probs, k, dim=-1)
        # transformers: float on the CPU (no integer histc there), int32 on an accelerator.
        flat_ids = top_i.reshape(-1).float() if dev == "cpu" else top_i.reshape(-1).int()
        counts = torch.histc(flat_ids, bins=experts, min=0, max=experts - 1)
        out = torch.zeros_like(x)
        flat = top_i.reshape(-1)
        # The grouped-mm path's ordering by expert (stable here: the CPU's unstable order is its own).
        grouped, perm = torch.sort(flat, stable=True)
        routed_w = top_w.reshape(-1)[perm]
        for e in range(experts):
            pos = torch.nonzero(flat.cpu() == e).reshape(-1).to(dev)  # routing positions (host-side loop)
            token = pos // k if dev == "cpu" else (pos.cpu() // k).to(dev)
            rows = x[token]
            y = (rows @ w[e].to(dev)) * top_w.reshape(-1)[pos].unsqueeze(-1)
            out.index_add_(0, token, y)
        return out, counts, grouped, perm, routed_w, top_w

    out, counts, grouped, perm, routed_w, top_w = moe(h.to(D), D)
    expected, expected_counts, expected_grouped, expected_perm, _, _ = moe(h, "cpu")
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(counts.cpu(), expected_counts.int())
    same(grouped, expected_grouped)
    same(perm, expected_perm)
    same(routed_w, top_w.cpu().reshape(-1)[perm.cpu()])  # the gather is exact (softmax is within fp32 tolerance)
    no_fallback("histc", "index", "index_add_", "topk", "sort")


# trn2 (configs/trn2.yaml): 16 DMA engines of 27.2 GB/s, 1300 ns start latency, 50 ns fixed start-up per
# engine, 86 ns per descriptor element, one software-DGE cycle per descriptor; GpSimd (the software DGE)
# 150 cycles GPSIMD_START at 1.2 GHz.
ENGINES, ENGINE_GBPS, START_NS, DMA_FIXED_NS, DESCRIPTOR_NS, POOL_START, POOL_GHZ = 16, 27.2, 1300, 50, 86, 150, 1.2


def dma_ns(rows, nbytes, indirect):
    """One DMA as the cost model prices it: the start latency, the start-up, the larger of its descriptor
    elements' processing and its bytes over the engines, and for an indirect one the GpSimd's descriptor
    generation (start + a cycle per row) first."""
    dge = (POOL_START + rows) / POOL_GHZ if indirect else 0
    return START_NS + dge + DMA_FIXED_NS + max(rows / ENGINES * DESCRIPTOR_NS, nbytes / ENGINES / ENGINE_GBPS)


@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_row_gather_scatter_time_matches_the_cost_model(op):
    trnsim.set_config("trn2")
    rows, width = 128, 1024  # one tile: ids load -> indirect DMA (-> store), each waiting on the last
    table = torch.randn(4096, width).to(torch.bfloat16)
    idx = torch.randperm(4096, generator=torch.Generator().manual_seed(43))[:rows]
    src = torch.randn(rows, width).to(torch.bfloat16)
    trnsim.reset_simulated_time()
    if op == "gather":
        same(table.to(D)[idx.to(D)], table[idx])
    else:
        t = table.to(D)
        t.index_put_((idx.to(D),), src.to(D))
        same(t, table.clone().index_put_((idx,), src))
    rec = [r for r in trnsim.op_log("kernel") if r["op"] in ("index.Tensor", "_index_put_impl_")][-1]
    moved = rows * width * 2
    ids_ns = dma_ns(rows, rows * 8, False)  # int64 ids: 8 bytes, one descriptor per id
    # gather: ids, the indirect gather, the store; scatter: ids and the row load overlap, then the scatter.
    chain = ids_ns + dma_ns(rows, moved, True) + dma_ns(rows, moved, False) if op == "gather" else \
        max(ids_ns, dma_ns(rows, moved, False)) + dma_ns(rows, moved, True)
    # HBM access latency and engine hand-offs come on top of the DMA formulas: within 25 %.
    body = rec["ns"] - rec["launch_ns"]   # the op's kernel after its launch cost (config chip.kernel_launch_ns)
    assert chain <= body <= 1.25 * chain, (body, chain)
