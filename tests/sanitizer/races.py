"""Buggy kernels: accesses that only program order protects, which ``affine_range`` does not promise.

Each kernel marks the line the sanitizer must name with ``# @<kernel name>``.
"""

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

P, F = 128, 64


def hbm_same_rows(a):
    """Every iteration stores its tile to the same rows of ``out``: which one stays is undefined."""
    out = nl.ndarray((P, F), a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        t = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * P : (i + 1) * P])
        nisa.dma_copy(dst=out, src=t)  # @hbm_same_rows
    return out


def hbm_overlapping_windows(a):
    """Stores of 128 rows at a stride of 64 rows: neighbouring iterations overlap by half."""
    out = nl.ndarray((P // 2 * (a.shape[0] // P + 1), F), a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        t = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * P : (i + 1) * P])
        rows = out[i * (P // 2) : i * (P // 2) + P]
        nisa.dma_copy(dst=rows, src=t)  # @hbm_overlapping_windows
    return out


def hbm_columns_modulo(a):
    """Iterations i and i + 2 store to the same half of ``out``."""
    out = nl.ndarray((P, 2 * F), a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        t = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * P : (i + 1) * P])
        half = out[:, (i % 2) * F : (i % 2 + 1) * F]
        nisa.dma_copy(dst=half, src=t)  # @hbm_columns_modulo
    return out


def single_buffer_reused(a):
    """One SBUF buffer for every iteration: the next load may land while the last compute still reads it."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    buf = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(a.shape[0] // P):
        nisa.dma_copy(dst=buf, src=a[i * P : (i + 1) * P])  # @single_buffer_reused
        res = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=res, data=buf, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=out[i * P : (i + 1) * P], src=res)
    return out


def scalar_overwrites_shared(a):
    """The Scalar Engine rewrites a tile the Vector Engine read in an earlier iteration."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    shared = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    for i in nl.affine_range(a.shape[0] // P):
        x = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[i * P : (i + 1) * P])
        nisa.activation(dst=shared, op=nl.exp, data=x)  # @scalar_overwrites_shared
        res = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=res, data1=shared, data2=x, op=nl.add)
        nisa.dma_copy(dst=out[i * P : (i + 1) * P], src=res)
    return out


def matmul_over_partial_read(a, b):
    """A PSUM accumulation read inside the loop: the next iteration's matmul overwrites what was read."""
    out = nl.ndarray((P, F), nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
    partial = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    for k in nl.affine_range(a.shape[0] // P):
        lhs = nl.ndarray((P, P), a.dtype, buffer=nl.sbuf)
        rhs = nl.ndarray((P, F), b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=lhs, src=a[k * P : (k + 1) * P])
        nisa.dma_copy(dst=rhs, src=b[k * P : (k + 1) * P])
        nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs)  # @matmul_over_partial_read
        nisa.tensor_copy(dst=partial, src=acc)
    nisa.dma_copy(dst=out, src=partial)
    return out


def hbm_first_column_every_iteration(a):
    """Each iteration stores its row sums into the same column of ``out``."""
    out = nl.ndarray((P, 1), a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        t = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * P : (i + 1) * P])
        s = nl.ndarray((P, 1), a.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s, op=nl.add, data=t, axis=1)
        nisa.dma_copy(dst=out[:, 0:1], src=s)  # @hbm_first_column_every_iteration
    return out


def runtime_offset_same_columns(a):
    """Every iteration stores to the same columns at one run-time row offset: the rows collide."""
    out = nl.ndarray((2 * P, F), a.dtype, buffer=nl.shared_hbm)
    row = nl.ndarray((1, 1), nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=row, value=P // 2)
    for i in nl.affine_range(a.shape[0] // P):
        t = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * P : (i + 1) * P])
        rows = out.ap(pattern=[[F, P], [1, F]], offset=0, scalar_offset=row, indirect_dim=0)
        nisa.dma_copy(dst=rows, src=t)  # @runtime_offset_same_columns
    return out
