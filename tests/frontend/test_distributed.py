"""torch.distributed on the simulated system (trnsim.distributed): the c10d backend "neuron" on real
ranks (torch.multiprocessing.spawn), values against references computed here from the ranks' seeds,
times against the system model and the clock rules (start at the last arrival, beside the compute,
waits only where the program waits), DDP against single-process training, and simulate_world
against real ranks."""
import os
import pickle
import socket
import sys
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import trnsim
from trnsim import _C

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, out_dir, body, args, env):
    os.environ.update(env)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import trnsim  # noqa: F401  registers the backend
    if "TRNSIM_VALUES" in env:  # trnsim was imported before the environment was set
        trnsim._C.set_values_enabled(env["TRNSIM_VALUES"] == "1")
    # A rank that never arrives is an error within minutes, not a hang.
    dist.init_process_group("neuron", rank=rank, world_size=world, timeout=timedelta(seconds=240))
    try:
        result = body(rank, world, *args)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)


def _run_ranks(tmp_path, world, body, *args, env=None):
    """Runs body(rank, world, *args) on `world` real ranks; returns their results by rank."""
    out_dir = str(tmp_path / f"ranks{world}_{body.__name__}")
    os.makedirs(out_dir, exist_ok=True)
    mp.spawn(_entry, args=(world, _free_port(), out_dir, body, args, dict(env or {})), nprocs=world, join=True)
    results = []
    for r in range(world):
        with open(os.path.join(out_dir, f"{r}.pkl"), "rb") as f:
            results.append(pickle.load(f))
    return results


def _in_fresh_process(tmp_path, entry, *args):
    """entry(*args, out_path) in a fresh spawned process (simulate_world initialises torch.distributed for
    the whole process); what it pickled to out_path."""
    out_path = str(tmp_path / f"{entry.__name__}.pkl")
    proc = mp.get_context("spawn").Process(target=entry, args=(*args, out_path))
    proc.start()
    proc.join(timeout=600)
    assert proc.exitcode == 0
    with open(out_path, "rb") as f:
        return pickle.load(f)


# --- values ----------------------------------------------------------------------------------------

