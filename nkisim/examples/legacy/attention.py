"""The causal attention of ``nkisim.examples.attention``, written against ``neuronxcc.nki``.

The causal mask is ``nisa.affine_select`` on the predicate ``q0 + i_q - i_k >= 0``;
``acc += nisa.nc_matmul(...)`` accumulates the probabilities times v in one PSUM tile.
"""

import math

import numpy as np

import nkisim.nki.legacy as nki
import nkisim.nki.legacy.isa as nisa
import nkisim.nki.legacy.language as nl

MASKED = -3.0e38  # about float32's lowest: exp() of it is exactly 0


@nki.jit
def causal_attention(q_t, k_t, v):
    """Attention for q_t, k_t [d, S] (transposed, d <= 128) and v [S, d], S % 128 == 0, S <= 512."""
    d, seq = q_t.shape
    block = nl.tile_size.pmax
    assert seq % block == 0 and seq <= nl.tile_size.psum_fmax, "S must be a multiple of 128, at most 512"
    out = nl.ndarray((seq, d), dtype=v.dtype, buffer=nl.shared_hbm)
    keys = nl.load(k_t)
    i_b, i_d = nl.mgrid[0:block, 0:d]
    values = [nl.load(v[kb * block + i_b, i_d]) for kb in nl.affine_range(seq // block)]
    i_q = nl.arange(block)[:, None]
    i_k = nl.arange(seq)[None, :]
    for qb in nl.affine_range(seq // block):
        q0 = qb * block
        queries = nl.load(q_t[:, q0 : q0 + block])
        scores = nisa.nc_matmul(queries, keys)
        scaled = nisa.activation(op=nl.copy, data=scores, scale=1.0 / math.sqrt(d))
        masked = nisa.affine_select(q0 + i_q - i_k >= 0, scaled, MASKED)  # keep key j for query q0 + i
        neg_max = nisa.tensor_reduce(np.max, masked, axis=1, negate=True)
        total = nl.ndarray((block, 1), dtype=nl.float32, buffer=nl.sbuf)
        probs = nisa.activation(
            op=nl.exp,
            data=masked,
            bias=neg_max,
            reduce_op=nl.add,
            reduce_res=total,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
            dtype=v.dtype,
        )
        acc = nl.ndarray((block, d), dtype=nl.float32, buffer=nl.psum)
        for kb in nl.affine_range(seq // block):
            probs_t = nisa.tensor_copy(nisa.nc_transpose(probs[:, kb * block : (kb + 1) * block]))
            acc += nisa.nc_matmul(probs_t, values[kb])
        result = nisa.tensor_scalar(acc, np.multiply, nisa.reciprocal(total), dtype=v.dtype)
        nl.store(out[q0 : q0 + block], value=result)
    return out
