"""Access patterns over an allocation (``tensor.ap(...)``), static or with run-time offsets.

A static pattern is an ordinary strided :class:`~nkisim.memory.tensor.Tensor` view; one
whose start (``scalar_offset``) or rows (``vector_offset``) are read at run time is a
:class:`DynamicTensor`, resolved when an instruction runs (:mod:`nkisim.memory.access`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from nkisim.errors import BoundsError, DtypeError, MemoryKindError, OperandError, ShapeError
from nkisim.memory.dtypes import dtype_name, to_dtype
from nkisim.memory.pattern import Layout, ScalarSource, check_static, is_int, layout_of, parse_pattern, strided
from nkisim.memory.space import Buffer
from nkisim.memory.tensor import Region, Tensor


def _defective(layout: Layout, pairs: Sequence[tuple[int, int]], error: BoundsError) -> Tensor:
    """A view of the pattern's shape that no instruction may use (its elements all alias element 0)."""
    first = strided(layout, [(0, 1)] * len(pairs), 0)
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
    layout = layout_of(tensor, dt)
    pairs = parse_pattern(pattern, layout.on_chip)
    if offset is None:
        offset = 0
    if not is_int(offset):
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
            check_static(layout, pairs, offset, ".ap")
        except BoundsError as exc:  # an error only if an instruction uses the view
            return _defective(layout, pairs, exc)
        return Tensor(
            strided(layout, pairs, offset), dt, layout.base.buffer, layout.base.name, layout.base.storage, layout.base
        )
    base = layout.base
    if not is_int(indirect_dim):
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
        layout: Layout,
        pairs: tuple[tuple[int, int], ...],
        offset: int,
        stride: int,
        scalar: Tensor | ScalarSource | None = None,
        vector: Tensor | None = None,
    ) -> None:
        base = layout.base
        self._view_of(layout.dtype, base.buffer, base.name, base.storage, base)
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
        check_static(self._layout, self._pairs, offset, f"scalar_offset {value} of {self!r}")
        return strided(self._layout, self._pairs, offset)

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
        """Row and column into :meth:`Layout.typed_rows` of flat element indices."""
        return np.divmod(addr, self._layout.row_elems)

    def first_bad_row(self, mask: np.ndarray) -> str:
        rows = np.flatnonzero(~mask.reshape(self._shape[0], -1).all(axis=1))
        row = int(rows[0])
        if self._vector is not None:
            return f"row {row} (index {int(self._vector.array.reshape(-1)[row])})"
        return f"row {row} (scalar_offset {self._scalar_value()})"


# -- DMA gather and scatter -----------------------------------------------------------
