"""trnsim.profile(), the device's simulated clock (host-link copies, fallbacks, device copies),
events with simulated time, and ops split across the logical core's physical cores (LNC)."""
import json

import pytest
import torch

from test_ops import check, rand, strict_lowering, trnsim  # noqa: F401

# trn2 host link (configs/trn2.yaml): 16 GB/s = 16 bytes/ns, 2000 ns per transfer.
LINK_BYTES_PER_NS, LINK_LATENCY_NS = 16, 2000


def link_ns(nbytes):
    return LINK_LATENCY_NS + nbytes / LINK_BYTES_PER_NS if nbytes else 0


@pytest.fixture
def trn2():
    trnsim.set_config("trn2")
    yield
    trnsim.set_config("trn2")


def test_host_copies_are_timed_over_the_host_link(trn2):
    x = torch.randn(300, 70)
    xd = x.to("neuron")
    back = xd.cpu()
    log = trnsim.op_log()
    assert [(r["op"], r["kind"], r["bytes"]) for r in log] == [("copy host->device", "copy", x.nbytes),
                                                               ("copy device->host", "copy", x.nbytes)]
    assert [r["ns"] for r in log] == [link_ns(x.nbytes)] * 2
    assert log[1]["start_ns"] == log[0]["ns"]  # one after the other on the device's clock
    assert torch.equal(back, x)


def test_fallback_ops_are_timed_and_marked(trn2):
    x = torch.randn(64, 33)
    xd = x.to("neuron")
    trnsim.reset_simulated_time()
    y = torch.i0(xd)  # no neuron kernel: runs on the CPU (as i0.out)
    assert list(trnsim.fallback_report()) == ["aten::i0.out"]
    (rec,) = trnsim.op_log()
    assert rec["kind"] == "fallback" and rec["op"] == "aten::i0.out" and rec["shapes"][0] == [64, 33]
    # x and the out= tensor i0.out writes go to the host; the out= tensor comes back.
    assert rec["bytes"] == 3 * x.nbytes and rec["ns"] == link_ns(2 * x.nbytes) + link_ns(x.nbytes)
    assert trnsim.simulated_ns() == rec["ns"]
    torch.testing.assert_close(y.cpu(), torch.i0(x))


def test_in_place_fallback_counts_the_written_argument(trn2):
    xd = torch.randn(10, 10).to("neuron")
    trnsim.reset_simulated_time()
    xd.i0_()  # in place (as i0.out into xd): the argument goes to the host and comes back
    (rec,) = trnsim.op_log()
    assert rec["kind"] == "fallback" and rec["bytes"] >= 2 * 400


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_device_copies_run_as_kernels(dtype):
    x = rand((130, 257), dtype, 3)
    xd = x.to("neuron")
    trnsim.reset_simulated_time()
    t = xd.t().contiguous()  # the permute kernel
    f = xd.float() if dtype != torch.float32 else xd.bfloat16()  # the cast kernel
    p = xd.reshape(13, 10, 257).permute(2, 0, 1).contiguous()
    log = trnsim.op_log()
    assert torch.equal(t.cpu(), x.t().contiguous())
    assert torch.equal(f.cpu(), x.float() if dtype != torch.float32 else x.bfloat16())
    assert torch.equal(p.cpu(), x.reshape(13, 10, 257).permute(2, 0, 1).contiguous())
    assert [r["op"] for r in log] == ["copy device->device", "cast", "copy device->device"]
    assert all(r["kind"] == "kernel" and r["ns"] > 0 for r in log)
    assert trnsim.fallback_report() == {}


def test_events_measure_simulated_time(trn2):
    a = rand((512, 512), torch.bfloat16, 5).to("neuron")
    start, end = torch.Event("neuron", enable_timing=True), torch.Event("neuron", enable_timing=True)
    start.record()
    before = trnsim.simulated_ns()
    c = a @ a
    after = trnsim.simulated_ns()
    end.record()
    end.synchronize()
    assert after > before
    assert start.elapsed_time(end) == pytest.approx((after - before) / 1e6)  # milliseconds, like CUDA
    assert torch.accelerator.current_accelerator().type == "neuron"
    torch.accelerator.synchronize()
    del c


