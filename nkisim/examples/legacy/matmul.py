"""The tiled matmul of ``nkisim.examples.matmul.matmul_tiled``, written against ``neuronxcc.nki``.

``result[M, N] = lhsT.T @ rhs``: every [128, 512] result block accumulates K/128 matmuls
in one PSUM tile (``acc += nisa.nc_matmul(...)``).
"""

import nkisim.nki.legacy as nki
import nkisim.nki.legacy.isa as nisa
import nkisim.nki.legacy.language as nl


@nki.jit
def matmul_tiled(lhsT, rhs):
    """result[M, N] = lhsT.T @ rhs for M % 128 == K % 128 == N % 512 == 0."""
    k_size, m_size = lhsT.shape
    _, n_size = rhs.shape
    result = nl.ndarray((m_size, n_size), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_k, i_m = nl.mgrid[0:128, 0:128]
    _, i_n = nl.mgrid[0:128, 0:512]
    i_rm, i_rn = nl.mgrid[0:128, 0:512]
    for m in nl.affine_range(m_size // 128):
        for n in nl.affine_range(n_size // 512):
            acc = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(k_size // 128):
                lhsT_tile = nl.load(lhsT[k * 128 + i_k, m * 128 + i_m])
                rhs_tile = nl.load(rhs[k * 128 + i_k, n * 512 + i_n])
                acc += nisa.nc_matmul(lhsT_tile, rhs_tile)
            out_tile = nl.copy(acc, dtype=result.dtype)
            nl.store(result[m * 128 + i_rm, n * 512 + i_rn], value=out_tile)
    return result
