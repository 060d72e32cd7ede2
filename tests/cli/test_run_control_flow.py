"""`trnsim run` on a program with registers and loops (isa/control_flow.h): a while loop whose trip count is an
input tensor's value, in values and timing-only runs."""
import json

import numpy as np

from conftest import REPO_ROOT

KERNEL = REPO_ROOT / "tests" / "fuzz" / "corpus" / "control_flow.tasm"


def run(run_trnsim, tmp_path, n, *extra):
    np.save(tmp_path / "n.npy", np.array([[n]], np.int32))
    stats = tmp_path / f"stats_{n}_{len(extra)}.json"
    result = run_trnsim("run", KERNEL, "--config", "trn2", "--input", f"n={tmp_path / 'n.npy'}", "--stats", stats,
                        "--force", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(stats.read_text())


def test_trip_count_from_a_tensor(run_trnsim, tmp_path):
    for n in (0, 4):
        stats = run(run_trnsim, tmp_path, n, "--output", f"out={tmp_path / 'out.npy'}")
        assert np.load(tmp_path / "out.npy").tolist() == [[n]]
        assert stats["instructions"].get("while_end", 0) == n
        assert stats["instructions"]["tensor_scalar"] == 2  # the counted loop
        timing = run(run_trnsim, tmp_path, n, "--timing-only")
        assert timing["total_ns"] == stats["total_ns"]
        assert timing["instructions"] == stats["instructions"]


def test_timing_only_needs_the_inputs_its_loops_read(run_trnsim):
    result = run_trnsim("run", KERNEL, "--config", "trn2", "--timing-only")
    assert result.returncode == 1
    assert "missing --input" in result.stderr and "n: int32[1, 1]" in result.stderr
    assert "loops depend on tensor values" in result.stderr
