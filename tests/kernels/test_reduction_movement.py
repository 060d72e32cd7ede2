"""Reduction, argmax/argmin, permute, concat and embedding-gather kernels against PyTorch.

Each case builds a kernel with build/bin/kernel_runner (--tasm), runs it with `trnsim run` and
compares with torch on the values the kernel sees (bf16 inputs rounded first). Sums accumulate in
fp32 in a different order than torch, so they are compared with a tolerance relative to the sum
of magnitudes; max/min, argmax and the data-movement kernels are exact.
"""
import subprocess

import numpy as np
import pytest
import torch

from conftest import build_dir
from elementwise_test import TORCH, rounded, run_kernel, shape_text

RNG = np.random.default_rng(2024)


def reduce_case(run_trnsim, tmp_path, shape, dims, op, keepdim, dtype, x=None):
    if x is None:
        x = RNG.standard_normal(shape).astype(np.float32)
    params = {"shape": shape_text(shape), "dims": ",".join(map(str, dims)), "op": op, "keepdim": int(keepdim),
              "dtype": dtype}
    (y,) = run_kernel(run_trnsim, tmp_path, "reduce", params, {"x": x}, ["y"])
    xt = rounded(x, dtype)
    return x, xt, np.asarray(y)


REDUCE_CASES = [  # shape, dims: rows (innermost), spread (few long rows), columns (outer dim), mixed
    ((300, 7), [1]), ((5, 3000), [1]), ((2, 70000), [-1]), ((129, 513), [0]), ((3, 300, 5000), [1]),
    ((4, 6, 33), [0, 2]), ((2, 3, 4, 5), [1, 3]), ((7, 1, 9), [1]), ((33, 65), [0, 1]), ((6, 50, 17), [1]),
]


@pytest.mark.parametrize("shape,dims", REDUCE_CASES)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reduce(run_trnsim, tmp_path, shape, dims, op):
    dtype = "bf16" if (len(shape) + len(dims)) % 2 else "fp32"
    keepdim = sum(shape) % 2 == 0
    x, xt, y = reduce_case(run_trnsim, tmp_path, shape, dims, op, keepdim, dtype)
    fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[op]
    expected = fn(xt.double(), dim=dims, keepdim=keepdim)
    assert y.shape == tuple(expected.shape)
    out = torch.from_numpy(np.asarray(y, np.float32)).double()
    if op in ("max", "min"):
        np.testing.assert_array_equal(out.numpy(), expected.to(TORCH[dtype]).double().numpy())
        return
    count = np.prod([shape[d] for d in dims])
    magnitude = torch.sum(xt.abs().double(), dim=dims, keepdim=keepdim) / (count if op == "mean" else 1)
    ulp = 2.0 ** -8 if dtype == "bf16" else 2.0 ** -23
    tol = ulp * expected.abs() + 1e-6 * magnitude + 1e-30
    assert torch.all((out - expected).abs() <= tol), (out - expected).abs().max()


# Reductions over an outer dim with a long inner row (the streamed-columns path: sum/mean on the
# Tensor engine with a ones column, fp32 inputs partly on GpSimd; max/min on Vector + GpSimd):
# ragged rows and columns, several column groups, a kept dim before the reduced one.
OUTER_CASES = [((1000, 777), [0]), ((3, 130, 50), [0]), ((3, 130, 50), [0, 1]), ((2100, 1100), [0]),
               ((2, 1030, 300), [1]),
               # few rows over long columns (the few-rows pass: rows spread [d, B/d], combined element-wise)
               ((2, 65536), [0]), ((16, 1000), [0]), ((3, 2, 3157), [1])]
OUTER_TORCH = {**TORCH, "fp16": torch.float16}


@pytest.mark.parametrize("shape,dims", OUTER_CASES)
@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp16"])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_reduce_outer_dim(run_trnsim, tmp_path, shape, dims, dtype, op):
    keepdim = shape[0] == 2
    x = RNG.standard_normal(shape).astype(np.float32)
    params = {"shape": shape_text(shape), "dims": ",".join(map(str, dims)), "op": op, "keepdim": int(keepdim),
              "dtype": dtype}
    (y,) = run_kernel(run_trnsim, tmp_path, "reduce", params, {"x": x}, ["y"])
    y = np.asarray(y)
    xt = torch.from_numpy(x).to(OUTER_TORCH[dtype]).float()
    fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[op]
    expected = fn(xt.double(), dim=dims, keepdim=keepdim)
    assert y.shape == tuple(expected.shape)
    out = torch.from_numpy(np.asarray(y, np.float32)).double()
    if op in ("max", "min"):
        np.testing.assert_array_equal(out.numpy(), expected.to(OUTER_TORCH[dtype]).double().numpy())
        return
    count = np.prod([shape[d] for d in dims])
    magnitude = torch.sum(xt.abs().double(), dim=dims, keepdim=keepdim) / (count if op == "mean" else 1)
    ulp = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11, "fp32": 2.0 ** -23}[dtype]
    tol = ulp * expected.abs() + 1e-6 * magnitude + 1e-30
    assert torch.all((out - expected).abs() <= tol), (out - expected).abs().max()


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("shape,dim,dtype", [((300, 7), 1, "fp32"), ((5, 5000), 1, "bf16"), ((3, 4), 1, "fp32"),
                                             ((40, 6, 9), 1, "bf16"), ((17, 3), 0, "fp32")])
