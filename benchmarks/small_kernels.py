"""Small-tile kernels for the per-instruction benchmarks: thousands of 128x64 instructions.

:func:`vector_chain` issues ``steps`` ``tensor_tensor`` instructions on two SBUF tiles;
:func:`engine_mix` issues, per step, a DMA load, a matmul on the Tensor Engine, a
``tensor_tensor`` on the Vector Engine, an ``activation`` on the Scalar Engine, a PSUM
copy and a DMA store (six instructions).
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

TILE = (128, 64)


@nki.jit
def vector_chain(a, b, steps=2000):
    """``steps`` 128x64 element-wise adds that ping-pong between two tiles."""
    out = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
    for i in range(steps):
        if i % 2:
            nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.multiply)
        else:
            nisa.tensor_tensor(dst=y, data1=x, data2=y, op=nl.add)
    nisa.dma_copy(dst=out, src=x)
    return out


@nki.jit
def engine_mix(a, w, steps=400):
    """Per step: load a 128x64 tile, matmul it by ``w``, add, scale on the Scalar Engine, store."""
    rows = a.shape[0]
    out = nl.ndarray((rows, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    weights = nl.ndarray(TILE, dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=weights, src=w)
    for i in range(steps):
        block = slice((i % (rows // 128)) * 128, (i % (rows // 128) + 1) * 128)
        tile = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a[block])
        acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=tile, moving=weights)
        summed = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=summed, data1=tile, data2=weights, op=nl.add)
        scaled = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=scaled, op=nl.exp, data=summed, scale=0.5)
        product = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=product, src=acc)
        nisa.dma_copy(dst=out[block], src=scaled)
    return out


@nki.jit
def row_shuffle(table, index):
    """Per 128 entries of ``index``: gather those rows of ``table`` into SBUF, then scatter them to the same rows
    of the output (a permutation ``index`` copies the table)."""
    rows, cols = table.shape
    out = nl.ndarray((rows, cols), dtype=table.dtype, buffer=nl.shared_hbm)
    for start in range(0, index.shape[0], 128):
        where = nl.ndarray((128, 1), dtype=index.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=index[start : start + 128])
        block = nl.ndarray((128, cols), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=block, src=table.ap([[cols, 128], [1, cols]], vector_offset=where, indirect_dim=0))
        nisa.dma_copy(dst=out.ap([[cols, 128], [1, cols]], vector_offset=where, indirect_dim=0), src=block)
    return out
