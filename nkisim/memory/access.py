"""Hardware access patterns: ``Tensor.ap(pattern, offset, scalar_offset, vector_offset, indirect_dim, dtype)``.

A pattern is a list of ``[step, num]`` pairs, outer to inner, over the tensor's
allocation flattened to elements of ``dtype``. The element at index ``(i0, i1, ...)``
is ``offset + i0 * step0 + i1 * step1 + ...``. For SBUF and PSUM the first pair is
``[elements per partition, partitions]``: the hardware reads whole partitions, the
same pattern in each. ``.ap()`` ignores the view it is called on (it is not
composable), as NKI's is.

A static pattern is a numpy strided view of the memory, bounds-checked when it is
made. ``scalar_offset`` (a ``(1, 1)`` SBUF tensor or a register) and ``vector_offset``
(a ``(P, 1)`` SBUF index tile, one row index per partition) make a *dynamic* view
(:class:`DynamicTensor`) whose addresses are read when an instruction executes.
Its dependency region is the whole allocation, plus the offsets it reads.

DMA instructions gather and scatter through :func:`apply_dynamic`, which also
implements ``oob_mode.skip``: an out-of-bounds row is dropped and its destination
elements keep their values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from nkisim.errors import BoundsError, DtypeError, MemoryKindError, OperandError, ShapeError
from nkisim.memory.dtypes import dtype_name, to_dtype
from nkisim.memory.space import Buffer
from nkisim.memory.tensor import Region, Tensor

#: On chip, a pattern is the partition pair and up to four free dims [nki-aps.rst].
MAX_ON_CHIP_PAIRS = 5


class ScalarSource(Protocol):
    """What a ``scalar_offset`` register provides (``nisa.VirtualRegister``)."""

    @property
    def region(self) -> Region: ...

    def read(self) -> int: ...


@dataclass(frozen=True)
class _Layout:
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


def _layout(tensor: Tensor, dtype: np.dtype) -> _Layout:
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
    return _Layout(base, dtype, base.buffer.is_on_chip, row0, col0, partitions, row_bytes // s)


def _pattern(pattern: Any, on_chip: bool) -> tuple[tuple[int, int], ...]:
    """Check ``pattern`` is ``[[step, num], ...]`` (nums positive) and return it as int pairs."""
    pairs = []
    try:
        for pair in pattern:
            step, num = pair
            if not (_is_int(step) and _is_int(num)):
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


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _span(pairs: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """Lowest and highest of ``sum(i_k * step_k)`` over the pattern."""
    lo = sum(min(0, step * (num - 1)) for step, num in pairs)
    hi = sum(max(0, step * (num - 1)) for step, num in pairs)
    return lo, hi


def _check_static(layout: _Layout, pairs: Sequence[tuple[int, int]], offset: int, what: str) -> None:
    """Raise :class:`BoundsError` unless every element lies in the allocation (on chip: in its partition)."""
    base = layout.base
    if layout.on_chip:
        row, col = divmod(offset, layout.row_elems)
        lo, hi = _span(pairs[1:])
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
    lo, hi = _span(pairs)
    if offset + lo < 0 or offset + hi >= layout.total:
        raise BoundsError(f"{what}: elements {offset + lo}..{offset + hi} fall outside the {layout.total} of {base!r}")


def _strided(layout: _Layout, pairs: Sequence[tuple[int, int]], offset: int) -> np.ndarray:
    """The bounds-checked pattern as a numpy view of the storage."""
    s, storage = layout.itemsize, layout.base.storage
    if layout.on_chip:
        row, col = divmod(offset, layout.row_elems)
        start = (layout.row0 + row) * storage.row_bytes + layout.col0 + col * s
    else:
        start = offset * s
    first = storage.bytes.reshape(-1)[start : start + s].view(layout.dtype)
    shape = tuple(num for _, num in pairs)
    steps = [step for step, _ in pairs]
    return np.lib.stride_tricks.as_strided(first, shape=shape, strides=layout.strides_bytes(steps))


def _defective(layout: _Layout, pairs: Sequence[tuple[int, int]], error: BoundsError) -> Tensor:
    """A view of the pattern's shape that no instruction may use (its elements all alias element 0)."""
    first = _strided(layout, [(0, 1)] * len(pairs), 0)
    shape = tuple(num for _, num in pairs)
    array = np.lib.stride_tricks.as_strided(first, shape=shape, strides=(0,) * len(shape), writeable=False)
    base = layout.base
    view = Tensor(array, layout.dtype, base.buffer, base.name, base.storage, base)
    view.defect = error
    return view