def _inputs(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return {"float": torch.randn(37, generator=g) + 0.5,
            "int": torch.randint(-50, 50, (19,), generator=g, dtype=torch.int32),
            "block": torch.randn(32, generator=g)}


_FLOAT_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX")
_INT_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


def _values_body(rank, world):
    x = _inputs(rank)
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        for op in _FLOAT_OPS:
            t = x["float"].to(dtype).to("neuron")
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            out[("all_reduce", str(dtype), op)] = t.cpu()
    for op in _INT_OPS:
        t = x["int"].to("neuron")
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        out[("all_reduce", "int32", op)] = t.cpu()
    cpu = x["float"].clone()
    dist.all_reduce(cpu)
    out["all_reduce_cpu"] = cpu
    premul = x["block"].to("neuron")
    dist.all_reduce(premul, op=dist._make_nccl_premul_sum(0.25))  # FSDP2's gradient divide factor
    out["premul_sum"] = premul.cpu()
    premul_rs = torch.empty(8, device="neuron")
    dist.reduce_scatter_tensor(premul_rs, x["block"].to("neuron"),
                               op=dist._make_nccl_premul_sum(torch.tensor(0.5, device="neuron")))
    out["premul_reduce_scatter"] = premul_rs.cpu()

    piece = x["block"][:8].to("neuron")
    gathered = torch.empty(8 * world, device="neuron")
    dist.all_gather_into_tensor(gathered, piece)
    out["all_gather_into_tensor"] = gathered.cpu()
    parts = [torch.empty(8, device="neuron") for _ in range(world)]
    dist.all_gather(parts, piece)
    out["all_gather"] = [p.cpu() for p in parts]

    scattered = torch.empty(8, device="neuron")
    dist.reduce_scatter_tensor(scattered, x["block"].to("neuron"))
    out["reduce_scatter_tensor"] = scattered.cpu()
    listed = torch.empty(8, device="neuron")
    dist.reduce_scatter(listed, [c.to("neuron") for c in x["block"].chunk(world)], op=dist.ReduceOp.MAX)
    out["reduce_scatter_max"] = listed.cpu()

    exchanged = torch.empty(32, device="neuron")
    dist.all_to_all_single(exchanged, x["block"].to("neuron"))
    out["all_to_all_single"] = exchanged.cpu()
    # Uneven: rank r sends r + j + 1 elements to rank j.
    send_splits = [rank + j + 1 for j in range(world)]
    recv_splits = [j + rank + 1 for j in range(world)]
    source = torch.arange(sum(send_splits), dtype=torch.float32) + 100 * rank
    uneven = torch.empty(sum(recv_splits), device="neuron")
    dist.all_to_all_single(uneven, source.to("neuron"), recv_splits, send_splits)
    out["all_to_all_uneven"] = uneven.cpu()
    outs = [torch.empty(8, device="neuron") for _ in range(world)]
    dist.all_to_all(outs, [c.to("neuron") for c in x["block"].chunk(world)])
    out["all_to_all"] = [o.cpu() for o in outs]

    b = x["float"].to("neuron")
    dist.broadcast(b, src=world - 2)
    out["broadcast"] = b.cpu()
    r = x["float"].to("neuron")
    dist.reduce(r, dst=1)
    if rank == 1:
        out["reduce"] = r.cpu()
    gather_list = [torch.empty(8, device="neuron") for _ in range(world)] if rank == 0 else None
    dist.gather(piece, gather_list, dst=0)
    if rank == 0:
        out["gather"] = [g.cpu() for g in gather_list]
    got = torch.empty(8, device="neuron")
    chunks = [c.to("neuron") for c in x["block"].chunk(world)] if rank == world - 1 else None
    dist.scatter(got, chunks, src=world - 1)
    out["scatter"] = got.cpu()

    # A ring of send / recv (isend first, so no rank blocks another).
    incoming = torch.empty(37, device="neuron")
    sent = dist.isend(x["float"].to("neuron"), (rank + 1) % world)
    dist.recv(incoming, (rank - 1) % world)
    sent.wait()
    out["recv"] = incoming.cpu()

    # recv from any source: ranks 1.. each send one tensor to rank 0 (tag 7), which takes them as they come;
    # rank 1 also sends two on tag 9: rank 0 takes the first from anyone, the second by name.
    if rank == 0:
        anysource = {}
        for _ in range(world - 1):
            t = torch.empty(37, device="neuron")
            src = dist.recv(t, tag=7)
            anysource[src] = t.cpu()
        out["anysource"] = anysource
        first, second = torch.empty(5, device="neuron"), torch.empty(5, device="neuron")
        out["anysource_then_named"] = (dist.recv(first, tag=9), first.cpu(), dist.recv(second, src=1, tag=9),
                                       second.cpu())
    else:
        dist.send(x["float"].to("neuron"), 0, tag=7)
        if rank == 1:
            dist.send(torch.full((5,), 1.0, device="neuron"), 0, tag=9)
            dist.send(torch.full((5,), 2.0, device="neuron"), 0, tag=9)

    work = dist.all_reduce(x["float"].to("neuron"), async_op=True)
    out["async_completed"] = work.is_completed()
    work.wait()
    dist.barrier()
    return out


def _rounded_sum(parts, dtype):
    acc = parts[0].to(torch.float32)
    for p in parts[1:]:
        acc = acc + p.to(torch.float32)
    return acc.to(dtype)


def test_collective_values_on_four_real_ranks(tmp_path):
    world = 4
    results = _run_ranks(tmp_path, world, _values_body)
    xs = [_inputs(r) for r in range(world)]

    for key in results[0]:
        if key in ("reduce", "gather", "anysource", "anysource_then_named"):
            continue
        for r in range(1, world):  # every member gets the same bits
            a, b = results[0][key], results[r][key]
            if key in ("all_to_all_single", "all_to_all_uneven", "all_to_all", "reduce_scatter_tensor",
                       "reduce_scatter_max", "premul_reduce_scatter", "scatter", "recv"):
                continue  # per-rank results
            if isinstance(a, list):
                assert all(torch.equal(u, v) for u, v in zip(a, b)), key
            elif isinstance(a, torch.Tensor):
                assert torch.equal(a, b), key

    for dtype in (torch.float32, torch.bfloat16):
        parts = [x["float"].to(dtype) for x in xs]
        stacked = torch.stack([p.double() for p in parts])
        refs = {"SUM": stacked.sum(0), "AVG": stacked.mean(0), "PRODUCT": stacked.prod(0),
                "MIN": stacked.min(0).values, "MAX": stacked.max(0).values}
        for op in _FLOAT_OPS:
            got = results[0][("all_reduce", str(dtype), op)]
            assert got.dtype == dtype
            if dtype == torch.float32:
                torch.testing.assert_close(got.double(), refs[op], rtol=1e-6, atol=1e-6)
            else:
                # fp32 accumulation in rank order, one rounding to bf16 (the documented order)
                ref = _rounded_sum(parts, dtype) if op == "SUM" else refs[op].to(dtype)
                torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)
                if op == "SUM":
                    assert torch.equal(got, ref)
    ints = torch.stack([x["int"].long() for x in xs])
    int_refs = {"SUM": ints.sum(0), "PRODUCT": ints.prod(0), "MIN": ints.min(0).values, "MAX": ints.max(0).values,
                "BAND": ints[0] & ints[1] & ints[2] & ints[3], "BOR": ints[0] | ints[1] | ints[2] | ints[3],
                "BXOR": ints[0] ^ ints[1] ^ ints[2] ^ ints[3]}
    for op in _INT_OPS:
        assert torch.equal(results[0][("all_reduce", "int32", op)], int_refs[op].to(torch.int32)), op
    torch.testing.assert_close(results[0]["all_reduce_cpu"], sum(x["float"] for x in xs))
    torch.testing.assert_close(results[0]["premul_sum"], sum(0.25 * x["block"] for x in xs), rtol=1e-6, atol=1e-6)

    torch.testing.assert_close(results[0]["all_gather_into_tensor"], torch.cat([x["block"][:8] for x in xs]))
    for r in range(world):
        torch.testing.assert_close(results[0]["all_gather"][r], xs[r]["block"][:8])
    blocks = torch.stack([x["block"] for x in xs])
    for r, res in enumerate(results):
        torch.testing.assert_close(res["reduce_scatter_tensor"], blocks.sum(0).chunk(world)[r])
        torch.testing.assert_close(res["reduce_scatter_max"], blocks.max(0).values.chunk(world)[r])
        torch.testing.assert_close(res["premul_reduce_scatter"], (0.5 * blocks).sum(0).chunk(world)[r])
        torch.testing.assert_close(res["all_to_all_single"], torch.cat([x["block"].chunk(world)[r] for x in xs]))
        for j in range(world):
            torch.testing.assert_close(res["all_to_all"][j], xs[j]["block"].chunk(world)[r])
        pieces = []
        for j in range(world):
            splits = [j + k + 1 for k in range(world)]
            begin = sum(splits[:r])
            pieces.append(torch.arange(sum(splits), dtype=torch.float32)[begin:begin + splits[r]] + 100 * j)
        torch.testing.assert_close(res["all_to_all_uneven"], torch.cat(pieces))
        torch.testing.assert_close(res["broadcast"], xs[world - 2]["float"])
        torch.testing.assert_close(res["scatter"], xs[world - 1]["block"].chunk(world)[r])
        torch.testing.assert_close(res["recv"], xs[(r - 1) % world]["float"])
        assert res["async_completed"]
    torch.testing.assert_close(results[1]["reduce"], sum(x["float"] for x in xs), rtol=1e-6, atol=1e-6)
    assert sorted(results[0]["anysource"]) == [1, 2, 3]
    for src, got in results[0]["anysource"].items():
        torch.testing.assert_close(got, xs[src]["float"])
    src_a, first, src_b, second = results[0]["anysource_then_named"]
    assert (src_a, src_b) == (1, 1) and torch.equal(first, torch.full((5,), 1.0)) and \
        torch.equal(second, torch.full((5,), 2.0))
    for r in range(world):
        torch.testing.assert_close(results[0]["gather"][r], xs[r]["block"][:8])