def test_argmax_ties(run_trnsim, tmp_path, op, shape, dim, dtype):
    x = np.round(RNG.standard_normal(shape) * 2).astype(np.float32)  # many ties
    x, xt, y = reduce_case(run_trnsim, tmp_path, shape, [dim], op, False, dtype, x)
    expected = (torch.argmax if op == "argmax" else torch.argmin)(xt, dim=dim)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, expected.numpy())


@pytest.mark.parametrize("shape,perm,dtype", [
    ((300, 7), (1, 0), "fp32"), ((129, 515), (1, 0), "bf16"), ((4, 5, 6), (2, 0, 1), "fp32"),
    ((3, 130, 70), (0, 2, 1), "bf16"), ((4, 5, 6), (1, 0, 2), "fp32"), ((2, 3, 4, 5), (3, 1, 0, 2), "bf16"),
    ((2, 3, 4, 5), (0, 2, 1, 3), "fp32"), ((6, 7), (1, 0), "int32"),
])
def test_permute(run_trnsim, tmp_path, shape, perm, dtype):
    x = RNG.standard_normal(shape).astype(np.float32)
    if dtype == "int32":
        x = RNG.integers(-2**31, 2**31 - 1, shape, dtype=np.int64).astype(np.int32)
    (y,) = run_kernel(run_trnsim, tmp_path, "permute", {"shape": shape_text(shape), "perm": ",".join(map(str, perm)),
                                                         "dtype": dtype}, {"x": x}, ["y"])
    xt = torch.from_numpy(x) if dtype == "int32" else rounded(x, dtype)
    np.testing.assert_array_equal(np.asarray(y, xt.numpy().dtype), xt.permute(*perm).contiguous().numpy())


@pytest.mark.parametrize("shapes,dim", [
    ([(3, 4), (5, 4)], 0), ([(3, 4), (3, 1), (3, 7)], 1), ([(2, 3, 4), (2, 5, 4), (2, 1, 4), (2, 2, 4)], 1),
    ([(2, 3, 4), (2, 3, 6)], 2), ([(2, 3, 4), (1, 3, 4)], 0), ([(200, 70000), (200, 1)], 1),
])
def test_concat(run_trnsim, tmp_path, shapes, dim):
    xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    (y,) = run_kernel(run_trnsim, tmp_path, "concat", {"shapes": ",".join(shape_text(s) for s in shapes), "dim": dim},
                      {f"x{k}": x for k, x in enumerate(xs)}, ["y"])
    np.testing.assert_array_equal(y, torch.cat([torch.from_numpy(x) for x in xs], dim=dim).numpy())


@pytest.mark.parametrize("n,vocab,dim,dtype", [(300, 50, 33, "bf16"), (5, 1000, 8192 + 5, "fp32")])
def test_embedding(run_trnsim, tmp_path, n, vocab, dim, dtype):
    table = RNG.standard_normal((vocab, dim)).astype(np.float32)
    ids = RNG.integers(0, vocab, n).astype(np.int32)
    ids[: min(n, 4)] = [vocab - 1, 0, vocab - 1, 3][: min(n, 4)]  # repeated, out of order, both ends
    (y,) = run_kernel(run_trnsim, tmp_path, "embedding", {"num_ids": n, "vocab": vocab, "dim": dim, "dtype": dtype},
                      {"ids": ids, "table": table}, ["y"])
    expected = torch.nn.functional.embedding(torch.from_numpy(ids).long(), rounded(table, dtype))
    np.testing.assert_array_equal(np.asarray(y, np.float32), expected.numpy())


def test_embedding_out_of_range_id(run_trnsim, tmp_path):
    tasm = tmp_path / "k.tasm"
    built = subprocess.run([str(build_dir() / "bin" / "kernel_runner"), "embedding", "num_ids=6", "vocab=10", "dim=4",
                            "--tasm", str(tasm)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    np.save(tmp_path / "ids.npy", np.array([1, 2, 10, 3, 4, 5], np.int32))
    np.save(tmp_path / "table.npy", np.zeros((10, 4), np.float32))
    result = run_trnsim("run", tasm, "--config", "trn2", "--input", f"ids={tmp_path / 'ids.npy'}",
                        "--input", f"table={tmp_path / 'table.npy'}", "--output", f"y={tmp_path / 'y.npy'}")
    assert result.returncode != 0
    assert "gather index 10 (partition 2) is out of range for a table of 10 rows" in result.stderr
