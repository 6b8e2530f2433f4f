"""A family of matrix multiplications: result[M, N] = lhsT.T @ rhs, from simplest to fastest.

``lhsT`` is [K, M] (the left operand already transposed, so that the contraction dim
K lies on the partitions) and ``rhs`` is [K, N]. The Tensor Engine multiplies a
stationary [K<=128, M<=128] tile by a moving [K<=128, N<=512] tile into PSUM.

* :func:`matmul_basic`: one tile of each operand.
* :func:`matmul_tiled`: every [128, 512] result block accumulates K/128 matmuls in one
  PSUM tile; both operands are reloaded for every block.
* :func:`matmul_hoisted`: each operand tile is loaded once per row or column of blocks.
* :func:`matmul_blocked`: blocks of the free dimensions share their loads.
* :func:`matmul_optimized`: blocks of M, N and K; partial results accumulate in SBUF.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


@nki.jit
def matmul_basic(lhsT, rhs):
    """result = lhsT.T @ rhs for K <= 128, M <= 128, N <= 512."""
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    lhsT_tile = nl.ndarray((k_size, m_size), dtype=lhsT.dtype, buffer=nl.sbuf)
    rhs_tile = nl.ndarray((k_size, n_size), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=lhsT_tile, src=lhsT)
    nisa.dma_copy(dst=rhs_tile, src=rhs)
    acc = nl.ndarray((m_size, n_size), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=lhsT_tile, moving=rhs_tile)
    out_tile = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out_tile, src=acc)
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=result, src=out_tile)
    return result


def _tile_sizes():
    return nl.tile_size.gemm_stationary_fmax, nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax


@nki.jit
def matmul_tiled(lhsT, rhs):
    """result[M, N] = lhsT.T @ rhs for M % 128 == K % 128 == N % 512 == 0."""
    k_size, m_size = lhsT.shape
    k_rhs, n_size = rhs.shape
    assert k_size == k_rhs, "contraction dims differ"
    tile_m, tile_k, tile_n = _tile_sizes()
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


def _load_tiles(src, k_tiles, tile_k, cols, k0=0):
    """``k_tiles`` [128, width] SBUF tiles of the column block ``cols`` of ``src``, from row ``k0``."""
    tiles = []
    for k in nl.affine_range(k_tiles):
        tile = nl.ndarray((tile_k, cols.stop - cols.start), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=src[k0 + k * tile_k : k0 + (k + 1) * tile_k, cols])
        tiles.append(tile)
    return tiles


def _store_block(result, acc, rows, cols):
    out_tile = nl.ndarray(acc.shape, dtype=result.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out_tile, src=acc)
    nisa.dma_copy(dst=result[rows, cols], src=out_tile)


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """Like :func:`matmul_tiled`, but each lhsT column block is loaded once per row of result blocks."""
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    tile_m, tile_k, tile_n = _tile_sizes()
    k_tiles = k_size // tile_k
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(m_size // tile_m):
        rows = slice(m * tile_m, (m + 1) * tile_m)
        stationary = _load_tiles(lhsT, k_tiles, tile_k, rows)
        for n in nl.affine_range(n_size // tile_n):
            cols = slice(n * tile_n, (n + 1) * tile_n)
            moving = _load_tiles(rhs, k_tiles, tile_k, cols)
            acc = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_tiles):
                nisa.nc_matmul(dst=acc, stationary=stationary[k], moving=moving[k])
            _store_block(result, acc, rows, cols)
    return result


@nki.jit
def matmul_blocked(lhsT, rhs, blocks_m=2, blocks_n=2):
    """Blocks of result tiles share their loads: each lhsT tile serves ``blocks_n`` column tiles
    and each rhs tile ``blocks_m`` row tiles."""
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    tile_m, tile_k, tile_n = _tile_sizes()
    k_tiles = k_size // tile_k
    block_m, block_n = tile_m * blocks_m, tile_n * blocks_n
    assert m_size % block_m == 0 and n_size % block_n == 0, "M and N must be multiples of the blocks"
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(m_size // block_m):
        row_tiles = [slice(mb * block_m + i * tile_m, mb * block_m + (i + 1) * tile_m) for i in range(blocks_m)]
        stationary = [_load_tiles(lhsT, k_tiles, tile_k, rows) for rows in row_tiles]
        for nb in nl.affine_range(n_size // block_n):
            col_tiles = [slice(nb * block_n + j * tile_n, nb * block_n + (j + 1) * tile_n) for j in range(blocks_n)]
            moving = [_load_tiles(rhs, k_tiles, tile_k, cols) for cols in col_tiles]
            for i in nl.affine_range(blocks_m):
                for j in nl.affine_range(blocks_n):
                    acc = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(k_tiles):
                        nisa.nc_matmul(dst=acc, stationary=stationary[i][k], moving=moving[j][k])
                    _store_block(result, acc, row_tiles[i], col_tiles[j])
            del moving  # free these tiles before the next block's are loaded
        del stationary
    return result


@nki.jit
def matmul_optimized(lhsT, rhs, blocks_m=16, blocks_n=2, blocks_k=8):
    """Blocks of M, N and K: each loaded tile feeds many matmuls; partial sums stay in SBUF.

    For each K block, the [blocks_k x 128, blocks_m x 128] slab of lhsT and the
    [blocks_k x 128, blocks_n x 512] slab of rhs are loaded once, 128 rows per DMA
    (4 KiB and 2 KiB per partition in bf16, large enough for full DMA efficiency),
    multiplied into PSUM and added to float32 SBUF accumulators for the result block.
    """
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    tile_m, tile_k, tile_n = _tile_sizes()
    block_m, block_n, block_k = tile_m * blocks_m, tile_n * blocks_n, tile_k * blocks_k
    assert m_size % block_m == 0 and n_size % block_n == 0 and k_size % block_k == 0, "shape must tile into blocks"
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(m_size // block_m):
        m_cols = slice(mb * block_m, (mb + 1) * block_m)
        for nb in nl.affine_range(n_size // block_n):
            n_cols = slice(nb * block_n, (nb + 1) * block_n)
            partial = [
                [nl.zeros((tile_m, tile_n), dtype=nl.float32, buffer=nl.sbuf) for _ in range(blocks_n)]
                for _ in range(blocks_m)
            ]
            for kb in nl.sequential_range(k_size // block_k):
                stationary = _load_tiles(lhsT, blocks_k, tile_k, m_cols, kb * block_k)
                moving = _load_tiles(rhs, blocks_k, tile_k, n_cols, kb * block_k)
                for i in nl.affine_range(blocks_m):
                    for j in nl.affine_range(blocks_n):
                        acc = nl.ndarray((tile_m, tile_n), dtype=nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(blocks_k):
                            nisa.nc_matmul(
                                dst=acc,
                                stationary=stationary[k][:, i * tile_m : (i + 1) * tile_m],
                                moving=moving[k][:, j * tile_n : (j + 1) * tile_n],
                            )
                        nisa.tensor_tensor(dst=partial[i][j], data1=partial[i][j], data2=acc, op=nl.add)
            for i in nl.affine_range(blocks_m):
                for j in nl.affine_range(blocks_n):
                    rows = slice(mb * block_m + i * tile_m, mb * block_m + (i + 1) * tile_m)
                    cols = slice(nb * block_n + j * tile_n, nb * block_n + (j + 1) * tile_n)
                    out_tile = nl.ndarray((tile_m, tile_n), dtype=result.dtype, buffer=nl.sbuf)
                    nisa.tensor_copy(dst=out_tile, src=partial[i][j])
                    nisa.dma_copy(dst=result[rows, cols], src=out_tile)
    return result
