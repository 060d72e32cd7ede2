"""The NKI tutorial's matmul in four stages (``matmul_kernels.py``), on trnsim:

    python -m trnsim.nki examples/nki/matmul.py [--target trn1] [--full]

Each stage is checked against NumPy on a small problem ([2048, 1024] @ [1024, 1024]), then timed
with ``nki.benchmark`` on the tutorial's problem ([4096, 8192] @ [8192, 8192] bf16) when ``--full``
is given (timing only: values at that size take the interpreter minutes). The published trn1
latencies (NKI tutorial, trainium.md V1) are printed beside the simulated ones.
"""
import argparse
import os
import sys
import time

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PUBLISHED_TRN1_MS = {"tiled": 51.80, "hoisted": 42.96, "blocked": 22.07, "optimized": 6.97}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="trn1", help="trn1 (the tutorial's), trn2 or trn3")
    parser.add_argument("--full", action="store_true", help="also time the tutorial's 4096x8192x8192")
    parser.add_argument("--stage", action="append", help="only these stages")
    args = parser.parse_args()
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = args.target

    from neuronxcc import nki
    import matmul_kernels

    rng = np.random.default_rng(0)
    M, K, N = 2048, 1024, 1024
    lhsT = rng.standard_normal((K, M), dtype=np.float32).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((K, N), dtype=np.float32).astype(ml_dtypes.bfloat16)
    want = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    status = 0
    for name, kernel in matmul_kernels.STAGES:
        if args.stage and name not in args.stage:
            continue
        got = nki.simulate_kernel(kernel, lhsT, rhs).astype(np.float32)
        err = np.abs(got - want).max() / np.abs(want).max()
        ok = err < 2e-2
        status |= not ok
        print(f"{name:>9}: values {'ok' if ok else 'WRONG'} (max error {err:.2e} of max |C|) on "
              f"[{M}, {K}] @ [{K}, {N}], {kernel.last_latency_ns / 1e3:.1f} us on {args.target}")
    if args.full:
        M, K, N = 4096, 8192, 8192
        lhsT = np.zeros((K, M), dtype=ml_dtypes.bfloat16)
        rhs = np.zeros((K, N), dtype=ml_dtypes.bfloat16)
        for name, kernel in matmul_kernels.STAGES:
            if args.stage and name not in args.stage:
                continue
            bench = nki.benchmark(kernel, warmup=2, iters=10, timing_only=True)
            start = time.perf_counter()
            bench(lhsT, rhs)
            host_s = time.perf_counter() - start
            us = bench.benchmark_result.nc_latency.get_latency_percentile(50)
            s = bench.last_summary
            published = PUBLISHED_TRN1_MS[name] if args.target == "trn1" else None
            print(f"{name:>9}: {us / 1e3:8.2f} ms simulated"
                  + (f" (published trn1 {published:.2f} ms)" if published else "")
                  + f", HFU {s.hfu:.1%}, MBU {s.mbu:.1%}, {sum(s.instructions.values())} instructions,"
                  f" {host_s:.2f} s host")
    return status


if __name__ == "__main__":
    sys.exit(main())
