"""tools/bench/sweep.py matmul on a tiny subset: CSV columns and rows, value ranges, the PNG,
refusal to overwrite. The sweeps join one Ray for the module (conftest's ray_address); the local
Ray each sweep starts by default is tested in tests/tools/test_sweep_fanout.py."""
import csv
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, build_dir

SWEEP = REPO_ROOT / "tools" / "bench" / "sweep.py"
TOOL_COLUMNS = ["config", "config_hash", "dtype", "m", "k", "n", "batch", "gflop", "time_ns", "tflops", "mfu",
                "bottleneck", "instructions"]
SUBSET = ["--models", "llama3-8b", "--projections", "q,down", "--m", "1,128", "--configs", "trn2"]


def sweep(*args):
    env = {**os.environ, "TRNSIM_BUILD_DIR": str(build_dir())}
    return subprocess.run([sys.executable, str(SWEEP), "matmul", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def swept(tmp_path_factory, trnsim_bin, ray_address):
    out = tmp_path_factory.mktemp("sweep")
    result = sweep(*SUBSET, "--csv", out / "mm.csv", "--ray-address", ray_address)
    assert result.returncode == 0, result.stderr
    with (out / "mm.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    return out, rows


def test_csv_has_tool_columns_plus_model_and_projection(swept):
    out, rows = swept
    header = (out / "mm.csv").read_text().splitlines()[0].split(",")
    assert header[:len(TOOL_COLUMNS)] == TOOL_COLUMNS
    assert {"model", "projection", "weight_layout"} <= set(header)


def test_one_row_per_point_with_the_published_shapes(swept):
    _, rows = swept
    points = {(r["model"], r["projection"], int(r["m"]), r["config"]) for r in rows}
    assert len(rows) == 4 and len(points) == 4
    shapes = {(r["projection"], int(r["k"]), int(r["n"])) for r in rows}
    assert shapes == {("q", 4096, 4096), ("down", 14336, 4096)}  # Llama-3 8B: hidden 4096, intermediate 14336
    assert {r["dtype"] for r in rows} == {"bf16"}
    assert {r["weight_layout"] for r in rows} == {"nk"}


def test_values_in_range(swept):
    _, rows = swept
    for r in rows:
        assert 0 < float(r["mfu"]) <= 1, r
        assert float(r["time_ns"]) > 0 and float(r["tflops"]) > 0 and int(r["instructions"]) > 0, r
        gflop = 2 * int(r["m"]) * int(r["k"]) * int(r["n"]) / 1e9
        assert float(r["gflop"]) == pytest.approx(gflop, rel=1e-4), r
    by_m = {int(r["m"]): float(r["mfu"]) for r in rows if r["projection"] == "q"}
    assert by_m[128] > by_m[1]


def test_png_written_next_to_csv(swept):
    out, _ = swept
    png = out / "mm.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


def test_refuses_to_overwrite_without_force(swept):
    out, _ = swept
    before = (out / "mm.csv").read_bytes()
    result = sweep(*SUBSET, "--csv", out / "mm.csv")
    assert result.returncode != 0
    assert "exists" in result.stderr and "--force" in result.stderr
    assert (out / "mm.csv").read_bytes() == before


def test_force_overwrites_and_png_path_option(swept, tmp_path, ray_address):
    out, _ = swept
    target = tmp_path / "again.csv"
    target.write_text("stale\n")
    result = sweep("--models", "llama3-8b", "--projections", "k", "--m", "1", "--configs", "trn2",
                   "--csv", target, "--png", tmp_path / "plot.png", "--force", "--ray-address", ray_address)
    assert result.returncode == 0, result.stderr
    assert len(target.read_text().splitlines()) == 2
    assert (tmp_path / "plot.png").exists() and not (tmp_path / "again.png").exists()


def test_unknown_projection_is_an_error(tmp_path):
    result = sweep("--models", "llama3-8b", "--projections", "router", "--csv", tmp_path / "x.csv")
    assert result.returncode != 0 and "router" in result.stderr
    assert not (tmp_path / "x.csv").exists()


def run_sweep(name, *args):
    env = {**os.environ, "TRNSIM_BUILD_DIR": str(build_dir())}
    return subprocess.run([sys.executable, str(SWEEP), name, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=120)


def test_attention_sweep_subset(tmp_path, trnsim_bin, ray_address):
    result = run_sweep("attention", "--batch", "1", "--seq", "256,512", "--head-dim", "64", "--causal", "0,1",
                       "--configs", "trn2", "--csv", tmp_path / "att.csv", "--ray-address", ray_address)
    assert result.returncode == 0, result.stderr
    with (tmp_path / "att.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8  # 2 sequences x causal or not x forward and backward
    assert {r["direction"] for r in rows} == {"forward", "backward"}
    for r in rows:
        assert 0 < float(r["mfu"]) <= 1 and float(r["time_ns"]) > 0, r
    gflop = {(r["direction"], r["seq"], r["causal"]): float(r["gflop"]) for r in rows}
    assert gflop[("backward", "512", "0")] == pytest.approx(2.5 * gflop[("forward", "512", "0")], rel=1e-4)
    assert (tmp_path / "att.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_kernels_sweep_subset(tmp_path, trnsim_bin, ray_address):
    result = run_sweep("kernels", "--kernels", "matmul,softmax,attention_bwd", "--sizes", "small", "--configs",
                       "trn2", "--csv", tmp_path / "k.csv", "--ray-address", ray_address)
    assert result.returncode == 0, result.stderr
    with (tmp_path / "k.csv").open(newline="") as f:
        rows = {r["kernel"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"matmul", "softmax", "attention_bwd"}
    assert 0 < float(rows["matmul"]["mfu"]) <= 1 and rows["matmul"]["bottleneck"]
    assert 0 < float(rows["softmax"]["bandwidth_utilization"]) and rows["softmax"]["bottleneck"]
    assert all(float(r["time_ns"]) > 0 for r in rows.values())
    assert (tmp_path / "k.png").exists()
