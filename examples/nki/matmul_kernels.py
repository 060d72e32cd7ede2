"""A bf16 matmul C[M, N] = A[M, K] @ B[K, N] in NKI beta 1 (``neuronxcc.nki``), in the four stages
the NKI tutorial walks through (written for trnsim, following the tutorial's plan):

1. ``matmul_tiled``: for every [128, 512] output tile, stream the K tiles of A^T and B and
   accumulate in PSUM. Every A^T tile is loaded again for every output tile.
2. ``matmul_hoisted``: the A^T tiles of one row of output tiles are loaded once and reused across N.
3. ``matmul_blocked``: blocks of BLOCK_M columns of A^T and BLOCK_N columns of B, each over all of K,
   stay in SBUF while every output tile of the block is computed (each loaded tile feeds 2 matmuls);
   loaded tile by tile, as the tutorial does (its loads have the tiled stage's shapes).
4. ``matmul_optimized``: blocks in K too, partial sums kept in SBUF across K blocks, so each
   operand block is loaded once per block pair and the DMA streams whole rows.

The kernels take A already transposed (``lhsT`` [K, M]): the Tensor engine contracts over the
partition dim.
"""
from neuronxcc import nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    K_, N = rhs.shape
    assert K == K_, "lhsT and rhs contract over K"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M = nl.tile_size.gemm_stationary_fmax   # 128
    TILE_K = nl.tile_size.pmax                   # 128
    TILE_N = nl.tile_size.gemm_moving_fmax       # 512
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                a_tile = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                b_tile = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                a_tile[...] = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                b_tile[...] = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                acc += nl.matmul(a_tile, b_tile, transpose_x=True)
            out_tile = nl.copy(acc, dtype=result.dtype)
            nl.store(result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], value=out_tile)
    return result


