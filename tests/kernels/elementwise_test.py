"""Element-wise and normalization kernel builders against PyTorch on the CPU.

Each case builds a kernel with build/bin/kernel_runner (--tasm), runs it with `trnsim run` and
compares with torch. Tolerances follow the dtypes: inputs are exact in the kernel's dtype (bf16
inputs are compared against torch on the bf16-rounded values, computed in fp32); fp32 outputs
agree to a few fp32 ulps (transcendentals, reassociated per-row constants); bf16 outputs to one
bf16 ulp of the fp32 reference (a different fp32 rounding can flip the final rounding).
"""
import numpy as np
import pytest
import torch

from conftest import build_dir

EPS = {"fp32": 2e-6, "bf16": 2.0 ** -7}  # bf16: one ulp at the bottom of a binade
TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16}


def runner():
    path = build_dir() / "bin" / "kernel_runner"
    if not path.exists():
        pytest.fail(f"{path} is missing: build first")
    return path


def run_kernel(run_trnsim, tmp_path, kernel, params, inputs, outputs):
    import subprocess
    tasm = tmp_path / "k.tasm"
    args = [str(runner()), kernel, *[f"{k}={v}" for k, v in params.items()], "--tasm", str(tasm)]
    built = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    cmd = ["run", tasm, "--config", params.get("config", "trn2")]
    for name, array in inputs.items():
        np.save(tmp_path / f"{name}.npy", array)
        cmd += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    for name in outputs:
        cmd += ["--output", f"{name}={tmp_path / f'out_{name}.npy'}"]
    result = run_trnsim(*cmd)
    assert result.returncode == 0, result.stderr
    return [np.load(tmp_path / f"out_{name}.npy") for name in outputs]


def rounded(x, dtype):
    """x as the kernel sees it (rounded to dtype), as fp32 torch tensor."""
    return torch.from_numpy(x).to(TORCH[dtype]).float()


def assert_close(out, expected, dtype, rel=None):
    """|out - expected| <= rel * |expected| + the same at the scale of the tensor's largest values."""
    rel = EPS[dtype] if rel is None else rel
    out = np.asarray(out, dtype=np.float64)
    exp = expected.double().numpy().reshape(out.shape)
    tol = rel * np.abs(exp) + rel * 1e-2 * (np.abs(exp).max() + 1e-30)
    bad = ~(np.abs(out - exp) <= tol) & ~(np.isnan(out) & np.isnan(exp))
    assert not bad.any(), f"{bad.sum()} mismatches, e.g. out {out[bad][:4]} vs {exp[bad][:4]}"


def shape_text(shape):
    return "x".join(map(str, shape))


UNARY = {
    "relu": torch.relu, "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "gelu_dx": lambda x: torch.ops.aten.gelu_backward(torch.ones_like(x), x), "silu": torch.nn.functional.silu,
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "square": torch.square, "abs": torch.abs, "neg": torch.neg,
    "reciprocal": torch.reciprocal, "affine": lambda x: x * 1.5 + 0.25,
}
POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal"}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("dtype,shape", [("fp32", (300, 7)), ("bf16", (129, 513)), ("fp32", (1,))])
def test_unary(run_trnsim, tmp_path, op, dtype, shape):
    rng = np.random.default_rng(hash(op) % 1000)
    x = rng.standard_normal(shape).astype(np.float32) * 2
    if op in POSITIVE:
        x = np.abs(x) + 0.1
    (y,) = run_kernel(run_trnsim, tmp_path, "unary", {"shape": shape_text(shape), "dtype": dtype, "op": op,
                                                       "scale": 1.5, "bias": 0.25}, {"x": x}, ["y"])
    expected = UNARY[op](rounded(x, dtype)).to(TORCH[dtype]).float()
    # fp32 transcendentals: a few ulps of the host libm against torch's vectorised versions. gelu's
    # 1 + erf(x/sqrt2) cancels for negative x, amplifying one ulp of erf to ~1e-4 relative there.
    rel = (1e-4 if op in ("gelu", "gelu_dx") else 4e-6) if dtype == "fp32" else None
    assert_close(y, expected, dtype, rel=rel)


