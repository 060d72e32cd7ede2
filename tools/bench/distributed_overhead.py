#!/usr/bin/env python3
"""Host cost of trnsim.distributed's collectives: wall microseconds per all_reduce on real ranks (values
moved between processes) and in simulate_world (timing only), by size, with the simulated latency beside.

    PYTHONPATH=build/python python tools/bench/distributed_overhead.py [--ranks 2] [--iters 20]
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [4 << 10, 1 << 20, 64 << 20]


def _measure(iters):
    import trnsim
    rows = []
    for size in SIZES:
        t = torch.ones(size // 4, device="neuron")
        dist.all_reduce(t)  # warm: programs, payload files
        dist.barrier()
        begin = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        host_us = (time.perf_counter() - begin) / iters * 1e6
        latency = [r for r in trnsim.op_log() if r["kind"] == "collective"][-1]["ns"]
        rows.append((size, host_us, latency / 1e3))
    return rows


def _real_rank(rank, world, port, iters, queue):
    import trnsim  # noqa: F401
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("neuron", rank=rank, world_size=world)
    rows = _measure(iters)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        queue.put(rows)


def _simulated(world, iters, queue):
    import trnsim
    trnsim.simulate_world(world)
    queue.put(_measure(iters))
    dist.destroy_process_group()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args(argv)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=_real_rank, args=(r, args.ranks, port, args.iters, queue)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    real = queue.get()
    for p in procs:
        p.join()
    sim = ctx.Process(target=_simulated, args=(args.ranks, args.iters, queue))
    sim.start()
    simulated = queue.get()
    sim.join()
    print(f"all_reduce on {args.ranks} ranks (trn2, one chip), {args.iters} calls each")
    print(f"{'bytes':>10} {'real ranks us/call':>19} {'simulate_world us/call':>23} {'simulated latency us':>21}")
    for (size, real_us, lat), (_, sim_us, _) in zip(real, simulated):
        print(f"{size:>10} {real_us:>19.1f} {sim_us:>23.1f} {lat:>21.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
