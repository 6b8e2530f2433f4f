"""Index expressions of the ``neuronxcc.nki`` API: ``nl.arange``, ``nl.mgrid``, affine expressions and masks.

In the legacy API a tile is indexed by integer expressions that broadcast like numpy
index arrays: ``i_p = nl.arange(128)[:, None]``, ``i_f = nl.arange(512)[None, :]``,
``t[k * 128 + i_p, i_f]``. Loops run eagerly here, so every expression is a concrete
integer array (:class:`IndexExpr`). Indexing a tensor with them gives a strided view when
the element offsets are affine in the result's axes (:func:`index_view`); a comparison of
expressions is a :class:`Predicate`, which as ``mask=`` restricts an instruction to the
rectangle where it holds (:func:`mask_box`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from nkisim.errors import BoundsError, OperandError, ShapeError
from nkisim.memory import DynSlice, Tensor


class IndexExpr:
    """An integer index expression: a numpy ``int64`` array that broadcasts like an index array."""

    __slots__ = ("values",)
    __array_ufunc__ = None  # numpy scalars on the left defer to these operators

    def __init__(self, values: Any) -> None:
        self.values = np.asarray(values, dtype=np.int64)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @property
    def ndim(self) -> int:
        return self.values.ndim

    def __getitem__(self, key: Any) -> IndexExpr:
        return IndexExpr(self.values[key])

    def __repr__(self) -> str:
        return f"IndexExpr(shape={list(self.shape)})"

    def _binary(self, other: Any, fn: Any, reflected: bool = False) -> Any:
        if isinstance(other, Tensor) and fn is np.add:  # i_f + offsets[0, j]: an offset read at run time
            return DynamicIndex(other, self)
        value = _int_values(other)
        return IndexExpr(fn(value, self.values) if reflected else fn(self.values, value))

    def __add__(self, o: Any) -> IndexExpr:
        return self._binary(o, np.add)

    def __radd__(self, o: Any) -> IndexExpr:
        return self._binary(o, np.add, True)

    def __sub__(self, o: Any) -> IndexExpr:
        return self._binary(o, np.subtract)

    def __rsub__(self, o: Any) -> IndexExpr:
        return self._binary(o, np.subtract, True)

    def __mul__(self, o: Any) -> IndexExpr:
        return self._binary(o, np.multiply)

    def __rmul__(self, o: Any) -> IndexExpr:
        return self._binary(o, np.multiply, True)

    def __floordiv__(self, o: Any) -> IndexExpr:
        return self._binary(o, np.floor_divide)

    def __rfloordiv__(self, o: Any) -> IndexExpr:
        return self._binary(o, np.floor_divide, True)

    def __mod__(self, o: Any) -> IndexExpr:
        return self._binary(o, np.mod)

    def __neg__(self) -> IndexExpr:
        return IndexExpr(-self.values)

    def __pos__(self) -> IndexExpr:
        return self

    def _compare(self, other: Any, op: str) -> Predicate:
        diff = self - other
        return Predicate(_COMPARE[op](diff.values, 0), diff, op)

    def __lt__(self, o: Any) -> Predicate:  # type: ignore[override]
        return self._compare(o, "less")

    def __le__(self, o: Any) -> Predicate:  # type: ignore[override]
        return self._compare(o, "less_equal")

    def __gt__(self, o: Any) -> Predicate:  # type: ignore[override]
        return self._compare(o, "greater")

    def __ge__(self, o: Any) -> Predicate:  # type: ignore[override]
        return self._compare(o, "greater_equal")

    def __eq__(self, o: Any) -> Predicate:  # type: ignore[override]
        return self._compare(o, "equal")

    def __ne__(self, o: Any) -> Predicate:  # type: ignore[override]
        return self._compare(o, "not_equal")

    __hash__ = None  # type: ignore[assignment]


_COMPARE = {
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "equal": np.equal,
    "not_equal": np.not_equal,
}


class DynamicIndex:
    """An index read at run time: a ``(1, 1)`` integer SBUF tile plus a static expression.

    ``t[i_p, offsets[0, j] + i_f]`` indexes ``t`` at ``i_f`` moved by the value the tile
    holds when an instruction reads ``t`` (a ``scalar_offset`` access pattern).
    """

    __slots__ = ("expr", "tile")
    __array_ufunc__ = None

    def __init__(self, tile: Tensor, expr: IndexExpr | int = 0) -> None:
        if tile.size != 1 or tile.dtype.kind not in "iu":
            raise OperandError(
                f"must be one integer value ((1, 1), as offsets[0, j]), got {tile!r}",
                instruction="index expression",
                operand="tile",
            )
        self.tile = tile
        self.expr = expr

    def __add__(self, other: Any) -> DynamicIndex:
        if isinstance(other, Tensor):
            raise OperandError("holds at most one run-time offset", instruction="index expression")
        return DynamicIndex(self.tile, self.expr + other if isinstance(self.expr, IndexExpr) else other + self.expr)

    __radd__ = __add__

    def __sub__(self, other: Any) -> DynamicIndex:
        return self + (-other)

    def __repr__(self) -> str:
        return f"DynamicIndex({self.tile.name} + {self.expr!r})"


def _int_values(value: Any) -> Any:
    if isinstance(value, IndexExpr):
        return value.values
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OperandError(f"an index expression combines only with integers, got {value!r}")
    return np.int64(value)


class Predicate:
    """A boolean condition on index expressions (``i_p < 64``, ``(i_p < 64) & (i_f < 256)``).

    ``expr`` and ``cmp`` keep the affine form of a single comparison (``expr cmp 0``),
    which ``nisa.affine_select`` needs; combinations keep only the values.
    """

    __slots__ = ("cmp", "expr", "values")
    __array_ufunc__ = None

    def __init__(self, values: Any, expr: IndexExpr | None = None, cmp: str | None = None) -> None:
        self.values = np.asarray(values, dtype=bool)
        self.expr = expr
        self.cmp = cmp

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    def __and__(self, o: Any) -> Predicate:
        return Predicate(self.values & _bool_values(o))

    __rand__ = __and__

    def __or__(self, o: Any) -> Predicate:
        return Predicate(self.values | _bool_values(o))

    __ror__ = __or__

    def __invert__(self) -> Predicate:
        return Predicate(~self.values)

    def __bool__(self) -> bool:
        raise OperandError(
            "a predicate on index expressions has one value per element and no single truth value: combine "
            "predicates with & and | (Python's and/or would keep only one of them), and pass it as mask=, "
            "not to an if"
        )

    def __repr__(self) -> str:
        return f"Predicate(shape={list(self.shape)})"


def _bool_values(value: Any) -> Any:
    if isinstance(value, Predicate):
        return value.values
    if isinstance(value, (bool, np.bool_)):
        return np.bool_(value)
    raise OperandError(f"a mask predicate combines only with predicates, got {value!r}")


def arange(*args: Any) -> IndexExpr:
    """``nl.arange(start, stop, step)``: a 1-D index expression, as numpy's ``arange`` of integers."""
    for a in args:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise OperandError(f"nl.arange takes integers, got {a!r}")
    return IndexExpr(np.arange(*args, dtype=np.int64))