def test_profile_table_totals_and_trace(tmp_path, trn2):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(96, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    x = torch.randn(130, 96)
    with trnsim.profile() as prof:
        model_d = model.to("neuron")
        y = model_d(x.to("neuron"))
        y.sum().backward()
        z = torch.i0(y.detach())  # one fallback op
    recs = prof.records
    kinds = {r["kind"] for r in recs}
    assert kinds == {"kernel", "copy", "fallback"}
    totals = prof.totals()
    for key in ("simulated_ns", "host_s", "flops", "mfu", "fallback_ops"):
        assert key in totals
    assert totals["simulated_ns"] == pytest.approx(sum(r["ns"] for r in recs))
    assert totals["fallback_ops"] == 1 and totals["host_s"] > 0 and 0 < totals["mfu"] < 1
    assert totals["flops"] == sum(r["flops"] for r in recs) >= 3 * 2 * 130 * (96 * 256 + 256 * 64) - 2 * 130 * 96 * 256
    # The records sit back to back on the device clock.
    for a, b in zip(recs, recs[1:]):
        assert b["start_ns"] == pytest.approx(a["start_ns"] + a["ns"])
    text = prof.table()
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["op", "kind", "shapes"]
    rows = prof.rows()
    assert [r["ns"] for r in rows] == sorted((r["ns"] for r in rows), reverse=True)
    assert any(r["op"] == "aten::i0.out" and r["fallback"] for r in rows)
    assert "addmm" in text and "fallback" in text and "trn2" in lines[-1]

    path = tmp_path / "t.json"
    slices = prof.export_trace(path)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert slices == sum(1 for e in events if e.get("ph") == "X")
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"neuron:0", "neuron:0 core 0", "neuron:0 core 1"} <= set(procs.values())
    ops_pid = next(p for p, n in procs.items() if n == "neuron:0")
    ops_tid = next(t for (p, t), n in tracks.items() if p == ops_pid and n == "ops")
    op_slices = [e for e in events if e.get("ph") == "X" and e["pid"] == ops_pid and e["tid"] == ops_tid]
    assert len(op_slices) == len(recs)
    assert any(s["name"] == "fallback aten::i0.out" and s["args"]["kind"] == "fallback" for s in op_slices)
    core_tracks = {n for (p, t), n in tracks.items() if procs[p] == "neuron:0 core 0"}
    assert "TensorMatrix" in core_tracks and any(n.startswith("q") for n in core_tracks)
    # Engine slices of the cores fall inside the op that issued them.
    end_us = max(s["ts"] + s["dur"] for s in op_slices)
    engine = [e for e in events if e.get("ph") == "X" and procs[e["pid"]].startswith("neuron:0 core")]
    assert engine and max(e["ts"] + e["dur"] for e in engine) <= end_us + 1e-3
    del z


def test_profile_trace_is_deterministic(tmp_path, trn2):
    a = rand((256, 384), torch.bfloat16, 7)
    outs = []
    for i in range(2):
        with trnsim.profile() as prof:
            ad = a.to("neuron")
            (ad @ ad.t()).relu().cpu()
        prof.export_trace(tmp_path / f"{i}.json")
        outs.append((tmp_path / f"{i}.json").read_bytes())
    assert outs[0] == outs[1]


def test_profile_does_not_nest():
    with trnsim.profile(trace=False):
        with pytest.raises(RuntimeError, match="nest"):
            with trnsim.profile():
                pass


