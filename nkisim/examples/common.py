"""Small building blocks shared by the example kernels."""

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


def broadcast_rows(vector, parts, width=None):
    """A float32 [parts, W] SBUF tile whose every partition holds ``vector``.

    ``vector`` is a [W] HBM tensor, or a [1, W] view of one. The broadcast is a
    matmul of a ones row (K = 1) with the vector on the Tensor Engine, 512 columns
    at a time, the usual NKI way to spread one row across partitions.
    """
    width = vector.shape[-1] if width is None else width
    row = nl.ndarray((1, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=vector)
    ones = nl.ndarray((1, parts), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    tile = nl.ndarray((parts, width), dtype=nl.float32, buffer=nl.sbuf)
    step = nl.tile_size.gemm_moving_fmax
    for start in nl.affine_range(0, width, step):
        cols = slice(start, min(width, start + step))
        spread = nl.ndarray((parts, cols.stop - cols.start), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=spread, stationary=ones, moving=row[:, cols])
        nisa.tensor_copy(dst=tile[:, cols], src=spread)
    return tile
