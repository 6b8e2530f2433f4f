"""numba kernels for the sequential (scan) instructions, with plain-numpy references, and one element-wise pass.

A scan carries a value from one element to the next, so numpy would need a Python
loop over the free dim. These kernels run that loop compiled. Every ALU operator is
evaluated in float32 with the same rules as the numpy functions of
:mod:`nkisim.isa.ops` (NaN propagation and signed zeros included), so a kernel and its
reference give bit-identical results; ``tests/isa/test_vector_reduce.py`` checks it.
"""

from __future__ import annotations

import numba
import numpy as np

from nkisim.isa.common import apply_alu
from nkisim.isa.ops import Op

F32 = np.float32


def _power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    wide = np.power(np.asarray(x, np.float64), np.asarray(y, np.float64))
    return np.where(np.isnan(wide), np.nan, wide).astype(np.float32)


#: Reference operators that differ from :data:`nkisim.isa.ops.OPS` (see :func:`alu`).
_REFERENCE_BINARY = {"power": _power}


def _ref_alu(op: Op, x: np.ndarray, y: np.ndarray, reverse: bool) -> np.ndarray:
    fn = _REFERENCE_BINARY.get(op.name)
    if fn is None:
        return apply_alu(op, x, y, reverse)
    return fn(y, x) if reverse else fn(x, y)


#: The arithmetic ALU operators the kernels know, by ``nki.language`` name, and their codes.
ALU_CODES: dict[str, int] = {
    name: code
    for code, name in enumerate(
        (
            "add",
            "subtract",
            "multiply",
            "maximum",
            "minimum",
            "divide",
            "equal",
            "not_equal",
            "greater",
            "greater_equal",
            "less",
            "less_equal",
            "logical_and",
            "logical_or",
            "logical_xor",
            "power",
            "abs_max",
            "abs_min",
            "abs",
            "square",
            "rsqrt",
            "reciprocal",
        )
    )
}


def alu_code(op: Op) -> int:
    """The kernel code of an arithmetic ALU operator."""
    return ALU_CODES[op.name]


@numba.njit(cache=True, inline="always")
def _flag(condition: bool) -> np.float32:
    return F32(1.0) if condition else F32(0.0)


@numba.njit(cache=True, inline="always")
def _max(x: np.float32, y: np.float32) -> np.float32:
    # numpy's maximum: a NaN operand wins (the first if both are NaN); on ties, y.
    return x if (x > y or x != x) else y


@numba.njit(cache=True, inline="always")
def _min(x: np.float32, y: np.float32) -> np.float32:
    return x if (x < y or x != x) else y


@numba.njit(cache=True, error_model="numpy")
def alu(code: int, x: np.float32, y: np.float32) -> np.float32:
    """``op(x, y)`` in float32 for the operator with kernel ``code`` (unary operators ignore ``y``)."""
    if code == 0:
        return x + y
    if code == 1:
        return x - y
    if code == 2:
        return x * y
    if code == 3:
        return _max(x, y)
    if code == 4:
        return _min(x, y)
    if code == 5:
        return x / y
    if code == 6:
        return _flag(x == y)
    if code == 7:
        return _flag(x != y)
    if code == 8:
        return _flag(x > y)
    if code == 9:
        return _flag(x >= y)
    if code == 10:
        return _flag(x < y)
    if code == 11:
        return _flag(x <= y)
    if code == 12:
        return _flag(x != 0 and y != 0)
    if code == 13:
        return _flag(x != 0 or y != 0)
    if code == 14:
        return _flag((x != 0) != (y != 0))
    if code == 15:
        # float32 power rounded from float64, NaN made canonical: numpy's float32 power is a
        # SIMD approximation whose last bit depends on the array length, so no loop matches it.
        wide = np.float64(x) ** np.float64(y)
        return F32(np.nan) if wide != wide else F32(wide)
    if code == 16:
        return _max(abs(x), abs(y))
    if code == 17:
        return _min(abs(x), abs(y))
    if code == 18:
        return abs(x)
    if code == 19:
        return x * x
    if code == 20:
        return F32(1.0) / np.sqrt(x)
    return F32(1.0) / x


# -- tensor_tensor_scan ---------------------------------------------------------------


