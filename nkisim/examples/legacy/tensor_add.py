"""The tiled tensor add of ``nkisim.examples.tensor_add``, written against ``neuronxcc.nki``.

With the alias installed the imports would read ``import neuronxcc.nki as nki`` and so on.
"""

import nkisim.nki.legacy as nki
import nkisim.nki.legacy.language as nl


@nki.jit(platform_target="trn1")
def nki_tensor_add(a_input, b_input):
    """Element-wise a + b for inputs that tile evenly into [128, 512] blocks."""
    c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    rows, cols = a_input.shape
    i_p, i_f = nl.mgrid[0:128, 0:512]
    for m in nl.affine_range(rows // 128):
        for n in nl.affine_range(cols // 512):
            a_tile = nl.load(a_input[m * 128 + i_p, n * 512 + i_f])
            b_tile = nl.load(b_input[m * 128 + i_p, n * 512 + i_f])
            c_tile = a_tile + b_tile
            nl.store(c_output[m * 128 + i_p, n * 512 + i_f], value=c_tile)
    return c_output
