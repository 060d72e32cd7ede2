"""`trnsim run` on the example kernels: outputs against PyTorch on the CPU, and the command's errors.

Tolerances follow from the dtypes. Matmuls: inputs are exact in the kernel's dtype (bf16 inputs
are compared against torch on the bf16-rounded values, computed in fp32), products are exact in
fp32, so the only difference is the fp32 accumulation order, bounded by ~K * eps32 * (|A| @ |B|).
Element-wise fp32 kernels: a few ulps of the transcendental functions, i.e. ~1e-5 relative.
"""
import numpy as np
import pytest
import torch

from conftest import REPO_ROOT

KERNELS = REPO_ROOT / "examples" / "kernels"
EPS32 = float(np.finfo(np.float32).eps)


def run_kernel(run_trnsim, tmp_path, kernel, inputs, outputs, extra=()):
    """Saves `inputs` (name -> array), runs the kernel, returns name -> array for `outputs`."""
    args = ["run", KERNELS / kernel, "--config", "trn2", *extra]
    for name, array in inputs.items():
        path = tmp_path / f"in_{name}.npy"
        np.save(path, array)
        args += ["--input", f"{name}={path}"]
    for name in outputs:
        args += ["--output", f"{name}={tmp_path / f'out_{name}.npy'}"]
    result = run_trnsim(*args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "instructions" in result.stdout and "host time" in result.stdout
    return {name: np.load(tmp_path / f"out_{name}.npy") for name in outputs}


def assert_matmul_close(out, a, b):
    """out ~ a @ b within the fp32 accumulation-order bound (a, b exact fp32 values)."""
    a64, b64 = torch.from_numpy(a).double(), torch.from_numpy(b).double()
    expected = (torch.from_numpy(a) @ torch.from_numpy(b)).numpy()
    bound = 2 * a.shape[1] * EPS32 * (a64.abs() @ b64.abs()).numpy() + 1e-30
    assert out.dtype == np.float32 and out.shape == expected.shape
    excess = np.abs(out.astype(np.float64) - expected) - bound
    assert excess.max() <= 0, f"max error beyond the bound by {excess.max()}"
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_matmul_128x128x512(run_trnsim, tmp_path):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 128), dtype=np.float32)
    b = rng.standard_normal((128, 512), dtype=np.float32)
    out = run_kernel(run_trnsim, tmp_path, "matmul_128x128x512.tasm", {"a_t": np.ascontiguousarray(a.T), "b": b},
                     ["c"])["c"]
    assert_matmul_close(out, a, b)


@pytest.mark.parametrize("b_as_bits", [False, True], ids=["fp32_files", "bf16_bits_as_uint16"])
def test_matmul_tiled_bf16(run_trnsim, tmp_path, b_as_bits):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((256, 512), dtype=np.float32)
    b = rng.standard_normal((512, 1024), dtype=np.float32)
    # What the kernel sees: the inputs rounded to bf16 (RNE), as torch rounds them.
    a_bf = torch.from_numpy(a).to(torch.bfloat16)
    b_bf = torch.from_numpy(b).to(torch.bfloat16)
    b_file = b_bf.view(torch.int16).numpy().view(np.uint16) if b_as_bits else b
    out = run_kernel(run_trnsim, tmp_path, "matmul_tiled.tasm", {"a_t": np.ascontiguousarray(a.T), "b": b_file},
                     ["c"])["c"]
    assert_matmul_close(out, a_bf.float().numpy(), b_bf.float().numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_softmax_rows(run_trnsim, tmp_path, dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((128, 512)) * 4).astype(dtype)
    out = run_kernel(run_trnsim, tmp_path, "softmax_rows.tasm", {"x": x}, ["y"])["y"]
    # float64 files are rounded to fp32 on load (RNE, as numpy's astype does); float16 widens exactly.
    expected = torch.softmax(torch.from_numpy(x.astype(np.float32)), dim=-1).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


def test_layernorm(run_trnsim, tmp_path):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((128, 512)) * 3 + 1.5).astype(np.float32)
    gamma = rng.standard_normal(512).astype(np.float32)
    beta = rng.standard_normal(512).astype(np.float32)
    out = run_kernel(run_trnsim, tmp_path, "layernorm.tasm", {"x": x, "gamma": gamma, "beta": beta}, ["y"])["y"]
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x), [512], torch.from_numpy(gamma),
                                              torch.from_numpy(beta), eps=1e-5).numpy()
    # The normalised values are O(1) and gamma ~ N(0, 1): a few fp32 ulps of |gamma| * |xn| + |beta|.
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