# --- time ------------------------------------------------------------------------------------------

def _timing_body(rank, world):
    trnsim.reset_simulated_time()
    a = torch.randn(256, 256, device="neuron") / 16
    if rank == 1:  # the straggler
        for _ in range(4):
            a = a @ a
    t = torch.ones(1 << 18, device="neuron")  # 1 MiB
    arrive = trnsim.simulated_ns()
    work = dist.all_reduce(t, async_op=True)
    after_issue = trnsim.simulated_ns()
    b = a @ a  # does not touch t: runs beside the all-reduce
    after_compute = trnsim.simulated_ns()
    work.wait()
    after_wait = trnsim.simulated_ns()
    # A second one, never waited for: the kernel that reads its result waits for it.
    u = torch.ones(1 << 18, device="neuron")
    dist.all_reduce(u, async_op=True)
    before_read = trnsim.simulated_ns()
    doubled = u * 2
    # Issued on a side stream with the op that reads its result: that op waits for it there, and the default
    # stream's later matmul runs on the core meanwhile (before it), as FSDP2's reduce-scatter stream does.
    w = torch.ones(1 << 24, device="neuron")  # 64 MiB: in flight longer than the matmul takes
    side = torch.neuron.Stream()
    side.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(side):
        dist.all_reduce(w, async_op=True)
        tripled = w * 3
    default_before = trnsim.simulated_ns()
    e = a @ a
    log = trnsim.op_log()
    # The profiler's trace: the collective on the device's "collectives" track with its links, the wait apart.
    import json
    import tempfile
    with trnsim.profile() as prof:
        v = torch.ones(1 << 18, device="neuron")
        dist.all_reduce(v, async_op=True).wait()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_trace(path)
    with open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    collective_slices = [e for e in events if e.get("ph") == "X" and tracks.get((e["pid"], e["tid"])) == "collectives"]
    wait_tracks = sorted({n for n in tracks.values() if n.startswith("waits")})
    link_counters = [e for e in events if e.get("ph") == "C" and e["name"].startswith("link ")]
    return {"link_counters": link_counters, "arrive": arrive, "after_issue": after_issue, "after_compute": after_compute, "after_wait": after_wait,
            "before_read": before_read, "value": t.cpu()[0].item(), "doubled": doubled.cpu()[0].item(),
            "tripled": tripled.cpu()[0].item(), "default_before": default_before,
            "log": log, "b": float(b.cpu().sum()), "e": float(e.cpu().sum()),
            "collective_slices": collective_slices, "wait_tracks": wait_tracks}


