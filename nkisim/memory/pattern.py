"""Hardware access patterns: the pattern arithmetic behind ``Tensor.ap``.

A pattern is a list of ``[step, num]`` pairs, outer to inner, over the tensor's
allocation flattened to elements of ``dtype``. The element at index ``(i0, i1, ...)``
is ``offset + i0 * step0 + i1 * step1 + ...``. For SBUF and PSUM the first pair is
``[elements per partition, partitions]``: the hardware reads whole partitions, the
same pattern in each. ``.ap()`` ignores the view it is called on (it is not
composable), as NKI's is.

A static pattern is a numpy strided view of the memory, bounds-checked when it is
made (:func:`check_static`, :func:`strided`). ``scalar_offset`` and ``vector_offset``
make a dynamic view (:class:`~nkisim.memory.tensor.DynamicTensor`) whose addresses
are read when an instruction executes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from nkisim.errors import BoundsError, OperandError
from nkisim.memory.dtypes import dtype_name

if TYPE_CHECKING:
    from nkisim.memory.tensor import Region, Tensor

#: On chip, a pattern is the partition pair and up to four free dims [nki-aps.rst].
MAX_ON_CHIP_PAIRS = 5


class ScalarSource(Protocol):
    """What a ``scalar_offset`` register provides (``nisa.VirtualRegister``)."""

    @property
    def region(self) -> Region: ...

    def read(self) -> int: ...


@dataclass(frozen=True)
class Layout:
    """The allocation a pattern addresses, in elements of the pattern's dtype.

    On chip: ``partitions`` rows of ``row_elems`` elements, starting at partition
    ``row0`` and byte ``col0`` of each row. In HBM: ``total`` contiguous elements.
    """

    base: Tensor
    dtype: np.dtype
    on_chip: bool
    row0: int
    col0: int
    partitions: int
    row_elems: int

    @property
    def total(self) -> int:
        return self.partitions * self.row_elems

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def strides_bytes(self, steps: Sequence[int]) -> tuple[int, ...]:
        """numpy strides of a pattern's dims (on chip, dim 0 steps whole partitions)."""
        s = self.itemsize
        if self.on_chip:
            return (self.base.storage.row_bytes, *(step * s for step in steps[1:]))
        return tuple(step * s for step in steps)

    def typed_rows(self) -> np.ndarray:
        """The allocation as a ``(partitions, row_elems)`` array (HBM: one row)."""
        s, storage = self.itemsize, self.base.storage
        if self.on_chip:
            block = storage.bytes[self.row0 : self.row0 + self.partitions, self.col0 : self.col0 + self.row_elems * s]
            return block.view(self.dtype)
        return storage.bytes.reshape(-1)[: self.total * s].view(self.dtype).reshape(1, -1)


