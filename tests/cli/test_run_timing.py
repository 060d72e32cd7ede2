"""`trnsim run` with the timing model: stats JSON, Perfetto trace, --timing-only, determinism."""
import json

import numpy as np

from conftest import REPO_ROOT

KERNEL = REPO_ROOT / "examples" / "kernels" / "matmul_tiled.tasm"


def run(run_trnsim, tmp_path, name, *extra, values=True):
    args = ["run", KERNEL, "--config", "trn2", "--stats", tmp_path / f"{name}.stats.json",
            "--trace", tmp_path / f"{name}.trace.json", *extra]
    if values:
        rng = np.random.default_rng(3)
        np.save(tmp_path / "a_t.npy", rng.standard_normal((512, 256)).astype(np.float32))
        np.save(tmp_path / "b.npy", rng.standard_normal((512, 1024)).astype(np.float32))
        args += ["--input", f"a_t={tmp_path / 'a_t.npy'}", "--input", f"b={tmp_path / 'b.npy'}"]
    else:
        args.append("--timing-only")
    result = run_trnsim(*args)
    assert result.returncode == 0, result.stderr
    stats = json.loads((tmp_path / f"{name}.stats.json").read_text())
    trace_text = (tmp_path / f"{name}.trace.json").read_text()
    return result.stdout, stats, trace_text


def test_stats_have_the_documented_fields(run_trnsim, tmp_path):
    stdout, stats, _ = run(run_trnsim, tmp_path, "a")
    for key in ("total_ns", "total_cycles", "config_hash", "instructions", "engines", "flops", "achieved_tflops",
                "mfu", "dma", "sbuf", "psum", "host_seconds", "instructions_per_host_second"):
        assert key in stats, key
    assert stats["instructions"]["nc_matmul"] == 16
    tensor = stats["engines"]["core0.tensor"]
    assert set(tensor) == {"busy_ns", "utilization", "instructions"}
    assert 0 < tensor["utilization"] <= 1
    # 16 matmuls of 128 x 128 x 512: 2 * 128 * 128 * 512 FLOPs each.
    assert stats["flops"] == 16 * 2 * 128 * 128 * 512
    assert abs(stats["achieved_tflops"] - stats["flops"] / stats["total_ns"] / 1e3) < 1e-9
    assert abs(stats["mfu"] - stats["achieved_tflops"] / (128 * 128 * 2 * 2.4 / 1e3)) < 1e-6
    assert stats["dma"]["bytes"] == 512 * 256 * 2 + 512 * 1024 * 2 + 256 * 1024 * 4
    assert stats["total_cycles"] == stats["total_ns"] * 1.2  # trn2 base clock (PROF)
    assert "MFU" in stdout and "core0.tensor" in stdout


def test_trace_is_chrome_trace_json_with_engine_tracks_and_flows(run_trnsim, tmp_path):
    _, stats, text = run(run_trnsim, tmp_path, "a")
    events = json.loads(text)["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"TensorMatrix", "Vector", "Scalar", "qSyncIO0"} <= tracks
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == sum(stats["instructions"].values())
    matmul = next(e for e in slices if e["name"] == "nc_matmul")
    assert {"dst", "stationary", "moving", "bytes"} <= set(matmul["args"])
    assert any(e["ph"] == "s" for e in events) and any(e["ph"] == "f" for e in events)
    # Slices end within the simulated time (ts/dur in microseconds).
    assert max(e["ts"] + e["dur"] for e in slices) <= stats["total_ns"] / 1e3 + 1e-3


def test_timing_only_gives_identical_timing_and_is_deterministic(run_trnsim, tmp_path):
    _, with_values, trace_a = run(run_trnsim, tmp_path, "a")
    _, timing_only, trace_b = run(run_trnsim, tmp_path, "b", values=False)
    _, again, trace_c = run(run_trnsim, tmp_path, "c", values=False)
    assert timing_only["total_ns"] == with_values["total_ns"]
    assert timing_only["engines"] == with_values["engines"]
    assert trace_a == trace_b == trace_c


def test_cores_share_hbm_and_refuse_unknown_cores(run_trnsim, tmp_path):
    _, one, _ = run(run_trnsim, tmp_path, "one", values=False)
    _, two, _ = run(run_trnsim, tmp_path, "two", "--cores", "0", "1", values=False)
    assert two["cores"] == 2 and "core1.tensor" in two["engines"]
    assert two["total_ns"] >= one["total_ns"]
    bad = run_trnsim("run", KERNEL, "--timing-only", "--cores", "9")
    assert bad.returncode == 1 and "core 9 does not exist" in bad.stderr