def test_collective_time_starts_at_the_last_arrival_and_overlaps_compute(tmp_path):
    world = 2
    results = _run_ranks(tmp_path, world, _timing_body)
    model = _C.CollectiveSystem("single-chip", _C.systems()["logical_cores_per_chip"])
    latency = model.run("all_reduce", 1 << 20, [0, 1], 0.0)["latency_ns"]
    assert latency > 0
    start = max(r["arrive"] for r in results)
    assert results[1]["arrive"] > results[0]["arrive"]  # rank 1 straggles
    for res in results:
        assert res["value"] == 2.0 and res["doubled"] == 4.0
        collectives = [r for r in res["log"] if r["kind"] == "collective"]
        assert [c["op"] for c in collectives] == ["all_reduce", "all_reduce", "all_reduce"]
        first = collectives[0]
        assert first["start_ns"] == pytest.approx(start, abs=1e-6)
        assert first["ns"] == pytest.approx(latency, rel=1e-9)
        assert first["bytes"] == 1 << 20
        assert res["after_issue"] == res["arrive"]  # the clock does not stop at the call
        end = start + latency
        assert res["after_wait"] == pytest.approx(max(res["after_compute"], end), abs=1e-6)
        waits = [r for r in res["log"] if r["kind"] == "wait"]
        if end > res["after_compute"]:
            assert waits[0]["op"] == "wait all_reduce"
            assert waits[0]["ns"] == pytest.approx(end - res["after_compute"], abs=1e-6)
        # the multiply reading the unwaited result starts at that collective's end
        second = collectives[1]
        kernels = [r for r in res["log"] if r["kind"] == "kernel"]
        mul = [k for k in kernels if k["start_ns"] >= res["before_read"] - 1e-6 and k["op"].startswith("mul")][0]
        assert mul["start_ns"] == pytest.approx(max(res["before_read"], second["start_ns"] + second["ns"]), abs=1e-6)
        # the side stream's multiply at its collective's end; the later matmul of the default stream before it
        assert res["tripled"] == 6.0
        third = collectives[2]
        side_mul, matmul = kernels[-2], kernels[-1]
        assert side_mul["start_ns"] == pytest.approx(third["start_ns"] + third["ns"], abs=1e-6)
        assert matmul["start_ns"] == pytest.approx(res["default_before"], abs=1e-6)
        assert matmul["start_ns"] + matmul["ns"] <= side_mul["start_ns"] + 1e-6
    for res in results:
        (slice_,) = res["collective_slices"]
        assert slice_["name"] == "all_reduce"
        assert slice_["args"]["busiest_link"] == "chip0 HBM (on-chip)"
        assert 0 < float(slice_["args"]["busiest_link_utilisation"]) <= 1
        assert slice_["args"]["group"] == "[0, 1]"
        # The links of the rank's chip as GB/s counters over the collective's span: the model's bytes on each
        # link over the slice's duration (longer than alone: the 64 MiB all-reduce before it shares the chip's
        # path), back to zero at its end.
        traffic = dict(model.run("all_reduce", 1 << 20, [0, 1], 0.0)["link_bytes"])
        span_ns = slice_["dur"] * 1e3
        assert traffic and all(name.startswith("chip0 ") for name in traffic)
        counters = {}
        for e in res["link_counters"]:
            counters.setdefault(e["name"], []).append((e["ts"], e["args"]["value"]))
        assert sorted(counters) == sorted(f"link {name} GB/s" for name in traffic)
        for name, bytes_ in traffic.items():
            (start, rate), (end, zero) = sorted(counters[f"link {name} GB/s"])
            # (the trace prints times to the nanosecond: the slice's duration is rounded)
            assert rate == pytest.approx(bytes_ / span_ns, rel=1e-4)
            assert zero == 0 and (end - start) * 1e3 == pytest.approx(span_ns, rel=1e-4)  # ts in us
            assert start == pytest.approx(slice_["ts"], abs=1e-3)
    assert any(res["wait_tracks"] == ["waits (default stream)"] for res in results)
    # The early rank waits for the straggler: its exposed communication is longer.
    exposed = [sum(r["ns"] for r in res["log"] if r["kind"] == "wait") for res in results]
    assert exposed[0] > exposed[1]


