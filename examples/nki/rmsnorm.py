"""Fused RMSNorm y = x / sqrt(mean(x^2, axis=1) + eps) * w over x [N, D], w [D], in the current NKI
API, on trnsim:

    python -m trnsim.nki examples/nki/rmsnorm.py [--target trn2] [--dtype bfloat16] [-N 1000] [-D 2048]

The weight row is loaded once into a [128, D] tile by a DMA whose source access pattern has a
partition stride of 0 (every partition reads the same D elements of HBM), so the Vector engine can
multiply by it element-wise. Two kernels, tiled by 128 rows (the last tile may be short):

- ``rmsnorm_isa`` (``nki.isa``): ``activation`` square with ``scale=1/sqrt(D)`` and ``reduce_res``
  (Scalar) gives mean(x^2) per row in one pass; ``tensor_scalar`` (add eps, then power -0.5) gives
  the reciprocal RMS; ``scalar_tensor_tensor`` (x * rrms) * w writes the output: three compute
  instructions per tile. The weight comes in by ``w.ap([[0, P], [1, D]])``.
- ``rmsnorm_nl`` (``nki.language``): ``nl.load`` / ``nl.rms_norm`` / ``nl.store``, the weight by
  ``w.reshape((1, D)).broadcast(0, P)``.

Each is checked against NumPy (max error relative to max |y|) and prints the simulated latency and
the run summary (MFU / HFU / MBU, busy engines). Exit status 1 when a kernel's values are wrong.
"""
import argparse
import os
import sys

import ml_dtypes
import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

EPS = 1e-6


@nki.jit
def rmsnorm_isa(x, w, eps=EPS):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    # w broadcast to all partitions: partition stride 0, then D contiguous elements.
    w_tile = nl.ndarray((P, D), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_tile, src=w.ap([[0, P], [1, D]]))
    for t in range((N + P - 1) // P):
        r0 = t * P
        rows = min(P, N - r0)
        xt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt[:rows], src=x[r0:r0 + rows, :])
        # (x / sqrt(D))^2 summed over the row = mean(x^2), on the Scalar engine in one pass.
        sq = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        mean_sq = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq[:rows], op=nl.square, data=xt[:rows], scale=1.0 / float(np.sqrt(D)),
                        reduce_op=nl.add, reduce_res=mean_sq[:rows])
        # 1 / sqrt(mean + eps): two ALU ops of one Vector instruction.
        rrms = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=rrms[:rows], data=mean_sq[:rows], op0=nl.add, operand0=eps,
                           op1=nl.power, operand1=-0.5)
        # (x * rrms) * w: the per-row scale and the element-wise weight in one Vector instruction.
        yt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=yt[:rows], data=xt[:rows], op0=nl.multiply, operand0=rrms[:rows],
                                  op1=nl.multiply, operand1=w_tile[:rows])
        nisa.dma_copy(dst=out[r0:r0 + rows, :], src=yt[:rows])
    return out


@nki.jit
def rmsnorm_nl(x, w, eps=EPS):
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    w_tile = nl.load(w.reshape((1, D)).broadcast(0, P))
    for t in range((N + P - 1) // P):
        r0 = t * P
        rows = min(P, N - r0)
        xt = nl.load(x[r0:r0 + rows, :])
        yt = nl.rms_norm(xt, w_tile[:rows], axis=1, epsilon=eps, dtype=x.dtype)
        nl.store(out[r0:r0 + rows, :], value=yt)
    return out


def reference(x, w, eps=EPS):
    x, w = x.astype(np.float64), w.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * w


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="trn2", help="trn1, trn2 or trn3")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("-N", type=int, default=1000, help="rows (any count: the last tile may be short)")
    parser.add_argument("-D", type=int, default=2048, help="row length (normalised dim)")
    args = parser.parse_args()
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = args.target

    host_dtype = np.float32 if args.dtype == "float32" else ml_dtypes.bfloat16
    tolerance = 1e-5 if args.dtype == "float32" else 1e-2
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.N, args.D), dtype=np.float32).astype(host_dtype)
    w = rng.uniform(0.5, 1.5, args.D).astype(np.float32).astype(host_dtype)
    want = reference(x, w)
    status = 0
    for name, kernel in (("rmsnorm_isa", rmsnorm_isa), ("rmsnorm_nl", rmsnorm_nl)):
        got = np.asarray(kernel(x, w)).astype(np.float64)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        ok = err < tolerance
        status |= not ok
        print(f"{name}: values {'ok' if ok else 'WRONG'} (max error {err:.2e} of max |y|, tolerance "
              f"{tolerance:.0e}) on {args.dtype}[{args.N}, {args.D}]; {kernel.last_latency_ns / 1e3:.2f} us on "
              f"{args.target}")
        print(f"  summary: {kernel.last_summary}")
    return status


if __name__ == "__main__":
    sys.exit(main())
