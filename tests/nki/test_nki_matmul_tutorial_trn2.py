"""The trn2 kernel-optimization tutorial's four matmul stages (examples/nki/matmul_kernels_trn2.py, the
current ``nki`` API; fidelity case V2 runs them at 4096 x 8192 x 8192): each computes lhsT.T @ rhs on a
small shape, in fp32 and bf16, with the result dtype its stage declares; and the blocked stage's operand
blocks do not fit trn2's SBUF in fp32 at K = 6144 (the reason V2 runs it in bf16)."""
import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

import trnsim.nki

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "nki"))
import matmul_kernels_trn2 as mk  # noqa: E402

STAGES = dict(mk.STAGES)
# The result dtype each stage declares: the inputs' dtype or fp32.
RESULT = {"tiled": "input", "hoisted": "fp32", "blocked": "input", "optimized": "fp32"}
M, K, N = 256, 1024, 1024


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_stage_computes_the_product(stage, dtype, rng):
    dt = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    lhsT = rng.random((K, M), dtype=np.float32).astype(dt)
    rhs = rng.random((K, N), dtype=np.float32).astype(dt)
    expected = lhsT.astype(np.float32).T @ rhs.astype(np.float32)
    # M = 256 is 2 tiles: the optimized stage's M block is shrunk to fit it (its N and K blocks are the tutorial's).
    kwargs = {"TILES_IN_BLOCK_M": 2} if stage == "optimized" else {}
    out = STAGES[stage](lhsT, rhs, **kwargs)
    assert out.shape == (M, N)
    assert out.dtype == (np.dtype(dt) if RESULT[stage] == "input" else np.float32)
    # fp32 accumulates in PSUM; bf16 rounds the stored result (and the optimized stage's bf16 partial sums).
    tolerance = 1e-5 if dtype == "float32" else 1e-2
    error = np.abs(out.astype(np.float32) - expected).max() / np.abs(expected).max()
    assert error < tolerance, f"{stage} {dtype}: relative error {error:.2e}"
    assert STAGES[stage].last_latency_ns > 0


def test_blocked_fp32_overflows_sbuf():
    """2 A^T columns + 2 B columns over K = 6144 in fp32 are 240 KiB per partition, more than trn2's 224 KiB
    (bf16: 120 KiB, fits): with strict_allocation the [sbuf-capacity] error; by default the compiler's spills, which
    move its HBM traffic by exactly their bytes."""
    k = 6144
    lhsT, rhs = np.zeros((k, 256), np.float32), np.zeros((k, 1024), np.float32)
    strict = trnsim.nki.jit(mk.matmul_blocked.fn, strict_allocation=True)
    bench = trnsim.nki.benchmark(strict, warmup=1, iters=1, timing_only=True)
    with pytest.raises(trnsim.nki.KernelError, match=r"SBUF overflow.*\[sbuf-capacity\]"):
        bench(lhsT, rhs)
    spilling = trnsim.nki.benchmark(mk.matmul_blocked, warmup=1, iters=1, timing_only=True)
    spilling(lhsT, rhs)
    assert "spill" in spilling.last_program
    spilled = [t.trace for t in spilling._cache.values() if getattr(t.trace, "spill_bytes", 0)]
    assert len(spilled) == 1   # the fp32 trace (the kernel's cache also holds other tests' shapes)
    spill_bytes = spilled[0].spill_bytes
    fp32_bytes = spilling.last_summary.hbm_bytes
    bench(lhsT.astype(ml_dtypes.bfloat16), rhs.astype(ml_dtypes.bfloat16))
    assert bench.last_latency_ns > 0
    # The same loads and stores at twice the bytes, plus exactly the spills' stores and reloads.
    assert spill_bytes > 0
    assert fp32_bytes == 2 * bench.last_summary.hbm_bytes + spill_bytes