#: Names of an ``nl.mgrid`` result's components, by dimension.
MGRID_NAMES = ("p", "x", "y", "z", "w")


class Grid:
    """The result of ``nl.mgrid[0:128, 0:512]``: ``.p``, ``.x``, ``.y``, ... or unpacked ``i_p, i_f``."""

    def __init__(self, exprs: tuple[IndexExpr, ...]) -> None:
        self.exprs = exprs
        for name, expr in zip(MGRID_NAMES, exprs):
            setattr(self, name, expr)

    def __iter__(self) -> Iterator[IndexExpr]:
        return iter(self.exprs)

    def __len__(self) -> int:
        return len(self.exprs)

    def __getitem__(self, i: int) -> IndexExpr:
        return self.exprs[i]


class _MGrid:
    """``nl.mgrid``: ``nl.mgrid[0:128, 0:512]`` gives one broadcasting expression per dimension."""

    def __getitem__(self, key: Any) -> Grid:
        items = key if isinstance(key, tuple) else (key,)
        rank = len(items)
        exprs = []
        for axis, item in enumerate(items):
            if not isinstance(item, slice):
                raise OperandError(f"nl.mgrid takes slices (nl.mgrid[0:128, 0:512]), got {item!r}")
            values = np.arange(item.start or 0, item.stop, item.step or 1, dtype=np.int64)
            shape = [1] * rank
            shape[axis] = values.size
            exprs.append(IndexExpr(values.reshape(shape)))
        return Grid(tuple(exprs))


