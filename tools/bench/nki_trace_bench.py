#!/usr/bin/env python3
"""Host speed of the NKI front-end (a benchmark, not a test): trace + timing-only simulation of the
tutorial matmul stages (examples/nki/matmul_kernels.py) at the tutorial's size on trn1, beside the
baseline measured in the same run: `trnsim.run_program` of the same traced program (parse, legality,
timing model), so the ratio is the tracer's own cost.

    PYTHONPATH=build/python .venv/bin/python tools/bench/nki_trace_bench.py [--stage tiled] [--m 4096]
"""
import argparse
import inspect
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "nki"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", action="append")
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--config", default="trn1")
    args = parser.parse_args()
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = args.config
    import ml_dtypes
    import numpy as np
    import trnsim
    import trnsim.nki
    trnsim.nki.install()
    import matmul_kernels
    lhsT = np.zeros((args.k, args.m), ml_dtypes.bfloat16)
    rhs = np.zeros((args.k, args.n), ml_dtypes.bfloat16)
    print(f"{'stage':>10} {'instructions':>12} {'trace s':>8} {'simulate s':>10} {'total s':>8} "
          f"{'run_program s':>13} {'total/run':>9} {'simulated ms':>12}")
    for name, kernel in matmul_kernels.STAGES:
        if args.stage and name not in args.stage:
            continue
        bound = inspect.signature(kernel.fn).bind(lhsT, rhs)
        bound.apply_defaults()
        t0 = time.perf_counter()
        traced = kernel._traced(bound, {"lhsT": (lhsT, lhsT), "rhs": (rhs, rhs)}, args.config, [], (), ())
        t1 = time.perf_counter()
        result = trnsim.run_program(traced.tasm, config=args.config, timing_only=True)
        t2 = time.perf_counter()
        again = trnsim.run_program(traced.tasm, config=args.config, timing_only=True)   # the baseline
        t3 = time.perf_counter()
        assert again.latency_ns == result.latency_ns
        count = sum(result.stats["instructions"].values())
        print(f"{name:>10} {count:>12} {t1 - t0:>8.2f} {t2 - t1:>10.2f} {t2 - t0:>8.2f} {t3 - t2:>13.2f} "
              f"{(t2 - t0) / (t3 - t2):>9.1f} {result.latency_ns / 1e6:>12.2f}")
        kernel._cache.clear()


if __name__ == "__main__":
    main()
