"""The row softmax of ``nkisim.examples.softmax``, written against ``neuronxcc.nki``.

One ``activation`` gives exp(x - max) and, through ``reduce_res``, its row sum; one
``tensor_scalar`` multiplies by the reciprocal of the sum.
"""

import numpy as np

import nkisim.nki.legacy as nki
import nkisim.nki.legacy.isa as nisa
import nkisim.nki.legacy.language as nl


@nki.jit
def softmax_rows(x):
    """Softmax over the last dim of x [N, D], for N % 128 == 0."""
    n_rows, width = x.shape
    tile_p = nl.tile_size.pmax
    assert n_rows % tile_p == 0, "rows must tile into 128 partitions"
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:tile_p, 0:width]
    for i in nl.affine_range(n_rows // tile_p):
        tile = nl.load(x[i * tile_p + i_p, i_f])
        neg_max = nisa.tensor_reduce(np.max, tile, axis=1, negate=True, dtype=nl.float32)
        total = nl.ndarray((tile_p, 1), dtype=nl.float32, buffer=nl.sbuf)
        exps = nisa.activation(
            op=nl.exp,
            data=tile,
            bias=neg_max,
            reduce_op=nl.add,
            reduce_res=total,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
            dtype=nl.float32,
        )
        inverse = nisa.activation(op=nl.reciprocal, data=total)
        result = nisa.tensor_scalar(exps, np.multiply, inverse, dtype=x.dtype)
        nl.store(out[i * tile_p + i_p, i_f], value=result)
    return out