mgrid = _MGrid()


# -- indexing tensors ------------------------------------------------------------------


def as_key(key: Any) -> Any:
    """``key`` with an ``nl.mgrid`` result used whole (``x[nl.mgrid[0:128, 0:512]]``) as its expressions."""
    return tuple(key) if isinstance(key, Grid) else key


def has_expr(key: Any) -> bool:
    """True when ``key`` (an index or a tuple of them) holds an index expression."""
    items = key if isinstance(key, tuple) else (key,)
    return any(isinstance(item, (IndexExpr, DynamicIndex)) for item in items)


def index_arrays(tensor: Tensor, key: Any) -> list[np.ndarray]:
    """One broadcast integer array per dim of ``tensor`` for ``key`` (ints, slices, expressions)."""
    items = list(key if isinstance(key, tuple) else (key,))
    if any(item is Ellipsis for item in items):
        pos = items.index(Ellipsis)
        items[pos : pos + 1] = [slice(None)] * (tensor.ndim - len(items) + 1)
    if len(items) > tensor.ndim:
        raise BoundsError(f"too many indices ({len(items)}) for {tensor!r}")
    items += [slice(None)] * (tensor.ndim - len(items))
    free = [i for i, item in enumerate(items) if not isinstance(item, (int, np.integer))]
    rank = max([len(free)] + [item.ndim for item in items if isinstance(item, IndexExpr)])
    arrays = []
    for dim, item in enumerate(items):
        if isinstance(item, DynSlice):
            item = item.as_slice()
        if isinstance(item, IndexExpr):
            arrays.append(item.values)
        elif isinstance(item, slice):
            values = np.arange(*item.indices(tensor.shape[dim]), dtype=np.int64)
            shape = [1] * rank
            shape[free.index(dim)] = values.size
            arrays.append(values.reshape(shape))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            arrays.append(np.int64(item))
        else:
            raise OperandError(f"unsupported index {item!r} for {tensor!r}: use integers, slices or nl.arange/mgrid")
    try:
        shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
    except ValueError:
        raise ShapeError(
            f"index expressions of shapes {[list(np.shape(a)) for a in arrays]} do not broadcast"
        ) from None
    return [np.broadcast_to(a, shape) for a in arrays]


def _compact(a: np.ndarray) -> np.ndarray:
    """``a`` without the axes it is only broadcast along (kept with size 1): the same values, once each."""
    return a[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in a.strides)]


def out_of_bounds(tensor: Tensor, arrays: list[np.ndarray]) -> str | None:
    """Why ``arrays`` reach outside ``tensor``, or None."""
    for dim, full in enumerate(arrays):
        a = _compact(full)
        if full.size and (a.min() < 0 or a.max() >= tensor.shape[dim]):
            span = f"{int(a.min())}..{int(a.max())}"
            return f"index {span} is out of bounds for dim {dim} of size {tensor.shape[dim]} of {tensor!r}"
    return None


def affine_fit(values: np.ndarray) -> tuple[int, list[int]] | None:
    """``(offset, steps)`` with ``values[i] == offset + sum(steps[j] * i_j)``, or None when not affine."""
    if values.size == 0:
        return 0, [0] * values.ndim
    origin = int(values[(0,) * values.ndim])
    steps = []
    rebuilt = np.full(values.shape, origin, dtype=np.int64)
    for axis, n in enumerate(values.shape):
        if n == 1:
            steps.append(0)
            continue
        unit = [0] * values.ndim
        unit[axis] = 1
        step = int(values[tuple(unit)]) - origin
        steps.append(step)
        shape = [1] * values.ndim
        shape[axis] = n
        rebuilt = rebuilt + step * np.arange(n, dtype=np.int64).reshape(shape)
    return (origin, steps) if np.array_equal(rebuilt, values) else None