# --- DDP against one process -----------------------------------------------------------------------

def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def _train(model, x, y, steps):
    """SGD on the MSE of model(x) against y: the losses of each step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _shard(rank, world):
    """This rank's equal share of the batch, on the device."""
    x, y = _batch()
    per = x.shape[0] // world
    return x[rank * per:(rank + 1) * per].to("neuron"), y[rank * per:(rank + 1) * per].to("neuron")


def _ddp_body(rank, world, steps, dtype=torch.float32):
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(_mlp().to("neuron", dtype), bucket_cap_mb=0.001)  # several buckets
    x, y = _shard(rank, world)
    with trnsim.profile(trace=False) as prof:
        losses = _train(model, x.to(dtype), y.to(dtype), steps)
    return {"losses": losses, "params": [p.detach().cpu() for p in model.parameters()], "totals": prof.totals()}


def _assert_trains_as_one_process(results, steps, data_parallel, dtype=torch.float32):
    """Every rank's parameters as one process training on the whole batch (on the CPU, in `dtype`; fp32 to
    1e-5, bf16 to bf16's tolerance); the losses: their mean over the ranks' shards (data parallel) or each
    rank's own (tensor parallel: every rank sees the whole batch)."""
    model, losses = _reference_training(steps, dtype)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for res in results:
        for got, ref, first in zip(res["params"], model.parameters(), results[0]["params"]):
            torch.testing.assert_close(got, ref.detach(), **tol)
            assert torch.equal(got, first)  # the ranks hold the same bits
    for step in range(steps):
        got = [r["losses"][step] for r in results]
        for loss in ([sum(got) / len(got)] if data_parallel else got):
            assert loss == pytest.approx(losses[step], rel=tol["rtol"], abs=tol["atol"])