@numba.njit(cache=True, error_model="numpy")
def tensor_tensor_scan_kernel(
    data0: np.ndarray,
    data1: np.ndarray,
    initial: np.ndarray,
    op0: int,
    op1: int,
    reverse0: bool,
    reverse1: bool,
) -> np.ndarray:
    """``r[:, i] = op1(op0(data0[:, i], r[:, i-1]), data1[:, i])`` with ``r[:, -1] = initial``.

    ``data0``/``data1`` are float32 ``(P, N)``; ``initial`` is float32 ``(P,)``.
    ``reverse0`` swaps the operands of ``op0``, ``reverse1`` those of ``op1``.
    """
    p, n = data0.shape
    out = np.empty((p, n), dtype=np.float32)
    for row in range(p):
        r = initial[row]
        for i in range(n):
            t = alu(op0, r, data0[row, i]) if reverse0 else alu(op0, data0[row, i], r)
            r = alu(op1, data1[row, i], t) if reverse1 else alu(op1, t, data1[row, i])
            out[row, i] = r
    return out


def tensor_tensor_scan_reference(
    data0: np.ndarray, data1: np.ndarray, initial: np.ndarray, op0: Op, op1: Op, reverse0: bool, reverse1: bool
) -> np.ndarray:
    """The NKI pseudo-code of ``tensor_tensor_scan`` as a numpy loop over the free dim."""
    out = np.empty(data0.shape, dtype=np.float32)
    r = initial.astype(np.float32)
    with np.errstate(all="ignore"):
        for i in range(data0.shape[1]):
            t = _ref_alu(op0, data0[:, i], r, reverse0)
            r = np.asarray(_ref_alu(op1, t, data1[:, i], reverse1), dtype=np.float32)
            out[:, i] = r
    return out


# -- tensor_scalar_cumulative ---------------------------------------------------------


@numba.njit(cache=True, error_model="numpy")
def cumulative_kernel(values: np.ndarray, regs: np.ndarray, op1: int) -> np.ndarray:
    """``reg = op1(values[:, i], reg); out[:, i] = reg`` per partition; ``regs`` is updated in place."""
    p, n = values.shape
    out = np.empty((p, n), dtype=np.float32)
    for row in range(p):
        r = regs[row]
        for i in range(n):
            r = alu(op1, values[row, i], r)
            out[row, i] = r
        regs[row] = r
    return out


def cumulative_reference(values: np.ndarray, regs: np.ndarray, op1: Op) -> np.ndarray:
    """The NKI pseudo-code of ``tensor_scalar_cumulative``'s scan as a numpy loop; updates ``regs``."""
    out = np.empty(values.shape, dtype=np.float32)
    with np.errstate(all="ignore"):
        for i in range(values.shape[1]):
            regs[...] = _ref_alu(op1, values[:, i], regs, False)
            out[:, i] = regs
    return out


# -- element-wise ---------------------------------------------------------------------

#: The float32 operators :func:`binary_f32` computes, by ufunc, with their codes: the correctly rounded IEEE
#: operations, whose bits are the hardware's whatever the loop (of two NaN operands either payload may stay,
#: as in numpy's own loops). ``maximum`` and ``minimum`` stay with numpy: the sign its loops give a tie of
#: zeros depends on the loop.
BINARY_F32_CODES = {np.add: 0, np.subtract: 1, np.multiply: 2, np.divide: 5}


@numba.njit(cache=True, nogil=True, error_model="numpy")
def binary_f32(code: int, dst: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    """``dst = op(x, y)`` over 2-D float32 arrays of one shape (``code`` from :data:`BINARY_F32_CODES`).

    The operands may be the very array ``dst`` but must not overlap it otherwise. For a
    tile's rows, strided by the partition pitch, numpy's ufunc loop costs about 35 ns a
    row (4.5 us for 128 rows of 64), more than the arithmetic.
    """
    rows, cols = dst.shape
    if code == 0:
        for r in range(rows):
            for c in range(cols):
                dst[r, c] = x[r, c] + y[r, c]
    elif code == 1:
        for r in range(rows):
            for c in range(cols):
                dst[r, c] = x[r, c] - y[r, c]
    elif code == 2:
        for r in range(rows):
            for c in range(cols):
                dst[r, c] = x[r, c] * y[r, c]
    else:
        for r in range(rows):
            for c in range(cols):
                dst[r, c] = x[r, c] / y[r, c]
