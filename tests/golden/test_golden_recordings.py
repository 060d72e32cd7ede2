"""Golden recordings tier (marker `golden`; part of `make test`): the demo model's training step
recorded on trn2 and trn3 (traces/demo_step_*.trnrec) replays on its own config with every launch's
time unchanged, bit for bit, also when every kernel is rebuilt from its recorded invocation
(--rebuild); the trn2 step rebuilt for trn3 is the trn3 recording launch for launch (and back); a
nudged cost-model constant shows up as changed launches; the replay is cheap (timing only, no
PyTorch). Update deliberately with `make golden-update`."""
import importlib.util
import pathlib

import pytest
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("golden_recordings", REPO_ROOT / "tools" / "golden_recordings.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

pytestmark = pytest.mark.golden

UPDATE_HINT = "if the change is intended, run `make golden-update` and commit traces/*.trnrec"
# issue 11: a timing-only replay of the demo step costs at most this much host time.
MAX_REPLAY_HOST_S = 0.3


@pytest.mark.parametrize("name", sorted(golden.RECORDINGS))
def test_recording_is_complete_and_on_its_config(name):
    path = golden.path_of(name)
    assert path.is_dir(), f"{golden.shown(path)} is missing: run `make golden-update`"
    header = golden._header(path)
    assert header["config"]["name"] == golden.RECORDINGS[name] and header["config"]["overrides"] == []
    assert golden.read_launches(path), "no launches"


@pytest.mark.parametrize("name", sorted(golden.RECORDINGS))
def test_replay_reproduces_every_launch(name):
    rows, doc = golden.check(name)
    assert not rows, (f"{len(rows)} launch(es) of {golden.shown(golden.path_of(name))} changed time:\n"
                      f"{golden.format_rows(rows)}\n{UPDATE_HINT}")
    assert doc["config"]["hash"] == doc["recorded_config_hash"]
    assert doc["total_ns"] == doc["recorded_total_ns"] > 0
    kinds = {l["kind"] for l in doc["launches"]}
    assert "kernel" in kinds and "copy" in kinds
    # Timing-only replay of the demo step: well under the recording's host time, and within the bound.
    assert doc["host_s"] <= MAX_REPLAY_HOST_S, doc["host_s"]
    assert doc["host_s"] < doc["recorded_host_s"]


def kernel_launches(name):
    return [l for l in golden.read_launches(golden.path_of(name)) if l["kind"] == "kernel"]


@pytest.mark.parametrize("name", sorted(golden.RECORDINGS))
def test_rebuild_on_its_own_config_builds_the_recorded_programs(name):
    rows, doc = golden.check(name, "--rebuild")
    assert not rows, (f"{len(rows)} launch(es) of {golden.shown(golden.path_of(name))} changed time when rebuilt:\n"
                      f"{golden.format_rows(rows)}")
    kernels = kernel_launches(name)
    assert kernels and all("kernel" in l for l in kernels), "re-record with `make golden-update`: launches lack invocations"
    assert doc["rebuild"] is True and doc["rebuilt_launches"] == len(kernels) and doc["not_rebuilt_launches"] == 0
    # The same .tasm text as recorded, not only the same times.
    assert doc["rebuilt_as_recorded"] == len(kernels)
    assert doc["total_ns"] == doc["recorded_total_ns"]
    assert doc["host_s"] < doc["recorded_host_s"]


@pytest.mark.parametrize("name, other", [("demo_step_trn2", "demo_step_trn3"), ("demo_step_trn3", "demo_step_trn2")])
def test_rebuilt_for_the_other_generation_is_that_generations_recording(name, other):
    """The step recorded on trn2 and rebuilt for trn3 times, launch for launch and bit for bit, as the
    step recorded on trn3 (the same ops with the same invocations, built and simulated for trn3).
    Re-timing the recorded programs does not: trn2's on trn3 take another time, and trn3's do not
    even fit trn2 (a kernel built for trn3's larger SBUF)."""
    target = golden.RECORDINGS[other]
    code, output, doc = golden.replay(golden.path_of(name), "--config", target, "--rebuild")
    assert code == 0 and doc is not None, output
    recorded = golden.read_launches(golden.path_of(other))
    assert [l["op"] for l in doc["launches"]] == [l["op"] for l in recorded]
    assert [l["ns"] for l in doc["launches"]] == [l["ns"] for l in recorded]
    code, output, retimed = golden.replay(golden.path_of(name), "--config", target)
    if target == "trn3":
        assert code == 0, output
        assert retimed["total_ns"] != doc["total_ns"]
    else:
        assert code == 1 and "is not legal on config 'trn2'" in output and "[memory-bounds]" in output, output


def test_sbuf_what_if_moves_only_when_rebuilt():
    """configs/whatif/trn2-2x-sbuf.yaml only shapes how kernels are built: re-timing the recorded
    programs moves nothing; rebuilding them for it moves the kernels whose tiles grow (and nothing
    over the host link)."""
    whatif = REPO_ROOT / "configs" / "whatif" / "trn2-2x-sbuf.yaml"
    code, output, retimed = golden.replay(golden.path_of("demo_step_trn2"), "--config", whatif)
    assert code == 0, output
    assert not golden.changed_rows(retimed)
    code, output, rebuilt = golden.replay(golden.path_of("demo_step_trn2"), "--config", whatif, "--rebuild")
    assert code == 0, output
    rows = golden.changed_rows(rebuilt)
    assert rows, "no launch moved with twice the SBUF"
    kinds = {l["index"]: l["kind"] for l in rebuilt["launches"]}
    assert all(kinds[index] == "kernel" for index, *_ in rows)


def _trn2_value(*path):
    value = yaml.safe_load((REPO_ROOT / "configs" / "trn2.yaml").read_text())
    for key in path:
        value = value[key]
    return value


@pytest.mark.parametrize("key, nudge", [
    # Every DMA's fixed latency (sim/cost_model.cpp), on every kernel of the step.
    (("core", "dma", "fixed_latency_ns"), lambda v: v + 1),
    # The PE array clock: the matmuls and attention.
    (("core", "tensor", "clock_ghz"), lambda v: round(v * 1.01, 6)),
])
def test_nudged_cost_model_constant_fails_the_check(key, nudge):
    """The tier can fail: one cost-model constant nudged through --set makes launches change time,
    and the replay's --diff exits non-zero naming them."""
    value = nudge(_trn2_value(*key))
    rows, doc = golden.check("demo_step_trn2", "--set", f"{'.'.join(key)}={value}")
    assert rows, f"--set {'.'.join(key)}={value} changed no launch"
    assert doc["config"]["overrides"] == [f"{'.'.join(key)}={value}"]
    table = golden.format_rows(rows)
    assert "old ns" in table and rows[0][1] in table
    # Host-link copies do not depend on either constant.
    assert all(r[1] != "copy host->device" for r in rows)
