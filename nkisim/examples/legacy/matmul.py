"""The matmul family of ``nkisim.examples.matmul``, written against ``neuronxcc.nki``.

``result[M, N] = lhsT.T @ rhs`` with ``lhsT`` [K, M] and ``rhs`` [K, N]. Each tier issues the
instructions of its current-API counterpart in the same order: tiles are loaded with
``nl.load`` of index expressions, every [128, 512] result block accumulates in a PSUM tile
started by ``nl.zeros(..., buffer=nl.psum)`` (``acc += nisa.nc_matmul(...)``), and leaves
through ``nl.copy`` and ``nl.store``.

* :func:`matmul_basic`: one tile of each operand.
* :func:`matmul_tiled`: both operands reloaded for every result block.
* :func:`matmul_hoisted`: each operand tile loaded once per row or column of blocks.
* :func:`matmul_blocked`: blocks of the free dimensions share their loads.
* :func:`matmul_optimized`: blocks of M, N and K; partial results accumulate in SBUF.
"""

import nkisim.nki.legacy as nki
import nkisim.nki.legacy.isa as nisa
import nkisim.nki.legacy.language as nl

#: The Tensor Engine's tile: a stationary [128, 128] by a moving [128, 512] into PSUM.
TILE_K, TILE_M, TILE_N = 128, 128, 512


@nki.jit
def matmul_basic(lhsT, rhs):
    """result = lhsT.T @ rhs for K <= 128, M <= 128, N <= 512."""
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    i_k, i_m = nl.mgrid[0:k_size, 0:m_size]
    _, i_n = nl.mgrid[0:k_size, 0:n_size]
    lhsT_tile = nl.load(lhsT[i_k, i_m])
    rhs_tile = nl.load(rhs[i_k, i_n])
    acc = nisa.nc_matmul(lhsT_tile, rhs_tile)
    out_tile = nl.copy(acc, dtype=lhsT.dtype)
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_rm, i_rn = nl.mgrid[0:m_size, 0:n_size]
    nl.store(result[i_rm, i_rn], value=out_tile)
    return result


