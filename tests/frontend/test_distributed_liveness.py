"""Dead peers found fast (issue 42, D1): a rank of the ``neuron`` process group that exits makes the others fail
within seconds with an error naming it (not after the group's timeout); the group's shared segment
(/dev/shm/trnsim-*) does not outlive a rank that dies or is terminated; the store host's death says so.

Ranks are plain spawned processes (torch.multiprocessing.spawn would terminate the survivors itself); each survivor
reports what it raised and how long after its call, and every test is bounded: a survivor still waiting after
_BOUND_S is killed and the test fails."""
import os
import pickle
import signal
import socket
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import trnsim  # noqa: F401  registers the backend

pytestmark = pytest.mark.skipif(not dist.is_available() or not os.path.isdir("/dev/shm"),
                                reason="needs torch.distributed and /dev/shm")

_GROUP_TIMEOUT_S = 120  # far beyond the bounds below: a survivor that waits it out fails the test
_BOUND_S = 10           # what "within seconds" means here


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_entry(rank, world, port, out_dir, body):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import trnsim  # noqa: F401
    dist.init_process_group("neuron", rank=rank, world_size=world, timeout=timedelta(seconds=_GROUP_TIMEOUT_S))
    group = dist.distributed_c10d._get_default_group()
    with open(os.path.join(out_dir, f"segment{rank}"), "w") as f:
        f.write(group._payloads._dir or "")  # (a private name: the test runs on the code before the fix too)
    dist.barrier()
    started = time.monotonic()
    try:
        body(rank, out_dir)
        outcome = ("returned", None, None)
    except Exception as error:  # noqa: BLE001  what the survivor raised is the result
        outcome = (type(error).__name__, str(error), time.monotonic() - started)
    with open(os.path.join(out_dir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(outcome, f)
    if outcome[0] == "returned":
        dist.destroy_process_group()  # and the process exits normally: rank 0 removes the segment (atexit)


def _start_ranks(tmp_path, world, body):
    out_dir = str(tmp_path)
    os.makedirs(out_dir, exist_ok=True)
    port = _free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank_entry, args=(r, world, port, out_dir, body)) for r in range(world)]
    for p in procs:
        p.start()
    return procs, out_dir


def _outcome(procs, out_dir, rank, bound_s):
    procs[rank].join(timeout=bound_s)
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    path = os.path.join(out_dir, f"{rank}.pkl")
    assert os.path.exists(path), f"rank {rank} was still waiting after {bound_s} s (or died)"
    with open(path, "rb") as f:
        return pickle.load(f)


def _segment(out_dir, rank=0):
    with open(os.path.join(out_dir, f"segment{rank}")) as f:
        return f.read()


def _exits_before_all_reduce(rank, out_dir):
    if rank == 1:
        os._exit(3)  # no atexit, no cleanup: as a rank killed or crashing
    time.sleep(0.5)
    dist.all_reduce(torch.ones(4, device="neuron"))


def test_a_rank_that_exits_fails_the_others_within_seconds(tmp_path):
    procs, out_dir = _start_ranks(tmp_path, 2, _exits_before_all_reduce)
    kind, message, elapsed_s = _outcome(procs, out_dir, 0, _BOUND_S + 30)  # + spawn and init
    assert kind == "RuntimeError", (kind, message)
    assert "rank 1 of group" in message and "has exited" in message and "all_reduce #" in message
    assert f"pid {procs[1].pid}" in message
    assert elapsed_s < _BOUND_S
    # The survivor removed the group's segment (the rank that died could not).
    segment = _segment(out_dir)
    assert segment.startswith("/dev/shm/trnsim-") and not os.path.exists(segment)


def _store_host_sends_then_exits(rank, out_dir):
    if rank == 0:
        dist.send(torch.arange(4.0, device="neuron"), 1)
        import atexit
        atexit._run_exitfuncs()  # a normal exit: rank 0 removes the segment, then its process (the store) ends
        os._exit(0)
    time.sleep(1.0)
    dist.recv(torch.empty(4, device="neuron"), 0)


def test_the_store_hosts_death_says_so(tmp_path):
    """Before: a bare FileNotFoundError on a /dev/shm path, or the store's connection error."""
    procs, out_dir = _start_ranks(tmp_path, 2, _store_host_sends_then_exits)
    kind, message, elapsed_s = _outcome(procs, out_dir, 1, _BOUND_S + 30)
    assert kind == "RuntimeError", (kind, message)
    assert "rank 0 of group" in message and "has exited" in message and "hosted the process group's store" in message
    assert elapsed_s < _BOUND_S


def _waits(rank, out_dir):
    if rank == 0:
        dist.all_reduce(torch.ones(4, device="neuron"))
    time.sleep(_GROUP_TIMEOUT_S)


def test_terminated_ranks_remove_the_segment(tmp_path):
    """torchrun terminates (SIGTERM) the other ranks when one fails; SIGTERM's default action skips atexit."""
    procs, out_dir = _start_ranks(tmp_path, 2, _waits)
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(out_dir, f"segment{r}")) for r in range(2)):
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.1)
    segment = _segment(out_dir)
    assert os.path.isdir(segment)
    time.sleep(1.0)  # both past the barrier: rank 0 in its all_reduce, rank 1 asleep
    for p in procs:
        os.kill(p.pid, signal.SIGTERM)
    for p in procs:
        p.join(timeout=_BOUND_S)
        if p.is_alive():
            p.kill()
            p.join()
    assert [p.exitcode for p in procs] == [-signal.SIGTERM] * 2
    assert not os.path.exists(segment)


def _heartbeat_stops(rank, out_dir):
    group = dist.distributed_c10d._get_default_group()
    if rank == 1:
        group._payloads._heartbeat.stop()  # as a process in another pid namespace that froze or died
        time.sleep(_GROUP_TIMEOUT_S)
    # Rank 1 seen as another pid namespace's process: only its heartbeat tells whether it is there.
    group._payloads.identities[1] = dict(group._payloads.identities[1], pid_namespace="pid:[elsewhere]")
    dist.all_reduce(torch.ones(4, device="neuron"))


def test_a_stopped_heartbeat_fails_the_others(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_DIST_HEARTBEAT_TIMEOUT_S", "2")
    procs, out_dir = _start_ranks(tmp_path, 2, _heartbeat_stops)
    kind, message, elapsed_s = _outcome(procs, out_dir, 0, _BOUND_S + 30)
    assert kind == "RuntimeError", (kind, message)
    assert "rank 1 of group" in message and "stopped its heartbeat" in message
    assert 1.5 < elapsed_s < 2 + 1.5  # the timeout, and a period of the heartbeat and of the look


def _returns(rank, out_dir):
    pass


def test_segments_of_killed_groups_are_removed_by_the_next_group(tmp_path):
    """SIGKILL runs no handler: the next group's rank 0 removes a segment whose members are all gone."""
    procs, out_dir = _start_ranks(tmp_path / "killed", 2, _waits)
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(out_dir, f"segment{r}")) for r in range(2)):
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.1)
    killed_segment = _segment(out_dir)
    time.sleep(1.0)
    for p in procs:
        p.kill()
        p.join()
    assert os.path.isdir(killed_segment)
    procs, out_dir = _start_ranks(tmp_path / "next", 2, _returns)
    assert _outcome(procs, out_dir, 0, 60)[0] == "returned"
    assert not os.path.exists(killed_segment)
