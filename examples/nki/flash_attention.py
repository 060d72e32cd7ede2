"""Flash-attention forward o = softmax(q k^T / sqrt(d)) v in the current NKI API, on trnsim:

    python -m trnsim.nki examples/nki/flash_attention.py [--target trn2] [-S 1024] [-d 128] [--heads 2]

q, k, v are [heads, S, d] bf16 (d <= 128, S a multiple of 128); each head is computed on its own.
Per head the kernel

1. loads K and V whole into SBUF ([128, S/128, d]: key rows on partitions) and builds K^T [d, S]
   by Tensor-engine transposes (``nc_transpose`` side by side into one PSUM bank, one copy back);
2. loads every 128-row query tile and transposes it to q^T [d, 128] the same way;
3. for every (query tile, key block of up to 512 keys: one PSUM bank of fp32 scores) step:
   - scores s = q k^T by one ``nc_matmul`` (stationary q^T, moving K^T block, contracting over d on
     the partitions) into PSUM;
   - online softmax: block max (``tensor_reduce``), the running max kept as nm = -max / sqrt(d)
     (the exp's bias) and updated by one ``tensor_scalar`` (multiply by -1/sqrt(d), then minimum
     with the old nm); p = exp(s / sqrt(d) + nm) in bf16 with its row sums (one ``activation``
     with ``reduce_res``); the rescale factor alpha = exp(nm - nm_old) (``activation``);
   - P^T by ``nc_transpose`` of each 128-key slice of p (Tensor engine, into PSUM, then to SBUF),
     and P V accumulated over the slices by ``nc_matmul`` (stationary P^T, moving V) in PSUM;
   - running sum l = l * alpha + rowsum and accumulator acc = acc * alpha + P V
     (``scalar_tensor_tensor``, fp32 in SBUF);
   and after a query tile's last block writes o = acc / l (``reciprocal``, ``tensor_scalar``) as
   bf16. The engines run their instruction streams in order, so the stages of consecutive steps
   are emitted skewed (software pipelining, see the kernel): the Tensor, Vector and Scalar engines
   work on different steps at once.

Checked against NumPy (float64 from the same bf16 inputs; max error relative to max |o|, bf16
tolerance); prints the simulated latency and the run summary (MFU counts the two matmuls,
4 S^2 d FLOPs per head; HFU also the transposes). Exit status 1 when the values are wrong.
"""
import argparse
import math
import os
import sys

import ml_dtypes
import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def _transpose_blocks(dst, blocks):
    """dst[C, n*R] (SBUF) = [b_0^T, ..., b_{n-1}^T] of n [R, C] blocks (SBUF): Tensor-engine transposes
    side by side into one PSUM tile (a 2 KiB bank per partition holds n*R <= 1024 bf16), then one
    copy back to SBUF (Vector: its 2x copy mode beats the Scalar engine's, which has the exps)."""
    rows = blocks[0].shape[0]
    t_psum = nl.ndarray(dst.shape, dtype=dst.dtype, buffer=nl.psum)
    for c, block in enumerate(blocks):
        nisa.nc_transpose(dst=t_psum[:, c * rows:(c + 1) * rows], data=block)
    nisa.tensor_copy(dst=dst, src=t_psum)


