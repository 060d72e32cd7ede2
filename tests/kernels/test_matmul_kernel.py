"""The matmul kernel builder against PyTorch on the CPU: ragged shapes, transposed operands,
batches, fused epilogues, dtypes. The kernel is emitted by `trnsim bench matmul --emit-tasm` and
run by `trnsim run` (values from the interpreter)."""
import numpy as np
import pytest
import torch

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
         # |x| < 240: the legacy e4m3 of NKI and the OCP e4m3fn of torch round identically.
         "fp8_e4m3": torch.float8_e4m3fn}
GELU = {"gelu": lambda x: torch.nn.functional.gelu(x), "relu": torch.relu, "silu": torch.nn.functional.silu}


def run_matmul(run_trnsim, tmp_path, m, k, n, dtype="bf16", out_dtype="fp32", batch=1, transpose_a=False,
               transpose_b=False, bias=False, activation=None, residual=False, config="trn2", seed=0):
    kernel = tmp_path / "mm.tasm"
    args = ["bench", "matmul", "--m", m, "--k", k, "--n", n, "--batch", batch, "--dtype", dtype,
            "--out-dtype", out_dtype, "--config", config, "--emit-tasm", kernel, "--force"]
    args += ["--transpose-a"] * transpose_a + ["--transpose-b"] * transpose_b + ["--bias"] * bias
    args += ["--residual"] * residual + (["--activation", activation] if activation else [])
    built = run_trnsim(*args)
    assert built.returncode == 0, built.stderr

    rng = np.random.default_rng(seed)
    lead = (batch,) if batch > 1 else ()
    # Inputs rounded to the kernel's dtype first, so both sides multiply the same numbers.
    a = torch.from_numpy(rng.standard_normal(lead + (m, k)).astype(np.float32)).to(TORCH[dtype]).float()
    b = torch.from_numpy(rng.standard_normal(lead + (k, n)).astype(np.float32)).to(TORCH[dtype]).float()
    files = {"a": a.transpose(-1, -2) if transpose_a else a, "b": b.transpose(-1, -2) if transpose_b else b}
    expected = a @ b
    if bias:
        files["bias"] = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
        expected = expected + files["bias"]
    if activation:
        expected = GELU[activation](expected)
    if residual:
        files["residual"] = torch.from_numpy(rng.standard_normal(lead + (m, n)).astype(np.float32))
        expected = expected + files["residual"]
    run_args = ["run", kernel, "--config", config, "--output", f"c={tmp_path / 'c.npy'}", "--force"]
    for name, tensor in files.items():
        np.save(tmp_path / f"{name}.npy", tensor.contiguous().numpy())
        run_args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    result = run_trnsim(*run_args)
    assert result.returncode == 0, result.stderr
    got = torch.from_numpy(np.load(tmp_path / "c.npy"))
    return got, expected, (a.abs() @ b.abs()), k


def check(got, expected, magnitude, k, out_dtype):
    # fp32 accumulation in another order: a few K ulps of the magnitude sum; a bf16/fp16 output adds
    # one rounding of the result (plus the epilogue's ~1e-6 relative).
    tolerance = 4 * k * 2.0**-24 * magnitude + 1e-6 * expected.abs()
    if out_dtype != "fp32":
        tolerance = tolerance + expected.abs() * 2.0 ** -(8 if out_dtype == "bf16" else 11) + 1e-6
    assert got.shape == expected.shape
    excess = (got - expected).abs() - tolerance
    assert float(excess.max()) <= 0, f"max excess {float(excess.max())}"


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (128, 128, 512), (300, 200, 700), (129, 257, 513)])
def test_ragged_shapes(run_trnsim, tmp_path, m, k, n):
    got, expected, magnitude, kk = run_matmul(run_trnsim, tmp_path, m, k, n)
    check(got, expected, magnitude, kk, "fp32")


@pytest.mark.parametrize("transpose_a,transpose_b", [(True, False), (False, True), (True, True)])
def test_transposed_operands(run_trnsim, tmp_path, transpose_a, transpose_b):
    got, expected, magnitude, k = run_matmul(run_trnsim, tmp_path, 200, 300, 600, transpose_a=transpose_a,
                                             transpose_b=transpose_b)
    check(got, expected, magnitude, k, "fp32")


def test_fp32_on_trn1_with_pe_transposes_and_batches(run_trnsim, tmp_path):
    got, expected, magnitude, k = run_matmul(run_trnsim, tmp_path, 150, 140, 600, dtype="fp32", batch=2,
                                             transpose_b=True, config="trn1")
    check(got, expected, magnitude, k, "fp32")


@pytest.mark.parametrize("activation", [None, "gelu", "relu", "silu"])
def test_fused_epilogue_with_bf16_output(run_trnsim, tmp_path, activation):
    got, expected, magnitude, k = run_matmul(run_trnsim, tmp_path, 300, 256, 700, out_dtype="bf16", bias=True,
                                             activation=activation, residual=True)
    check(got.float(), expected, magnitude, k, "bf16")


def test_fp16_inputs(run_trnsim, tmp_path):
    got, expected, magnitude, k = run_matmul(run_trnsim, tmp_path, 130, 384, 520, dtype="fp16", out_dtype="fp16")
    check(got.float(), expected, magnitude, k, "fp16")


@pytest.mark.parametrize("config", ["trn1", "trn2"])
def test_fp8_inputs_use_double_row_where_the_generation_has_it(run_trnsim, tmp_path, config):
    got, expected, magnitude, k = run_matmul(run_trnsim, tmp_path, 200, 512, 600, dtype="fp8_e4m3",
                                             transpose_a=True, config=config)
    check(got, expected, magnitude, k, "fp32")
    listing = (tmp_path / "mm.tasm").read_text()
    assert ("perf_mode=double_row" in listing) == (config == "trn2")
