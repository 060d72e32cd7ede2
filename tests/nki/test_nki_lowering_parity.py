"""Lowering parity (issue 37 item 1): a traced NKI kernel holds the instructions the Neuron compiler would emit for
it and no more. For the NKI tutorial's matmul stages (beta 1, examples/nki/matmul_kernels.py, and the trn2 tutorial's,
matmul_kernels_trn2.py) and plain-NKI softmax and RMSNorm kernels (examples/nki/softmax.py, rmsnorm.py, their
``nki.language`` forms), the traced program is compared with a .tasm written here for the same algorithm, one line per
hardware instruction, independently of the front-end: the same instructions per engine and opcode, the same DMA
bytes and the same matmul FLOPs. ``explain``'s static reading of each program is checked against what the simulator
counts when it runs it, so the comparison rests on the simulator's figures too."""
import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

import trnsim
import nki
import nki.language as nl
import trnsim.nki
from trnsim.nki import _instruction_mix

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "nki"
sys.path.insert(0, str(EXAMPLES))
import matmul_kernels as v1  # noqa: E402
import matmul_kernels_trn2 as v2  # noqa: E402
import rmsnorm  # noqa: E402
import softmax  # noqa: E402

M, K, N = 256, 1024, 1024
P, TN = 128, 512
MT, KT, NT = M // P, K // P, N // TN


@pytest.fixture(autouse=True)
def trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def program(name, decls, body):
    return "\n".join([f"kernel {name}", "target trn2"] + decls + body) + "\n"


def rows(t, r0, r1, c0, c1):
    return f"{t}[{r0}:{r1}, {c0}:{c1}]"


# ---- the matmul stages, as the tutorial describes each: every [128, 512] output tile accumulates its K tiles in
# PSUM (the zeroing folded into the first matmul), is copied PSUM -> SBUF once and stored by one DMA.

def _matmul_decls(dt, out_dt):
    return [f"hbm lhsT : {dt}[{K}, {M}] input", f"hbm rhs : {dt}[{K}, {N}] input",
            f"hbm result : {out_dt}[{M}, {N}] output", f"sbuf a : {dt}[128, 128]", f"sbuf b : {dt}[128, 512]",
            f"sbuf a_row : {dt}[128, {M}]", f"sbuf b_row : {dt}[128, {N}]",
            "psum acc : fp32[128, 512]", f"sbuf o : {out_dt}[128, 512]", f"sbuf packed : {out_dt}[128, {N}]",
            f"sbuf partial : {out_dt}[128, {MT * NT * TN}]"]


def _load_a(k, m):
    return f"dma_copy dst=a, src={rows('lhsT', k * P, (k + 1) * P, m * P, (m + 1) * P)}"


def _load_b(k, n):
    return f"dma_copy dst=b, src={rows('rhs', k * P, (k + 1) * P, n * TN, (n + 1) * TN)}"


def _evacuate(m, n):
    return ["tensor_copy dst=o, src=acc",
            f"dma_copy dst={rows('result', m * P, (m + 1) * P, n * TN, (n + 1) * TN)}, src=o"]


def hand_tiled(dt, out_dt):
    body = []
    for m in range(MT):
        for n in range(NT):
            for k in range(KT):
                body += [_load_a(k, m), _load_b(k, n), "nc_matmul dst=acc, stationary=a, moving=b"]
            body += _evacuate(m, n)
    return program("tiled", _matmul_decls(dt, out_dt), body)


def hand_hoisted(dt, out_dt):
    """A^T's K tiles for one m loaded once (reused for every n); B's K tiles per (m, n)."""
    body = []
    for m in range(MT):
        body += [_load_a(k, m) for k in range(KT)]
        for n in range(NT):
            for k in range(KT):
                body += [_load_b(k, n), "nc_matmul dst=acc, stationary=a, moving=b"]
            body += _evacuate(m, n)
    return program("hoisted", _matmul_decls(dt, out_dt), body)


def hand_hoisted_trn2(dt, out_dt):
    """The trn2 tutorial's hoisted stage loads B's K tiles once per (m, n) too, before its matmuls."""
    body = []
    for m in range(MT):
        body += [_load_a(k, m) for k in range(KT)]
        for n in range(NT):
            body += [_load_b(k, n) for k in range(KT)]
            body += ["nc_matmul dst=acc, stationary=a, moving=b"] * KT
            body += _evacuate(m, n)
    return program("hoisted", _matmul_decls(dt, out_dt), body)