@nki.jit
def matmul_hoisted(lhsT, rhs):
    K, M = lhsT.shape
    K_, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M, TILE_K, TILE_N = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    i_a = nl.mgrid[0:TILE_K, 0:TILE_M]
    i_b = nl.mgrid[0:TILE_K, 0:TILE_N]
    i_c = nl.mgrid[0:TILE_M, 0:TILE_N]
    for m in nl.affine_range(M // TILE_M):
        # All K tiles of this column block of A^T, loaded once for every n.
        a_tiles = nl.ndarray((K // TILE_K, nl.par_dim(TILE_K), TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TILE_K):
            a_tiles[k, i_a.p, i_a.x] = nl.load(lhsT[k * TILE_K + i_a.p, m * TILE_M + i_a.x])
        for n in nl.affine_range(N // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                b_tile = nl.load(rhs[k * TILE_K + i_b.p, n * TILE_N + i_b.x])
                acc += nisa.nc_matmul(a_tiles[k, i_a.p, i_a.x], b_tile)
            out_tile = nl.copy(acc, dtype=result.dtype)
            nl.store(result[m * TILE_M + i_c.p, n * TILE_N + i_c.x], value=out_tile)
    return result


@nki.jit
def matmul_blocked(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2):
    K, M = lhsT.shape
    K_, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M, TILE_K, TILE_N = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    BLOCK_M, BLOCK_N = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N
    TILES_K = K // TILE_K
    for m in nl.affine_range(M // BLOCK_M):
        # A block of BLOCK_M columns of A^T over all of K stays in SBUF for every n block ...
        # The tutorial loads them tile by tile ([TILE_K, TILE_M] each), as the tiled stage does.
        a_tiles = nl.ndarray((TILES_IN_BLOCK_M, TILES_K, nl.par_dim(TILE_K), TILE_M), dtype=lhsT.dtype,
                             buffer=nl.sbuf)
        for bm in nl.affine_range(TILES_IN_BLOCK_M):
            col = (m * TILES_IN_BLOCK_M + bm) * TILE_M
            for k in nl.affine_range(TILES_K):
                a_tiles[bm, k] = nl.load(lhsT[k * TILE_K:(k + 1) * TILE_K, col:col + TILE_M])
        for n in nl.affine_range(N // BLOCK_N):
            # ... and a block of BLOCK_N columns of B over all of K for every tile of the C block,
            # again one [TILE_K, TILE_N] tile per load.
            b_tiles = nl.ndarray((TILES_IN_BLOCK_N, TILES_K, nl.par_dim(TILE_K), TILE_N), dtype=rhs.dtype,
                                 buffer=nl.sbuf)
            for bn in nl.affine_range(TILES_IN_BLOCK_N):
                col = (n * TILES_IN_BLOCK_N + bn) * TILE_N
                for k in nl.affine_range(TILES_K):
                    b_tiles[bn, k] = nl.load(rhs[k * TILE_K:(k + 1) * TILE_K, col:col + TILE_N])
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(TILES_K):
                        acc += nisa.nc_matmul(a_tiles[bm, k], b_tiles[bn, k])
                    out_tile = nl.copy(acc, dtype=result.dtype)
                    nl.store(result[m * BLOCK_M + bm * TILE_M:m * BLOCK_M + (bm + 1) * TILE_M,
                                    n * BLOCK_N + bn * TILE_N:n * BLOCK_N + (bn + 1) * TILE_N], value=out_tile)
    return result


@nki.jit
def matmul_optimized(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    K, M = lhsT.shape
    K_, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    TILE_M, TILE_K, TILE_N = nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
    BLOCK_M, BLOCK_N, BLOCK_K = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    NUM_BLOCK_M, NUM_BLOCK_N, NUM_BLOCK_K = M // BLOCK_M, N // BLOCK_N, K // BLOCK_K
    for n in nl.affine_range(NUM_BLOCK_N):
        # Partial sums of a whole BLOCK_N column of C, in SBUF across the K blocks (in the output
        # dtype, as the tutorial keeps them: fp32 would not fit 24 MiB of SBUF with the operand blocks).
        partial = nl.zeros((NUM_BLOCK_M, TILES_IN_BLOCK_M, TILES_IN_BLOCK_N, nl.par_dim(TILE_M), TILE_N),
                           dtype=result.dtype, buffer=nl.sbuf)
        for k in nl.sequential_range(NUM_BLOCK_K):
            b_tiles = nl.ndarray((TILES_IN_BLOCK_K, nl.par_dim(TILE_K), BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
            for bk in nl.affine_range(TILES_IN_BLOCK_K):
                row = (k * TILES_IN_BLOCK_K + bk) * TILE_K
                b_tiles[bk] = nl.load(rhs[row:row + TILE_K, n * BLOCK_N:(n + 1) * BLOCK_N])
            for m in nl.affine_range(NUM_BLOCK_M):
                a_tiles = nl.ndarray((TILES_IN_BLOCK_K, nl.par_dim(TILE_K), BLOCK_M), dtype=lhsT.dtype,
                                     buffer=nl.sbuf)
                for bk in nl.affine_range(TILES_IN_BLOCK_K):
                    row = (k * TILES_IN_BLOCK_K + bk) * TILE_K
                    a_tiles[bk] = nl.load(lhsT[row:row + TILE_K, m * BLOCK_M:(m + 1) * BLOCK_M])
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    for bm in nl.affine_range(TILES_IN_BLOCK_M):
                        acc = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(TILES_IN_BLOCK_K):
                            acc += nisa.nc_matmul(a_tiles[bk, :, bm * TILE_M:(bm + 1) * TILE_M],
                                                  b_tiles[bk, :, bn * TILE_N:(bn + 1) * TILE_N])
                        partial[m, bm, bn] = nl.loop_reduce(acc, op=nl.add, loop_indices=[k], dtype=result.dtype)
        for m in nl.affine_range(NUM_BLOCK_M):
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                packed = nl.ndarray((TILE_M, BLOCK_N), dtype=result.dtype, buffer=nl.sbuf)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    packed[:, bn * TILE_N:(bn + 1) * TILE_N] = nl.copy(partial[m, bm, bn], dtype=result.dtype)
                row = (m * TILES_IN_BLOCK_M + bm) * TILE_M
                nl.store(result[row:row + TILE_M, n * BLOCK_N:(n + 1) * BLOCK_N], value=packed)
    return result


STAGES = [("tiled", matmul_tiled), ("hoisted", matmul_hoisted), ("blocked", matmul_blocked),
          ("optimized", matmul_optimized)]
