#!/usr/bin/env python3
"""Benchmark (not a test): host time of ops on the simulated device with values, against PyTorch's own CPU kernels
for the same op and inputs, measured in the same run (issue 15, item 3).

    PYTHONPATH=build/python python tools/bench/device_ops.py [--repeat 5] [--ops add,gelu,...] [--json F]

For each op: the CPU time (torch on the host's threads), the device's first call (kernel build + the timing model
with values) and its warm calls (the program cache and the timing cache hit: the interpreter alone computes the
values), as the median of --repeat calls, and warm / CPU. Inputs are on the device before timing; the device runs
each op synchronously, so a call's wall time is its host cost. torch and trnsim use the same number of host threads
(--threads, default $TRNSIM_HOST_THREADS or the host's cores, at most 8).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import trnsim


def _ops(n):
    """name -> (make inputs on the CPU, the op). Shapes are what a model's layer moves (n x n fp32 by default)."""
    def x(*shape, dtype=torch.float32):
        return lambda: [torch.randn(*shape, dtype=dtype)]
    def xy(*shape):
        return lambda: [torch.randn(*shape), torch.randn(*shape)]
    return {
        "add_16x16": (xy(16, 16), lambda a, b: a + b),
        "add": (xy(n, n), lambda a, b: a + b),
        "mul": (xy(n, n), lambda a, b: a * b),
        "exp": (x(n, n), torch.exp),
        "gelu": (x(n, n), F.gelu),
        "gelu_tanh": (x(n, n), lambda a: F.gelu(a, approximate="tanh")),
        "tanh": (x(n, n), torch.tanh),
        "silu": (x(n, n), F.silu),
        "sum_rows": (x(n, n), lambda a: a.sum(dim=-1)),
        "softmax": (x(n, n), lambda a: torch.softmax(a, dim=-1)),
        "layer_norm": (x(n, n), lambda a: F.layer_norm(a, (a.shape[-1],))),
        "rms_norm": (x(n, n), lambda a: F.rms_norm(a, (a.shape[-1],))),
        "to_bf16": (x(n, n), lambda a: a.to(torch.bfloat16)),
        "bf16_to_fp32": (x(n, n, dtype=torch.bfloat16), lambda a: a.to(torch.float32)),
        "transpose": (x(n, n), lambda a: a.t().contiguous()),
        "matmul": (xy(n, n), torch.matmul),
    }


def _median_seconds(call, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--size", type=int, default=2048, help="n for the n x n operands (default 2048)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ops", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", default="", help="also write the rows as JSON here")
    args = parser.parse_args()
    threads = args.threads or int(os.environ.get("TRNSIM_HOST_THREADS", "0")) or min(os.cpu_count() or 1, 8)
    os.environ["TRNSIM_HOST_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    trnsim.set_config(args.config, values=True)
    ops = _ops(args.size)
    names = [o for o in args.ops.split(",") if o] or list(ops)
    unknown = [o for o in names if o not in ops]
    if unknown:
        parser.error(f"unknown ops {unknown}; known: {', '.join(ops)}")
    torch.manual_seed(0)
    print(f"{args.config}, {threads} host threads, n = {args.size}, median of {args.repeat}")
    print(f"{'op':14s} {'cpu ms':>9s} {'first ms':>9s} {'warm ms':>9s} {'warm/cpu':>9s}  max |diff|")
    rows = []
    for name in names:
        make, op = ops[name]
        cpu_inputs = make()
        dev_inputs = [t.to("neuron") for t in cpu_inputs]
        expected = op(*cpu_inputs)
        cpu_s = _median_seconds(lambda: op(*cpu_inputs), args.repeat)
        start = time.perf_counter()
        got = op(*dev_inputs)
        first_s = time.perf_counter() - start
        warm_s = _median_seconds(lambda: op(*dev_inputs), args.repeat)
        diff = (got.cpu().float() - expected.float()).abs().max().item()
        rows.append(dict(op=name, cpu_ms=cpu_s * 1e3, first_ms=first_s * 1e3, warm_ms=warm_s * 1e3,
                         warm_over_cpu=warm_s / cpu_s, max_abs_diff=diff))
        r = rows[-1]
        print(f"{name:14s} {r['cpu_ms']:9.3f} {r['first_ms']:9.3f} {r['warm_ms']:9.3f} {r['warm_over_cpu']:9.2f}  {diff:.3g}")
    stats = trnsim.timing_cache_stats()
    print(f"timing cache: {stats['hits']} hits, {stats['misses']} misses")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