@pytest.mark.parametrize("src,dst", [("fp32", "bf16"), ("bf16", "fp32")])
def test_cast(run_trnsim, tmp_path, src, dst):
    x = np.random.default_rng(5).standard_normal((127, 2049)).astype(np.float32)
    (y,) = run_kernel(run_trnsim, tmp_path, "unary", {"shape": "127x2049", "dtype": src, "out_dtype": dst, "op": "copy"},
                      {"x": x}, ["y"])
    expected = rounded(x, src).to(TORCH[dst]).float()
    np.testing.assert_array_equal(np.asarray(y, np.float32), expected.numpy())


BINARY = {"add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": torch.div,
          "maximum": torch.maximum, "minimum": torch.minimum, "greater": torch.gt, "less_equal": torch.le,
          "equal": torch.eq}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("dtype,a_shape,b_shape", [
    ("fp32", (300, 7), (300, 7)), ("bf16", (129, 513), (513,)), ("fp32", (4, 1, 33), (5, 1)),
    ("bf16", (3, 200, 1), (1, 1, 9)), ("fp32", (1,), (7, 129)),
])
def test_binary(run_trnsim, tmp_path, op, dtype, a_shape, b_shape):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    if op == "equal":
        b = np.round(b)
        a = np.round(a)
    compare = op in ("greater", "less_equal", "equal")
    out_dtype = "uint8" if compare else dtype
    (c,) = run_kernel(run_trnsim, tmp_path, "binary", {"a_shape": shape_text(a_shape), "b_shape": shape_text(b_shape),
                                                        "dtype": dtype, "out_dtype": out_dtype, "op": op},
                      {"a": a, "b": b}, ["c"])
    expected = BINARY[op](rounded(a, dtype), rounded(b, dtype))
    if compare:
        np.testing.assert_array_equal(c.astype(np.uint8), expected.numpy().astype(np.uint8))
    else:
        assert_close(c, expected.to(TORCH[dtype]).float(), dtype, rel=0 if dtype == "fp32" else None)


@pytest.mark.parametrize("which", ["a", "b"])
def test_binary_scalar(run_trnsim, tmp_path, which):
    x = np.random.default_rng(8).standard_normal((129, 7)).astype(np.float32)
    params = {"a_shape" if which == "b" else "b_shape": "129x7", f"{which}_scalar": 2.5, "op": "subtract"}
    (c,) = run_kernel(run_trnsim, tmp_path, "binary", params, {("a" if which == "b" else "b"): x}, ["c"])
    expected = torch.from_numpy(x) - 2.5 if which == "b" else 2.5 - torch.from_numpy(x)
    assert_close(c, expected, "fp32", rel=0)


