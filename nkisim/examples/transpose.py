"""2-D transpose of an HBM matrix, in 128 x 128 blocks through the Tensor Engine.

Each block is loaded into SBUF, transposed by ``nc_transpose`` into PSUM (an
identity matmul on the PE array), copied back to SBUF and stored at the mirrored
block position.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


@nki.jit
def transpose2d(x):
    """out = x.T for x [R, C] with R and C multiples of 128 (or smaller than 128)."""
    rows, cols = x.shape
    block = nl.tile_size.pmax
    block_r, block_c = min(rows, block), min(cols, block)
    assert rows % block_r == 0 and cols % block_c == 0, "dims must tile into 128 x 128 blocks"
    out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(rows // block_r):
        for j in nl.affine_range(cols // block_c):
            src_rows = slice(i * block_r, (i + 1) * block_r)
            src_cols = slice(j * block_c, (j + 1) * block_c)
            tile = nl.ndarray((block_r, block_c), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x[src_rows, src_cols])
            flipped = nl.ndarray((block_c, block_r), dtype=x.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=tile)
            staged = nl.ndarray((block_c, block_r), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=staged, src=flipped)
            nisa.dma_copy(dst=out[src_cols, src_rows], src=staged)
    return out
