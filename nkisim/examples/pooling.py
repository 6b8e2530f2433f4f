"""2-D average pooling with a square, non-overlapping window.

Channels go to partitions. The window sum is two reductions over views of the tile:
first along each row's window (the innermost axis), then across the window's rows.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


@nki.jit
def avg_pool2d(x, pool=2):
    """out[c, i, j] = mean(x[c, i*pool:(i+1)*pool, j*pool:(j+1)*pool]) for x [C <= 128, H, W]."""
    channels, height, width = x.shape
    assert channels <= nl.tile_size.pmax, "channels must fit the partitions"
    assert height % pool == 0 and width % pool == 0, "H and W must be multiples of the pool size"
    out_h, out_w = height // pool, width // pool
    tile = nl.ndarray((channels, height, width), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    # sum each row's windows: [C, H, W/p, p] -> [C, H, W/p]
    row_sums = nl.ndarray((channels, height, out_w), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=row_sums, op=nl.add, data=tile.reshape((channels, height, out_w, pool)), axis=3)
    # sum the window's rows: [C, H/p, p, W/p] -> [C, H/p, W/p]
    sums = nl.ndarray((channels, out_h, out_w), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=sums, op=nl.add, data=row_sums.reshape((channels, out_h, pool, out_w)), axis=2)
    result = nl.ndarray((channels, out_h, out_w), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=result, data=sums, op0=nl.multiply, operand0=1.0 / (pool * pool))
    out = nl.ndarray((channels, out_h, out_w), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out
