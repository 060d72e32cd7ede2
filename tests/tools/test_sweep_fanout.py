"""The Ray fan-out of the sweeps (tools/sweeps/fanout.py) on a local Ray of 2 workers: task order,
inputs sent by value, failure reports; tools/sweeps/replay_sweep.py end to end against a fake
`trnsim` (tests/tools/fake_trnsim.py, until `trnsim replay` lands); tools/bench/sweep.py on Ray
giving the CSV that running its points one by one gives.

One Ray for the module (conftest's ray_address, shut down at the end): the in-process tests use it
directly and most command-line runs join it with --ray-address; one run starts its own local Ray
(--jobs 2), the default path."""
import csv
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, build_dir

sys.path.insert(0, str(REPO_ROOT / "tools" / "sweeps"))
import fanout  # noqa: E402

ray = pytest.importorskip("ray", reason="ray is pinned in deps/requirements.txt: pip install -r it")

REPLAY_SWEEP = REPO_ROOT / "tools" / "sweeps" / "replay_sweep.py"
BENCH_SWEEP = REPO_ROOT / "tools" / "bench" / "sweep.py"
FAKE = pathlib.Path(__file__).resolve().parent / "fake_trnsim.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# The fake recording: (op, device, recorded_ns). Powers of two and small integers, so that the
# fake's floating-point times are exact and the expected values below match to the last bit.
LAUNCHES = [("matmul", 0, 1000.0), ("softmax", 0, 500.0), ("matmul", 1, 3000.0), ("add", 1, 250.0)]
CONFIGS = {"fast": {"core.speed": 2.0}, "slow": {"core.speed": 0.5}}


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    """The fake trnsim (with configs/ beside it, which workers do not get) and a recording."""
    root = tmp_path_factory.mktemp("fake")
    exe = root / "bin" / "trnsim"
    (root / "bin" / "configs").mkdir(parents=True)
    exe.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    exe.chmod(0o755)
    (root / "bin" / "configs" / "fast.yaml").write_text("name: fast\ncore.speed: 2\n")
    (root / "slow.yaml").write_text("name: slow\ncore.speed: 0.5\nfail: 0\n")
    rec = root / "step.trnrec"
    (rec / "programs").mkdir(parents=True)
    with (rec / "manifest.jsonl").open("w") as f:
        for index, (op, device, ns) in enumerate(LAUNCHES):
            f.write(json.dumps({"op": op, "kind": "kernel", "device": device, "shapes": [[128, 128]],
                                "dtype": "bf16", "recorded_ns": ns}) + "\n")
            (rec / "programs" / f"{index}.tasm").write_text(f"; launch {index}\n")
    return {"exe": exe, "rec": rec, "slow": root / "slow.yaml", "root": root}


def replay_sweep(fake, *args, address=None, jobs=None):
    cmd = [sys.executable, str(REPLAY_SWEEP), str(fake["rec"]), "--trnsim", str(fake["exe"]), *map(str, args)]
    if address:
        cmd += ["--ray-address", address]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # no address: a local Ray, as documented
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------------------------------------------
# fanout.py in this process
# ---------------------------------------------------------------------------------------------
def python_task(code, *args, outputs=(), label=""):
    return fanout.Task([sys.executable, "-c", code, *args], outputs=outputs, label=label)


def test_results_come_back_in_task_order_not_finishing_order(ray_address):
    # Task 0 sleeps, so with 2 workers the others finish first; the results must not care.
    tasks = [python_task(f"import time; time.sleep({0.8 if i == 0 else 0}); print({i})", label=str(i))
             for i in range(4)]
    with fanout.FanOut(jobs=2) as fan:
        results = fan.run(tasks, desc="order")
    assert [r.index for r in results] == [0, 1, 2, 3]
    assert [r.stdout.strip() for r in results] == ["0", "1", "2", "3"]
    assert all(r.ok and r.returncode == 0 for r in results)