INT_KERNEL = """\
kernel int_copy
target trn2
hbm a : int32[4, 8] input
hbm b : int32[4, 8] output
hbm c : int16[4, 8] input
hbm d : int16[4, 8] output
sbuf t : int32[4, 8]
sbuf u : int16[4, 8]
dma_copy dst=t, src=a
dma_copy dst=b, src=t
dma_copy dst=u, src=c
dma_copy dst=d, src=u
"""


def test_integer_tensors_keep_their_dtype(run_trnsim, tmp_path):
    kernel = tmp_path / "int_copy.tasm"
    kernel.write_text(INT_KERNEL)
    a = (np.arange(32, dtype=np.int64).reshape(4, 8) * 1000003 + 2**30 + 1).astype(np.int32)
    c = np.arange(-16, 16, dtype=np.int8).reshape(4, 8)  # a narrower integer file is widened
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "c.npy", c)
    result = run_trnsim("run", kernel, "--config", "trn2", "--input", f"a={tmp_path / 'a.npy'}",
                        "--input", f"c={tmp_path / 'c.npy'}", "--output", f"b={tmp_path / 'b.npy'}",
                        "--output", f"d={tmp_path / 'd.npy'}")
    assert result.returncode == 0, result.stderr
    b, d = np.load(tmp_path / "b.npy"), np.load(tmp_path / "d.npy")
    assert b.dtype == np.int32 and np.array_equal(b, a)
    assert d.dtype == np.int16 and np.array_equal(d, c.astype(np.int16))


SR_KERNEL = """
target trn2
hbm x : fp32[128, 512] input
hbm y : bf16[128, 512] output
sbuf t : fp32[128, 512]
sbuf r : bf16[128, 512]
dma_copy dst=t, src=x
tensor_copy dst=r, src=t
dma_copy dst=y, src=r
"""


def test_stochastic_rounding_is_unbiased_and_deterministic_per_seed(run_trnsim, tmp_path):
    kernel = tmp_path / "sr.tasm"
    kernel.write_text(SR_KERNEL)
    # 1 + 2^-9 lies a quarter of the way from bf16 1.0 to the next value 1 + 2^-7... (spacing 2^-7).
    value = np.float32(1.0 + 2.0**-9)
    np.save(tmp_path / "x.npy", np.full((128, 512), value, dtype=np.float32))

    def run(seed, name, rounding="stochastic"):
        result = run_trnsim("run", kernel, "--input", f"x={tmp_path / 'x.npy'}", "--output",
                            f"y={tmp_path / name}", "--rounding", rounding, "--seed", seed)
        assert result.returncode == 0, result.stderr
        return np.load(tmp_path / name)

    a, b, c = run(1, "a.npy"), run(1, "b.npy"), run(2, "c.npy")
    nearest = run(1, "n.npy", "nearest")
    assert np.array_equal(a, b)                      # same seed, same bits
    assert not np.array_equal(a, c)                  # another seed, another draw
    assert set(np.unique(a)) == {np.float32(1.0), np.float32(1.0 + 2.0**-7)}
    # Unbiased: the mean of 65536 draws is within 5 sigma of the value.
    sigma = 2.0**-7 * np.sqrt(0.25 * 0.75 / a.size)
    assert abs(a.astype(np.float64).mean() - float(value)) < 5 * sigma
    assert np.all(nearest == np.float32(1.0))        # RNE rounds down


# ---- errors: exit 1, one "error: ..." message, nothing written ----

@pytest.fixture
def matmul_files(tmp_path):
    rng = np.random.default_rng(5)
    np.save(tmp_path / "a_t.npy", rng.standard_normal((128, 128), dtype=np.float32))
    np.save(tmp_path / "b.npy", rng.standard_normal((128, 512), dtype=np.float32))
    return tmp_path


def run_matmul(run_trnsim, *args):
    return run_trnsim("run", KERNELS / "matmul_128x128x512.tasm", "--config", "trn2", *args)


def assert_error(result, *fragments):
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_missing_input(run_trnsim, matmul_files):
    result = run_matmul(run_trnsim, "--input", f"b={matmul_files / 'b.npy'}",
                        "--output", f"c={matmul_files / 'c.npy'}")
    assert_error(result, "missing --input", "a_t: fp32[128, 128]")
    assert not (matmul_files / "c.npy").exists()


def test_wrong_shape(run_trnsim, matmul_files):
    np.save(matmul_files / "small.npy", np.zeros((128, 64), np.float32))
    result = run_matmul(run_trnsim, "--input", f"a_t={matmul_files / 'small.npy'}",
                        "--input", f"b={matmul_files / 'b.npy'}")
    assert_error(result, str(matmul_files / "small.npy"), "(128, 64)", "a_t : fp32[128, 128]")