@pytest.mark.parametrize("which", ["a", "b"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_binary_runtime_scalar_is_an_input_not_part_of_the_program(run_trnsim, tmp_path, which, dtype):
    """runtime_scalar: the scalar reaches the kernel as its fp32 [1] input, so two values build one
    program, and the results are those of the same scalar as an immediate, bit for bit."""
    x = np.random.default_rng(8).standard_normal((300, 513)).astype(np.float32)
    tensor = "a" if which == "b" else "b"
    results, programs = [], []
    for k, value in enumerate((0.37, -1.7e-3)):
        base = {f"{tensor}_shape": "300x513", f"{which}_scalar": value, "op": "divide", "dtype": dtype}
        run_dir, imm_dir = tmp_path / f"runtime{k}", tmp_path / f"imm{k}"
        run_dir.mkdir(), imm_dir.mkdir()
        (c,) = run_kernel(run_trnsim, run_dir, "binary", {**base, "runtime_scalar": 1},
                          {tensor: x, which: np.array([value], np.float32)}, ["c"])
        (c_imm,) = run_kernel(run_trnsim, imm_dir, "binary", base, {tensor: x}, ["c"])
        np.testing.assert_array_equal(c, c_imm)
        xr = rounded(x, dtype)
        expected = xr / value if which == "b" else value / xr
        assert_close(c, expected.to(TORCH[dtype]).float(), dtype)
        programs.append((run_dir / "k.tasm").read_text())
    assert programs[0] == programs[1]


@pytest.mark.parametrize("b_scalar", [False, True])
def test_where(run_trnsim, tmp_path, b_scalar):
    rng = np.random.default_rng(9)
    cond = (rng.random((300, 7)) > 0.5).astype(np.uint8)
    a = rng.standard_normal((300, 7)).astype(np.float32)
    b = rng.standard_normal((300, 7)).astype(np.float32)
    params = {"shape": "300x7"}
    inputs = {"cond": cond, "a": a}
    if b_scalar:
        params["b_scalar"] = -1.0
    else:
        inputs["b"] = b
    (out,) = run_kernel(run_trnsim, tmp_path, "where", params, inputs, ["out"])
    expected = np.where(cond != 0, a, -1.0 if b_scalar else b)
    np.testing.assert_array_equal(out, expected.astype(np.float32))


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype,shape", [
    ("fp32", (300, 7)), ("bf16", (129, 513)), ("fp32", (2, 3, 1)), ("bf16", (5, 2049)),
    # Rows too long for SBUF: the chunked two-pass schedule (ragged C: not a multiple of the chunk).
    ("fp32", (5, 40000)), ("bf16", (5, 40000)), ("fp32", (130, 70000)), ("bf16", (2, 3, 33333)),
])
def test_softmax(run_trnsim, tmp_path, log, dtype, shape):
    x = (np.random.default_rng(10).standard_normal(shape) * 3).astype(np.float32)
    kernel = "log_softmax" if log else "softmax"
    (y,) = run_kernel(run_trnsim, tmp_path, kernel, {"shape": shape_text(shape), "dtype": dtype}, {"x": x}, ["y"])
    fn = torch.log_softmax if log else torch.softmax
    # fp32: the reference in float64, rounded once (torch's fp32 CPU softmax over 70K-long rows is off
    # by up to ~1.7e-5 relative on a host without AVX-512; the kernel is within 6e-6).
    reference = rounded(x, dtype).double() if dtype == "fp32" else rounded(x, dtype)
    expected = fn(reference, dim=-1).to(TORCH[dtype]).float()
    assert_close(y, expected, dtype, rel=1e-5 if dtype == "fp32" else None)


@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("dtype,shape,weight,bias", [
    ("fp32", (300, 7), True, True), ("bf16", (129, 513), True, False), ("fp32", (1, 2049), False, False),
    ("bf16", (2, 64, 100), True, True),
    # Rows too long for SBUF: the chunked two-pass schedule (ragged C: not a multiple of the chunk).
    ("fp32", (5, 40000), True, True), ("bf16", (130, 20001), True, False), ("fp32", (3, 70001), False, False),
])
def test_norm(run_trnsim, tmp_path, kind, dtype, shape, weight, bias):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(shape) + 0.5).astype(np.float32)
    w = rng.standard_normal(shape[-1]).astype(np.float32)
    b = rng.standard_normal(shape[-1]).astype(np.float32)
    eps = 1e-5
    params = {"shape": shape_text(shape), "dtype": dtype, "eps": eps, "weight": int(weight), "has_bias": int(bias),
              "save_stats": 1}
    inputs = {"x": x}
    if weight:
        inputs["w"] = w
    if bias and kind == "layernorm":
        inputs["b"] = b
    stats = ["rstd"] if kind == "rmsnorm" else ["mean", "rstd"]
    y, *saved = run_kernel(run_trnsim, tmp_path, kind, params, inputs, ["y"] + stats)
    xr = rounded(x, dtype)
    # The statistics the backward takes, fp32 per row.
    rows = xr.reshape(-1, shape[-1]).double()
    if kind == "rmsnorm":
        expected_stats = [torch.rsqrt(rows.pow(2).mean(-1) + eps)]
    else:
        expected_stats = [rows.mean(-1), torch.rsqrt(rows.var(-1, unbiased=False) + eps)]
    for name, got, want in zip(stats, saved, expected_stats):
        torch.testing.assert_close(torch.as_tensor(np.asarray(got)).double().reshape(-1), want, rtol=2e-5, atol=1e-6,
                                   msg=name)
    wr = rounded(w, dtype) if weight else None
    if kind == "rmsnorm":
        expected = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + eps)
        if weight:
            expected = expected * wr
    else:
        br = rounded(b, dtype) if bias else None
        expected = torch.nn.functional.layer_norm(xr, (shape[-1],), wr, br, eps)
    assert_close(y, expected.to(TORCH[dtype]).float(), dtype, rel=1e-5 if dtype == "fp32" else None)
