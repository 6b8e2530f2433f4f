"""Tiles as values, for the ``neuronxcc.nki`` API: :class:`LegacyTile` and views waiting for a mask.

A legacy kernel computes with tiles as values: ``c = a + b``, ``t[i_p, i_f] = nl.load(...)``,
``acc += nisa.nc_matmul(x, y)``. :class:`LegacyTile` is nkisim's :class:`~nkisim.memory.Tensor`
with those operators; every tensor the legacy front end hands a kernel is one. Its
operators call the legacy ``nl`` functions (``nkisim.nki.legacy.language``), which emit
the same instructions as the current API.

A view whose index expressions reach outside the tensor (``x[k * 128 + i_p, i_f]`` on the
last, partial tile) is legal when the instruction's ``mask=`` keeps only elements inside:
it is a :class:`PendingView` until an instruction resolves it with its mask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.errors import BoundsError, KernelError, OperandError, user_location
from nkisim.frontend.context import current_context, is_running
from nkisim.frontend.legacy_index import (
    DynamicIndex,
    IndexExpr,
    affine_fit,
    as_key,
    box_slices,
    dynamic_view,
    has_dynamic,
    has_expr,
    index_arrays,
    mask_box,
    out_of_bounds,
    strided_view,
)
from nkisim.memory import Buffer, Tensor

#: The legacy ``nl`` functions the operators call, by name; ``legacy_nl`` fills it when imported.
OPERATORS: dict[str, Callable[..., Any]] = {}


class LegacyTile(Tensor):
    """A tensor of the legacy API: indexed by index expressions, with arithmetic operators."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        return index(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        target = index(self, key)
        if isinstance(target, PendingView):
            raise target.error(user_location())
        OPERATORS["assign"](target, value)

    def reshape(self, shape: Any) -> LegacyTile:
        return as_tile(Tensor.reshape(self, shape))

    def view(self, dtype: Any) -> LegacyTile:
        """The same bytes reinterpreted as ``dtype`` (its item size must equal this tensor's)."""
        from nkisim.memory import to_dtype

        dt = to_dtype(dtype)
        if dt.itemsize != self.itemsize:
            raise OperandError(f"{self!r}.view({dt}): item sizes differ")
        return as_tile(Tensor(self.array.view(dt), dt, self.buffer, self.name, self.storage, self._base or self))

    def astype(self, dtype: Any) -> LegacyTile:
        """A copy cast to ``dtype`` (tensor_copy into a new SBUF tile)."""
        return OPERATORS["copy"](self, dtype=dtype)

    def broadcast_to(self, shape: Any) -> LegacyTile:
        return OPERATORS["broadcast_to"](self, shape=shape)

    def expand_dims(self, axis: int) -> LegacyTile:
        from nkisim.frontend.helpers import expand_dims

        return as_tile(expand_dims(self, axis))

    def assert_shape(self, shape: Any) -> LegacyTile:
        if tuple(shape) != tuple(self.shape):
            raise OperandError(f"{self!r} has shape {list(self.shape)}, not {list(shape)}")
        return self

    # -- operators: the legacy nl functions -------------------------------------------

    def _op(self, name: str, other: Any, reflected: bool = False) -> Any:
        if name == "add" and isinstance(other, IndexExpr):  # offsets[0, j] + i_f: a run-time index
            return DynamicIndex(self, other)
        fn = OPERATORS[name]
        return fn(other, self) if reflected else fn(self, other)

    def __add__(self, o: Any) -> Any:
        return self._op("add", o)

    def __radd__(self, o: Any) -> Any:
        return self._op("add", o, True)

    def __sub__(self, o: Any) -> Any:
        return self._op("subtract", o)

    def __rsub__(self, o: Any) -> Any:
        return self._op("subtract", o, True)

    def __mul__(self, o: Any) -> Any:
        return self._op("multiply", o)

    def __rmul__(self, o: Any) -> Any:
        return self._op("multiply", o, True)

    def __truediv__(self, o: Any) -> Any:
        return self._op("divide", o)

    def __rtruediv__(self, o: Any) -> Any:
        return self._op("divide", o, True)

    def __pow__(self, o: Any) -> Any:
        return self._op("power", o)

    def __and__(self, o: Any) -> Any:
        return self._op("bitwise_and", o)

    def __or__(self, o: Any) -> Any:
        return self._op("bitwise_or", o)

    def __xor__(self, o: Any) -> Any:
        return self._op("bitwise_xor", o)

    def __lshift__(self, o: Any) -> Any:
        return self._op("left_shift", o)

    def __rshift__(self, o: Any) -> Any:
        return self._op("right_shift", o)

    def __lt__(self, o: Any) -> Any:
        return self._op("less", o)

    def __le__(self, o: Any) -> Any:
        return self._op("less_equal", o)

    def __gt__(self, o: Any) -> Any:
        return self._op("greater", o)

    def __ge__(self, o: Any) -> Any:
        return self._op("greater_equal", o)

    def __neg__(self) -> Any:
        return OPERATORS["negative"](self)

    def __abs__(self) -> Any:
        return OPERATORS["abs"](self)

    def __invert__(self) -> Any:
        return OPERATORS["invert"](self)

    def _inplace(self, name: str, other: Any) -> LegacyTile:
        OPERATORS["accumulate"](self, other, name)
        return self

    def __iadd__(self, o: Any) -> LegacyTile:
        return self._inplace("add", o)

    def __isub__(self, o: Any) -> LegacyTile:
        return self._inplace("subtract", o)

    def __imul__(self, o: Any) -> LegacyTile:
        return self._inplace("multiply", o)

    def __itruediv__(self, o: Any) -> LegacyTile:
        return self._inplace("divide", o)

    __hash__ = Tensor.__hash__
    __eq__ = Tensor.__eq__  # identity, as for every tensor (nl.equal compares values)


