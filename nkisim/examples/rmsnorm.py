"""RMSNorm: out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * gamma.

Rows go to partitions in tiles of 128. The sum of squares comes from an
``activation(square)`` with its add-reduction; gamma [D] is broadcast to every
partition once, by a matmul of a ones column with gamma on the Tensor Engine.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.examples.common import broadcast_rows


@nki.jit
def rmsnorm(x, gamma, eps=1e-6):
    """RMSNorm over the last dim of x [N, D] (N % 128 == 0) with weight gamma [D]."""
    n_rows, width = x.shape
    parts = nl.tile_size.pmax
    assert n_rows % parts == 0, "rows must tile into 128 partitions"
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    weight = broadcast_rows(gamma, parts)
    for i in nl.affine_range(n_rows // parts):
        rows = slice(i * parts, (i + 1) * parts)
        tile = nl.ndarray((parts, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[rows])
        squares = nl.ndarray((parts, width), dtype=nl.float32, buffer=nl.sbuf)
        sum_sq = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(
            dst=squares,
            op=nl.square,
            data=tile,
            reduce_op=nl.add,
            reduce_res=sum_sq,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )
        # rstd = 1 / sqrt(sum_sq / D + eps)
        mean_sq = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=mean_sq, data=sum_sq, op0=nl.multiply, operand0=1.0 / width, op1=nl.add, operand1=eps)
        rstd = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=mean_sq)
        scaled = nl.ndarray((parts, width), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=scaled, data=tile, op0=nl.multiply, operand0=rstd)
        result = nl.ndarray((parts, width), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=result, data1=scaled, data2=weight, op=nl.multiply)
        nisa.dma_copy(dst=out[rows], src=result)
    return out
