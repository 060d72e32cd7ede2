"""trnsim.run_program: an example kernel run in-process on NumPy arrays gives NumPy's values and
exactly the simulated time `trnsim run` gives for it (traces/golden/kernels.json); timing-only gives
the same time; unknown names, wrong shapes / dtypes, missing inputs, illegal programs and missing
configs raise clear exceptions."""
import json
import os
import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON_DIR = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", REPO_ROOT / "build")) / "python"
sys.path.insert(0, str(PYTHON_DIR))

import trnsim  # noqa: E402

KERNELS = REPO_ROOT / "examples" / "kernels"
SOFTMAX = KERNELS / "softmax_rows.tasm"
MATMUL_TILED = KERNELS / "matmul_tiled.tasm"
GOLDEN = {c["name"]: c for c in json.loads((REPO_ROOT / "traces" / "golden" / "kernels.json").read_text())["cases"]}


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def assert_golden_timing(result, case):
    golden = GOLDEN[case]
    assert result.latency_ns == golden["total_ns"]  # exactly: the same core as `trnsim run`
    assert result.engines == golden["busy"]
    assert result.config_hash == golden["config_hash"]


def test_softmax_values_and_golden_timing():
    x = (np.random.default_rng(3).standard_normal((128, 512)) * 4).astype(np.float32)
    result = trnsim.run_program(SOFTMAX, {"x": x}, config="trn2")
    assert set(result.outputs) == {"y"}
    y = result.outputs["y"]
    assert y.dtype == np.float32 and y.shape == (128, 512)
    np.testing.assert_allclose(y, softmax(x), rtol=1e-5, atol=1e-7)
    assert_golden_timing(result, "example_softmax_rows_trn2")
    assert result.name == "softmax_rows"
    assert result.stats["total_ns"] == result.latency_ns
    assert result.stats["config"] == "trn2"


def test_program_text_is_the_same_as_its_path():
    x = np.random.default_rng(5).standard_normal((128, 512)).astype(np.float32)
    by_path = trnsim.run_program(str(SOFTMAX), {"x": x})
    by_text = trnsim.run_program(SOFTMAX.read_text(), {"x": x})
    np.testing.assert_array_equal(by_path.outputs["y"], by_text.outputs["y"])
    assert by_path.latency_ns == by_text.latency_ns


def test_timing_only_needs_no_inputs_and_gives_the_same_time():
    result = trnsim.run_program(SOFTMAX, timing_only=True)
    assert result.outputs == {}
    assert_golden_timing(result, "example_softmax_rows_trn2")


@pytest.mark.parametrize("as_bf16", [False, True], ids=["float32_arrays", "bfloat16_arrays"])
def test_matmul_tiled_bf16(as_bf16):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((256, 512), dtype=np.float32)
    b = rng.standard_normal((512, 1024), dtype=np.float32)
    a_bf, b_bf = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)  # RNE, as the kernel rounds them
    inputs = {"a_t": np.ascontiguousarray(a_bf.T), "b": b_bf} if as_bf16 else {"a_t": a.T, "b": b}
    result = trnsim.run_program(MATMUL_TILED, inputs)
    c = result.outputs["c"]
    assert c.dtype == np.float32 and c.shape == (256, 1024)
    a32, b32 = a_bf.astype(np.float32), b_bf.astype(np.float32)
    bound = 2 * 512 * np.finfo(np.float32).eps * (np.abs(a32).astype(np.float64) @ np.abs(b32)) + 1e-30
    assert (np.abs(c - a32.astype(np.float64) @ b32) <= bound).all()
    assert_golden_timing(result, "example_matmul_tiled_trn2")
    assert result.stats["flops"] == 2 * 256 * 512 * 1024
    assert 0 < result.stats["mfu"] < 1


def test_bf16_outputs_come_back_as_bfloat16(tmp_path):
    program = SOFTMAX.read_text().replace("hbm y : fp32[128, 512] output", "hbm y : bf16[128, 512] output")
    x = np.random.default_rng(6).standard_normal((128, 512)).astype(np.float32)
    y = trnsim.run_program(program, {"x": x}).outputs["y"]
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y.astype(np.float32), softmax(x), rtol=2 ** -8)


def test_outputs_are_writable_arrays_of_their_own():
    """Outputs come back as one copy each (a writable view of their own buffer), not shared between runs."""
    x = np.random.default_rng(7).standard_normal((128, 512)).astype(np.float32)
    first = trnsim.run_program(SOFTMAX, {"x": x}).outputs["y"]
    second = trnsim.run_program(SOFTMAX, {"x": x}).outputs["y"]
    assert first.flags.writeable and first.shape == (128, 512) and first.dtype == np.float32
    first[:] = 0.0
    np.testing.assert_allclose(second, softmax(x), rtol=1e-5)


def test_trace_and_overrides(tmp_path):
    trace = tmp_path / "t.json"
    slow = trnsim.run_program(SOFTMAX, timing_only=True, trace=trace, overrides={"core.dma.fixed_latency_ns": 500})
    assert json.loads(trace.read_text())
    with pytest.raises(FileExistsError):
        trnsim.run_program(SOFTMAX, timing_only=True, trace=trace)
    trnsim.run_program(SOFTMAX, timing_only=True, trace=trace, overwrite=True)
    assert slow.latency_ns > GOLDEN["example_softmax_rows_trn2"]["total_ns"]


def test_unknown_tensor_name():
    with pytest.raises(KeyError, match=r"no HBM tensor 'z' \(HBM tensors: x, y\)"):
        trnsim.run_program(SOFTMAX, {"x": np.zeros((128, 512), np.float32), "z": np.zeros(3)})


def test_wrong_shape_and_dtype():
    with pytest.raises(trnsim.InputError, match=r"shape \(128, 64\) differs .* x : fp32\[128, 512\]"):
        trnsim.run_program(SOFTMAX, {"x": np.zeros((128, 64), np.float32)})
    with pytest.raises(ValueError, match="inputs\\['x'\\]"):
        trnsim.run_program(SOFTMAX, {"x": np.zeros((128, 512), np.int32)})
    with pytest.raises(ValueError, match="unsupported dtype"):
        trnsim.run_program(SOFTMAX, {"x": np.zeros((128, 512), np.complex64)})


def test_missing_input():
    with pytest.raises(ValueError, match=r"missing inputs .* x: fp32\[128, 512\]"):
        trnsim.run_program(SOFTMAX, {})


def test_illegal_program_names_instruction_and_rule():
    program = SOFTMAX.read_text() + "tensor_copy dst=y_sb[32:96, 0:512], src=e[32:96, 0:512]\n"
    with pytest.raises(trnsim.ProgramError, match=r"instruction \d+ .*tensor_copy.*\[partition-start-alignment\]"):
        trnsim.run_program(program, timing_only=True)
    with pytest.raises(trnsim.ProgramError, match="targets trn2 but config 'trn3' is trn3"):
        trnsim.run_program(SOFTMAX, timing_only=True, config="trn3")


def test_missing_config():
    with pytest.raises(trnsim.ConfigError, match="no-such-config"):
        trnsim.run_program(SOFTMAX, timing_only=True, config="no-such-config")


@pytest.mark.parametrize("program", [SOFTMAX, MATMUL_TILED])
def test_same_time_as_trnsim_run(program, run_trnsim, tmp_path):
    stats_path = tmp_path / "stats.json"
    proc = run_trnsim("run", program, "--timing-only", "--stats", stats_path)
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(stats_path.read_text())
    result = trnsim.run_program(program, timing_only=True)
    assert result.latency_ns == cli["total_ns"]
    assert result.stats["engines"] == cli["engines"]