def test_unknown_name_lists_valid_ones(run_trnsim, matmul_files):
    result = run_matmul(run_trnsim, "--input", f"a_t={matmul_files / 'a_t.npy'}",
                        "--input", f"b={matmul_files / 'b.npy'}", "--input", f"x={matmul_files / 'b.npy'}")
    assert_error(result, "'x'", "a_t, b, c")
    result = run_matmul(run_trnsim, "--input", f"a_t={matmul_files / 'a_t.npy'}",
                        "--input", f"b={matmul_files / 'b.npy'}", "--output", f"a_sb={matmul_files / 'o.npy'}")
    assert_error(result, "no HBM tensor 'a_sb'", "a_t, b, c")


def test_refuses_to_overwrite_without_force(run_trnsim, matmul_files):
    out = matmul_files / "c.npy"
    out.write_bytes(b"precious")
    args = ["--input", f"a_t={matmul_files / 'a_t.npy'}", "--input", f"b={matmul_files / 'b.npy'}",
            "--output", f"c={out}"]
    assert_error(run_matmul(run_trnsim, *args), str(out), "--force")
    assert out.read_bytes() == b"precious"
    result = run_matmul(run_trnsim, *args, "--force")
    assert result.returncode == 0, result.stderr
    assert np.load(out).shape == (128, 512)


def test_same_file_for_two_outputs(run_trnsim, tmp_path):
    kernel = tmp_path / "int_copy.tasm"
    kernel.write_text(INT_KERNEL)
    np.save(tmp_path / "a.npy", np.zeros((4, 8), np.int32))
    np.save(tmp_path / "c.npy", np.zeros((4, 8), np.int16))
    result = run_trnsim("run", kernel, "--input", f"a={tmp_path / 'a.npy'}", "--input", f"c={tmp_path / 'c.npy'}",
                        "--output", f"b={tmp_path / 'o.npy'}", "--output", f"d={tmp_path / 'o.npy'}")
    assert_error(result, "another output")


def _npy_header(descr, shape, fortran=False, version=1):
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}".encode()
    header += b" " * ((64 - (10 + len(header) + 1) % 64) % 64) + b"\n"
    length = len(header).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + length + header


MALFORMED = {
    "bad_magic": (b"PK\x03\x04 not an npy file", "bad magic"),
    "empty": (b"", "bad magic"),
    "truncated_header": (_npy_header("<f4", (128, 128))[:20], "truncated"),
    "fortran_order": (_npy_header("<f4", (128, 128), fortran=True) + bytes(128 * 128 * 4), "Fortran"),
    "complex": (_npy_header("<c8", (128, 128)) + bytes(128 * 128 * 8), "unsupported dtype '<c8'"),
    "big_endian": (_npy_header(">f4", (128, 128)) + bytes(128 * 128 * 4), "big-endian"),
    "short_data": (_npy_header("<f4", (128, 128)) + bytes(100), "needs 65536"),
    "huge_shape": (_npy_header("<f4", (2**40, 2**40)) + bytes(16), "shorter"),
    "garbage_header": (_npy_header("<f4", (128, 128)).replace(b"'shape'", b"'shape)") + bytes(65536), "malformed"),
    "version_9": (b"\x93NUMPY\x09\x00" + bytes(64), "version 9.0"),
    "int_into_float": (_npy_header("<i4", (128, 128)) + bytes(65536), "cannot load <i4 data into a fp32 tensor"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_npy_is_a_clear_error(run_trnsim, matmul_files, case):
    data, fragment = MALFORMED[case]
    bad = matmul_files / f"{case}.npy"
    bad.write_bytes(data)
    result = run_matmul(run_trnsim, "--input", f"a_t={bad}", "--input", f"b={matmul_files / 'b.npy'}")
    assert_error(result, str(bad), fragment)


def test_version_2_and_3_files_load(run_trnsim, matmul_files):
    a_t = np.load(matmul_files / "a_t.npy")
    for version in (2, 3):
        path = matmul_files / f"v{version}.npy"
        path.write_bytes(_npy_header("<f4", (128, 128), version=version) + a_t.tobytes())
        out = matmul_files / f"c{version}.npy"
        result = run_matmul(run_trnsim, "--input", f"a_t={path}", "--input", f"b={matmul_files / 'b.npy'}",
                            "--output", f"c={out}")
        assert result.returncode == 0, result.stderr
        assert_matmul_close(np.load(out), np.ascontiguousarray(a_t.T), np.load(matmul_files / "b.npy"))


def test_bad_kernel_is_an_error(run_trnsim, tmp_path):
    kernel = tmp_path / "bad.tasm"
    kernel.write_text("hbm a : fp32[4] input\nno_such_instruction dst=a\n")
    result = run_trnsim("run", kernel, "--config", "trn2")
    assert_error(result, str(kernel))
