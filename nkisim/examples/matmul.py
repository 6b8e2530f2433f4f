"""Tiled matrix multiplication: result = lhsT.T @ rhs, with K accumulated in PSUM.

``lhsT`` is [K, M] (the left operand, already transposed so that the contraction
dim K lies on the partitions) and ``rhs`` is [K, N]. Each [128, 512] block of the
result accumulates K / 128 matmuls in one PSUM tile, then goes back to HBM.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


@nki.jit
def matmul_tiled(lhsT, rhs):
    """result[M, N] = lhsT.T @ rhs for M % 128 == K % 128 == N % 512 == 0."""
    k_size, m_size = lhsT.shape
    k_rhs, n_size = rhs.shape
    assert k_size == k_rhs, "contraction dims differ"
    tile_m = nl.tile_size.gemm_stationary_fmax
    tile_k = nl.tile_size.pmax
    tile_n = nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for m in nl.affine_range(m_size // tile_m):
        rows = slice(m * tile_m, (m + 1) * tile_m)
        for n in nl.affine_range(n_size // tile_n):
            cols = slice(n * tile_n, (n + 1) * tile_n)
            acc = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // tile_k):
                depth = slice(k * tile_k, (k + 1) * tile_k)
                lhsT_tile = nl.ndarray((tile_k, tile_m), dtype=lhsT.dtype, buffer=nl.sbuf)
                rhs_tile = nl.ndarray((tile_k, tile_n), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=lhsT_tile, src=lhsT[depth, rows])
                nisa.dma_copy(dst=rhs_tile, src=rhs[depth, cols])
                nisa.nc_matmul(dst=acc, stationary=lhsT_tile, moving=rhs_tile)
            out_tile = nl.ndarray((tile_m, tile_n), dtype=result.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=out_tile, src=acc)
            nisa.dma_copy(dst=result[rows, cols], src=out_tile)
    return result