def test_inputs_travel_by_value(ray_address, tmp_path):
    """Inputs are read into the object store when they are named: deleting the driver's files
    before the tasks run must not matter."""
    tree = tmp_path / "data.trnrec"
    (tree / "sub").mkdir(parents=True)
    (tree / "top.txt").write_text("top\n")
    (tree / "sub" / "inner.txt").write_text("inner\n")
    script = tmp_path / "lister"
    script.write_text(f"#!{sys.executable}\nimport pathlib, sys\nroot = pathlib.Path(sys.argv[1])\n"
                      "lines = [f'{p.relative_to(root)}={p.read_text().strip()}' for p in sorted(root.rglob('*.txt'))]\n"
                      "pathlib.Path('out.txt').write_text(root.name + ' ' + sys.argv[2] + ' ' + ' '.join(lines))\n")
    script.chmod(0o755)
    with fanout.FanOut(jobs=2) as fan:
        exe = fan.file(script, executable=True)
        rec = fan.tree(tree)
        note = fan.text("note.yaml", "speed: 2\n", shown="the note")
        shutil.rmtree(tree)
        script.unlink()
        [result] = fan.run([fanout.Task([exe, rec, fanout.concat("note=", note)], outputs=["out.txt"])])
    assert result.ok, fanout.format_failure(result)
    name, note_arg, *files = result.outputs["out.txt"].decode().split(" ")
    assert name == "data.trnrec"  # the directory keeps its name
    assert note_arg.startswith("note=/") and note_arg.endswith("/note.yaml")
    assert files == ["sub/inner.txt=inner", "top.txt=top"]
    assert result.command == f"{script} {tree} note=the note"  # shown as on the driver


def test_workers_need_no_copy_of_fanout_py(ray_address, tmp_path):
    """fanout.py sends its worker function by value: a copy imported from a folder that is gone
    before the task runs still works (without by-value pickling the worker fails to import it)."""
    folder = tmp_path / "gone"
    folder.mkdir()
    shutil.copy(REPO_ROOT / "tools" / "sweeps" / "fanout.py", folder / "fanout_gone_copy.py")
    sys.path.insert(0, str(folder))
    try:
        import fanout_gone_copy
    finally:
        sys.path.remove(str(folder))
    shutil.rmtree(folder)
    with fanout_gone_copy.FanOut(jobs=2) as fan:
        [result] = fan.run([fanout_gone_copy.Task(["echo", "by value"])])
    assert result.ok and result.stdout == "by value\n", result.error


def test_a_failure_is_reported_with_command_and_stderr_tail(ray_address, tmp_path):
    noisy = "import sys\nfor i in range(30): print(f'line {i}', file=sys.stderr)\nsys.exit(3)"
    tasks = [python_task(noisy, label="noisy"),
             python_task("pass", outputs=["missing.txt"], label="silent"),
             fanout.Task([str(tmp_path / "no-such-binary")], label="absent"),
             python_task("print('fine')", label="fine")]
    with fanout.FanOut(jobs=2) as fan:
        noisy_r, silent_r, absent_r, fine_r = fan.run(tasks)
    assert fine_r.ok and fine_r.stdout == "fine\n"  # the failures did not stop it
    assert noisy_r.returncode == 3 and noisy_r.error == "exit status 3"
    report = fanout.format_failure(noisy_r)
    assert report.startswith("point noisy: exit status 3\n  command: " + sys.executable + " -c ")
    assert "line 29" in report and "line 10" in report and "line 9\n" not in report  # the last 20 lines
    assert silent_r.returncode == 0 and silent_r.error == "exit status 0 but it wrote no missing.txt"
    assert absent_r.returncode is None and absent_r.error.startswith("could not start")


def test_report_failures_exit_status_and_wording(capsys):
    def failed(label, stderr):
        return fanout.Result(0, label, f"trnsim {label}", 1, "", stderr, {}, "exit status 1")
    assert fanout.report_failures([], 3, "out.csv") == 0 and capsys.readouterr().err == ""
    assert fanout.report_failures([failed("a", "boom\n"), failed("b", "bang\n")], 2, "out.csv") == 1
    err = capsys.readouterr().err
    assert "point a: exit status 1\n  command: trnsim a\n  stderr:\n    boom\n" in err
    assert "point b: exit status 1\n  command: trnsim b\n  stderr:\n    bang\n" in err  # different: in full
    assert err.endswith("error: 2 of 2 points failed; nothing written\n")


