"""trnsim.record(): the recording's layout (manifest header, one line per launch, footer; programs
stored once by hash; each kernel launch's invocation), overwrite refusal, errors inside the block,
copies and fallbacks as launches; and `trnsim replay` on it: its own config reproduces every launch
bit for bit (also with --rebuild, which builds the recorded programs again from the invocations of
many kernel families), another config or a what-if gives per-op times, --diff's exit code, the
--json schema, illegal targets, output files."""
import json
import os
import pathlib
import subprocess

import pytest
import torch

from test_ops import rand, strict_lowering, trnsim  # noqa: F401

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TRNSIM = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", REPO_ROOT / "build")) / "bin" / "trnsim"


def replay(*args):
    return subprocess.run([str(TRNSIM), "replay", *map(str, args)], capture_output=True, text=True, timeout=120)


def manifest(path):
    lines = [json.loads(line) for line in (path / "manifest.jsonl").read_text().splitlines() if line]
    return lines[0], lines[1:-1], lines[-1]


def small_step():
    """Copies in, a matmul + activation (kernels), a CPU fallback, a copy back."""
    a, b = rand((256, 512), torch.bfloat16, 1), rand((512, 1024), torch.bfloat16, 2)
    y = (a.to("neuron") @ b.to("neuron")).relu()
    # special_erfcx has no lowering: the counted CPU fallback (host-link transfers out and back).
    z = torch.special.erfcx(y.float() * 0.01)
    return z.cpu()


