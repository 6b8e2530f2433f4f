"""A tiled tensor add in NKI 0.2 style, and its composition a * b * (a + b).

Only the imports differ from a kernel written for hardware:
``import nki`` becomes ``import nkisim.nki as nki`` and so on.
"""

import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


@nki.jit(platform_target="trn1")
def nki_tensor_add(a_input, b_input):
    """Element-wise a + b for inputs that tile evenly into [128, 512] blocks."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    rows, cols = a_input.shape
    tile_rows, tile_cols = 128, 512
    assert a_input.shape == b_input.shape, "inputs must have one shape"
    assert rows % tile_rows == 0 and cols % tile_cols == 0, "shape must tile into [128, 512]"

    for m in nl.affine_range(rows // tile_rows):
        for n in nl.affine_range(cols // tile_cols):
            block = (slice(m * tile_rows, (m + 1) * tile_rows), slice(n * tile_cols, (n + 1) * tile_cols))
            a_tile = nl.ndarray(shape=(tile_rows, tile_cols), dtype=a_input.dtype, buffer=nl.sbuf)
            b_tile = nl.ndarray(shape=(tile_rows, tile_cols), dtype=b_input.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a_tile, src=a_input[block])
            nisa.dma_copy(dst=b_tile, src=b_input[block])
            c_tile = nl.ndarray(shape=(tile_rows, tile_cols), dtype=a_input.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
            nisa.dma_copy(dst=c_output[block], src=c_tile)
    return c_output


def mul_add_mul(a, b):
    """a * b * (a + b), with the addition done by the simulated kernel."""
    c = nki_tensor_add(a, b)
    return a * b * c