def test_bad_jobs_and_bad_inputs_are_errors_not_tracebacks(ray_address, tmp_path):
    with pytest.raises(fanout.FanOutError, match="at least 1"):
        fanout.FanOut(jobs=0)
    with fanout.FanOut(jobs=2) as fan:
        with pytest.raises(fanout.FanOutError, match="cannot read"):
            fan.file(tmp_path / "absent")
        with pytest.raises(fanout.FanOutError, match="not a directory"):
            fan.tree(tmp_path / "absent")
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / "link").symlink_to(tmp_path)
        with pytest.raises(fanout.FanOutError, match="link to a directory"):
            fan.tree(tmp_path / "d")


# ---------------------------------------------------------------------------------------------
# replay_sweep.py against the fake trnsim
# ---------------------------------------------------------------------------------------------
GRID = ["--grid", "core.overhead_ns=0,100", "--grid", "core.scale=1,3"]


def expected_rows(fake_slow, programs="recorded"):
    """What the sweep must write, from the fake's formula, in the documented order."""
    rows = []
    for config_arg, config in (("fast", CONFIGS["fast"]), (str(fake_slow), CONFIGS["slow"])):
        for overhead in ("0", "100"):
            for scale in ("1", "3"):
                per_op = {}
                for op, _, recorded in LAUNCHES:
                    ns = recorded * float(scale) / config["core.speed"] + float(overhead)
                    entry = per_op.setdefault(op, [0, 0.0, 0.0])
                    entry[0] += 1
                    entry[1] += recorded
                    entry[2] += ns
                total = [len(LAUNCHES), sum(v[1] for v in per_op.values()), sum(v[2] for v in per_op.values())]
                for op, (count, recorded, ns) in sorted(per_op.items()) + [("__total__", total)]:
                    rows.append({"config": config_arg, "programs": programs, "core.overhead_ns": overhead, "core.scale": scale, "op": op,
                                 "count": str(count), "recorded_ns": repr(float(recorded)), "ns": repr(float(ns)),
                                 "ratio": f"{ns / recorded:.6f}"})
    return rows


@pytest.fixture(scope="module")
def swept(fake, tmp_path_factory):
    """The default path: the sweep starts its own local Ray of 2 workers."""
    out = tmp_path_factory.mktemp("replay")
    result = replay_sweep(fake, "--config", "fast", fake["slow"], *GRID, "--csv", out / "sweep.csv", jobs=2)
    assert result.returncode == 0, result.stderr
    return out, result


def test_replay_sweep_rows_order_and_totals(swept, fake):
    out, result = swept
    rows = read_csv(out / "sweep.csv")
    header = (out / "sweep.csv").read_text().splitlines()[0]
    assert header == "config,config_hash,programs,core.overhead_ns,core.scale,op,count,recorded_ns,ns,ratio"
    assert [{k: v for k, v in r.items() if k != "config_hash"} for r in rows] == expected_rows(fake["slow"])
    # The hash is the fake's hash of the config with the point's overrides: one per point.
    assert len({r["config_hash"] for r in rows}) == 8
    assert all(len({r["config_hash"] for r in rows if r["config"] == c and r["core.overhead_ns"] == o
                    and r["core.scale"] == s}) == 1 for c in ("fast", str(fake["slow"]))
               for o in ("0", "100") for s in ("1", "3"))
    assert result.stdout.splitlines()[0] == f"8 points, 32 rows -> {out / 'sweep.csv'}"