@nki.jit
def flash_attention_fwd(q, k, v):
    H, S, d = q.shape
    assert k.shape == (H, S, d) and v.shape == (H, S, d)
    P = nl.tile_size.pmax                                   # 128 query rows / keys per tile
    assert d <= P and S % P == 0, "d <= 128 and S a multiple of 128"
    # Keys per score block: up to 512 (the moving tile's limit; one PSUM bank of fp32), dividing S.
    KB = next(n * P for n in (4, 2, 1) if n * P <= nl.tile_size.gemm_moving_fmax and S % (n * P) == 0)
    n_tiles, n_blocks, slices = S // P, S // KB, KB // P
    scale = 1.0 / math.sqrt(d)
    out = nl.ndarray((H, S, d), dtype=q.dtype, buffer=nl.shared_hbm)

    for h in range(H):
        # K and V of this head in SBUF, key rows on partitions: [128, S/128, d] (one DMA each).
        k_sb = nl.ndarray((P, n_tiles, d), dtype=k.dtype, buffer=nl.sbuf)
        v_sb = nl.ndarray((P, n_tiles, d), dtype=v.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=k_sb, src=k[h].reshape((n_tiles, P, d)).permute(1, 0, 2))
        nisa.dma_copy(dst=v_sb, src=v[h].reshape((n_tiles, P, d)).permute(1, 0, 2))
        # K^T [d, S]: d on partitions, the contraction dim of q k^T.
        kT = nl.ndarray((d, S), dtype=k.dtype, buffer=nl.sbuf)
        for b in range(n_blocks):
            _transpose_blocks(kT[:, b * KB:(b + 1) * KB], [k_sb[:, b * slices + c, :] for c in range(slices)])

        qT = {}
        for i in range(n_tiles):
            q_sb = nl.ndarray((P, d), dtype=q.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=q_sb, src=q[h, i * P:(i + 1) * P, :])
            qT[i] = nl.ndarray((d, P), dtype=q.dtype, buffer=nl.sbuf)
            _transpose_blocks(qT[i], [q_sb])

        # One step per (query tile, key block), in four stages. The engines run their instruction
        # streams in order, so the stages of consecutive steps are emitted skewed (software
        # pipelining): while the Vector and Scalar engines do the softmax of step t - 1, the
        # Tensor engine computes the scores of step t and the P V of step t - 3.
        steps = [{"i": i, "b": b} for i in range(n_tiles) for b in range(n_blocks)]
        state = {}   # per query tile: running max (as nm), running sum l, accumulator acc

        def scores(st):
            st["s"] = nl.ndarray((P, KB), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=st["s"], stationary=qT[st["i"]], moving=kT[:, st["b"] * KB:(st["b"] + 1) * KB])

        def softmax_block(st):
            # The running max is kept as nm = -max / sqrt(d), the exp's bias, so that one Vector
            # instruction updates it: nm_new = min(nm_old, -blockmax / sqrt(d)).
            i, b, s_psum = st["i"], st["b"], st["s"]
            block_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=block_max, op=nl.maximum, data=s_psum, axis=1)
            st["nm"] = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            if b == 0:
                nisa.tensor_scalar(dst=st["nm"], data=block_max, op0=nl.multiply, operand0=-scale)
            else:
                st["nm_old"] = state[i]["nm"]
                nisa.tensor_scalar(dst=st["nm"], data=block_max, op0=nl.multiply, operand0=-scale,
                                   op1=nl.minimum, operand1=st["nm_old"])
            state.setdefault(i, {})["nm"] = st["nm"]
            # p = exp((s - max) / sqrt(d)) in bf16, and its row sums, in one Scalar-engine pass.
            st["p"] = nl.ndarray((P, KB), dtype=q.dtype, buffer=nl.sbuf)
            st["row_sum"] = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=st["p"], op=nl.exp, data=s_psum, bias=st["nm"], scale=scale,
                            reduce_op=nl.add, reduce_res=st["row_sum"])
            if b > 0:
                # alpha = exp((max_old - max_new) / sqrt(d)) = exp(nm_new - nm_old) rescales what was
                # accumulated so far (computed here, after the exp, so that the update never waits).
                st["alpha"] = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.activation(dst=st["alpha"], op=nl.exp, data=st["nm_old"], bias=st["nm"], scale=-1.0)

        def pv(st):
            # P V over the block's 128-key slices: P^T [keys, queries] is the stationary.
            st["pv"] = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
            pT = nl.ndarray((P, KB), dtype=q.dtype, buffer=nl.sbuf)
            _transpose_blocks(pT, [st["p"][:, c * P:(c + 1) * P] for c in range(slices)])
            for c in range(slices):
                nisa.nc_matmul(dst=st["pv"], stationary=pT[:, c * P:(c + 1) * P],
                               moving=v_sb[:, st["b"] * slices + c, :], accumulate=c > 0)

        def update(st):
            i, b, t = st["i"], st["b"], state[st["i"]]
            if b == 0:
                t["l"], t["acc"] = st["row_sum"], nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=t["acc"], src=st["pv"])
            else:
                l_new = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.scalar_tensor_tensor(dst=l_new, data=t["l"], op0=nl.multiply, operand0=st["alpha"],
                                          op1=nl.add, operand1=st["row_sum"])
                acc_new = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.sbuf)
                nisa.scalar_tensor_tensor(dst=acc_new, data=t["acc"], op0=nl.multiply, operand0=st["alpha"],
                                          op1=nl.add, operand1=st["pv"])
                t["l"], t["acc"] = l_new, acc_new
            if b == n_blocks - 1:
                # o = acc / l, in bf16.
                inv_l = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                nisa.reciprocal(dst=inv_l, data=t["l"])
                o_sb = nl.ndarray((P, d), dtype=q.dtype, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=o_sb, data=t["acc"], op0=nl.multiply, operand0=inv_l)
                nisa.dma_copy(dst=out[h, i * P:(i + 1) * P, :], src=o_sb)

        # (stage, skew): step t's scores are computed in round t, its softmax in round t + 1, its
        # P V in round t + 3 (two rounds after the exp: its transposes never wait for the Scalar
        # engine) and its update in round t + 4. Each round emits the later stages first.
        stages = [(update, 4), (pv, 3), (softmax_block, 1), (scores, 0)]
        for r in range(len(steps) + 4):
            for stage, skew in stages:
                if 0 <= r - skew < len(steps):
                    stage(steps[r - skew])
    return out


def reference(q, k, v):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="trn2", help="trn1, trn2 or trn3")
    parser.add_argument("-S", type=int, default=1024, help="sequence length (a multiple of 128)")
    parser.add_argument("-d", type=int, default=128, help="head dim (<= 128)")
    parser.add_argument("--heads", type=int, default=2, help="heads, each attended on its own")
    args = parser.parse_args()
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = args.target

    rng = np.random.default_rng(0)
    shape = (args.heads, args.S, args.d)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32).astype(ml_dtypes.bfloat16) for _ in range(3))
    want = reference(q, k, v)
    got = np.asarray(flash_attention_fwd(q, k, v)).astype(np.float64)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    tolerance = 2e-2
    ok = err < tolerance
    kernel = flash_attention_fwd
    print(f"flash_attention_fwd: values {'ok' if ok else 'WRONG'} (max error {err:.2e} of max |o|, tolerance "
          f"{tolerance:.0e}) on bf16 q/k/v [{args.heads}, {args.S}, {args.d}]; "
          f"{kernel.last_latency_ns / 1e3:.2f} us on {args.target}")
    print(f"  summary: {kernel.last_summary}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
