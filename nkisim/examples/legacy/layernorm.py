"""The LayerNorm of ``nkisim.examples.layernorm``, written against ``neuronxcc.nki``.

Each instruction returns its result tile; ``stats[:, a:b] = nisa.bn_stats(...)`` and
``normed[...] = nisa.tensor_tensor(...)`` write the named tile directly, so the kernel
emits the same instructions as the current-API version.
"""

import nkisim.nki.legacy as nki
import nkisim.nki.legacy.isa as nisa
import nkisim.nki.legacy.language as nl

STATS = 6  # bn_stats: (count, mean, variance*count) for the even and the odd elements


def _rows_of(vector, parts):
    """A float32 [parts, W] tile with ``vector`` [W] (HBM) in every partition: a K = 1 matmul per 512 columns."""
    width = vector.shape[-1]
    row = nl.load(vector.reshape((1, width)), dtype=nl.float32)
    ones = nl.ones((1, parts), dtype=nl.float32)
    tile = nl.ndarray((parts, width), dtype=nl.float32, buffer=nl.sbuf)
    step = nl.tile_size.gemm_moving_fmax
    for start in nl.affine_range(0, width, step):
        stop = min(width, start + step)
        tile[:, start:stop] = nisa.nc_matmul(ones, row[:, start:stop])
    return tile


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last dim of x [N, D] (N % 128 == 0) with gamma and beta [D]."""
    n_rows, width = x.shape
    parts = nl.tile_size.pmax
    chunk = nl.tile_size.bn_stats_fmax
    chunks = (width + chunk - 1) // chunk
    assert n_rows % parts == 0, "rows must tile into 128 partitions"
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    weight = _rows_of(gamma, parts)
    bias = _rows_of(beta, parts)
    i_p, i_f = nl.mgrid[0:parts, 0:width]
    for i in nl.affine_range(n_rows // parts):
        tile = nl.load(x[i * parts + i_p, i_f])
        stats = nl.ndarray((parts, STATS * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(chunks):
            cols = slice(c * chunk, min(width, (c + 1) * chunk))
            stats[:, c * STATS : (c + 1) * STATS] = nisa.bn_stats(tile[:, cols], dtype=nl.float32)
        mean_var = nisa.bn_aggr(stats)
        rstd = nisa.activation(op=nl.rsqrt, data=nisa.tensor_scalar(mean_var[:, 1:2], nl.add, eps))
        normed = nisa.tensor_scalar(
            tile, nl.subtract, mean_var[:, 0:1], op1=nl.multiply, operand1=rstd, dtype=nl.float32
        )
        normed[...] = nisa.tensor_tensor(normed, weight, nl.multiply)
        result = nisa.tensor_tensor(normed, bias, nl.add, dtype=x.dtype)
        nl.store(out[i * parts + i_p, i_f], value=result)
    return out