def test_replay_sweep_rebuild_is_passed_through_and_noted(fake, tmp_path, ray_address):
    result = replay_sweep(fake, "--config", "fast", fake["slow"], *GRID, "--rebuild", "--csv", tmp_path / "r.csv",
                          address=ray_address)
    assert result.returncode == 0, result.stderr
    rows = read_csv(tmp_path / "r.csv")
    assert [{k: v for k, v in r.items() if k != "config_hash"} for r in rows] == expected_rows(fake["slow"], "rebuilt")
    assert (tmp_path / "r.png").read_bytes()[:8] == PNG_MAGIC
    # The fake recording's launches carry no invocation: said once, not hidden behind "rebuilt".
    assert result.stderr.count("carry no kernel invocation") == 1, result.stderr
    assert f"{len(LAUNCHES)} kernel launch(es)" in result.stderr


def test_replay_report_in_another_mode_than_asked_is_a_clear_error():
    import replay_sweep as module
    report = {"config": {"hash": "h"}, "per_op": {}, "launches": [], "total_ns": 1.0, "recorded_total_ns": 1.0}
    assert module.rows_of("trn2", [], report)[0]["programs"] == "recorded"  # no field: a trnsim that never rebuilt
    with pytest.raises(ValueError, match="asked to replay with --rebuild"):
        module.rows_of("trn2", [], report, rebuild=True)
    with pytest.raises(ValueError, match="not true or false"):
        module.rows_of("trn2", [], {**report, "rebuild": "yes"})
    assert module.rows_of("trn2", [], {**report, "rebuild": True}, rebuild=True)[0]["programs"] == "rebuilt"


def test_replay_sweep_plot(swept):
    out, _ = swept
    png = out / "sweep.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000


def test_replay_sweep_same_bytes_on_a_joined_ray(swept, fake, ray_address):
    """Joining a running Ray (--ray-address) schedules differently; the CSV must not differ."""
    out, _ = swept
    result = replay_sweep(fake, "--config", "fast", fake["slow"], *GRID, "--csv", out / "joined.csv",
                          address=ray_address, jobs=1)
    assert result.returncode == 0, result.stderr
    assert (out / "joined.csv").read_bytes() == (out / "sweep.csv").read_bytes()


def test_replay_sweep_refuses_to_overwrite_without_force(swept, fake, ray_address):
    out, _ = swept
    before = (out / "sweep.csv").read_bytes(), (out / "sweep.png").read_bytes()
    result = replay_sweep(fake, "--config", "fast", "--csv", out / "sweep.csv", address=ray_address)
    assert result.returncode == 1
    assert "sweep.csv exists" in result.stderr and "--force" in result.stderr
    png_only = out / "other.csv"
    result = replay_sweep(fake, "--config", "fast", "--csv", png_only, "--png", out / "sweep.png", address=ray_address)
    assert result.returncode == 1 and "sweep.png exists" in result.stderr and not png_only.exists()
    assert ((out / "sweep.csv").read_bytes(), (out / "sweep.png").read_bytes()) == before

    result = replay_sweep(fake, "--config", "fast", "--csv", out / "sweep.csv", "--force", address=ray_address)
    assert result.returncode == 0, result.stderr
    assert len(read_csv(out / "sweep.csv")) == 4  # 3 ops + the total of one point


def test_replay_sweep_failed_points_are_reported_and_the_rest_kept(fake, tmp_path, ray_address):
    result = replay_sweep(fake, "--config", "fast", "--grid", "fail=0,1", "--grid", "core.scale=1,3",
                          "--csv", tmp_path / "f.csv", address=ray_address)
    assert result.returncode == 1
    rows = read_csv(tmp_path / "f.csv")
    assert {(r["fail"], r["core.scale"]) for r in rows} == {("0", "1"), ("0", "3")}
    assert f"error: 2 of 4 points failed; {tmp_path / 'f.csv'} holds the other 2" in result.stderr
    assert "point config=fast fail=1 core.scale=1: exit status 3\n" in result.stderr
    assert (f"  command: {fake['exe']} replay {fake['rec']} --config fast --set fail=1 --set core.scale=1 "
            "--timing-only --json replay.json") in result.stderr
    assert "fake replay failed on launch 2 of step.trnrec" in result.stderr
    assert "fake trace line 29" in result.stderr and "fake trace line 5\n" not in result.stderr
    # The second failure has the same stderr: one line pointing at the first, not the report again.
    assert ("point config=fast fail=1 core.scale=3: exit status 3, the same stderr as point config=fast fail=1 "
            "core.scale=1\n") in result.stderr
    assert result.stderr.count("fake trace line 29") == 1
    assert (tmp_path / "f.png").exists()


