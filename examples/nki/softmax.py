"""Fused row softmax y = softmax(x, axis=1) over x [N, D] in the current NKI API, on trnsim:

    python -m trnsim.nki examples/nki/softmax.py [--target trn2] [--dtype bfloat16] [-N 1000] [-D 2048]

Two kernels, each tiled by 128 rows (the partition dim) with a shorter last tile when N is not a
multiple of 128:

- ``softmax_isa`` calls ``nki.isa`` directly, five instructions per tile besides the two DMAs:
  ``tensor_reduce`` max with ``negate=True`` (Vector) gives -max per row; ``activation`` exp with
  ``bias=-max`` and ``reduce_res`` (Scalar) gives exp(x - max) and its row sum in one pass;
  ``reciprocal`` (Vector) of the sum; ``tensor_scalar`` multiply (Vector) by it.
- ``softmax_nl`` does the same with ``nl.load`` / ``nl.softmax`` / ``nl.store``.

Each is checked against NumPy (max abs error; the rows sum to 1 so this is also relative) and
prints the simulated latency and the run summary (MFU / HFU / MBU, busy engines). Exit status 1
when a kernel's values are wrong.
"""
import argparse
import os
import sys

import ml_dtypes
import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def softmax_isa(x):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for t in range((N + P - 1) // P):
        r0 = t * P
        rows = min(P, N - r0)
        xt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt[:rows], src=x[r0:r0 + rows, :])
        # -max of each row (negate is free on the Vector engine): the exp's bias.
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max[:rows], op=nl.maximum, data=xt[:rows], axis=1, negate=True)
        # exp(x - max) and, in the same Scalar-engine pass, the row sums.
        e = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e[:rows], op=nl.exp, data=xt[:rows], bias=neg_max[:rows],
                        reduce_op=nl.add, reduce_res=row_sum[:rows])
        inv_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv_sum[:rows], data=row_sum[:rows])
        # Scale each row by 1/sum, casting to the output dtype on the way out of the Vector engine.
        yt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=yt[:rows], data=e[:rows], op0=nl.multiply, operand0=inv_sum[:rows])
        nisa.dma_copy(dst=out[r0:r0 + rows, :], src=yt[:rows])
    return out


@nki.jit
def softmax_nl(x):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for t in range((N + P - 1) // P):
        r0 = t * P
        rows = min(P, N - r0)
        xt = nl.load(x[r0:r0 + rows, :])
        yt = nl.softmax(xt, axis=1, dtype=x.dtype)
        nl.store(out[r0:r0 + rows, :], value=yt)
    return out


def reference(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="trn2", help="trn1, trn2 or trn3")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("-N", type=int, default=1000, help="rows (any count: the last tile may be short)")
    parser.add_argument("-D", type=int, default=2048, help="row length")
    args = parser.parse_args()
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = args.target

    host_dtype = np.float32 if args.dtype == "float32" else ml_dtypes.bfloat16
    tolerance = 5e-5 if args.dtype == "float32" else 1e-2
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((args.N, args.D), dtype=np.float32) * 4).astype(host_dtype)
    want = reference(x)
    status = 0
    for name, kernel in (("softmax_isa", softmax_isa), ("softmax_nl", softmax_nl)):
        got = np.asarray(kernel(x)).astype(np.float64)
        err = float(np.abs(got - want).max())
        ok = err < tolerance
        status |= not ok
        print(f"{name}: values {'ok' if ok else 'WRONG'} (max error {err:.2e}, tolerance {tolerance:.0e}) on "
              f"{args.dtype}[{args.N}, {args.D}]; {kernel.last_latency_ns / 1e3:.2f} us on {args.target}")
        print(f"  summary: {kernel.last_summary}")
    return status


if __name__ == "__main__":
    sys.exit(main())
