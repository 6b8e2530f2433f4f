"""Cumulative sum along rows with one Vector Engine scan per tile.

``tensor_tensor_scan`` computes ``r[i] = (data0[i] * r[i-1]) + data1[i]``; with
data0 all ones and data1 the input, that is a running sum.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


@nki.jit
def cumsum_rows(x):
    """out[i, j] = sum(x[i, :j+1]) for x [N, D], N % 128 == 0 (or N < 128)."""
    n_rows, width = x.shape
    parts = min(n_rows, nl.tile_size.pmax)
    assert n_rows % parts == 0, "rows must tile into partitions"
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ones = nl.ndarray((parts, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=ones, value=1.0)
    for i in nl.affine_range(n_rows // parts):
        rows = slice(i * parts, (i + 1) * parts)
        tile = nl.ndarray((parts, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[rows])
        sums = nl.ndarray((parts, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor_scan(dst=sums, data0=ones, data1=tile, initial=0.0, op0=nl.multiply, op1=nl.add)
        nisa.dma_copy(dst=out[rows], src=sums)
    return out
