"""Golden timings tier (marker `golden`; part of `make test`): reruns every case recorded in
traces/golden/kernels.json and fails on any change of a simulated time, printing a per-case diff
table. Update deliberately with `make golden-update` (tools/golden_update.py)."""
import importlib.util
import pathlib

import pytest
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("golden_update", REPO_ROOT / "tools" / "golden_update.py")
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

pytestmark = pytest.mark.golden

UPDATE_HINT = "if the change is intended, run `make golden-update` and commit traces/golden/kernels.json"


@pytest.fixture(scope="module")
def golden_doc():
    if not golden.GOLDEN_PATH.exists():
        pytest.fail(f"{golden.GOLDEN_PATH} is missing: run `make golden-update`")
    return golden.load_golden()


@pytest.fixture(scope="module")
def tools_present(golden_doc):
    """A missing binary is a failure, never a skip."""
    missing = golden.missing_tools(golden_doc["cases"])
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run `make` first")


def test_golden_file_lists_every_case(golden_doc):
    """The file records exactly the cases tools/golden_update.py defines (every example kernel
    included), with the same commands: a new case or a changed command needs `make golden-update`."""
    recorded = [(c["name"], c["tool"], c["args"]) for c in golden_doc["cases"]]
    defined = [(c["name"], c["tool"], c["args"]) for c in golden.case_definitions()]
    assert recorded == defined, UPDATE_HINT
    examples = sorted((REPO_ROOT / "examples" / "kernels").glob("*.tasm"))
    assert examples and all(any(str(p.relative_to(REPO_ROOT)) in c["args"] for c in golden_doc["cases"])
                            for p in examples)


def test_golden_timings_unchanged(golden_doc, tools_present):
    results = golden.run_all(golden_doc["cases"])
    rows = golden.compare(golden_doc["cases"], results)
    assert not rows, (f"{len(rows)} timing change(s) against {golden.shown(golden.GOLDEN_PATH)}:\n"
                      f"{golden.format_table(rows)}\n{UPDATE_HINT}")


def _case(doc, name):
    return next(c for c in doc["cases"] if c["name"] == name)


def _trn2_value(*path):
    value = yaml.safe_load((REPO_ROOT / "configs" / "trn2.yaml").read_text())
    for key in path:
        value = value[key]
    return value


@pytest.mark.parametrize("name, key, nudge", [
    # The DMA fixed latency (sim/cost_model.cpp: every transfer's cost) on a DMA-heavy example.
    ("example_softmax_rows_trn2", ("core", "dma", "fixed_latency_ns"), lambda v: v + 1),
    # The PE array clock on the tensor-bound headline matmul.
    ("matmul_bf16_4096x8192x8192_ta_trn2", ("core", "tensor", "clock_ghz"), lambda v: round(v * 1.01, 6)),
])
def test_nudged_cost_model_constant_is_reported(golden_doc, tools_present, name, key, nudge):
    """The tier can fail: the same case with one cost-model constant nudged through --set is
    reported as a timing change for that case (and only that case is rerun here)."""
    case = _case(golden_doc, name)
    value = nudge(_trn2_value(*key))
    results = [(case, golden.run_case(case, ["--set", f"{'.'.join(key)}={value}"]))]
    rows = golden.compare([case], results)
    assert any(r[0] == name and r[1] == "total_ns" for r in rows), rows
    table = golden.format_table(rows)
    assert name in table and repr(case["total_ns"]) in table
    # Unnudged, the same case reproduces the golden value bit for bit.
    assert golden.compare([case], [(case, golden.run_case(case))]) == []


def test_dropped_case_is_reported(golden_doc):
    """A case missing from the fresh results (or new in them) is a difference too."""
    cases = golden_doc["cases"]
    fake = [({"name": c["name"]}, {"total_ns": c["total_ns"], "busy": c["busy"]}) for c in cases[1:]]
    rows = golden.compare(cases, fake)
    assert rows == [(cases[0]["name"], "total_ns", cases[0]["total_ns"], None)]