def test_matmul_splits_across_the_logical_cores_physical_cores():
    a, b = rand((1024, 1024), torch.bfloat16, 8), rand((1024, 2048), torch.bfloat16, 9)
    times = {}
    for lnc in (1, 2):
        trnsim.set_config("trn2", chip__default_logical_core_size=lnc)
        assert trnsim.config()["cores_per_device"] == lnc
        trnsim.reset_simulated_time()
        out = a.to("neuron") @ b.to("neuron")
        check(out, a @ b, torch.bfloat16, 1024)
        (rec,) = trnsim.op_log("kernel")
        times[lnc] = rec["ns"] - rec["launch_ns"]   # the body: the launch cost does not split
    trnsim.set_config("trn2")
    # Two physical cores: close to half the time (each core its own half of the output).
    assert times[2] < 0.6 * times[1], times


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_strided_views_are_copied_by_a_device_dma(dtype):
    x = rand((6, 40, 70), dtype, 11)
    xd = x.to("neuron")
    trnsim.reset_simulated_time()
    views = [lambda t: t[..., 35:], lambda t: t[:, ::3, 1:50:2], lambda t: t[2:5].transpose(0, 2)[:, 7:],
             lambda t: t[:, :1, :].expand(6, 9, 70), lambda t: t[1, :, 5]]
    for view in views:
        got = view(xd).contiguous()
        assert got.is_contiguous() and torch.equal(got.cpu(), view(x).contiguous())
    log = trnsim.op_log()
    assert [r["op"] for r in log if r["kind"] == "kernel"] == ["copy device->device"] * len(views)
    assert all(r["ns"] > 0 for r in log)
    assert trnsim.fallback_report() == {}


def test_copy_between_devices_is_a_dma_on_the_destination(trn2):
    if torch.neuron.device_count() < 2:
        pytest.skip("one device")
    x = rand((64, 130), torch.bfloat16, 12)
    xd = x.to("neuron:0")
    trnsim.reset_simulated_time()
    y = xd.to("neuron:1")
    (rec,) = trnsim.op_log()
    assert rec["kind"] == "kernel" and rec["device"] == 1 and rec["ns"] > 0
    assert trnsim.simulated_ns(0) == 0 and trnsim.simulated_ns(1) == rec["ns"]
    assert y.device == torch.device("neuron:1") and torch.equal(y.cpu(), x)


def test_casts_of_strided_views_run_on_the_device():
    x = rand((6, 40, 70), torch.float32, 13)
    xd = x.to("neuron")
    trnsim.reset_simulated_time()
    for view in (lambda t: t[..., 35:], lambda t: t.transpose(0, 2), lambda t: t[:, ::2]):
        got = view(xd).to(torch.bfloat16)
        assert torch.equal(got.cpu(), view(x).to(torch.bfloat16))
    kernels = [r["op"] for r in trnsim.op_log("kernel")]
    # A slice is gathered then cast; a transpose keeps its strides in the result (preserve_format),
    # so it is one cast in storage order.
    assert kernels == ["copy device->device", "cast", "cast", "copy device->device", "cast"]
    assert trnsim.fallback_report() == {}


def test_each_kernel_op_pays_the_launch_cost_first(tmp_path, trn2):
    """chip.kernel_launch_ns: every kernel op (one kernel execution in eager mode) is charged it before its body;
    copies and fallbacks are not kernel executions. The timeline shows the launch, the cores' slices after it."""
    launch = float(trnsim._C.device_config_leaves()["chip.kernel_launch_ns"])
    assert launch > 0
    a = torch.randn(128, 64).to("neuron")
    with trnsim.profile() as prof:
        b = a * 2 + 1
    kernels = [r for r in prof.records if r["kind"] == "kernel"]
    assert kernels and all(r["launch_ns"] == launch and r["ns"] > launch for r in kernels)
    path = tmp_path / "launch.json"
    prof.export_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    launches = [e for e in events if e.get("ph") == "X" and tracks.get((e["pid"], e["tid"])) == "launch"]
    assert len(launches) == len(kernels)
    assert all(e["dur"] == pytest.approx(launch / 1e3) for e in launches)
    first_engine = min(e["ts"] for e in events if e.get("ph") == "X" and procs[e["pid"]].startswith("neuron:0 core"))
    assert first_engine >= min(e["ts"] for e in launches) + launch / 1e3 - 1e-6
    del b
