"""Row softmax: out[i, :] = exp(x[i, :] - max(x[i, :])) / sum(exp(x[i, :] - max(x[i, :]))).

Rows go to partitions in tiles of 128. The exponent and its row sum come from one
``activation`` (bias = -max, accumulated with ``reduce_cmd``), then one
``tensor_scalar`` multiplies by the reciprocal of the sum.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


@nki.jit
def softmax_rows(x):
    """Softmax over the last dim of x [N, D], for N % 128 == 0."""
    n_rows, width = x.shape
    tile_p = nl.tile_size.pmax
    assert n_rows % tile_p == 0, "rows must tile into 128 partitions"
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n_rows // tile_p):
        rows = slice(i * tile_p, (i + 1) * tile_p)
        tile = nl.ndarray((tile_p, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[rows])
        neg_max = nl.ndarray((tile_p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=tile, axis=1, negate=True)
        exps = nl.ndarray((tile_p, width), dtype=nl.float32, buffer=nl.sbuf)
        total = nl.ndarray((tile_p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(
            dst=exps,
            op=nl.exp,
            data=tile,
            bias=neg_max,
            reduce_op=nl.add,
            reduce_res=total,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )
        inverse = nl.ndarray((tile_p, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=inverse, op=nl.reciprocal, data=total)
        result = nl.ndarray((tile_p, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=result, data=exps, op0=nl.multiply, operand0=inverse)
        nisa.dma_copy(dst=out[rows], src=result)
    return out
