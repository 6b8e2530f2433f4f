"""A Mamba-style selective scan, fused on one NeuronCore.

For each channel c (on partitions) and state n, over time t:

    h[c, n, t] = exp(delta[c, t] * A[c, n]) * h[c, n, t-1] + delta[c, t] * B[n, t] * u[c, t]
    y[c, t]    = sum over n of C[n, t] * h[c, n, t]

The decay comes from one ``activation(exp)`` with a per-partition scale, the recurrence
from one ``tensor_tensor_scan`` per state, and B and C rows are broadcast to every
partition by matmuls with a ones row.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.examples.common import broadcast_rows


@nki.jit
def selective_scan(delta, u, A, B, C):
    """y [channels, L] for delta, u [channels, L], A [channels, N], B, C [N, L]; channels % 128 == 0."""
    channels, length = delta.shape
    states = A.shape[1]
    parts = nl.tile_size.pmax
    assert channels % parts == 0, "channels must tile into 128 partitions"
    y = nl.ndarray((channels, length), dtype=delta.dtype, buffer=nl.shared_hbm)
    b_rows = [broadcast_rows(B[n : n + 1, :], parts) for n in range(states)]
    c_rows = [broadcast_rows(C[n : n + 1, :], parts) for n in range(states)]
    for i in nl.affine_range(channels // parts):
        rows = slice(i * parts, (i + 1) * parts)
        delta_t = nl.ndarray((parts, length), dtype=nl.float32, buffer=nl.sbuf)
        u_t = nl.ndarray((parts, length), dtype=nl.float32, buffer=nl.sbuf)
        a_t = nl.ndarray((parts, states), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=delta_t, src=delta[rows])
        nisa.dma_copy(dst=u_t, src=u[rows])
        nisa.dma_copy(dst=a_t, src=A[rows])
        delta_u = nl.ndarray((parts, length), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=delta_u, data1=delta_t, data2=u_t, op=nl.multiply)
        acc = nl.zeros((parts, length), dtype=nl.float32, buffer=nl.sbuf)
        for n in nl.affine_range(states):
            decay = nl.ndarray((parts, length), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=decay, op=nl.exp, data=delta_t, scale=a_t[:, n : n + 1])
            drive = nl.ndarray((parts, length), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=drive, data1=delta_u, data2=b_rows[n], op=nl.multiply)
            hidden = nl.ndarray((parts, length), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor_scan(dst=hidden, data0=decay, data1=drive, initial=0.0, op0=nl.multiply, op1=nl.add)
            nisa.tensor_tensor(dst=hidden, data1=hidden, data2=c_rows[n], op=nl.multiply)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=hidden, op=nl.add)
        out_t = nl.ndarray((parts, length), dtype=delta.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out_t, src=acc)
        nisa.dma_copy(dst=y[rows], src=out_t)
    return y