def as_tile(value: Any) -> Any:
    """``value`` as a :class:`LegacyTile` when it is a plain tensor (the same object, retyped)."""
    if type(value) is Tensor:
        value.__class__ = LegacyTile
    elif isinstance(value, tuple):
        return tuple(as_tile(v) for v in value)
    return value


def index(tensor: Tensor, key: Any) -> Any:
    """``tensor[key]`` with the legacy API's indices: a :class:`LegacyTile` view, or a :class:`PendingView`.

    Errors name the indexing (``x[...]``) as their instruction, at the kernel's line.
    """
    try:
        return _index(tensor, as_key(key))
    except KernelError as exc:
        if exc.instruction:
            raise
        loc = exc.loc if exc.loc is not None and exc.loc.line else user_location()
        raise type(exc)(exc.rule, loc=loc, instruction=f"{tensor.name}[...]", operand=exc.operand) from None


def _index(tensor: Tensor, key: Any) -> Any:
    items = key if isinstance(key, tuple) else (key,)
    if items and isinstance(items[0], Tensor) and not tensor.buffer.is_on_chip:
        return indirect_view(tensor, items[0], items[1:])
    if has_dynamic(key):
        return dynamic_view(tensor, key)
    if not has_expr(key):
        try:
            return as_tile(Tensor.__getitem__(tensor, key))
        except BoundsError:
            if not any(isinstance(k, slice) for k in (key if isinstance(key, tuple) else (key,))):
                raise
    arrays = index_arrays(tensor, key)
    if out_of_bounds(tensor, arrays) is not None:
        return PendingView(tensor, arrays)
    return as_tile(strided_view(tensor, arrays))


def indirect_view(tensor: Tensor, rows: Tensor, rest: tuple[Any, ...]) -> Tensor:
    """``hbm[idx_tile, i_f]``: one row of ``tensor`` per partition of the integer tile ``rows`` (DMA gather/scatter)."""
    if rows.free_size != 1:
        raise OperandError(f"an index tile on dim 0 of {tensor!r} must be (P, 1), got {list(rows.shape)}")
    row = Tensor.__getitem__(tensor, 0)
    arrays = index_arrays(row, rest) if rest else index_arrays(row, (slice(None),) * row.ndim)
    steps = [s // row.itemsize for s in row.array.strides]
    offsets = sum((a * s for a, s in zip(arrays, steps)), np.zeros(arrays[0].shape, dtype=np.int64))
    offsets = np.asarray(offsets)
    if offsets.ndim >= 2 and offsets.shape[0] == 1:
        offsets = offsets[0]
    fit = affine_fit(offsets)
    if fit is None:
        raise OperandError(f"the free index expressions on {tensor!r} are not affine")
    origin, free_steps = fit
    base_row = (
        tensor.array.__array_interface__["data"][0] - (tensor._base or tensor).array.__array_interface__["data"][0]
    )
    row_stride = tensor.array.strides[0] // tensor.itemsize
    pattern = [[row_stride, rows.partitions]] + [[s, n] for s, n in zip(free_steps, offsets.shape)]
    return as_tile(tensor.ap(pattern, origin + base_row // tensor.itemsize, vector_offset=rows, indirect_dim=0))


class PendingView:
    """Index expressions on a tensor that reach outside it: an instruction's mask must keep them inside."""

    def __init__(self, tensor: Tensor, arrays: list[np.ndarray]) -> None:
        self.tensor = tensor
        self.arrays = arrays

    @property
    def shape(self) -> tuple[int, ...]:
        return self.arrays[0].shape if self.arrays else ()

    @property
    def dtype(self) -> np.dtype:
        return self.tensor.dtype

    @property
    def buffer(self) -> Buffer:
        return self.tensor.buffer

    def error(self, loc: Any) -> BoundsError:
        why = out_of_bounds(self.tensor, self.arrays)
        return BoundsError(f"{why}; a mask= keeping the indices inside makes this legal", loc=loc)

    def resolve(self, box: Any, loc: Any) -> LegacyTile:
        """The view within the mask's rectangle ``box`` (from :func:`mask_box`)."""
        slices = box_slices(self.shape, box) if box is not None else None
        if slices is None:
            raise self.error(loc)
        arrays = [a[slices] for a in self.arrays]
        if out_of_bounds(self.tensor, arrays) is not None:
            raise PendingView(self.tensor, arrays).error(loc)
        return as_tile(strided_view(self.tensor, arrays))

    def __repr__(self) -> str:
        return f"PendingView({self.tensor.name}{list(self.shape)})"


def restrict(value: Any, box: Any, loc: Any) -> Any:
    """An operand under a mask: a pending view resolved, a tensor cut to the mask's rectangle."""
    if isinstance(value, PendingView):
        return value.resolve(box, loc)
    if box is None or not isinstance(value, Tensor):
        return value
    slices = box_slices(value.shape, box)
    if slices is None or all(s == slice(None) for s in slices):
        return value
    return as_tile(Tensor.__getitem__(value, slices))


def masked(mask: Any, loc: Any) -> Any:
    """The mask's rectangle, with errors at the kernel's line."""
    try:
        return mask_box(mask)
    except OperandError as exc:
        exc.loc = loc
        raise


def empty_box(box: Any) -> bool:
    """True when the mask holds nowhere (the instruction is skipped)."""
    return box is not None and any(s.stop == s.start for s in box[1])


def flush() -> None:
    """Issue a matmul held back for ``+=`` (before anything reads its result)."""
    if is_running():
        current_context().flush_deferred()
