"""LayerNorm with the Vector Engine's batch-norm statistics: bn_stats per 512 columns, bn_aggr to combine.

out[i, :] = (x[i, :] - mean) / sqrt(var + eps) * gamma + beta, with the population
variance of each row.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.examples.common import broadcast_rows

STATS = 6  # bn_stats writes (count, mean, variance*count) for the even and the odd elements


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last dim of x [N, D] (N % 128 == 0) with gamma and beta [D]."""
    n_rows, width = x.shape
    parts = nl.tile_size.pmax
    chunk = nl.tile_size.bn_stats_fmax
    chunks = (width + chunk - 1) // chunk
    assert n_rows % parts == 0, "rows must tile into 128 partitions"
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    weight = broadcast_rows(gamma, parts)
    bias = broadcast_rows(beta, parts)
    for i in nl.affine_range(n_rows // parts):
        rows = slice(i * parts, (i + 1) * parts)
        tile = nl.ndarray((parts, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[rows])
        stats = nl.ndarray((parts, STATS * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(chunks):
            cols = slice(c * chunk, min(width, (c + 1) * chunk))
            nisa.bn_stats(dst=stats[:, c * STATS : (c + 1) * STATS], data=tile[:, cols])
        mean_var = nl.ndarray((parts, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mean_var, data=stats)
        var_eps = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=var_eps, data=mean_var[:, 1:2], op0=nl.add, operand0=eps)
        rstd = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=var_eps)
        normed = nl.ndarray((parts, width), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(
            dst=normed, data=tile, op0=nl.subtract, operand0=mean_var[:, 0:1], op1=nl.multiply, operand1=rstd
        )
        nisa.tensor_tensor(dst=normed, data1=normed, data2=weight, op=nl.multiply)
        result = nl.ndarray((parts, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=result, data1=normed, data2=bias, op=nl.add)
        nisa.dma_copy(dst=out[rows], src=result)
    return out