def test_replay_sweep_checks_config_keys_before_fanning_out(fake, tmp_path):
    # No --ray-address and no Ray started: the check runs first, so this fails in well under a second
    # of Ray start-up (the timeout would catch a sweep that started one per point).
    result = replay_sweep(fake, "--config", "fast", fake["slow"], "--grid", "core.nosuch=1,2",
                          "--csv", tmp_path / "x.csv")
    assert result.returncode == 1
    assert "do not validate with core.nosuch=1" in result.stderr and "unknown key 'core.nosuch'" in result.stderr
    assert not (tmp_path / "x.csv").exists()
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--config", "fast", "--grid", "core.scale"], "expected KEY=V1,V2"),
    (["--config", "fast", "--grid", "core.scale=1,,3"], "no empty value"),
    (["--config", "fast", "--grid", "core.scale=1,1"], "given twice"),
    (["--config", "fast", "fast"], "--config fast is given twice"),
    (["--config", "fast", "--grid", "core.scale=1", "--grid", "core.scale=2"], "--grid core.scale is given twice"),
    (["--config", "fast", "--grid", "core.scale=1,2", "--set", "core.scale=3"], "both a --set and a --grid key"),
    (["--config", "fast", "--grid", "op=1,2"], "already has a column named 'op'"),
    (["--config", "fast", "--set", "core.scale"], "expected KEY=VALUE"),
    (["--config", "fast", "--jobs", "0"], "--jobs must be at least 1"),
    (["--config", "nosuch"], "config 'nosuch' not found"),
])
def test_replay_sweep_bad_arguments(fake, tmp_path, args, message):
    result = replay_sweep(fake, *args, "--csv", tmp_path / "x.csv")
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "x.csv").exists()


def test_replay_sweep_joins_ray_address_from_the_environment_and_says_when_it_cannot(fake, tmp_path):
    # Nothing listens on port 1: a clear error at once, not Ray's endless reconnecting.
    cmd = [sys.executable, str(REPLAY_SWEEP), str(fake["rec"]), "--config", "fast", "--trnsim", str(fake["exe"]),
           "--csv", str(tmp_path / "x.csv")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "RAY_ADDRESS": "127.0.0.1:1"})
    assert result.returncode == 1
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.csv").exists()


