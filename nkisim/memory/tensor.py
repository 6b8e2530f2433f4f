"""Tensors: typed views of real memory at an allocated address.

A :class:`Tensor` is what kernels hold: kernel arguments and outputs in HBM, tiles
in SBUF and PSUM. Indexing one gives another view of the same bytes, following
NKI's rules: dim 0 of an on-chip tile is the partition dim, an integer index on it
keeps a dim of size 1, and on-chip views stay at least 2-D. Every index is checked
against the tensor's bounds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from nkisim.errors import BoundsError, DtypeError, MemoryKindError, OperandError, ShapeError
from nkisim.memory.dtypes import dtype_name, to_dtype
from nkisim.memory.pattern import (
    Layout,
    ScalarSource,
    check_static,
    is_int,
    layout_of,
    parse_pattern,
    row_box_of,
    strided,
)
from nkisim.memory.space import ON_CHIP_BUFFERS, Buffer, Storage
from nkisim.memory.views import DynSlice, Region, check_slice, new_region, region_of

_tensor_ids = itertools.count(1)

#: Operand geometries (:attr:`Tensor.geometry`) by the tuple of what they are made of. A view's geometry is
#: a small int from here, so that the plan and rule tables key on it without hashing a dtype, an enum
#: member and two tuples at every instruction. A number is never given twice (a new one after the memo
#: starts again), so two views share one only when their geometries are equal.
_geometry_numbers: dict[tuple[object, ...], int] = {}
_next_geometry_number = itertools.count(1).__next__
#: Past this many geometries (about 250 bytes each) the memo starts again; a kernel has a few hundred.
_MAX_GEOMETRIES = 1 << 14


def uid_mark() -> int:
    """A number larger than every :attr:`Tensor.uid` so far and at most every later one."""
    return next(_tensor_ids)


class Tensor:
    """An NKI tensor: a view of HBM, SBUF or PSUM bytes with a shape and a dtype.

    Attributes:
        shape: the view's shape; on chip, ``shape[0]`` is the partition dim.
        dtype: the NKI data type (a numpy dtype).
        buffer: where the bytes live (``nl.sbuf``, ``nl.psum``, ``nl.hbm``, ...).
        name: the name given at creation, or an automatic one.
    """

    __slots__ = (
        "__weakref__",
        "_base",
        "_geometry",
        "_region",
        "_row_box",
        "_start",
        "_views",
        "array",
        "buffer",
        "defect",
        "dtype",
        "name",
        "storage",
        "uid",
    )

    #: True when the view's addresses depend on run-time values (``.ap`` with an offset tensor or register): a
    #: class attribute, read at every operand of every instruction.
    is_dynamic: ClassVar[bool] = False

    def __init__(
        self,
        array: np.ndarray,
        dtype: np.dtype,
        buffer: Buffer,
        name: str,
        storage: Storage,
        base: Tensor | None,
        start: int | None = None,
    ) -> None:
        if array is not None:  # a dynamic view computes its array (DynamicTensor.array)
            self.array = array
        # every view's attributes, set here rather than by a helper: a view is made per slice and per tile
        self.dtype = dtype
        self.buffer = buffer
        self.name = name
        self.storage = storage
        self._base = base
        self._region: Region | None = None
        self._start = start  # the byte offset of element 0, when the caller knows it
        self._geometry: int | None = None
        self._row_box: tuple[int, int, int, int] | bool | None = None
        #: An HBM view's block views worked out so far, by index (:func:`_index_key`): each one's array, byte
        #: offset, box, region and geometry, as a kernel slices the same blocks of its inputs and outputs again
        #: and again, in loops.
        self._views: dict[tuple[object, ...], tuple[Any, ...]] | None = None
        #: One number per allocation, shared by its views: PSUM accumulation belongs to a tile, not to bytes.
        self.uid: int = next(_tensor_ids) if base is None else base.uid
        #: Why this view may not be used (an empty slice, a pattern outside the tensor), or None.
        #: Tracing a kernel may build such a view on a path that never uses it, as NKI's
        #: tracer does; an instruction given one raises this error.
        self.defect: BoundsError | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def ndim(self) -> int:
        return self.array.ndim

    @property
    def itemsize(self) -> int:
        return self.array.itemsize

    @property
    def size(self) -> int:
        return self.array.size

    @property
    def partitions(self) -> int:
        """Size of the partition dim (dim 0) of an on-chip view."""
        return self.array.shape[0] if self.array.ndim else 1

    @property
    def free_size(self) -> int:
        """Elements per partition."""
        return self.array.size // max(self.partitions, 1)

    def __repr__(self) -> str:
        return f"Tensor({self.name}: {dtype_name(self.dtype)}{list(self.shape)} in {self.buffer.value})"

    def __len__(self) -> int:
        return self.array.shape[0]

    def __bool__(self) -> bool:
        return True

    # -- views -------------------------------------------------------------------------

    def __getitem__(self, index: Any) -> Tensor:
        if self.defect is not None:
            raise self.defect
        buffer = self.buffer
        memo_key = None
        if buffer not in ON_CHIP_BUFFERS and self.__class__ is Tensor:  # an HBM view: worked out once per index
            memo_key = _index_key(index)
            if memo_key is not None:
                views = self._views
                if views is None:
                    views = self._views = {}
                else:
                    known = views.get(memo_key)
                    if known is not None:
                        array, start, box, region, geometry = known
                        view = Tensor(array, self.dtype, buffer, self.name, self.storage, self._base or self, start)
                        view._row_box, view._region, view._geometry = box, region, geometry
                        return view
        view = self._view(index, buffer)
        if memo_key is not None and view.defect is None:
            views = self._views
            assert views is not None
            if len(views) >= MAX_VIEWS:
                views.clear()
            # what the view is made of, not the view: one would refer back to this tensor, a cycle that only the
            # garbage collector frees (with the tensor's bytes)
            start = view._start  # set by _view for a view with elements (the property's memo)
            if start is None:
                start = view.byte_offset
            views[memo_key] = (view.array, start, view._row_box, view._region or view.region, view.geometry)
        return view

    def _view(self, index: Any, buffer: Buffer) -> Tensor:
        key = self._normalise_index(index)
        array = self.array
        view = array[(*key, Ellipsis)]  # the Ellipsis keeps an all-integer index a 0-d view, not a copy
        if buffer in ON_CHIP_BUFFERS:
            while view.ndim < 2:
                view = view[..., np.newaxis]
        start = None
        size = view.size
        if size:  # where element 0 of the view is: this view's first index along each dim
            start = self._start  # the property's memo first
            if start is None:
                start = self.byte_offset
            for item, stride in zip(key, array.strides):
                start += (item.start if item.__class__ is slice else item) * stride
        result = Tensor(view, self.dtype, buffer, self.name, self.storage, self._base or self, start)
        if key and len(key) <= 2 and size:  # (an empty index, t[()], is the whole view: nothing to take)
            box = self._row_box or self.row_box  # the property's memo first (False: known not to be a box)
            if box is not None:
                _take_block_box(result, box, key)
        if size == 0:
            empty = view.shape.index(0)
            result.defect = BoundsError(f"slice selects no elements of dim {empty} of {self!r}")
        return result

    def raise_defect(self) -> None:
        """Raise the error recorded when this view was made, if it may not be used."""
        if self.defect is not None:
            raise self.defect

    def reshape(self, shape: tuple[int, ...] | list[int]) -> Tensor:
        """A view with a new shape over the same elements.

        On chip, dim 0 stays the partition dim: only the free dims are reshaped, and
        the new shape must be expressible as a view (no copy) of each partition's bytes.
        """
        self.raise_defect()
        if is_int(shape):
            shape = (shape,)  # numpy's reshape(n)
        if not isinstance(shape, (tuple, list)) or not all(is_int(s) and s >= 0 for s in shape):
            inferred = isinstance(shape, (tuple, list)) and -1 in shape
            raise OperandError(
                f"{self.name}.reshape: shape {shape!r} must be a tuple of integers of at least 0"
                + ("; nkisim infers no dimension from -1, give each" if inferred else "")
            )
        shape = tuple(int(s) for s in shape)
        if int(np.prod(shape, dtype=np.int64)) != self.array.size:
            raise OperandError(f"cannot reshape {list(self.shape)} to {list(shape)}: element counts differ")
        if self.buffer.is_on_chip and (len(shape) < 2 or shape[0] != self.shape[0]):
            raise ShapeError(
                f"cannot reshape {list(self.shape)} to {list(shape)}: an on-chip tensor keeps its "
                f"partition dim {self.shape[0]} at dim 0, followed by at least one free dim"
            )
        view = self.array.reshape(shape)
        if not np.may_share_memory(view, self.array):  # numpy had to copy: not a view of these bytes
            raise OperandError(f"cannot reshape a non-contiguous view of {self.name} to {list(shape)}")
        return Tensor(view, self.dtype, self.buffer, self.name, self.storage, self._base or self)

    def view(self, dtype: Any) -> Tensor:
        """The same bytes read as ``dtype`` (``NkiTensor.view``): same shape, no copy.

        nkisim reinterprets between types of one item size only (a packed x4 type and its 32-bit
        words, float32 and int32, ...); another size raises :class:`~nkisim.errors.DtypeError`.
        """
        self.raise_defect()
        try:
            dt = to_dtype(dtype)
        except TypeError as exc:
            raise DtypeError(f"{self.name}.view: {exc}") from None
        if dt.itemsize != self.dtype.itemsize:
            raise DtypeError(
                f"{self.name}.view({dtype_name(dt)}): its item size {dt.itemsize} differs from "
                f"{dtype_name(self.dtype)}'s {self.dtype.itemsize}; nkisim reinterprets only between types of one size"
            )
        return Tensor(self.array.view(dt), dt, self.buffer, self.name, self.storage, self._base or self, self._start)

    def _normalise_index(self, index: Any) -> tuple[Any, ...]:
        items = index if isinstance(index, tuple) else (index,)
        shape = self.array.shape
        if len(items) <= len(shape):  # the usual index, slices only: no Ellipsis, ints or nl.ds to resolve
            sliced = []
            for dim, item in enumerate(items):
                if item.__class__ is not slice:
                    break
                sliced.append(check_slice(item, shape[dim], dim, self))
            else:
                return tuple(sliced)
        if any(item is Ellipsis for item in items):
            pos = next(i for i, item in enumerate(items) if item is Ellipsis)
            fill = self.ndim - (len(items) - 1)
            items = items[:pos] + (slice(None),) * fill + items[pos + 1 :]
        if len(items) > self.ndim:
            raise BoundsError(f"too many indices ({len(items)}) for {self!r}")
        key: list[Any] = []
        for dim, item in enumerate(items):
            extent = self.array.shape[dim]
            if isinstance(item, DynSlice):
                item = item.as_slice()
            if isinstance(item, slice):
                key.append(check_slice(item, extent, dim, self))
            elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                i = int(item) + extent if item < 0 else int(item)
                if not 0 <= i < extent:
                    raise BoundsError(f"index {int(item)} is out of bounds for dim {dim} of size {extent} of {self!r}")
                key.append(slice(i, i + 1) if dim == 0 and self.buffer.is_on_chip else i)
            else:
                raise OperandError(
                    f"unsupported index {item!r} for {self!r}: use integers, slices or nl.ds(start, size)"
                )
        return tuple(key)

    # -- memory footprint --------------------------------------------------------------

    @property
    def region(self) -> Region:
        """The rectangle of bytes this view reads or writes (a conservative bounding box)."""
        if self._region is None:
            self._region = region_of(self.array, self.storage, self.byte_offset)
        return self._region

    @property
    def geometry(self) -> int | None:
        """What rules and costs may read of this view, as a number; None for a dynamic or defective view.

        The number stands for the dtype (and its identity: float32 and tfloat32 are equal dtypes), buffer,
        shape, strides, and on chip the partition rows of :attr:`region` and the first partition (in HBM, the
        number of rows: an HBM view's rows are addresses, which no rule or cost reads). Two views have the
        same number only when all of these are equal, and then differ only in where their bytes are (within a
        partition, on chip) and in their values (equal geometries may get different numbers once the memo has
        started again, which costs a plan, never a wrong one).
        """
        geometry = self._geometry
        if geometry is None:
            if self.defect is not None or self.is_dynamic:
                return None
            region = self._region or self.region  # the property's memo first
            array = self.array
            dtype = self.dtype
            buffer = self.buffer
            if buffer in ON_CHIP_BUFFERS:  # the partitions a view starts at and spans
                first = self.byte_offset // self.storage.row_bytes
                key = (dtype, id(dtype), buffer, array.shape, array.strides, region.r0, region.r1, first)
            else:
                key = (dtype, id(dtype), buffer, array.shape, array.strides, region.r1 - region.r0)
            geometry = _geometry_numbers.get(key)
            if geometry is None:
                if len(_geometry_numbers) >= _MAX_GEOMETRIES:
                    _geometry_numbers.clear()
                geometry = _geometry_numbers.setdefault(key, _next_geometry_number())
            self._geometry = geometry
        return geometry

    @property
    def row_box(self) -> tuple[int, int, int, int] | None:
        """``(r0, r1, b0, b1)`` when this static view's bytes are exactly rows ``[r0, r1)`` x bytes ``[b0, b1)``.

        That is a view whose free dims are contiguous within each partition (a whole tile,
        a partition range, a column range); None for a dynamic, strided or empty view, or one
        whose partitions are not consecutive rows.
        """
        box = self._row_box
        if box is None:
            static = not self.is_dynamic and self.defect is None
            box = self._row_box = static and row_box_of(self.array, self.storage.row_bytes, self.byte_offset)
        return box or None  # type: ignore[return-value]

    @property
    def byte_offset(self) -> int:
        """Offset of element 0 from the start of its storage."""
        start = self._start
        if start is None:
            start = self.array.ctypes.data - self.storage.address
            if not self.is_dynamic:  # a dynamic view moves with its offset's value
                self._start = start
        return start

    # -- access patterns (NKI 0.3+) ----------------------------------------------------

    def ap(
        self,
        pattern: Any,
        offset: int | None = 0,
        scalar_offset: Any = None,
        vector_offset: Tensor | None = None,
        indirect_dim: int = 0,
        dtype: Any = None,
    ) -> Tensor:
        """A hardware access pattern over this tensor's allocation (``NkiTensor.ap``).

        ``pattern`` is ``[[step, num], ...]`` outer to inner over the allocation
        flattened to elements of ``dtype`` (default: this tensor's); the element at
        ``(i0, i1, ...)`` is ``offset + sum(i_k * step_k)``. On chip the first pair is
        ``[elements per partition, partitions]``. The view ``.ap()`` is called on is
        ignored. ``scalar_offset`` (a ``(1, 1)`` SBUF integer tensor or a register)
        adds ``value * (elements per index of dim indirect_dim)`` at run time;
        ``vector_offset`` (a ``(P, 1)`` int32/uint32 SBUF tile) picks one row of this
        HBM tensor per partition (``indirect_dim=0``), for DMA gather and scatter.

        Raises:
            OperandError, ShapeError, DtypeError, MemoryKindError: a malformed pattern or offset.
            BoundsError: a static pattern reaching outside the allocation.
        """
        return access_pattern(self, pattern, offset, scalar_offset, vector_offset, indirect_dim, dtype)

    @property
    def offset_regions(self) -> tuple[Region, ...]:
        """What an instruction also reads to resolve this view's addresses: nothing for a static view."""
        return ()

    @property
    def index_tensors(self) -> tuple[Tensor, ...]:
        """The tiles holding this view's run-time offsets: none for a static view."""
        return ()


# -- access patterns (Tensor.ap) ------------------------------------------------------


#: The block views an HBM view keeps (:attr:`Tensor._views`); one more starts the memo again.
MAX_VIEWS = 1024


def _index_key(index: Any) -> tuple[object, ...] | None:
    """``index`` as a hashable key when it is made of Python ints, slices of ints and ``nl.ds`` of ints (else
    None, not kept): a slice as its ``(start, stop, step)``, ``nl.ds(start, size)`` as its slice's, an int as
    itself."""
    items = index if index.__class__ is tuple else (index,)
    key: list[object] = []
    for item in items:
        cls = item.__class__
        if cls is slice:
            start, stop, step = item.start, item.stop, item.step
            if not (
                (start is None or start.__class__ is int)
                and (stop is None or stop.__class__ is int)
                and (step is None or step.__class__ is int)
            ):
                return None
            key.append((start, stop, step))
        elif cls is int:
            key.append(item)
        elif cls is DynSlice and item.start.__class__ is int and item.size.__class__ is int:  # nl.ds: that slice
            key.append((item.start, item.start + item.size, None))
        else:
            return None
    return tuple(key)


def _take_block_box(view: Tensor, box: tuple[int, int, int, int], key: tuple[Any, ...]) -> None:
    """Give ``view``, the block ``key`` (one or two unit-step slices: a range of rows, then one of dim 1 with
    every later dim whole) of a view whose bytes are the box ``box``, its own box and region without working
    them out from its array (what :func:`row_box_of` would find)."""
    rows = key[0]
    if rows.__class__ is not slice or rows.step != 1:
        return
    r0, r1 = box[0] + rows.start, box[0] + rows.stop
    if len(key) == 1:
        block = (r0, r1, box[2], box[3])
    else:
        cols = key[1]
        if cols.__class__ is not slice or cols.step != 1:
            return
        # a box's free dims are in C order: an index of dim 1 moves by every later dim's bytes
        step = view.array.itemsize * math.prod(view.array.shape[2:])
        block = (r0, r1, box[2] + cols.start * step, box[2] + cols.stop * step)
    view._row_box = block
    view._region = new_region(Region, (view.storage, *block))


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

    is_dynamic: ClassVar[bool] = True

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
        super().__init__(None, layout.dtype, base.buffer, base.name, base.storage, base)  # type: ignore[arg-type]
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

    def at_current_offset(self) -> Tensor | None:
        """The static view this ``scalar_offset`` view is at now, with its offset's current value;
        None for a ``vector_offset`` view or an offset that leaves the allocation."""
        if self._vector is not None:
            return None
        offset = self._offset + self._scalar_value() * self._stride
        try:
            check_static(self._layout, self._pairs, offset, "")
        except BoundsError:
            return None
        base = self._layout.base
        array = strided(self._layout, self._pairs, offset)
        return Tensor(array, self.dtype, base.buffer, base.name, base.storage, base)

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
        return addr, row_mask(ok, self._shape)

    def locate(self, addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row and column into :meth:`Layout.typed_rows` of flat element indices."""
        return np.divmod(addr, self._layout.row_elems)

    def first_bad_row(self, mask: np.ndarray) -> str:
        rows = np.flatnonzero(~mask.reshape(self._shape[0], -1).all(axis=1))
        row = int(rows[0])
        if self._vector is not None:
            return f"row {row} (index {int(self._vector.array.reshape(-1)[row])})"
        return f"row {row} (scalar_offset {self._scalar_value()})"


def row_mask(rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A per-row flag (along dim 0) as a per-element mask of ``shape`` (a read-only broadcast view)."""
    return np.broadcast_to(rows.reshape((-1,) + (1,) * (len(shape) - 1)), shape)


# -- DMA gather and scatter -----------------------------------------------------------