def test_ddp_training_matches_one_process(tmp_path):
    world, steps = 2, 5
    results = _run_ranks(tmp_path, world, _ddp_body, steps)
    _assert_trains_as_one_process(results, steps, data_parallel=True)
    for res in results:
        assert res["totals"]["collectives"] >= steps  # the gradient buckets' all-reduces
        assert res["totals"]["collective_ns"] > 0


def _reference_training(steps, dtype=torch.float32):
    model = _mlp().to(dtype)
    x, y = _batch()
    return model, _train(model, x.to(dtype), y.to(dtype), steps)


def _fsdp_body(rank, world, steps):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("neuron", (world,))
    model = _mlp().to("neuron")
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    with trnsim.profile(trace=False) as prof:
        losses = _train(model, *_shard(rank, world), steps)
    kinds = sorted({r["op"] for r in prof.records if r["kind"] == "collective"})
    return {"losses": losses, "params": [p.full_tensor().cpu() for p in model.parameters()], "kinds": kinds}


def test_ddp_bf16_training_matches_one_process_at_bf16_tolerance(tmp_path):
    world, steps = 2, 5
    results = _run_ranks(tmp_path, world, _ddp_body, steps, torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in results[0]["params"])
    _assert_trains_as_one_process(results, steps, data_parallel=True, dtype=torch.bfloat16)


def test_fsdp2_training_matches_one_process(tmp_path):
    world, steps = 2, 5
    results = _run_ranks(tmp_path, world, _fsdp_body, steps)
    _assert_trains_as_one_process(results, steps, data_parallel=True)
    for res in results:
        assert "all_gather" in res["kinds"] and "reduce_scatter" in res["kinds"]