@nki.jit
def matmul_tiled(lhsT, rhs):
    """result[M, N] = lhsT.T @ rhs for M % 128 == K % 128 == N % 512 == 0."""
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_k, i_m = nl.mgrid[0:TILE_K, 0:TILE_M]
    _, i_n = nl.mgrid[0:TILE_K, 0:TILE_N]
    i_rm, i_rn = nl.mgrid[0:TILE_M, 0:TILE_N]
    for m in nl.affine_range(m_size // TILE_M):
        for n in nl.affine_range(n_size // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // TILE_K):
                lhsT_tile = nl.load(lhsT[k * TILE_K + i_k, m * TILE_M + i_m])
                rhs_tile = nl.load(rhs[k * TILE_K + i_k, n * TILE_N + i_n])
                acc += nisa.nc_matmul(lhsT_tile, rhs_tile)
            out_tile = nl.copy(acc, dtype=result.dtype)
            nl.store(result[m * TILE_M + i_rm, n * TILE_N + i_rn], value=out_tile)
    return result


def _load_column_tiles(src, k_tiles, col0, width, k0=0):
    """``k_tiles`` [128, width] SBUF tiles of ``src``: rows from ``k0``, columns from ``col0``."""
    i_k, i_c = nl.mgrid[0:TILE_K, 0:width]
    return [nl.load(src[k0 + k * TILE_K + i_k, col0 + i_c]) for k in nl.affine_range(k_tiles)]


def _store_block(result, acc, row0, col0):
    """``acc`` (PSUM) cast to the result's dtype and stored at ``result[row0:, col0:]``."""
    i_rm, i_rn = nl.mgrid[0:TILE_M, 0:TILE_N]
    out_tile = nl.copy(acc, dtype=result.dtype)
    nl.store(result[row0 + i_rm, col0 + i_rn], value=out_tile)


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """Like :func:`matmul_tiled`, but each lhsT column block is loaded once per row of result blocks."""
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    k_tiles = k_size // TILE_K
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // TILE_M):
        stationary = _load_column_tiles(lhsT, k_tiles, m * TILE_M, TILE_M)
        for n in nl.affine_range(n_size // TILE_N):
            moving = _load_column_tiles(rhs, k_tiles, n * TILE_N, TILE_N)
            acc = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_tiles):
                acc += nisa.nc_matmul(stationary[k], moving[k])
            _store_block(result, acc, m * TILE_M, n * TILE_N)
    return result


@nki.jit
def matmul_blocked(lhsT, rhs, blocks_m=2, blocks_n=2):
    """Blocks of result tiles share their loads: each lhsT tile serves ``blocks_n`` column tiles
    and each rhs tile ``blocks_m`` row tiles."""
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    k_tiles = k_size // TILE_K
    block_m, block_n = TILE_M * blocks_m, TILE_N * blocks_n
    assert m_size % block_m == 0 and n_size % block_n == 0, "M and N must be multiples of the blocks"
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(m_size // block_m):
        row0 = [mb * block_m + i * TILE_M for i in range(blocks_m)]
        stationary = [_load_column_tiles(lhsT, k_tiles, r, TILE_M) for r in row0]
        for nb in nl.affine_range(n_size // block_n):
            col0 = [nb * block_n + j * TILE_N for j in range(blocks_n)]
            moving = [_load_column_tiles(rhs, k_tiles, c, TILE_N) for c in col0]
            for i in nl.affine_range(blocks_m):
                for j in nl.affine_range(blocks_n):
                    acc = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(k_tiles):
                        acc += nisa.nc_matmul(stationary[i][k], moving[j][k])
                    _store_block(result, acc, row0[i], col0[j])
            del moving  # free these tiles before the next block's are loaded
        del stationary
    return result


@nki.jit
def matmul_optimized(lhsT, rhs, blocks_m=16, blocks_n=2, blocks_k=8):
    """Blocks of M, N and K: each loaded tile feeds many matmuls; partial sums stay in SBUF.

    For each K block, the [blocks_k x 128, blocks_m x 128] slab of lhsT and the
    [blocks_k x 128, blocks_n x 512] slab of rhs are loaded once, 128 rows per DMA,
    multiplied into PSUM and added to float32 SBUF accumulators for the result block.
    """
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    block_m, block_n, block_k = TILE_M * blocks_m, TILE_N * blocks_n, TILE_K * blocks_k
    assert m_size % block_m == 0 and n_size % block_n == 0 and k_size % block_k == 0, "shape must tile into blocks"
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_k, i_m = nl.mgrid[0:TILE_K, 0:TILE_M]
    _, i_n = nl.mgrid[0:TILE_K, 0:TILE_N]
    for mb in nl.affine_range(m_size // block_m):
        for nb in nl.affine_range(n_size // block_n):
            partial = [
                [nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf) for _ in range(blocks_n)]
                for _ in range(blocks_m)
            ]
            for kb in nl.sequential_range(k_size // block_k):
                stationary = _load_column_tiles(lhsT, blocks_k, mb * block_m, block_m, kb * block_k)
                moving = _load_column_tiles(rhs, blocks_k, nb * block_n, block_n, kb * block_k)
                for i in nl.affine_range(blocks_m):
                    for j in nl.affine_range(blocks_n):
                        acc = nl.zeros((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(blocks_k):
                            lhsT_tile = stationary[k][i_k, i * TILE_M + i_m]
                            acc += nisa.nc_matmul(lhsT_tile, moving[k][i_k, j * TILE_N + i_n])
                        partial[i][j] += acc
            for i in nl.affine_range(blocks_m):
                for j in nl.affine_range(blocks_n):
                    _store_block(result, partial[i][j], mb * block_m + i * TILE_M, nb * block_n + j * TILE_N)
    return result