def access_pattern(
    tensor: Tensor,
    pattern: Any,
    offset: int | None = 0,
    scalar_offset: Tensor | ScalarSource | None = None,
    vector_offset: Tensor | None = None,
    indirect_dim: int = 0,
    dtype: Any = None,
) -> Tensor:
    """The implementation of :meth:`Tensor.ap` (see the module docstring)."""
    try:
        dt = to_dtype(dtype) if dtype is not None else tensor.dtype
    except TypeError as exc:
        raise DtypeError(f".ap: {exc}") from None
    layout = _layout(tensor, dt)
    pairs = _pattern(pattern, layout.on_chip)
    if offset is None:
        offset = 0
    if not _is_int(offset):
        raise OperandError(f".ap: offset {offset!r} must be an integer (use scalar_offset for a run-time offset)")
    offset = int(offset)
    if layout.on_chip and pairs[0][1] > 1 and pairs[0][0] != layout.row_elems:
        raise OperandError(
            f".ap: partition step {pairs[0][0]} must be {layout.row_elems}, the elements per partition of "
            f"{layout.base!r}: the hardware reads consecutive partitions"
        )
    if scalar_offset is not None and vector_offset is not None:
        raise OperandError(".ap: give at most one of scalar_offset and vector_offset")
    if scalar_offset is None and vector_offset is None:
        try:
            _check_static(layout, pairs, offset, ".ap")
        except BoundsError as exc:  # an error only if an instruction uses the view
            return _defective(layout, pairs, exc)
        return Tensor(
            _strided(layout, pairs, offset), dt, layout.base.buffer, layout.base.name, layout.base.storage, layout.base
        )
    base = layout.base
    if not _is_int(indirect_dim):
        raise OperandError(f".ap: indirect_dim {indirect_dim!r} must be an integer")
    # indirect_dim names a dim of the tensor .ap is called on: an HBM tensor reshaped to expose a dim
    # (x.reshape((2, 2, 8)).ap(..., indirect_dim=0)) moves by that view's stride, not the allocation's.
    shaped = tensor if not layout.on_chip and tensor.ndim > indirect_dim >= 0 else base
    if not 0 <= indirect_dim < shaped.ndim:
        raise OperandError(f".ap: indirect_dim {indirect_dim} is not a dim of {shaped!r}")
    stride_bytes = shaped.array.strides[indirect_dim] if shaped is tensor else 0
    if stride_bytes <= 0:
        stride_bytes = math.prod(base.shape[indirect_dim + 1 :]) * base.itemsize
    if stride_bytes % dt.itemsize:
        raise OperandError(f".ap: dim {indirect_dim} of {base!r} is not a whole number of {dt.itemsize}-byte elements")
    stride = stride_bytes // dt.itemsize
    if vector_offset is not None:
        _check_vector_offset(vector_offset, base, indirect_dim, pairs)
        return DynamicTensor(layout, pairs, offset, stride, vector=vector_offset)
    if layout.on_chip and indirect_dim == 0:
        raise OperandError(".ap: scalar_offset on an SBUF/PSUM tensor cannot move along the partition dim (dim 0)")
    _check_scalar_offset(scalar_offset)
    return DynamicTensor(layout, pairs, offset, stride, scalar=scalar_offset)


def _check_scalar_offset(source: Any) -> None:
    if isinstance(source, Tensor):
        if source.buffer is not Buffer.sbuf:
            raise MemoryKindError(f".ap: scalar_offset must be in SBUF, not {source.buffer.value} ({source!r})")
        if source.size != 1:
            raise ShapeError(f".ap: scalar_offset must be a (1, 1) tensor, got {list(source.shape)}")
        if source.dtype.kind not in "iu":
            raise DtypeError(f".ap: scalar_offset dtype {dtype_name(source.dtype)} must be an integer type")
    elif not (hasattr(source, "read") and hasattr(source, "region")):
        raise OperandError(
            f".ap: scalar_offset must be a (1, 1) SBUF tensor or a register, got {type(source).__name__}"
        )


def _check_vector_offset(vector: Any, base: Tensor, indirect_dim: int, pairs: Sequence[tuple[int, int]]) -> None:
    if not isinstance(vector, Tensor):
        raise OperandError(f".ap: vector_offset must be an SBUF tensor, got {type(vector).__name__}")
    if vector.buffer is not Buffer.sbuf:
        raise MemoryKindError(f".ap: vector_offset must be in SBUF, not {vector.buffer.value} ({vector!r})")
    if vector.dtype not in (np.dtype(np.int32), np.dtype(np.uint32)):
        raise DtypeError(f".ap: vector_offset dtype {dtype_name(vector.dtype)} must be int32 or uint32")
    if vector.free_size != 1:
        raise ShapeError(f".ap: vector_offset must be (P, 1), one index per partition, got {list(vector.shape)}")
    if vector.partitions != pairs[0][1]:
        raise ShapeError(
            f".ap: vector_offset has {vector.partitions} indices but the pattern's first dim has {pairs[0][1]}"
        )
    if indirect_dim != 0:
        raise OperandError(f".ap: vector_offset needs indirect_dim=0, got {indirect_dim}")
    if base.buffer.is_on_chip:
        raise MemoryKindError(f".ap: vector_offset indexes an HBM tensor, not {base.buffer.value} ({base!r})")