@pytest.fixture
def trn2():
    trnsim.set_config("trn2")
    yield
    trnsim.set_config("trn2")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One small recording on trn2, shared by the replay tests (read only)."""
    trnsim.set_config("trn2")
    trnsim.set_fallback_mode("allow")
    trnsim.reset_simulated_time()
    path = tmp_path_factory.mktemp("rec") / "small.trnrec"
    with trnsim.record(path):
        small_step()
    log = trnsim.op_log()
    trnsim.set_fallback_mode("warn")
    return path, log


def test_layout_header_launches_footer_and_programs_once(recorded):
    path, log = recorded
    header, launches, footer = manifest(path)
    assert header["format"] == "trnsim-recording" and header["version"] == 1
    info = trnsim.config()
    assert header["config"] == {"name": "trn2", "name_or_path": "trn2", "source": info["source_file"],
                                "overrides": [], "hash": info["hash"]}
    host_s = footer["end"].pop("host_s")
    assert 0 < host_s < 60
    assert footer == {"end": {"complete": True, "launches": len(launches), "error": ""}}
    # One launch per op the device ran, in order, with the op log's metadata and times.
    assert [(l["index"], l["op"], l["kind"], l["ns"], l["start_ns"]) for l in launches] == \
        [(i, r["op"], r["kind"], r["ns"], r["start_ns"]) for i, r in enumerate(log)]
    kinds = {l["kind"] for l in launches}
    assert kinds == {"kernel", "copy", "fallback"}
    mm = next(l for l in launches if l["op"] == "mm")
    assert mm["shapes"] == [[256, 512], [512, 1024]] and mm["dtype"] == "BFloat16"
    assert len(mm["programs"]) == trnsim.config()["cores_per_device"]
    assert {b["direction"] for b in mm["bindings"]} == {"in", "out"}
    assert sum(mm["busy_ns"].values()) > 0 and mm["flops"] == 2 * 256 * 512 * 1024
    fallback = next(l for l in launches if l["kind"] == "fallback")
    assert len(fallback["transfer_bytes"]) == 2 and sum(fallback["transfer_bytes"]) == fallback["host_link_bytes"]
    copies = [l for l in launches if l["kind"] == "copy"]
    assert [l["op"] for l in copies] == ["copy host->device", "copy host->device", "copy device->host"]
    assert all(l["transfer_bytes"] == [l["host_link_bytes"]] for l in copies)
    # Every program referenced is stored exactly once, named by its hash.
    referenced = {h for l in launches for h in l.get("programs", [])}
    stored = {p.name[:-len(".tasm.gz")] for p in (path / "programs").iterdir()}
    assert referenced == stored


def test_every_kernel_launch_carries_its_invocation(recorded):
    path, _ = recorded
    _, launches, _ = manifest(path)
    kernels = [l for l in launches if l["kind"] == "kernel"]
    assert kernels and all(set(l["kernel"]) == {"name", "spec"} for l in kernels)
    assert all("kernel" not in l for l in launches if l["kind"] != "kernel")
    mm = next(l for l in kernels if l["op"] == "mm")
    assert mm["kernel"]["name"] == "matmul"
    assert {k: mm["kernel"]["spec"][k] for k in ("m", "k", "n", "input_dtype")} == \
        {"m": 256, "k": 512, "n": 1024, "input_dtype": "bf16"}


def many_kernel_families():
    """Forward and backward of conv, pooling, norms, attention, losses, embedding, plus indexing,
    sorting, scans and data movement: launches of most registered kernels."""
    torch.manual_seed(0)
    dev = "neuron"
    x = rand((2, 4, 12, 12), torch.float32, 1).to(dev).requires_grad_()
    w = rand((8, 4, 3, 3), torch.float32, 2).to(dev).requires_grad_()
    y = torch.nn.functional.conv2d(x, w, padding=1)
    y = torch.nn.functional.max_pool2d(y, 2) + torch.nn.functional.avg_pool2d(y, 2)
    y = torch.nn.functional.layer_norm(y, (6,)).flatten(1)
    loss = torch.nn.functional.cross_entropy(y[:, :10], torch.tensor([1, 3], device=dev))
    q = rand((1, 2, 128, 64), torch.bfloat16, 3).to(dev).requires_grad_()
    att = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    emb = torch.nn.functional.embedding(torch.tensor([[1, 2, 5]], device=dev),
                                        rand((10, 16), torch.float32, 4).to(dev).requires_grad_())
    (loss + att.float().sum() + emb.softmax(-1).sum()).backward()
    v = rand((64, 100), torch.float32, 5).to(dev)
    idx = torch.tensor([3, 0, 7], device=dev)
    outs = [v.flip(0), v.cumsum(1), v.prod(1), v.topk(3, dim=1).values, v.sort(dim=1).values, v.triu(1),
            torch.cat([v, v], 1), v[idx], v.argmax(1), torch.where(v > 0, v, 0.5),
            torch.arange(10, device=dev), torch.histc(v, bins=8, min=-2, max=2), (v > 1).nonzero(),
            v.index_add(0, idx, torch.ones(3, 100, device=dev)),
            torch.zeros(64, 5, device=dev).scatter_reduce(1, torch.zeros(64, 3, dtype=torch.long, device=dev),
                                                          v[:, :3].contiguous(), "amax"),
            torch.randint(0, 10, (4, 50)).to(dev).sort(dim=1).values,
            torch.bincount(torch.tensor([1, 2, 2, 5], device=dev))]
    return [o.cpu() for o in outs]


def test_rebuild_from_invocations_reproduces_many_kernel_families(trn2, tmp_path):
    """Every kernel launch of many families rebuilt on its own config builds the recorded programs
    (same .tasm text, so the spec's JSON form misses nothing that shapes them) and the same times."""
    trnsim.set_fallback_mode("allow")
    try:
        with trnsim.record(tmp_path / "many.trnrec"):
            many_kernel_families()
    finally:
        trnsim.set_fallback_mode("warn")
    _, launches, _ = manifest(tmp_path / "many.trnrec")
    kernels = [l for l in launches if l["kind"] == "kernel"]
    names = {l["kernel"]["name"] for l in kernels}
    assert {"conv2d", "conv2d_backward", "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
            "norm", "norm_backward", "flash_attention_forward", "flash_attention_backward", "embedding", "flip",
            "scan", "prod", "topk", "sort", "triangle", "concat", "gather_rows", "reduce", "where", "arange",
            "histogram", "nonzero", "scatter_rows", "scatter_max", "counting_sort", "one_hot", "softmax", "matmul",
            "unary", "binary", "permute"} <= names, sorted(names)
    out = replay(tmp_path / "many.trnrec", "--rebuild", "--diff", "--stats", tmp_path / "s.json",
                 "--json", tmp_path / "r.json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "bit for bit" in out.stdout
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["rebuild"] is True
    assert stats["rebuilt_launches"] == stats["rebuilt_as_recorded"] == len(kernels)
    assert stats["not_rebuilt_launches"] == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["rebuild"] is True and doc["rebuilt_launches"] == len(kernels)
    assert [l["ns"] for l in doc["launches"]] == [l["ns"] for l in launches]


def test_rebuild_for_another_lnc_moves_what_retiming_cannot(recorded, tmp_path):
    """LNC only shapes how kernels are split: re-timing the recorded two-core programs keeps their
    time, rebuilding for LNC 1 puts each kernel on one core."""
    path, log = recorded
    lnc1 = ("--set", "chip.default_logical_core_size=1")
    kept = replay(path, *lnc1, "--json", tmp_path / "kept.json")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    rebuilt = replay(path, *lnc1, "--rebuild", "--json", tmp_path / "rebuilt.json")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    kept_doc, rebuilt_doc = (json.loads((tmp_path / f).read_text()) for f in ("kept.json", "rebuilt.json"))
    assert kept_doc["rebuild"] is False and rebuilt_doc["rebuild"] is True
    assert [l["ns"] for l in kept_doc["launches"]] == [r["ns"] for r in log]
    # relu splits its rows across the two cores of LNC 2 (this mm does not split: it ran on one core).
    relu = next(i for i, r in enumerate(log) if r["op"] == "relu")
    assert rebuilt_doc["launches"][relu]["ns"] > log[relu]["ns"]  # one core instead of two
    assert all(l["ns"] == r["ns"] for l, r in zip(rebuilt_doc["launches"], log) if r["kind"] != "kernel")
    assert "LNC 1" in rebuilt.stdout and "rebuilt for trn2" in rebuilt.stdout


def test_a_kernel_the_target_cannot_build_is_a_clear_error(recorded, tmp_path):
    """Rebuilding a launch whose invocation the kernel library declines (here: edited to an argmax
    over two dims) or cannot read (an unknown kernel) names each launch, its op and the reason."""
    path, _ = recorded
    copy = tmp_path / "edited.trnrec"
    subprocess.run(["cp", "-r", str(path), str(copy)], check=True)
    lines = [json.loads(line) for line in (copy / "manifest.jsonl").read_text().splitlines() if line]
    mm = next(l for l in lines if l.get("op") == "mm")
    mm["kernel"] = {"name": "reduce", "spec": {"shape": [4, 4], "dims": [0, 1], "op": "argmax",
                                               "output_dtype": "int32"}}
    relu = next(l for l in lines if l.get("op") == "relu")
    relu["kernel"]["name"] = "no_such_kernel"
    (copy / "manifest.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    out = replay(copy, "--rebuild")
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.startswith("error: 2 kernel launch(es) cannot be rebuilt for config 'trn2'"), out.stderr
    assert f"launch {mm['index']} (mm [256, 512], [512, 1024]): kernel 'reduce' cannot be built for config " \
           "'trn2': argmax/argmin reduce exactly one dim" in out.stderr
    assert f"launch {relu['index']} (relu" in out.stderr and "unknown kernel 'no_such_kernel'" in out.stderr
    assert "Traceback" not in out.stderr and "terminate" not in out.stderr
    assert replay(copy).returncode == 0  # without --rebuild the recorded programs replay


def test_existing_path_is_refused_unless_overwrite(trn2, tmp_path):
    path = tmp_path / "r.trnrec"
    with trnsim.record(path):
        torch.ones(4).to("neuron")
    before = (path / "manifest.jsonl").read_text()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        with trnsim.record(path):
            pass
    assert (path / "manifest.jsonl").read_text() == before
    with trnsim.record(path, overwrite=True) as rec:
        pass
    assert rec.launches == 0 and rec.complete
    # A directory that is not a recording is never replaced, even with overwrite=True.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(RuntimeError, match="not a trnsim recording"):
        with trnsim.record(mine, overwrite=True):
            pass
    assert (mine / "notes.txt").read_text() == "keep"
    assert not trnsim._C.recording()


def test_error_inside_the_block_propagates_and_marks_the_recording_incomplete(trn2, tmp_path):
    path = tmp_path / "failed.trnrec"
    with pytest.raises(ValueError, match="boom"):
        with trnsim.record(path) as rec:
            torch.ones(8).to("neuron") * 2
            raise ValueError("boom")
    assert not rec.complete and rec.launches == 2
    _, launches, footer = manifest(path)
    assert len(launches) == 2
    assert footer["end"]["complete"] is False and "ValueError: boom" in footer["end"]["error"]
    out = replay(path)
    assert out.returncode == 0, out.stderr
    assert "incomplete" in out.stderr and "boom" in out.stderr
    assert not trnsim._C.recording()  # the next block may record again
    with trnsim.record(tmp_path / "next.trnrec"):
        pass


def test_records_do_not_nest_and_hold_one_config(trn2, tmp_path):
    with trnsim.record(tmp_path / "outer.trnrec"):
        with pytest.raises(RuntimeError, match="do not nest"):
            with trnsim.record(tmp_path / "inner.trnrec"):
                pass
        with pytest.raises(RuntimeError, match="one config"):
            trnsim.set_config("trn3")
        assert trnsim.config()["name"] == "trn2"
    assert not (tmp_path / "inner.trnrec").exists()
    assert trnsim.set_config("trn3")["name"] == "trn3"


def test_overrides_and_profile_alongside(tmp_path):
    trnsim.set_config("trn2", host_link__latency_ns=500)
    try:
        path = tmp_path / "o.trnrec"
        with trnsim.profile(trace=False) as prof, trnsim.record(path):
            torch.ones(1024).to("neuron").cpu()
        header, launches, _ = manifest(path)
        assert header["config"]["overrides"] == ["host_link.latency_ns=500"]
        assert [l["ns"] for l in launches] == [r["ns"] for r in prof.records]
        # Replay loads the recorded config with its overrides: the same times.
        out = replay(path, "--diff")
        assert out.returncode == 0, out.stdout + out.stderr
        assert "warning" not in out.stderr
    finally:
        trnsim.set_config("trn2")


def test_replay_on_its_own_config_is_bit_identical(recorded, tmp_path):
    path, log = recorded
    out = replay(path, "--diff", "--timing-only", "--json", tmp_path / "r.json", "--stats", tmp_path / "s.json",
                 "--trace", tmp_path / "t.json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "bit for bit" in out.stdout and "values are not recorded" in out.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [(l["ns"], l["recorded_ns"]) for l in doc["launches"]] == [(r["ns"], r["ns"]) for r in log]
    assert doc["total_ns"] == doc["recorded_total_ns"] == sum(r["ns"] for r in log)
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["changed_launches"] == 0 and stats["by_kind"]["fallback"]["launches"] == 1
    trace = json.loads((tmp_path / "t.json").read_text())
    names = {e.get("args", {}).get("name") for e in trace["traceEvents"] if e.get("ph") == "M"}
    assert {"neuron:0", "ops", "host link"} <= names
    assert any(e.get("name") == "mm" for e in trace["traceEvents"])


JSON_KEYS = {"recording": str, "config": dict, "recorded_config_hash": str, "launches": list, "per_op": dict,
             "total_ns": float, "recorded_total_ns": float, "host_s": float}
LAUNCH_KEYS = {"index": int, "op": str, "kind": str, "device": int, "shapes": list, "dtype": str,
               "recorded_ns": float, "ns": float}


def check_schema(doc):
    for key, kind in JSON_KEYS.items():
        assert isinstance(doc[key], kind), key
    assert set(doc["config"]) >= {"name", "source", "overrides", "hash"}
    assert all(isinstance(doc["config"][k], str) for k in ("name", "source", "hash"))
    assert all(isinstance(s, str) for s in doc["config"]["overrides"])
    for launch in doc["launches"]:
        for key, kind in LAUNCH_KEYS.items():
            assert isinstance(launch[key], kind), (key, launch)
        assert all(isinstance(d, int) for shape in launch["shapes"] for d in shape)
    for op, row in doc["per_op"].items():
        assert isinstance(op, str) and isinstance(row["count"], int)
        assert isinstance(row["recorded_ns"], float) and isinstance(row["ns"], float)


@pytest.mark.parametrize("target", ["trn3", "configs/whatif/trn3-hbm-8tbps.yaml"])
def test_replay_on_another_config_gives_per_op_times(recorded, tmp_path, target):
    path, log = recorded
    out = replay(path, "--config", target if target == "trn3" else REPO_ROOT / target, "--json", tmp_path / "r.json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    check_schema(doc)
    assert doc["config"]["name"] == ("trn3" if target == "trn3" else "trn3-hbm-8tbps")
    assert doc["recorded_config_hash"] == manifest(path)[0]["config"]["hash"] != doc["config"]["hash"]
    assert doc["per_op"]["mm"]["count"] == 1 and doc["per_op"]["mm"]["ns"] != doc["per_op"]["mm"]["recorded_ns"]
    assert doc["total_ns"] != doc["recorded_total_ns"]
    for row in ("op", "recorded us", "replayed us", "ratio", "mm", "total"):
        assert row in out.stdout
    assert "not rebuilt" in out.stdout  # the what-if is honest about what it keeps


def test_diff_names_changed_launches_and_exits_nonzero(recorded, tmp_path):
    path, _ = recorded
    out = replay(path, "--diff", "--set", "core.dma.fixed_latency_ns=72")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "launches changed time" in out.stdout
    table = out.stdout.split("launches changed time:")[1]
    assert "mm" in table and "[256, 512], [512, 1024]" in table and "old ns" in table
    assert "copy host->device" not in table  # host-link times do not depend on the DMA latency
    # Without --diff a what-if is not a failure.
    assert replay(path, "--set", "core.dma.fixed_latency_ns=72").returncode == 0


def test_illegal_target_is_a_clear_error(recorded):
    path, _ = recorded
    out = replay(path, "--set", "core.sbuf.bytes_per_partition=8192")
    assert out.returncode == 1
    assert out.stderr.startswith("error: launch ") and "[memory-bounds]" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and "terminate" not in out.stderr


def test_outputs_are_not_overwritten_without_force(recorded, tmp_path):
    path, _ = recorded
    existing = tmp_path / "r.json"
    existing.write_text("mine")
    out = replay(path, "--json", existing)
    assert out.returncode == 1 and "--force" in out.stderr
    assert existing.read_text() == "mine"
    assert replay(path, "--json", existing, "--force").returncode == 0
    check_schema(json.loads(existing.read_text()))


def test_a_changed_config_is_warned_about(recorded, tmp_path):
    path, _ = recorded
    copy = tmp_path / "edited.trnrec"
    subprocess.run(["cp", "-r", str(path), str(copy)], check=True)
    lines = (copy / "manifest.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["config"]["hash"] = "0000000000000000"
    (copy / "manifest.jsonl").write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    out = replay(copy)
    assert out.returncode == 0
    assert "warning" in out.stderr and "0000000000000000" in out.stderr and "changed since recording" in out.stderr


def test_not_a_recording_is_a_clear_error(tmp_path):
    out = replay(tmp_path / "nothing.trnrec")
    assert out.returncode == 1 and out.stderr.startswith("error:") and "no such directory" in out.stderr
    (tmp_path / "empty.trnrec").mkdir()
    out = replay(tmp_path / "empty.trnrec")
    assert out.returncode == 1 and "manifest.jsonl" in out.stderr