def test_replay_sweep_recording_after_the_config_list_is_explained(fake, tmp_path):
    result = subprocess.run([sys.executable, str(REPLAY_SWEEP), "--config", "fast", str(fake["rec"]),
                             "--csv", str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"{fake['rec']} was read as a config: put REC before --config" in result.stderr


def test_replay_sweep_missing_recording_and_binary(fake, tmp_path):
    result = subprocess.run([sys.executable, str(REPLAY_SWEEP), str(tmp_path / "none.trnrec"), "--config", "fast",
                             "--trnsim", str(fake["exe"]), "--csv", str(tmp_path / "x.csv")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "none.trnrec does not exist" in result.stderr
    result = subprocess.run([sys.executable, str(REPLAY_SWEEP), str(fake["rec"]), "--config", "fast",
                             "--csv", str(tmp_path / "x.csv")], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "TRNSIM_BUILD_DIR": str(tmp_path)})
    assert result.returncode == 1 and f"{tmp_path}/bin/trnsim is missing" in result.stderr


def test_replay_report_missing_a_field_is_a_clear_error():
    import replay_sweep as module
    report = {"config": {"hash": "h"}, "per_op": {"matmul": {"count": 1, "recorded_ns": 1.0}}, "launches": [{}],
              "total_ns": 1.0, "recorded_total_ns": 1.0}
    with pytest.raises(ValueError, match=r"per_op\['matmul'\] lacks 'ns'"):
        module.rows_of("trn2", [], report)
    with pytest.raises(ValueError, match="lacks 'total_ns'"):
        module.rows_of("trn2", [], {k: v for k, v in report.items() if k != "total_ns"})
    report["per_op"]["matmul"]["ns"] = "fast"
    with pytest.raises(ValueError, match="not a number"):
        module.rows_of("trn2", [], report)


# ---------------------------------------------------------------------------------------------
# tools/bench/sweep.py on Ray against its points run one by one (the real trnsim)
# ---------------------------------------------------------------------------------------------
def test_bench_sweep_on_ray_matches_its_points_run_one_by_one(trnsim_bin, tmp_path, ray_address):
    configs = ["trn2", str(REPO_ROOT / "configs" / "whatif" / "trn2-2x-sbuf.yaml")]
    env = {**os.environ, "TRNSIM_BUILD_DIR": str(build_dir())}
    result = subprocess.run([sys.executable, str(BENCH_SWEEP), "matmul", "--models", "llama3-8b", "--projections",
                             "k,down", "--m", "1,128", "--configs", ",".join(configs), "--csv", str(tmp_path / "mm.csv"),
                             "--ray-address", ray_address, "--jobs", "2"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr

    # The recipe the sweep followed before Ray: one `trnsim bench matmul --csv` per point, in point
    # order (projections, then M, then configs), the tool's columns then model/projection/layout.
    merged = []
    for projection, (k, n) in (("k", (4096, 1024)), ("down", (14336, 4096))):
        for m in (1, 128):
            for config in configs:
                out = tmp_path / f"{projection}-{m}-{len(merged)}.csv"
                subprocess.run([str(trnsim_bin), "bench", "matmul", "--m", str(m), "--k", str(k), "--n", str(n),
                                "--dtype", "bf16", "--config", config, "--transpose-b", "--csv", str(out)],
                               check=True, capture_output=True, timeout=120)
                [row] = read_csv(out)
                merged.append({**row, "model": "llama3-8b", "projection": projection, "weight_layout": "nk"})
    expected = io.StringIO(newline="")
    writer = csv.DictWriter(expected, fieldnames=list(merged[0]))
    writer.writeheader()
    writer.writerows(merged)
    assert (tmp_path / "mm.csv").read_bytes() == expected.getvalue().encode()
    assert {r["config"] for r in merged} == {"trn2", "trn2-2x-sbuf"}  # both configs really ran


def test_bench_sweep_failed_point_is_reported(trnsim_bin, tmp_path, ray_address):
    env = {**os.environ, "TRNSIM_BUILD_DIR": str(build_dir())}
    # M = 0 is refused by trnsim bench; M = 1 runs: the CSV keeps it, the failure is reported.
    result = subprocess.run([sys.executable, str(BENCH_SWEEP), "matmul", "--models", "llama3-8b", "--projections",
                             "k", "--m", "0,1", "--configs", "trn2", "--csv", str(tmp_path / "mm.csv"),
                             "--ray-address", ray_address],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert [r["m"] for r in read_csv(tmp_path / "mm.csv")] == ["1"]
    assert "point model=llama3-8b projection=k m=0 k=4096 n=1024 config=trn2: exit status 1" in result.stderr
    assert f"command: {trnsim_bin} bench matmul --m 0 " in result.stderr
    assert "error: 1 of 2 points failed" in result.stderr


def test_bench_sweep_jobs_zero_is_an_error(trnsim_bin, tmp_path):
    env = {**os.environ, "TRNSIM_BUILD_DIR": str(build_dir())}
    result = subprocess.run([sys.executable, str(BENCH_SWEEP), "matmul", "--models", "llama3-8b", "--projections",
                             "k", "--m", "1", "--configs", "trn2", "--jobs", "0", "--csv", str(tmp_path / "mm.csv")],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1 and "--jobs must be at least 1, got 0" in result.stderr
    assert not (tmp_path / "mm.csv").exists()
