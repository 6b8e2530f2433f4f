"""Buggy kernels: ``affine_range`` iterations that depend on each other (loop-carried dependencies).

Each kernel marks the line the sanitizer must name with ``# @<kernel name>``.
"""

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

P, F = 128, 64


def carried_previous_tile(a):
    """Each iteration reads the tile the previous one loaded (a software pipeline written with affine_range)."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    prev = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.memset(dst=prev, value=0.0)
    for i in nl.affine_range(a.shape[0] // P):
        cur = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=cur, src=prev)  # @carried_previous_tile
        nisa.dma_copy(dst=prev, src=a[i * P : (i + 1) * P])
        nisa.dma_copy(dst=out[i * P : (i + 1) * P], src=cur)
    return out


def carried_prefix_scan(a):
    """A running sum over columns: column j+1 needs column j from the previous iteration."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    acc = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=acc[:, 0:1], src=x[:, 0:1])
    for j in nl.affine_range(a.shape[1] - 1):
        before, here = acc[:, j : j + 1], acc[:, j + 1 : j + 2]
        nisa.tensor_tensor(dst=here, data1=before, data2=x[:, j + 1 : j + 2], op=nl.add)  # @carried_prefix_scan
    nisa.dma_copy(dst=out, src=acc)
    return out


def carried_through_hbm(a):
    """Iteration i reads back the rows of ``out`` that iteration i - 1 stored."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    first = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=first, src=a[0:P])
    nisa.dma_copy(dst=out[0:P], src=first)
    for i in nl.affine_range(1, a.shape[0] // P):
        t = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=out[(i - 1) * P : i * P])  # @carried_through_hbm
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[i * P : (i + 1) * P], src=t)
    return out


def carried_decay(a):
    """``h = 0.5 * h + x`` split over two instructions: not a single associative accumulation."""
    out = nl.ndarray((P, F), a.dtype, buffer=nl.shared_hbm)
    h = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
    nisa.memset(dst=h, value=0.0)
    for i in nl.affine_range(a.shape[0] // P):
        x = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[i * P : (i + 1) * P])
        half = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=half, data=h, op0=nl.multiply, operand0=0.5)  # @carried_decay
        nisa.tensor_tensor(dst=h, data1=half, data2=x, op=nl.add)
    nisa.dma_copy(dst=out, src=h)
    return out


def carried_in_inner_loop(a):
    """An inner affine_range carries a value between its own iterations; the outer one is fine."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // P):
        t = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * P : (i + 1) * P])
        for _ in nl.affine_range(3):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)  # @carried_in_inner_loop
            doubled = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=doubled, src=t)
            nisa.tensor_scalar(dst=t, data=doubled, op0=nl.add, operand0=1.0)
        nisa.dma_copy(dst=out[i * P : (i + 1) * P], src=t)
    return out


def shifted_in_place(a):
    """Shift columns left in place: iteration j reads column j+1, which iteration j+1 overwrites."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    for j in nl.affine_range(a.shape[1] - 1):
        nisa.tensor_copy(dst=t[:, j : j + 1], src=t[:, j + 1 : j + 2])  # @shifted_in_place
    nisa.dma_copy(dst=out, src=t)
    return out


def carried_running_max_used(a):
    """A running max is associative, but scaling by it inside the loop reads a partial result:
    the next iteration's update overwrites the max this iteration divided by."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray((P, 1), a.dtype, buffer=nl.sbuf)
    nisa.memset(dst=m, value=0.0)
    for i in nl.affine_range(a.shape[0] // P):
        x = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[i * P : (i + 1) * P])
        col = nl.ndarray((P, 1), a.dtype, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=col, op=nl.maximum, data=x, axis=1)
        nisa.tensor_tensor(dst=m, data1=m, data2=col, op=nl.maximum)  # @carried_running_max_used
        y = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=x, op0=nl.divide, operand0=m)
        nisa.dma_copy(dst=out[i * P : (i + 1) * P], src=y)
    return out


def carried_through_a_python_variable(a):
    """A software pipeline: each iteration stores the tile the previous iteration loaded."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    previous = None
    for i in nl.affine_range(a.shape[0] // P):
        t = nl.ndarray((P, F), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[i * P : (i + 1) * P])
        if previous is not None:
            nisa.dma_copy(dst=out[(i - 1) * P : i * P], src=previous)  # @carried_through_a_python_variable
        previous = t
    nisa.dma_copy(dst=out[a.shape[0] - P :], src=previous)
    return out