def _sum_of_fits(arrays: list[np.ndarray], scales: list[int], ndim: int) -> tuple[int, list[int]] | None:
    """The affine fit of ``sum(scale * array)`` from each array's own fit (on its compact form), or None
    when an array is not affine by itself."""
    offset, steps = 0, [0] * ndim
    for a, scale in zip(arrays, scales):
        fit = affine_fit(_compact(a))
        if fit is None:
            return None
        offset += scale * fit[0]
        steps = [total + scale * step for total, step in zip(steps, fit[1])]
    return offset, steps


def strided_view(tensor: Tensor, arrays: list[np.ndarray]) -> Tensor:
    """The view of ``tensor`` the in-bounds index ``arrays`` select (its element offsets must be affine)."""
    shape = arrays[0].shape if arrays else ()
    strides = tensor.array.strides
    fit = _sum_of_fits(arrays, [s // tensor.itemsize for s in strides], len(shape))
    if fit is None:  # a part is not affine on its own; their sum may still be
        offsets = sum((a * (s // tensor.itemsize) for a, s in zip(arrays, strides)), np.zeros(shape, dtype=np.int64))
        fit = affine_fit(np.asarray(offsets))
    if fit is None:
        raise OperandError(f"the index expressions on {tensor!r} are not affine in the result's axes")
    if 0 in shape:
        raise BoundsError(f"the index expressions select no elements of {tensor!r}")
    _, steps = fit
    first = tensor.array[(*(int(a[(0,) * len(shape)]) for a in arrays), Ellipsis)]
    # as_strided goes through the array interface, which knows no ml_dtypes type (fp8, bf16): stride raw bytes
    raw = first.view(np.dtype(f"u{tensor.itemsize}"))
    strides = tuple(s * tensor.itemsize for s in steps)
    view = np.lib.stride_tricks.as_strided(raw, shape=shape, strides=strides).view(first.dtype)
    if tensor.buffer.is_on_chip:
        while view.ndim < 2:
            view = view[..., np.newaxis]
    return Tensor(view, tensor.dtype, tensor.buffer, tensor.name, tensor.storage, tensor._base or tensor)


# -- masks -----------------------------------------------------------------------------


def mask_box(mask: Any) -> tuple[tuple[int, ...], tuple[slice, ...]] | None:
    """The mask's shape and the rectangle where it holds, per axis; None for no mask.

    Raises:
        OperandError: the mask is not a predicate, or holds on a region that is not a rectangle.
    """
    if mask is None or mask is True:
        return None
    if not isinstance(mask, Predicate):
        raise OperandError(f"must be a predicate on index expressions (i_p < 64), got {mask!r}", operand="mask")
    values = mask.values
    box = []
    projections = []
    for axis in range(values.ndim):
        others = tuple(a for a in range(values.ndim) if a != axis)
        proj = values.any(axis=others) if others else values
        hits = np.flatnonzero(proj)
        lo, hi = (int(hits[0]), int(hits[-1]) + 1) if hits.size else (0, 0)
        if hits.size and hi - lo != hits.size:
            raise OperandError(
                "holds on separate ranges of one axis; nkisim supports rectangular masks", operand="mask"
            )
        box.append(slice(lo, hi))
        shape = [1] * values.ndim
        shape[axis] = proj.size
        projections.append(proj.reshape(shape))
    rectangle = np.ones(values.shape, dtype=bool)
    for proj in projections:
        rectangle = rectangle & proj
    if not np.array_equal(rectangle, values):
        raise OperandError(
            "does not hold on a rectangle of the tile; nkisim supports rectangular masks", operand="mask"
        )
    return values.shape, tuple(box)


def box_slices(shape: tuple[int, ...], box: tuple[tuple[int, ...], tuple[slice, ...]]) -> tuple[slice, ...] | None:
    """The slices restricting an operand of ``shape`` to the mask's rectangle, or None when it does not apply."""
    mask_shape, slices = box
    if len(shape) != len(mask_shape):
        if shape and mask_shape and shape[0] == mask_shape[0] > 1:
            return (slices[0],) + (slice(None),) * (len(shape) - 1)
        return None
    return tuple(s if n == m and m > 1 else slice(None) for n, m, s in zip(shape, mask_shape, slices))


# -- run-time offsets ------------------------------------------------------------------


def has_dynamic(key: Any) -> bool:
    """True when ``key`` holds an index read at run time (a :class:`DynamicIndex` or a tile)."""
    items = key if isinstance(key, tuple) else (key,)
    return any(isinstance(item, (DynamicIndex, Tensor)) for item in items)


def dynamic_view(tensor: Tensor, key: Any) -> Tensor:
    """``tensor[key]`` with one index read at run time: a ``scalar_offset`` access pattern.

    The static part of the index (the expressions, and the dynamic index's own expression)
    must be affine in the result's axes, as for :func:`strided_view`; the run-time value
    moves the view along the dim it indexes.
    """
    items = list(key if isinstance(key, tuple) else (key,))
    if any(item is Ellipsis for item in items):
        pos = items.index(Ellipsis)
        items[pos : pos + 1] = [slice(None)] * (tensor.ndim - len(items) + 1)
    dims = [d for d, item in enumerate(items) if isinstance(item, (DynamicIndex, Tensor))]
    if len(dims) != 1:
        raise OperandError(f"an index of {tensor!r} holds at most one run-time offset, got {len(dims)}")
    dim = dims[0]
    if tensor.buffer.is_on_chip and dim == 0:
        raise OperandError(f"a run-time offset cannot index the partition dim of {tensor!r}; index a free dim")
    dynamic = items[dim] if isinstance(items[dim], DynamicIndex) else DynamicIndex(items[dim])
    items[dim] = dynamic.expr
    arrays = index_arrays(tensor, tuple(items))
    pattern, origin = _pattern(tensor, arrays)
    return tensor.ap(pattern, origin, scalar_offset=dynamic.tile, indirect_dim=_moving_dim(tensor, dim))


def _pattern(tensor: Tensor, arrays: list[np.ndarray]) -> tuple[list[list[int]], int]:
    """The ``.ap`` pattern and offset over ``tensor``'s allocation that ``arrays`` select."""
    base = tensor._base or tensor
    shape = arrays[0].shape if arrays else ()
    addr = sum(
        (a * s for a, s in zip(arrays, tensor.array.strides)),
        np.full(shape, tensor.byte_offset - base.byte_offset, dtype=np.int64),
    )
    if tensor.buffer.is_on_chip:
        part, col = np.divmod(np.asarray(addr), tensor.storage.row_bytes)
        elems = part * base.free_size + col // tensor.itemsize
    else:
        elems = np.asarray(addr) // tensor.itemsize
    while tensor.buffer.is_on_chip and elems.ndim < 2:
        elems = elems[..., np.newaxis]
    fit = affine_fit(elems)
    if fit is None:
        raise OperandError(f"the index expressions on {tensor!r} are not affine in the result's axes")
    origin, steps = fit
    if tensor.buffer.is_on_chip:
        steps[0] = base.free_size  # the partition step of an on-chip pattern (any, for one partition)
    return [[int(s), int(n)] for s, n in zip(steps, elems.shape)], origin


def _moving_dim(tensor: Tensor, dim: int) -> int:
    """The dim of the allocation a run-time index of ``tensor``'s ``dim`` moves along (its stride's)."""
    base = tensor._base or tensor
    if not tensor.buffer.is_on_chip or base is tensor:
        return dim
    stride = tensor.array.strides[dim]
    for k in [dim, *range(1, base.ndim)]:
        if 0 < k < base.ndim and base.array.strides[k] == stride:
            return k
    raise OperandError(f"dim {dim} of {tensor!r} moves by {stride} bytes, as no dim of its tile does")
