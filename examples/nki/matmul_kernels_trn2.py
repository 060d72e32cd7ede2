"""C[M, N] = A[M, K] @ B[K, N] in the current NKI API (``import nki``), in the four stages of the trn2
"kernel optimization" tutorial (nki/guides/tutorials/kernel-optimization.rst; written for trnsim,
following that tutorial's plan and loop structure, with the dtypes each of its stages declares):

1. ``matmul_tiled``: for every [128, 512] output tile, a PSUM tile accumulates the K tiles; each k
   step copies a [128, 128] A^T tile and a [128, 512] B tile in by DMA right before its matmul.
   The result is copied PSUM -> SBUF (fp32) and stored (C in the inputs' dtype).
2. ``matmul_hoisted``: the K tiles of A^T for one m are loaded once per m, those of B for one n once
   per n, before the matmuls that use them (C in fp32).
3. ``matmul_blocked``: blocks of 2 x 2 output tiles: the K tiles of 2 A^T columns and 2 B columns
   (still one [128, 128] / [128, 512] tile per DMA) stay in SBUF for the block's 4 output tiles
   (C in the inputs' dtype).
4. ``matmul_optimized``: blocks in M (16 tiles), N (2 tiles) and K (8 tiles); a BLOCK_N column of C
   is kept as partial sums in SBUF (the inputs' dtype) across the K blocks, accumulated by
   ``tensor_tensor`` add from PSUM; B is loaded as [128, BLOCK_N] rows, A^T as [128, BLOCK_M] rows;
   each row of result tiles is packed [128, BLOCK_N] (fp32) and stored in one DMA (C in fp32).

The kernels take A already transposed (``lhsT`` [K, M]): the Tensor engine contracts over the
partition dim.
"""
import nki
import nki.isa as nisa
import nki.language as nl

TILE_M = 128   # nl.tile_size.gemm_stationary_fmax
TILE_K = 128   # nl.tile_size.pmax
TILE_N = 512   # nl.tile_size.gemm_moving_fmax


def _shapes(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, f"lhsT [K, M] and rhs [K, N] contract over K ({K} != {K2})"
    assert nl.tile_size.gemm_stationary_fmax == TILE_M and nl.tile_size.pmax == TILE_K
    assert nl.tile_size.gemm_moving_fmax == TILE_N
    assert M % TILE_M == 0 and K % TILE_K == 0 and N % TILE_N == 0, (M, K, N)
    return M, K, N


@nki.jit(platform_target="trn2")
def matmul_tiled(lhsT, rhs):
    M, K, N = _shapes(lhsT, rhs)
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                a = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                nisa.dma_copy(dst=b, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            out = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=acc)
            nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], src=out)
    return result


