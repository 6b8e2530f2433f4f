"""The plain facts of a view below :mod:`nkisim.memory.tensor`: the bytes it touches and its slices."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from nkisim.errors import BoundsError
from nkisim.memory.space import Storage

if TYPE_CHECKING:
    from nkisim.memory.tensor import Tensor


class Region(NamedTuple):
    """The bytes a view touches, as a rectangle of a storage: rows [r0, r1) x bytes [b0, b1).

    A named tuple: one is made for every new tile and view, at a fifth of a frozen dataclass's cost.
    """

    storage: Storage
    r0: int
    r1: int
    b0: int
    b1: int


#: ``new_region(Region, (storage, r0, r1, b0, b1))`` makes a region without the named tuple's ``__new__``, a Python
#: call that is half the cost of a new tile's or block's region.
new_region = tuple.__new__


class DynSlice:
    """``nl.ds(start, size)``: the slice ``start:start + size``."""

    __slots__ = ("size", "start")

    def __init__(self, start: int, size: int) -> None:
        self.start = start
        self.size = size

    def as_slice(self) -> slice:
        return slice(self.start, self.start + self.size)

    def __repr__(self) -> str:
        return f"ds({self.start}, {self.size})"


def check_slice(item: slice, extent: int, dim: int, tensor: object) -> slice:
    """``item`` with its bounds made explicit, checked against ``extent`` (``tensor`` names the view in errors)."""
    step = 1 if item.step is None else int(item.step)
    if step <= 0:
        raise BoundsError(f"slice step {step} on dim {dim} of {tensor!r} must be positive")
    start = 0 if item.start is None else int(item.start)
    stop = extent if item.stop is None else int(item.stop)
    start = start + extent if start < 0 else start
    stop = stop + extent if stop < 0 else stop
    if not 0 <= start <= stop <= extent:
        raise BoundsError(
            f"slice {item.start}:{item.stop} is out of bounds for dim {dim} of size {extent} of {tensor!r}"
        )
    return slice(start, stop, step)


def region_of(array: np.ndarray, storage: Storage, start: int) -> Region:
    """The bounding rectangle of ``array``, a view of ``storage`` whose element 0 is at byte ``start``."""
    row_bytes = storage.row_bytes
    if array.size == 0:
        row = start // row_bytes
        return Region(storage, row, row, 0, 0)
    row_lo = row_hi = 0
    col_lo = col_hi = 0
    for extent, stride in zip(array.shape, array.strides):
        span = (extent - 1) * stride
        if stride % row_bytes == 0:
            row_lo, row_hi = row_lo + min(0, span), row_hi + max(0, span)
        else:
            col_lo, col_hi = col_lo + min(0, span), col_hi + max(0, span)
    first_row, first_col = divmod(start, row_bytes)
    b0 = first_col + col_lo
    b1 = first_col + col_hi + array.itemsize
    r0 = first_row + row_lo // row_bytes
    r1 = first_row + row_hi // row_bytes + 1
    if b0 < 0 or b1 > row_bytes:
        lo = start + row_lo + col_lo
        hi = start + row_hi + col_hi + array.itemsize
        r0, r1, b0, b1 = lo // row_bytes, -(-hi // row_bytes), 0, row_bytes
    return Region(storage, r0, r1, b0, b1)


#: Bytes compared at a time by :func:`bytes_differ` (its temporary is one such chunk).
COMPARE_CHUNK = 1 << 20


def bytes_differ(a: np.ndarray, b: np.ndarray, chunk: int = COMPARE_CHUNK) -> bool:
    """True when two arrays differ in shape, in size, or in any byte of their values in C order.

    Bit-exact (NaN payloads, -0.0 against 0.0); contiguous arrays are compared a chunk at a time,
    without copying either whole.
    """
    if a.shape != b.shape or a.nbytes != b.nbytes:
        return True
    if a.ctypes.data == b.ctypes.data and a.strides == b.strides:  # the same bytes (an input read in place)
        return False
    if not (a.flags.c_contiguous and b.flags.c_contiguous):
        return a.tobytes() != b.tobytes()
    x, y = a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)
    return any(
        not np.array_equal(x[start : start + chunk], y[start : start + chunk]) for start in range(0, x.size, chunk)
    )


def same_bytes(view: Tensor, tile: Tensor) -> bool:
    """True when ``view`` covers exactly the bytes of ``tile``, in its layout and dtype."""
    return (
        view.storage is tile.storage
        and view.byte_offset == tile.byte_offset
        and view.shape == tile.shape
        and view.array.strides == tile.array.strides
        and view.dtype == tile.dtype
    )