def hand_blocked(dt, out_dt, bm_tiles=2, bn_tiles=2):
    """Blocks of bm_tiles x bn_tiles output tiles: the block's A^T and B columns over all of K loaded tile by tile,
    once per block (A^T once per m block), then each output tile of the block."""
    body = []
    for mb in range(MT // bm_tiles):
        body += [_load_a(k, mb * bm_tiles + bm) for bm in range(bm_tiles) for k in range(KT)]
        for nb in range(NT // bn_tiles):
            body += [_load_b(k, nb * bn_tiles + bn) for bn in range(bn_tiles) for k in range(KT)]
            for bm in range(bm_tiles):
                for bn in range(bn_tiles):
                    body += ["nc_matmul dst=acc, stationary=a, moving=b"] * KT
                    body += _evacuate(mb * bm_tiles + bm, nb * bn_tiles + bn)
    return program("blocked", _matmul_decls(dt, out_dt), body)


def hand_optimized(dt, out_dt, bm_tiles, bn_tiles, bk_tiles):
    """Blocks in M, N and K: a BLOCK_N column of C kept as partial sums in SBUF across the K blocks (each output
    tile's partial sum zeroed by one memset: the compiler allocates each block of a tile with leading block dims on
    its own, so one memset cannot cover them; each output tile's PSUM result added to its partial sum by one
    tensor_tensor); B and A^T loaded as [128, BLOCK] rows; each row of result tiles copied into one packed tile per
    output tile and stored in one DMA."""
    block_m, block_n = bm_tiles * P, bn_tiles * TN
    body = []
    for n in range(N // block_n):
        body += ["memset dst=partial[0:128, 0:512], value=0"] * (M // block_m * bm_tiles * bn_tiles)
        for k in range(K // (bk_tiles * P)):
            for bk in range(bk_tiles):
                r = (k * bk_tiles + bk) * P
                body += [f"dma_copy dst=b_row, src={rows('rhs', r, r + P, n * block_n, (n + 1) * block_n)}"]
            for m in range(M // block_m):
                for bk in range(bk_tiles):
                    r = (k * bk_tiles + bk) * P
                    body += [f"dma_copy dst=a_row, src={rows('lhsT', r, r + P, m * block_m, (m + 1) * block_m)}"]
                for _ in range(bm_tiles * bn_tiles):
                    body += ["nc_matmul dst=acc, stationary=a_row[0:128, 0:128], moving=b_row[0:128, 0:512]"] * \
                        bk_tiles
                    body += ["tensor_tensor dst=partial[0:128, 0:512], data1=partial[0:128, 0:512], data2=acc, "
                             "op=add"]
        for m in range(M // block_m):
            for bm in range(bm_tiles):
                body += ["tensor_copy dst=packed[0:128, 0:512], src=partial[0:128, 0:512]"] * bn_tiles
                row = (m * bm_tiles + bm) * P
                body += [f"dma_copy dst={rows('result', row, row + P, n * block_n, (n + 1) * block_n)}, "
                         f"src=packed[0:128, 0:{block_n}]"]
    return program("optimized", _matmul_decls(dt, out_dt), body)


# ---- softmax and RMSNorm over x [R, D], 128 rows a tile

R, D = 256, 512


def hand_softmax(dt):
    decls = [f"hbm x : {dt}[{R}, {D}] input", f"hbm y : {dt}[{R}, {D}] output", f"sbuf xt : {dt}[128, {D}]",
             "sbuf neg_max : fp32[128, 1]", f"sbuf e : fp32[128, {D}]", "sbuf total : fp32[128, 1]",
             "sbuf inv : fp32[128, 1]", f"sbuf yt : {dt}[128, {D}]"]
    body = []
    for t in range(R // P):
        body += [f"dma_copy dst=xt, src={rows('x', t * P, (t + 1) * P, 0, D)}",
                 "tensor_reduce dst=neg_max, op=maximum, data=xt, axis=[1], negate=true",
                 "activation dst=e, op=exp, data=xt, bias=neg_max, reduce_op=add, reduce_res=total",
                 "reciprocal dst=inv, data=total",
                 "tensor_scalar dst=yt, data=e, op0=multiply, operand0=inv",
                 f"dma_copy dst={rows('y', t * P, (t + 1) * P, 0, D)}, src=yt"]
    return program("softmax", decls, body)


def hand_rmsnorm(dt):
    """The weight row broadcast onto the partitions by one DMA (partition stride 0); per tile mean(x^2) by one
    Scalar pass (square of x / sqrt(D), summed), 1 / sqrt(mean + eps) by one two-op tensor_scalar, and
    (x * rrms) * w by one scalar_tensor_tensor."""
    decls = [f"hbm x : {dt}[{R}, {D}] input", f"hbm w : {dt}[{D}] input", f"hbm y : {dt}[{R}, {D}] output",
             f"sbuf wt : {dt}[128, {D}]", f"sbuf xt : {dt}[128, {D}]", f"sbuf sq : fp32[128, {D}]",
             "sbuf ms : fp32[128, 1]", "sbuf rrms : fp32[128, 1]", f"sbuf yt : {dt}[128, {D}]"]
    body = [f"dma_copy dst=wt, src=w{{offset=0, ap=[[0, 128], [1, {D}]]}}"]
    for t in range(R // P):
        body += [f"dma_copy dst=xt, src={rows('x', t * P, (t + 1) * P, 0, D)}",
                 f"activation dst=sq, op=square, data=xt, scale={float(1 / np.sqrt(D))!r}, reduce_op=add, "
                 "reduce_res=ms",
                 "tensor_scalar dst=rrms, data=ms, op0=add, operand0=1e-06, op1=power, operand1=-0.5",
                 "scalar_tensor_tensor dst=yt, data=xt, op0=multiply, operand0=rrms, op1=multiply, operand1=wt",
                 f"dma_copy dst={rows('y', t * P, (t + 1) * P, 0, D)}, src=yt"]
    return program("rmsnorm", decls, body)


def _inputs(dt):
    rng = np.random.default_rng(0)
    host = np.float32 if dt == "fp32" else ml_dtypes.bfloat16
    return (rng.random((K, M), dtype=np.float32).astype(host), rng.random((K, N), dtype=np.float32).astype(host))


CASES = {
    # name: (kernel, input dtype, kernel keyword arguments, hand program)
    "v1-tiled": (v1.matmul_tiled, "bf16", {}, lambda: hand_tiled("bf16", "bf16")),
    "v1-hoisted": (v1.matmul_hoisted, "bf16", {}, lambda: hand_hoisted("bf16", "bf16")),
    "v1-blocked": (v1.matmul_blocked, "bf16", {}, lambda: hand_blocked("bf16", "bf16")),
    "v1-optimized": (v1.matmul_optimized, "bf16", dict(TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=4),
                     lambda: hand_optimized("bf16", "bf16", 2, 2, 4)),
    "v2-tiled": (v2.matmul_tiled, "fp32", {}, lambda: hand_tiled("fp32", "fp32")),
    "v2-hoisted": (v2.matmul_hoisted, "fp32", {}, lambda: hand_hoisted_trn2("fp32", "fp32")),
    "v2-blocked": (v2.matmul_blocked, "bf16", {}, lambda: hand_blocked("bf16", "bf16")),
}


def _hand_mix(text):
    mix = _instruction_mix.mix_of_tasm(text)
    _check_against_simulator(text, mix)
    return mix


def _check_against_simulator(text, mix):
    """explain's static figures are what the simulator counts running the program (no compiled loops here)."""
    stats = trnsim.run_program(text, timing_only=True, config="trn2").stats
    assert stats["instructions"] == mix.per_opcode()
    simulated = {name.split(".")[-1]: e["instructions"] for name, e in stats["engines"].items() if e["instructions"]}
    assert simulated == mix.per_engine()
    assert stats["dma"]["bytes"] == mix.dma_bytes
    assert stats["flops"] == mix.matmul_flops


def _last_tasm(kernel):
    return list(kernel._cache.values())[-1].tasm


@pytest.mark.parametrize("case", list(CASES))
def test_matmul_stage_traces_to_the_hand_program(case):
    kernel, dt, kwargs, hand = CASES[case]
    lhsT, rhs = _inputs(dt)
    traced = kernel.explain(lhsT, rhs, **kwargs)
    _check_against_simulator(_last_tasm(kernel), traced)
    assert traced == _hand_mix(hand())


def test_optimized_trn2_stage_traces_to_the_hand_program():
    lhsT, rhs = _inputs("bf16")
    traced = v2.matmul_optimized.explain(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=4)
    assert traced == _hand_mix(hand_optimized("bf16", "fp32", 2, 2, 4))


@pytest.mark.parametrize("dt", ["fp32", "bf16"])
def test_softmax_traces_to_the_hand_program(dt):
    x = np.random.default_rng(1).standard_normal((R, D)).astype(np.float32 if dt == "fp32" else ml_dtypes.bfloat16)
    traced = softmax.softmax_nl.explain(x)
    _check_against_simulator(_last_tasm(softmax.softmax_nl), traced)
    assert traced == _hand_mix(hand_softmax(dt))


@pytest.mark.parametrize("dt", ["fp32", "bf16"])
def test_rmsnorm_traces_to_the_hand_program(dt):
    host = np.float32 if dt == "fp32" else ml_dtypes.bfloat16
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((R, D)).astype(host), rng.standard_normal(D).astype(host)
    traced = rmsnorm.rmsnorm_nl.explain(x, w)
    _check_against_simulator(_last_tasm(rmsnorm.rmsnorm_nl), traced)
    assert traced == _hand_mix(hand_rmsnorm(dt))


def test_rmsnorm_values_after_the_fused_lowering():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((R, D)).astype(np.float32), rng.standard_normal(D).astype(np.float32)
    got = rmsnorm.rmsnorm_nl(x, w)
    np.testing.assert_allclose(got, rmsnorm.reference(x, w), rtol=2e-5, atol=2e-5)


# ---- attention for one 128-query tile, in plain nki.language: each nl call one instruction, plus the copy of
# P^T out of PSUM that the Tensor engine needs (its operands come from SBUF only).

@nki.jit
def attention_nl(qT, kT, v):
    d, S = kT.shape
    out = nl.ndarray((128, d), dtype=nl.float32, buffer=nl.shared_hbm)
    q_sb, k_sb, v_sb = nl.load(qT), nl.load(kT), nl.load(v)
    s = nl.matmul(q_sb, k_sb, transpose_x=True)
    m = nl.max(s, axis=1, keepdims=True)
    p = nl.exp(nl.subtract(s, m))
    total = nl.sum(p, axis=1, keepdims=True)
    o = nl.matmul(nl.transpose(p), v_sb, transpose_x=True)
    nl.store(out, value=nl.divide(o, total))
    return out


def hand_attention(d, S):
    decls = [f"hbm qT : fp32[{d}, 128] input", f"hbm kT : fp32[{d}, {S}] input", f"hbm v : fp32[{S}, {d}] input",
             f"hbm o : fp32[128, {d}] output", f"sbuf q : fp32[{d}, 128]", f"sbuf k : fp32[{d}, {S}]",
             f"sbuf vs : fp32[{S}, {d}]", f"psum s : fp32[128, {S}]", "sbuf m : fp32[128, 1]",
             f"sbuf x : fp32[128, {S}]", f"sbuf p : fp32[128, {S}]", "sbuf l : fp32[128, 1]",
             f"psum pT : fp32[{S}, 128]", f"sbuf pT_sb : fp32[{S}, 128]", f"psum pv : fp32[128, {d}]",
             f"sbuf y : fp32[128, {d}]"]
    body = ["dma_copy dst=q, src=qT", "dma_copy dst=k, src=kT", "dma_copy dst=vs, src=v",
            "nc_matmul dst=s, stationary=q, moving=k",
            "tensor_reduce dst=m, op=maximum, data=s, axis=[1]",
            "tensor_scalar dst=x, data=s, op0=subtract, operand0=m",
            "activation dst=p, op=exp, data=x",
            "tensor_reduce dst=l, op=add, data=p, axis=[1]",
            "nc_transpose dst=pT, data=p",
            "tensor_copy dst=pT_sb, src=pT",
            "nc_matmul dst=pv, stationary=pT_sb, moving=vs",
            "tensor_scalar dst=y, data=pv, op0=divide, operand0=l",
            "dma_copy dst=o, src=y"]
    return program("attention", decls, body)


def test_attention_traces_to_the_hand_program_and_computes_it():
    rng = np.random.default_rng(4)
    d, S = 64, 128
    qT, kT, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((d, 128), (d, S), (S, d)))
    traced = attention_nl.explain(qT, kT, v)
    _check_against_simulator(_last_tasm(attention_nl), traced)
    assert traced == _hand_mix(hand_attention(d, S))
    s = qT.T.astype(np.float64) @ kT
    p = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(attention_nl(qT, kT, v), (p @ v) / p.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-5)
