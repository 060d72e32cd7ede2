"""Golden recordings tier (marker `golden`; part of `make test`): the demo model's training step
recorded on trn2 and trn3 (traces/demo_step_*.trnrec) replays on its own config with every launch's
time unchanged, bit for bit; a nudged cost-model constant shows up as changed launches; the replay
is cheap (timing only, no PyTorch). Update deliberately with `make golden-update`."""
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