class DynamicTensor(Tensor):
    """A view whose start (``scalar_offset``) or rows (``vector_offset``) are read at run time.

    Its shape is the pattern's. ``.array`` of a ``scalar_offset`` view is the strided
    view at the offset's current value (out of bounds raises :class:`BoundsError`);
    a ``vector_offset`` view is only usable through :func:`apply_dynamic` (DMA).
    """

    __slots__ = ("_layout", "_offset", "_pairs", "_scalar", "_shape", "_stride", "_vector")

    def __init__(
        self,
        layout: _Layout,
        pairs: tuple[tuple[int, int], ...],
        offset: int,
        stride: int,
        scalar: Tensor | ScalarSource | None = None,
        vector: Tensor | None = None,
    ) -> None:
        base = layout.base
        self.dtype = layout.dtype
        self.buffer = base.buffer
        self.name = base.name
        self.storage = base.storage
        self._base = base
        self._region = None
        self.uid = base.uid
        self.defect = None
        self._layout = layout
        self._pairs = pairs
        self._offset = offset
        self._stride = stride
        self._scalar = scalar
        self._vector = vector
        self._shape = tuple(num for _, num in pairs)

    # -- static facts ------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def size(self) -> int:
        return math.prod(self._shape)

    @property
    def partitions(self) -> int:
        return self._shape[0]

    @property
    def free_size(self) -> int:
        return self.size // self._shape[0]

    @property
    def is_dynamic(self) -> bool:
        return True

    @property
    def region(self) -> Region:
        """The whole allocation: the rows touched are known only at run time."""
        return self._base.region  # type: ignore[union-attr]

    @property
    def offset_regions(self) -> tuple[Region, ...]:
        source = self._vector if self._vector is not None else self._scalar
        return (source.region,)  # type: ignore[union-attr]

    @property
    def index_tensors(self) -> tuple[Tensor, ...]:
        source = self._vector if self._vector is not None else self._scalar
        return (source,) if isinstance(source, Tensor) else ()

    def __repr__(self) -> str:
        kind = "vector_offset" if self._vector is not None else "scalar_offset"
        pattern = [list(p) for p in self._pairs]
        what = f"{dtype_name(self.dtype)}{list(self._shape)} in {self.buffer.value}"
        return f"Tensor({self.name}.ap({pattern}, {kind}): {what})"

    def __getitem__(self, index: Any) -> Tensor:
        raise OperandError(f"{self!r} has a run-time offset and cannot be indexed; put the slicing in its pattern")

    def reshape(self, shape: tuple[int, ...] | list[int]) -> Tensor:
        raise OperandError(f"{self!r} has a run-time offset and cannot be reshaped; change its pattern")

    # -- run-time resolution -----------------------------------------------------------

    def _scalar_value(self) -> int:
        source = self._scalar
        if isinstance(source, Tensor):
            return int(source.array.reshape(-1)[0])
        return int(source.read())  # type: ignore[union-attr]

    @property
    def array(self) -> np.ndarray:  # type: ignore[override]
        """The view at the current offset; raises :class:`BoundsError` when it leaves the allocation."""
        if self._vector is not None:
            raise OperandError(f"{self!r} gathers rows by vector_offset; only nisa.dma_copy/dma_transpose use it")
        value = self._scalar_value()
        offset = self._offset + value * self._stride
        _check_static(self._layout, self._pairs, offset, f"scalar_offset {value} of {self!r}")
        return _strided(self._layout, self._pairs, offset)

    def addresses(self) -> tuple[np.ndarray, np.ndarray]:
        """Every element's index into the flattened allocation, and a per-element in-bounds mask.

        A row (index along the pattern's first dim) is in bounds when all its
        elements are inside the allocation (on chip: inside one partition).
        """
        layout, pairs = self._layout, self._pairs
        addr = np.zeros(self._shape, dtype=np.int64)
        for k, (step, num) in enumerate(pairs):
            axis = np.arange(num, dtype=np.int64).reshape((num,) + (1,) * (len(pairs) - k - 1))
            if k == 0 and self._vector is not None:
                index = self._vector.array.reshape(-1).astype(np.int64)
                axis = index.reshape(axis.shape) * self._stride
            else:
                axis = axis * step
            addr = addr + axis
        if self._scalar is not None:
            addr += self._offset + self._scalar_value() * self._stride
        else:
            addr += self._offset
        rows = addr.reshape(self._shape[0], -1)
        ok = (rows >= 0).all(axis=1) & (rows < layout.total).all(axis=1)
        if layout.on_chip:
            part = rows // layout.row_elems
            ok &= (part == part[:, :1]).all(axis=1)
        mask = np.broadcast_to(ok.reshape((-1,) + (1,) * (len(self._shape) - 1)), self._shape)
        return addr, mask

    def locate(self, addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row and column into :meth:`_Layout.typed_rows` of flat element indices."""
        return np.divmod(addr, self._layout.row_elems)

    def first_bad_row(self, mask: np.ndarray) -> str:
        rows = np.flatnonzero(~mask.reshape(self._shape[0], -1).all(axis=1))
        row = int(rows[0])
        if self._vector is not None:
            return f"row {row} (index {int(self._vector.array.reshape(-1)[row])})"
        return f"row {row} (scalar_offset {self._scalar_value()})"


# -- DMA gather and scatter -----------------------------------------------------------


def _staged(values: np.ndarray, like: Tensor) -> Tensor:
    """A plain tensor over ``values`` (a copy) standing in for ``like`` during one instruction."""
    return Tensor(values, like.dtype, like.buffer, like.name, like.storage, None)


def _read(t: Tensor, skip_oob: bool, role: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Values (a copy), per-element in-bounds mask, and flat addresses (dynamic views only)."""
    if not isinstance(t, DynamicTensor):
        return t.array.copy(), np.ones(t.shape, dtype=bool), None
    addr, ok = t.addresses()
    if not skip_oob and not ok.all():
        raise BoundsError(f"{role} {t!r}: {t.first_bad_row(ok)} is out of bounds (oob_mode.error)")
    rows = t._layout.typed_rows()
    r, c = t.locate(np.where(ok, addr, 0))
    return rows[r, c], ok, addr


def gather(src: Tensor, skip_oob: bool) -> tuple[np.ndarray, np.ndarray]:
    """The values a dynamic view reads, in its shape, and which are in bounds.

    Out-of-bounds rows raise :class:`BoundsError` unless ``skip_oob`` (then their mask is False).
    """
    values, ok, _ = _read(src, skip_oob, "src")
    return values, ok


def apply_dynamic(dst: Tensor, src: Tensor, skip_oob: bool, body: Callable[[Tensor, Tensor], None]) -> None:
    """Run ``body(dst, src)`` (a DMA's element-wise semantics) with dynamic views resolved.

    Static tensors are passed through untouched. Otherwise ``body`` sees plain
    tensors holding the gathered elements; elements pair up in row-major order.
    Rows out of bounds raise :class:`BoundsError`, or with ``skip_oob`` are dropped
    (their destination elements keep their values). Scattered writes to one address
    apply in order, so with ``dst_rmw_op`` repeated indices accumulate.
    """
    if not (dst.is_dynamic or src.is_dynamic):
        body(dst, src)
        return
    src_values, src_ok, _ = _read(src, skip_oob, "src")
    dst_values, dst_ok, dst_addr = _read(dst, skip_oob, "dst")
    keep = dst_ok & src_ok.reshape(dst.shape)
    if dst_addr is None:
        staged = _staged(dst_values, dst)
        body(staged, _staged(src_values.reshape(dst.shape), src))
        dst.array[keep] = staged.array[keep]
        return
    assert isinstance(dst, DynamicTensor)
    rows = dst._layout.typed_rows()
    positions = np.flatnonzero(keep.reshape(-1))
    flat_addr = dst_addr.reshape(-1)[positions]
    flat_src = src_values.reshape(-1)
    for wave in _waves(flat_addr):
        sel = positions[wave]
        r, c = dst.locate(flat_addr[wave])
        staged = _staged(rows[r, c], dst)
        body(staged, _staged(flat_src[sel], src))
        rows[r, c] = staged.array


def _waves(addr: np.ndarray) -> list[np.ndarray]:
    """Split positions into groups of distinct addresses: the k-th write to each address goes in group k."""
    if addr.size == 0:
        return []
    order = np.argsort(addr, kind="stable")
    sorted_addr = addr[order]
    starts = np.r_[True, sorted_addr[1:] != sorted_addr[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(addr.size), 0))
    rank = np.empty(addr.size, dtype=np.int64)
    rank[order] = np.arange(addr.size) - group_start
    return [np.flatnonzero(rank == k) for k in range(int(rank.max()) + 1)]