@nki.jit(platform_target="trn2")
def matmul_hoisted(lhsT, rhs):
    M, K, N = _shapes(lhsT, rhs)
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.hbm)
    for m in nl.affine_range(M // TILE_M):
        # The whole A^T column for this m (K x TILE_M), one tile per DMA, reused for every n.
        a_col = []
        for k in nl.affine_range(K // TILE_K):
            a = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
            a_col.append(a)
        for n in nl.affine_range(N // TILE_N):
            # The whole B column for this n, loaded before the matmuls that use it.
            b_col = []
            for k in nl.affine_range(K // TILE_K):
                b = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                b_col.append(b)
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                nisa.nc_matmul(dst=acc, stationary=a_col[k], moving=b_col[k])
            out = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out, src=acc)
            nisa.dma_copy(dst=result[m * TILE_M:(m + 1) * TILE_M, n * TILE_N:(n + 1) * TILE_N], src=out)
    return result


@nki.jit(platform_target="trn2")
def matmul_blocked(lhsT, rhs):
    M, K, N = _shapes(lhsT, rhs)
    TILES_IN_BLOCK_M = TILES_IN_BLOCK_N = 2
    BLOCK_M, BLOCK_N = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N
    assert M % BLOCK_M == 0 and N % BLOCK_N == 0, (M, N)
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.hbm)
    for m in nl.affine_range(M // BLOCK_M):
        a_block = []   # [bm][k]: TILES_IN_BLOCK_M A^T columns over all of K
        for bm in nl.affine_range(TILES_IN_BLOCK_M):
            col = (m * TILES_IN_BLOCK_M + bm) * TILE_M
            tiles = []
            for k in nl.affine_range(K // TILE_K):
                a = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TILE_K:(k + 1) * TILE_K, col:col + TILE_M])
                tiles.append(a)
            a_block.append(tiles)
        for n in nl.affine_range(N // BLOCK_N):
            b_block = []   # [bn][k]: TILES_IN_BLOCK_N B columns over all of K
            for bn in nl.affine_range(TILES_IN_BLOCK_N):
                col = (n * TILES_IN_BLOCK_N + bn) * TILE_N
                tiles = []
                for k in nl.affine_range(K // TILE_K):
                    b = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=b, src=rhs[k * TILE_K:(k + 1) * TILE_K, col:col + TILE_N])
                    tiles.append(b)
                b_block.append(tiles)
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TILE_K):
                        nisa.nc_matmul(dst=acc, stationary=a_block[bm][k], moving=b_block[bn][k])
                    out = nl.ndarray((TILE_M, TILE_N), dtype=result.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=out, src=acc)
                    row = (m * TILES_IN_BLOCK_M + bm) * TILE_M
                    col = (n * TILES_IN_BLOCK_N + bn) * TILE_N
                    nisa.dma_copy(dst=result[row:row + TILE_M, col:col + TILE_N], src=out)
    return result


@nki.jit(platform_target="trn2")
def matmul_optimized(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    M, K, N = _shapes(lhsT, rhs)
    BLOCK_M, BLOCK_N, BLOCK_K = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    assert M % BLOCK_M == 0 and N % BLOCK_N == 0 and K % BLOCK_K == 0, (M, N, K)
    NUM_BLOCK_M, NUM_BLOCK_N, NUM_BLOCK_K = M // BLOCK_M, N // BLOCK_N, K // BLOCK_K
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.hbm)
    for n in nl.affine_range(NUM_BLOCK_N):
        # Partial sums of this BLOCK_N column of C, [m][bm][bn] tiles in the inputs' dtype, zeroed.
        partial = []
        for _m in range(NUM_BLOCK_M):
            rows = []
            for _bm in range(TILES_IN_BLOCK_M):
                cols = []
                for _bn in range(TILES_IN_BLOCK_N):
                    t = nl.ndarray((TILE_M, TILE_N), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.memset(dst=t, value=0.0)
                    cols.append(t)
                rows.append(cols)
            partial.append(rows)
        for k in nl.sequential_range(NUM_BLOCK_K):
            # TILES_IN_BLOCK_K rows of B, [TILE_K, BLOCK_N] each: one DMA per row.
            b_rows = []
            for bk in range(TILES_IN_BLOCK_K):
                r = (k * TILES_IN_BLOCK_K + bk) * TILE_K
                b = nl.ndarray((TILE_K, BLOCK_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[r:r + TILE_K, n * BLOCK_N:(n + 1) * BLOCK_N])
                b_rows.append(b)
            for m in nl.affine_range(NUM_BLOCK_M):
                # TILES_IN_BLOCK_K rows of A^T, [TILE_K, BLOCK_M] each.
                a_rows = []
                for bk in nl.affine_range(TILES_IN_BLOCK_K):
                    r = (k * TILES_IN_BLOCK_K + bk) * TILE_K
                    a = nl.ndarray((TILE_K, BLOCK_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a, src=lhsT[r:r + TILE_K, m * BLOCK_M:(m + 1) * BLOCK_M])
                    a_rows.append(a)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    for bm in nl.affine_range(TILES_IN_BLOCK_M):
                        acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(dst=acc, stationary=a_rows[bk][:, bm * TILE_M:(bm + 1) * TILE_M],
                                           moving=b_rows[bk][:, bn * TILE_N:(bn + 1) * TILE_N])
                        p = partial[m][bm][bn]
                        nisa.tensor_tensor(dst=p, data1=p, data2=acc, op=nl.add)
        for m in nl.affine_range(NUM_BLOCK_M):
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                packed = nl.ndarray((TILE_M, BLOCK_N), dtype=nl.float32, buffer=nl.sbuf)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    nisa.tensor_copy(dst=packed[:, bn * TILE_N:(bn + 1) * TILE_N], src=partial[m][bm][bn])
                r = (m * TILES_IN_BLOCK_M + bm) * TILE_M
                nisa.dma_copy(dst=result[r:r + TILE_M, n * BLOCK_N:(n + 1) * BLOCK_N], src=packed)
    return result


STAGES = [("tiled", matmul_tiled), ("hoisted", matmul_hoisted), ("blocked", matmul_blocked),
          ("optimized", matmul_optimized)]