def layout_of(tensor: Tensor, dtype: np.dtype) -> Layout:
    base = tensor._base or tensor
    s = dtype.itemsize
    if base.buffer.is_on_chip:
        row0, col0 = divmod(base.byte_offset, base.storage.row_bytes)
        row_bytes = base.free_size * base.itemsize
        partitions = base.partitions
    else:
        row0, col0 = 0, 0
        row_bytes = base.size * base.itemsize
        partitions = 1
    if row_bytes % s:
        raise OperandError(
            f".ap(dtype={dtype_name(dtype)}): {row_bytes} bytes {'per partition ' if base.buffer.is_on_chip else ''}"
            f"of {base!r} are not a whole number of {s}-byte elements"
        )
    return Layout(base, dtype, base.buffer.is_on_chip, row0, col0, partitions, row_bytes // s)


def parse_pattern(pattern: Any, on_chip: bool) -> tuple[tuple[int, int], ...]:
    """Check ``pattern`` is ``[[step, num], ...]`` (nums positive) and return it as int pairs."""
    pairs = []
    try:
        for pair in pattern:
            step, num = pair
            if not (is_int(step) and is_int(num)):
                raise TypeError
            pairs.append((int(step), int(num)))
    except (TypeError, ValueError):
        raise OperandError(f".ap: pattern {pattern!r} must be a list of [step, num] integer pairs") from None
    if not pairs:
        raise OperandError(".ap: pattern must have at least one [step, num] pair")
    if any(num < 1 for _, num in pairs):
        raise OperandError(f".ap: pattern {[list(p) for p in pairs]} has a num below 1")
    if on_chip and not 2 <= len(pairs) <= MAX_ON_CHIP_PAIRS:
        raise OperandError(
            f".ap: an SBUF/PSUM pattern is [partition_step, partitions] then 1 to {MAX_ON_CHIP_PAIRS - 1} free "
            f"[step, num] pairs, got {len(pairs)} pairs"
        )
    return tuple(pairs)


def is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def span(pairs: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """Lowest and highest of ``sum(i_k * step_k)`` over the pattern."""
    lo = sum(min(0, step * (num - 1)) for step, num in pairs)
    hi = sum(max(0, step * (num - 1)) for step, num in pairs)
    return lo, hi


def check_static(layout: Layout, pairs: Sequence[tuple[int, int]], offset: int, what: str) -> None:
    """Raise :class:`BoundsError` unless every element lies in the allocation (on chip: in its partition)."""
    base = layout.base
    if layout.on_chip:
        row, col = divmod(offset, layout.row_elems)
        lo, hi = span(pairs[1:])
        if offset < 0 or row + pairs[0][1] > layout.partitions:
            raise BoundsError(
                f"{what}: offset {offset} and {pairs[0][1]} partitions reach outside the {layout.partitions} "
                f"partitions of {base!r}"
            )
        if col + lo < 0 or col + hi >= layout.row_elems:
            raise BoundsError(
                f"{what}: elements {col + lo}..{col + hi} of a partition fall outside its {layout.row_elems} "
                f"elements of {base!r} (an access pattern stays inside each partition)"
            )
        return
    lo, hi = span(pairs)
    if offset + lo < 0 or offset + hi >= layout.total:
        raise BoundsError(f"{what}: elements {offset + lo}..{offset + hi} fall outside the {layout.total} of {base!r}")


def strided(layout: Layout, pairs: Sequence[tuple[int, int]], offset: int) -> np.ndarray:
    """The bounds-checked pattern as a numpy view of the storage."""
    s, storage = layout.itemsize, layout.base.storage
    if layout.on_chip:
        row, col = divmod(offset, layout.row_elems)
        start = (layout.row0 + row) * storage.row_bytes + layout.col0 + col * s
    else:
        start = offset * s
    first = storage.bytes.reshape(-1)[start : start + s].view(layout.dtype)
    shape = tuple(num for _, num in pairs)
    steps = [step if num > 1 else 0 for step, num in pairs]  # a one-element dim never steps (its step may not fit)
    return np.lib.stride_tricks.as_strided(first, shape=shape, strides=layout.strides_bytes(steps))


def row_box_of(array: np.ndarray, row_bytes: int, start: int) -> tuple[int, int, int, int] | bool:
    """``(r0, r1, b0, b1)`` when the bytes of ``array`` (a view at byte ``start`` of rows of ``row_bytes``)
    are exactly rows ``[r0, r1)`` x bytes ``[b0, b1)``: consecutive rows, contiguous free dims; else False."""
    shape, strides = array.shape, array.strides
    if array.ndim < 2 or array.size == 0:
        return False
    if shape[0] > 1 and strides[0] != row_bytes:
        return False
    step = array.itemsize
    for extent, stride in zip(reversed(shape[1:]), reversed(strides[1:])):
        if extent != 1 and stride != step:
            return False
        step *= extent
    row, col = divmod(start, row_bytes)
    if col + step > row_bytes:
        return False
    return (row, row + shape[0], col, col + step)