def _tp_body(rank, world, steps):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("neuron", (world,))
    model = parallelize_module(_mlp().to("neuron"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x, y = _batch()
    losses = _train(model, x.to("neuron"), y.to("neuron"), steps)  # every TP rank sees the whole batch
    return {"losses": losses, "params": [p.full_tensor().cpu() for p in model.parameters()]}


def test_tensor_parallel_training_matches_one_process(tmp_path):
    world, steps = 2, 5
    _assert_trains_as_one_process(_run_ranks(tmp_path, world, _tp_body, steps), steps, data_parallel=False)


def _dtensor_random_body(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("neuron", (world,))
    out = {}
    for attempt in range(2):  # the same seed twice: the same numbers
        torch.manual_seed(5)
        sharded = distribute_tensor(torch.zeros(8, 16, device="neuron"), mesh, [Shard(0)])
        torch.nn.init.uniform_(sharded)  # a DTensor random op: DTensor's RNG tracker sets each shard's offset
        replicated = distribute_tensor(torch.zeros(4, 6, device="neuron"), mesh, [Replicate()])
        torch.nn.init.normal_(replicated)
        # A model parallelised after construction on the device, initialised again through DTensor, with dropout.
        torch.manual_seed(6)
        model = parallelize_module(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.5),
                                                       torch.nn.Linear(32, 4)).to("neuron"),
                                   mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        torch.nn.init.normal_(model[0].weight)
        y = model(torch.ones(3, 16, device="neuron"))
        out[attempt] = {"local": sharded.to_local().cpu(), "full": sharded.full_tensor().cpu(),
                        "replicated": replicated.to_local().cpu(), "weight": model[0].weight.full_tensor().cpu(),
                        "y": y.cpu(), "state": torch.neuron.get_rng_state()}
    return out


def test_dtensor_random_ops_shard_the_stream(tmp_path):
    world = 2
    results = _run_ranks(tmp_path, world, _dtensor_random_body)
    for attempt in (0, 1):
        r0, r1 = results[0][attempt], results[1][attempt]
        # Each shard draws at its own offset: the shards differ, every rank sees the same whole tensor.
        assert not torch.equal(r0["local"], r1["local"])
        assert torch.equal(r0["full"], r1["full"]) and torch.equal(r0["full"][:4], r0["local"])
        assert r0["full"].min() >= 0 and r0["full"].max() < 1 and r0["full"].unique().numel() == 128
        assert torch.equal(r0["replicated"], r1["replicated"])
        assert torch.equal(r0["weight"], r1["weight"]) and torch.equal(r0["y"], r1["y"])
        assert torch.equal(r0["state"], r1["state"])  # the offsets move together
        for key in r0:
            assert torch.equal(r0[key], results[0][1 - attempt][key]), key


# --- one process for the whole world ---------------------------------------------------------------

def _step_time_body(rank, world, steps):
    """A data-parallel step, timing-only: per-step simulated times of this rank."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512))
                .to("neuron"), bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 512, device="neuron")
    times = []
    for _ in range(steps):
        begin = trnsim.simulated_ns()
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        dist.barrier()
        times.append(trnsim.simulated_ns() - begin)
    return times


def _simulated_world_entry(world, steps, out_path):
    import trnsim
    trnsim.simulate_world(world)
    try:
        times = _step_time_body(0, world, steps)
    finally:
        dist.destroy_process_group()
    with open(out_path, "wb") as f:
        pickle.dump(times, f)


@pytest.mark.parametrize("world", [4, 8])
def test_simulate_world_times_a_step_as_real_ranks_do(tmp_path, world):
    steps = 3
    real = _run_ranks(tmp_path, world, _step_time_body, steps, env={"TRNSIM_VALUES": "0"})
    simulated = _in_fresh_process(tmp_path, _simulated_world_entry, world, steps)
    # Steps after the first (warm program cache, same programs): within 1 % of rank 0's.
    for step in range(1, steps):
        assert simulated[step] == pytest.approx(real[0][step], rel=0.01)
        assert simulated[step] > 0


def test_simulate_world_needs_a_system_that_holds_it(tmp_path):
    info = _C.systems()
    biggest = max(info["systems"].values()) * info["logical_cores_per_chip"]
    code = ("import trnsim, sys\n"
            f"try:\n    trnsim.simulate_world({biggest + 1})\n"
            "except ValueError as e:\n    print('ERR', e)\n")
    import subprocess
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert "ERR" in out.stdout and "do not fit any system" in out.stdout, out.stdout + out.stderr


def test_fsdp_step_example_runs_reduced():
    """examples/distributed/fsdp_step.py (the seeds' runs) at a reduced size: FSDP2 x TP on 8 ranks of a
    16-chip trn2 system, in one process."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, os.path.join(root, "examples", "distributed", "fsdp_step.py"),
                          "--model", "qwen3-32b", "--config", "trn2", "--world", "8", "--tp", "2", "--layers", "1",
                          "--seq", "256"], capture_output=True, text=True, env=dict(os.environ), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "FSDP2 over 4 ranks x TP 2 = 8 logical cores of trn2 system trn2-48xlarge" in out.stdout
    step_ms = float(out.stdout.split("  step ")[1].split(" ms")[0])
    assert step_ms > 0
    assert "exposed" in out.stdout and "HBM per rank" in out.stdout


_TORCHRUN_SCRIPT = """
import torch, torch.distributed as dist, trnsim
dist.init_process_group()  # no backend named: the accelerator's, neuron's
r = dist.get_rank()
t = torch.full((8,), float(r + 1), device="neuron")
dist.all_reduce(t)
print(f"rank {r} of {dist.get_world_size()}: {type(dist.group.WORLD).__name__} {t[0].item()}", flush=True)
dist.destroy_process_group()
"""


def test_torchrun_with_the_default_backend(tmp_path):
    import shutil
    import subprocess
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed next to this python")
    script = tmp_path / "script.py"
    script.write_text(_TORCHRUN_SCRIPT)
    out = subprocess.run([torchrun, "--nproc-per-node", "2", "--master-port", str(_free_port()), str(script)],
                         capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for r in range(2):
        assert f"rank {r} of 2: NeuronProcessGroup 3.0" in out.stdout


def _ddp_overlap_entry(out_path):
    import trnsim
    from torch.nn.parallel import DistributedDataParallel as DDP
    trnsim.simulate_world(8)
    try:
        torch.manual_seed(0)
        layers = []
        for _ in range(6):
            layers += [torch.nn.Linear(2048, 2048), torch.nn.GELU()]
        model = DDP(torch.nn.Sequential(*layers).to("neuron"), bucket_cap_mb=16)
        x = torch.randn(512, 2048, device="neuron")
        for _ in range(2):
            with trnsim.profile(trace=False) as prof:
                model(x).sum().backward()
                torch.neuron.synchronize()
        totals = prof.totals()
        records = [r for r in prof.records if r["kind"] in ("collective", "wait")]
    finally:
        dist.destroy_process_group()
    with open(out_path, "wb") as f:
        pickle.dump((totals, records), f)


def test_ddp_gradient_all_reduces_overlap_the_backward(tmp_path):
    """DDP's bucketed all-reduces run beside the rest of the backward: only the last bucket's tail is exposed."""
    totals, records = _in_fresh_process(tmp_path, _ddp_overlap_entry)
    all_reduces = [r for r in records if r["kind"] == "collective" and r["op"] == "all_reduce"]
    assert len(all_reduces) >= 3  # several buckets
    assert totals["collective_ns"] > 10 * totals["exposed_communication_ns"] > 0
    # each bucket's all-reduce starts before the previous one would have been waited for: they are in flight
    # while the backward goes on (the clock passed their start without a wait record in between)
    waits = [r for r in records if r["kind"] == "wait" and r["op"] == "wait all_reduce"]
    assert len(waits) == 1 and waits[0]["start_ns"] > all_reduces[-1]["start_ns"]



def _family_entry(out_path):
    import trnsim
    from trnsim import _C
    from trnsim.distributed import _translates
    trnsim.simulate_world(8, system="trn2-48xlarge")
    try:
        pair = dist.new_group([0, 1])  # with [2, 3], [4, 5], [6, 7]: two of them on each chip
        t = torch.empty(1 << 24, device="neuron")  # 64 MiB
        dist.all_reduce(t, group=pair)
        contended = [r for r in trnsim.op_log() if r["kind"] == "collective"][-1]["ns"]
        alone = _C.CollectiveSystem("trn2-48xlarge", _C.systems()["logical_cores_per_chip"]).run(
            "all_reduce", 1 << 26, [0, 1], 0.0)["latency_ns"]
        family = _translates([0, 1], 8)
    finally:
        dist.destroy_process_group()
    with open(out_path, "wb") as f:
        pickle.dump((contended, alone, family), f)


def test_a_groups_translates_share_its_links_in_a_symmetric_world(tmp_path):
    """Every TP pair of a symmetric world all-reduces at once: the two pairs of a chip share its HBM path."""
    contended, alone, family = _in_fresh_process(tmp_path, _family_entry)
    assert family == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert contended > 1.5 * alone
