"""Buggy kernels: reads of on-chip memory nothing wrote.

Each kernel marks the line the sanitizer must name with ``# @<kernel name>``.
"""

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

P, F = 128, 64


def _stored(t):
    out = nl.ndarray(t.shape, t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


def never_loaded(a):
    """The second operand was allocated but never loaded."""
    x = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    res = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=res, data1=x, data2=y, op=nl.add)  # @never_loaded
    return _stored(res)


def half_loaded_partitions(a):
    """Only the first 64 partitions were loaded; all 128 are read."""
    x = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[0:64], src=a[0:64])
    res = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=res, data=x, op0=nl.multiply, operand0=2.0)  # @half_loaded_partitions
    return _stored(res)


def half_loaded_columns(a):
    """The last column block was never loaded; the DMA to HBM reads it."""
    x = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[:, 0 : F - 8], src=a[:, 0 : F - 8])
    out = nl.ndarray((P, F), a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)  # @half_loaded_columns
    return out


def psum_never_written(a):
    """A PSUM tile copied out before any matmul wrote it."""
    acc = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
    res = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)  # @psum_never_written
    return _stored(res)


def bias_never_written(a):
    """The activation's per-partition bias was allocated, not filled."""
    x = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    bias = nl.ndarray((P, 1), nl.float32, buffer=nl.sbuf)
    res = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.activation(dst=res, op=nl.exp, data=x, bias=bias)  # @bias_never_written
    return _stored(res)


def matmul_moving_half_written(a, b):
    """The moving tile's second half of columns was never loaded."""
    lhs = nl.ndarray((P, P), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=lhs, src=a)
    rhs = nl.ndarray((P, F), b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rhs[:, 0 : F // 2], src=b[:, 0 : F // 2])
    acc = nl.ndarray((P, F), nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=lhs, moving=rhs)  # @matmul_moving_half_written
    res = nl.ndarray((P, F), nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    return _stored(res)


def partly_copied_operand(a):
    """Only half of ``y`` was copied before it is used whole."""
    x = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a[0:P])
    y = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y[:, 0 : F // 2], src=x[:, 0 : F // 2])
    res = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=res, data1=x, data2=y, op=nl.multiply)  # @partly_copied_operand
    return _stored(res)


def used_before_load_in_loop(a):
    """The load was moved below its first use."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        x = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y, op=nl.exp, data=x)  # @used_before_load_in_loop
        nisa.dma_copy(dst=x, src=a[i * P : (i + 1) * P])
        nisa.dma_copy(dst=out[i * P : (i + 1) * P], src=y)
    return out


def reduce_over_unwritten_tail(a):
    """The row sum covers 64 columns, of which only 48 were loaded."""
    x = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x[:, 0:48], src=a[:, 0:48])
    s = nl.ndarray((P, 1), a.dtype, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=s, op=nl.add, data=x, axis=1)  # @reduce_over_unwritten_tail
    return _stored(s)
