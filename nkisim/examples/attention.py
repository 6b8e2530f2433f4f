"""Causal self-attention for one head: out = softmax(q k^T / sqrt(d) + causal mask) v.

Queries go to partitions 128 at a time. Scores for a query tile come from one matmul
against all keys (S <= 512 columns fit one PSUM bank). The causal mask is an
``affine_select`` on ``query - key >= 0``. The probabilities are transposed block by
block on the Tensor Engine and multiplied with v, accumulating in PSUM.
"""

import math

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

MASKED = -3.0e38  # about float32's lowest: exp() of it is exactly 0


@nki.jit
def causal_attention(q_t, k_t, v):
    """Attention for q_t, k_t [d, S] (transposed, d <= 128) and v [S, d], S % 128 == 0, S <= 512."""
    d, seq = q_t.shape
    block = nl.tile_size.pmax
    assert seq % block == 0 and seq <= nl.tile_size.psum_fmax, "S must be a multiple of 128, at most 512"
    out = nl.ndarray((seq, d), dtype=v.dtype, buffer=nl.shared_hbm)
    keys = nl.ndarray((d, seq), dtype=k_t.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=keys, src=k_t)
    values = []
    for kb in nl.affine_range(seq // block):
        v_tile = nl.ndarray((block, d), dtype=v.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=v_tile, src=v[kb * block : (kb + 1) * block])
        values.append(v_tile)
    for qb in nl.affine_range(seq // block):
        q0 = qb * block
        queries = nl.ndarray((d, block), dtype=q_t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=queries, src=q_t[:, q0 : q0 + block])
        scores = nl.ndarray((block, seq), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=scores, stationary=queries, moving=keys)
        scaled = nl.ndarray((block, seq), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=scaled, op=nl.copy, data=scores, scale=1.0 / math.sqrt(d))
        # keep key j for query q0 + c when (q0 + c) - j >= 0
        masked = nl.ndarray((block, seq), dtype=nl.float32, buffer=nl.sbuf)
        nisa.affine_select(
            dst=masked,
            pattern=[[-1, seq]],
            offset=q0,
            channel_multiplier=1,
            on_true_tile=scaled,
            on_false_value=MASKED,
            cmp_op=nl.greater_equal,
        )
        neg_max = nl.ndarray((block, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=masked, axis=1, negate=True)
        probs = nl.ndarray((block, seq), dtype=v.dtype, buffer=nl.sbuf)
        total = nl.ndarray((block, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(
            dst=probs,
            op=nl.exp,
            data=masked,
            bias=neg_max,
            reduce_op=nl.add,
            reduce_res=total,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )
        acc = nl.ndarray((block, d), dtype=nl.float32, buffer=nl.psum)
        for kb in nl.affine_range(seq // block):
            flipped = nl.ndarray((block, block), dtype=v.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=flipped, data=probs[:, kb * block : (kb + 1) * block])
            probs_t = nl.ndarray((block, block), dtype=v.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=probs_t, src=flipped)
            nisa.nc_matmul(dst=acc, stationary=probs_t, moving=values[kb])
        inverse = nl.ndarray((block, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inverse, data=total)
        result = nl.ndarray((block, d), dtype=v.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=result, data=acc, op0=nl.multiply, operand0=inverse)
        nisa.dma_copy(dst=out[q0 : q0 + block], src=result)
    return out
