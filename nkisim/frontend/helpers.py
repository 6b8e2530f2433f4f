"""NKI 0.3+ value-returning ``nl.*`` helpers, each lowered to ``nki.isa`` instructions.

``c = nl.add(a, b)`` allocates a new tile for its result and emits the instructions
the NKI documentation names for it, so the profile shows the real cost:

=====================================  ====================================================
helper                                 instructions
=====================================  ====================================================
``nl.load`` / ``nl.store``             ``dma_copy``
``nl.copy``                            ``tensor_copy``
``nl.add``, ``nl.less``, ... (ALU)     ``tensor_tensor``; ``tensor_scalar`` when one side
                                       is a scalar or a ``(P, 1)`` column
``nl.exp``, ``nl.tanh``, ... (unary)   ``activation``
``nl.negative`` / ``nl.invert`` /      ``tensor_scalar`` (``* -1`` / ``xor`` all-ones /
``nl.logical_not``                     ``logical_xor 1``)
``nl.sum/max/min/prod/all``            ``tensor_reduce``
``nl.mean`` / ``nl.var``               ``tensor_reduce`` then ``tensor_scalar`` (``var``
                                       also ``tensor_tensor`` for the deviations)
``nl.softmax``                         ``tensor_reduce`` (negated max), ``activation(exp)``
                                       with its add-reduction, ``tensor_scalar(divide)``
``nl.rms_norm``                        ``tensor_tensor``, ``tensor_reduce``,
                                       ``tensor_scalar``, ``activation(rsqrt)``
``nl.matmul``                          ``nc_matmul`` into PSUM (``transpose_x=False``: first
                                       ``nc_transpose`` and ``tensor_copy`` of ``x``)
``nl.transpose``                       ``nc_transpose``
``nl.broadcast_to``                    ``tensor_copy`` (free dims) or ``dma_copy``
                                       (across partitions)
``nl.where``                           ``tensor_scalar`` (predicate), ``tensor_copy``,
                                       ``tensor_copy_predicated``
=====================================  ====================================================

Element-wise results take the promoted dtype of the inputs (NKI's type promotion);
see docs/semantics.md for the choices where the documentation is silent.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from nkisim.errors import DtypeError, KernelError, MemoryKindError, OperandError, ShapeError, user_location
from nkisim.frontend.context import current_context
from nkisim.isa.enums import reduce_cmd
from nkisim.isa.ops import OPS, VALUE_HELPERS, Op
from nkisim.memory import Buffer, Tensor, is_float, is_integer, to_dtype
from nkisim.memory.dtypes import NKI_DTYPES, is_tfloat32

_FP32 = NKI_DTYPES["float32"]
_BF16 = NKI_DTYPES["bfloat16"]
_UINT8 = NKI_DTYPES["uint8"]
_ADD, _MUL, _DIV, _SUB = OPS["add"], OPS["multiply"], OPS["divide"], OPS["subtract"]


# -- one helper call: where it was made, and how it emits ---------------------------


class _Call:
    """One ``nl.<helper>(...)`` call: its kernel line, and the tiles and instructions it makes."""

    def __init__(self, helper: str) -> None:
        self.helper = helper
        self.loc = user_location()
        self.ctx = current_context()

    def error(self, cls: type[KernelError], rule: str) -> KernelError:
        return cls(rule, loc=self.loc, instruction=f"nl.{self.helper}", target=self.ctx.hw.name)

    def tile(self, shape: tuple[int, ...], dtype: np.dtype, buffer: Buffer = Buffer.sbuf) -> Tensor:
        """A new on-chip tile for a result or an intermediate value."""
        partitions = self.ctx.hw.sbuf.partitions
        if len(shape) < 2:
            raise self.error(ShapeError, f"result shape {list(shape)} needs a partition dim and a free dim")
        if shape[0] > partitions:
            raise self.error(ShapeError, f"partition dim {shape[0]} exceeds {partitions}")
        return self.ctx.memory.new_tensor(tuple(int(d) for d in shape), dtype, buffer, "", self.loc)

    def emit(self, instruction: str, **operands: Any) -> None:
        self.ctx.emit(instruction, operands, self.loc)

    def dtype(self, dtype: Any, default: np.dtype) -> np.dtype:
        if dtype is None:
            return default
        try:
            return to_dtype(dtype)
        except TypeError as exc:
            raise self.error(DtypeError, f"dtype {exc}") from None

    def on_chip(self, name: str, value: Any) -> Tensor:
        """``value`` as an SBUF or PSUM tile, or a clear error."""
        if isinstance(value, Tensor):
            if value.buffer.is_on_chip:
                return value
            raise self.error(
                MemoryKindError, f"{name} is in {value.buffer.value} ({value.name}); load it into SBUF with nl.load"
            )
        raise self.error(OperandError, f"{name} must be an SBUF or PSUM tile, got {type(value).__name__}")


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating))


def _scalar(value: Any) -> int | float:
    return int(value) if isinstance(value, (bool, int, np.integer, np.bool_)) else float(value)


# -- type promotion -------------------------------------------------------------------


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """NKI's type promotion for two tile dtypes.

    (float, int) gives the float; two floats give the wider, or a widened type when
    equal widths differ in format (fp8 pair -> bfloat16, float16/bfloat16 -> float32);
    two ints give the wider, or a signed type that holds both (int8/uint8 -> int16,
    int32/uint32 -> float32, as there is no int64).
    """
    if a == b and is_tfloat32(a) == is_tfloat32(b):
        return a
    a_float, b_float = is_float(a), is_float(b)
    if a_float != b_float:
        return a if a_float else b
    if a_float:
        if a.itemsize != b.itemsize:
            return a if a.itemsize > b.itemsize else b
        return _BF16 if a.itemsize == 1 else _FP32
    a, b = (_UINT8 if t.kind == "b" else t for t in (a, b))
    if a == b:
        return a
    if (a.kind == "i") == (b.kind == "i"):
        return a if a.itemsize > b.itemsize else b
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    width = 2 * unsigned.itemsize
    return NKI_DTYPES[f"int{8 * width}"] if width <= 4 else _FP32


def _scalar_result(op: Op, tile: np.dtype, scalar: Any) -> np.dtype:
    """A weakly typed scalar keeps the tile's dtype, but a float scalar turns an integer tile into float32."""
    if not op.is_bitvec and is_integer(tile) and isinstance(scalar, (float, np.floating)):
        return _FP32
    return tile


# -- tile views -----------------------------------------------------------------------


def _expand(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A read-only view of ``t`` broadcast to ``shape`` (stride-0 access pattern dims)."""
    if t.shape == shape:
        return t
    return Tensor(np.broadcast_to(t.array, shape), t.dtype, t.buffer, t.name, t.storage, t)


def _broadcast_shape(call: _Call, x: Tensor, y: Tensor) -> tuple[int, ...]:
    if x.ndim != y.ndim:
        raise call.error(ShapeError, f"shapes {list(x.shape)} and {list(y.shape)} differ in rank")
    if x.partitions != y.partitions:
        raise call.error(
            ShapeError,
            f"partition dims {x.partitions} and {y.partitions} differ; "
            "broadcast across partitions explicitly with nl.broadcast_to",
        )
    shape = [x.shape[0]]
    for a, b in zip(x.shape[1:], y.shape[1:]):
        if a != b and 1 not in (a, b):
            raise call.error(ShapeError, f"shapes {list(x.shape)} and {list(y.shape)} do not broadcast")
        shape.append(max(a, b))
    return tuple(shape)


def _column(call: _Call, op: Op, t: Tensor) -> Tensor:
    """A ``(P, 1)`` tile as a tensor_scalar operand: float32 for arithmetic operators."""
    col = t if t.ndim == 2 else t.reshape((t.partitions, 1))
    if op.is_bitvec or col.dtype == _FP32:
        return col
    col32 = call.tile((t.partitions, 1), _FP32)
    call.emit("tensor_copy", dst=col32, src=col)
    return col32


def _to_sbuf(call: _Call, t: Tensor) -> Tensor:
    if t.buffer is Buffer.sbuf:
        return t
    staged = call.tile(t.shape, t.dtype)
    call.emit("tensor_copy", dst=staged, src=t)
    return staged


# -- element-wise ---------------------------------------------------------------------


def _elementwise(call: _Call, op: Op, x: Any, y: Any, dtype: Any) -> Tensor:
    x_scalar, y_scalar = _is_scalar(x), _is_scalar(y)
    if x_scalar and y_scalar:
        raise call.error(OperandError, "x and y are both scalars; at least one must be a tile")
    if x_scalar or y_scalar:
        tile = call.on_chip("y" if x_scalar else "x", y if x_scalar else x)
        scalar = x if x_scalar else y
        dst = call.tile(tile.shape, call.dtype(dtype, _scalar_result(op, tile.dtype, scalar)))
        call.emit("tensor_scalar", dst=dst, data=tile, op0=op, operand0=_scalar(scalar), reverse0=x_scalar)
        return dst
    x, y = call.on_chip("x", x), call.on_chip("y", y)
    shape = _broadcast_shape(call, x, y)
    out = call.dtype(dtype, promote(x.dtype, y.dtype))
    if y.free_size == 1 and x.shape == shape and x.free_size > 1:
        dst = call.tile(shape, out)
        call.emit("tensor_scalar", dst=dst, data=x, op0=op, operand0=_column(call, op, y), reverse0=False)
        return dst
    if x.free_size == 1 and y.shape == shape and y.free_size > 1:
        dst = call.tile(shape, out)
        call.emit("tensor_scalar", dst=dst, data=y, op0=op, operand0=_column(call, op, x), reverse0=True)
        return dst
    if x.buffer is Buffer.psum and y.buffer is Buffer.psum:  # an engine reads at most one input from PSUM
        y = _to_sbuf(call, y)
    dst = call.tile(shape, out)
    call.emit("tensor_tensor", dst=dst, data1=_expand(x, shape), data2=_expand(y, shape), op=op)
    return dst


def _binary_helper(op: Op) -> Callable[..., Tensor]:
    def helper(x: Any, y: Any, dtype: Any = None) -> Tensor:
        return _elementwise(_Call(op.name), op, x, y, dtype)

    helper.__name__ = helper.__qualname__ = op.name
    helper.__doc__ = (
        f"``nl.{op.name}(x, y, dtype=None)``: element-wise {op.name} of two tiles, or of a tile and a "
        "scalar or (P, 1) column, in a new SBUF tile (tensor_tensor, or tensor_scalar)."
    )
    return helper


def _unary_helper(op: Op) -> Callable[..., Tensor]:
    def helper(x: Any, dtype: Any = None) -> Tensor:
        call = _Call(op.name)
        x = call.on_chip("x", x)
        dst = call.tile(x.shape, call.dtype(dtype, x.dtype))
        call.emit("activation", dst=dst, op=op, data=x)
        return dst

    helper.__name__ = helper.__qualname__ = op.name
    helper.__doc__ = f"``nl.{op.name}(x, dtype=None)``: {op.name} of each element in a new SBUF tile (activation)."
    return helper


def copy(x: Any, dtype: Any = None) -> Tensor:
    """A copy of an SBUF or PSUM tile in a new SBUF tile, cast to ``dtype`` (tensor_copy)."""
    call = _Call("copy")
    x = call.on_chip("x", x)
    dst = call.tile(x.shape, call.dtype(dtype, x.dtype))
    call.emit("tensor_copy", dst=dst, src=x)
    return dst


def _unary_alu(call: _Call, x: Any, op: Op, operand: int | float, dtype: Any) -> Tensor:
    x = call.on_chip("x", x)
    dst = call.tile(x.shape, call.dtype(dtype, x.dtype))
    call.emit("tensor_scalar", dst=dst, data=x, op0=op, operand0=operand)
    return dst


def negative(x: Any, dtype: Any = None) -> Tensor:
    """``-x`` element-wise (tensor_scalar multiply by -1)."""
    return _unary_alu(_Call("negative"), x, _MUL, -1.0, dtype)


def invert(x: Any, dtype: Any = None) -> Tensor:
    """Bitwise NOT of an integer tile (tensor_scalar bitwise_xor with all-ones)."""
    call = _Call("invert")
    tile = call.on_chip("x", x)
    ones = -1 if tile.dtype.kind == "i" else int(np.iinfo(np.uint8 if tile.dtype.kind == "b" else tile.dtype).max)
    return _unary_alu(call, tile, OPS["bitwise_xor"], ones, dtype)


def logical_not(x: Any, dtype: Any = None) -> Tensor:
    """``x == 0`` as 1/0 for boolean-like (0/1) inputs (tensor_scalar logical_xor with 1)."""
    return _unary_alu(_Call("logical_not"), x, OPS["logical_xor"], 1.0, dtype)


# -- reductions -----------------------------------------------------------------------


def _axes(call: _Call, x: Tensor, axis: Any) -> tuple[int, ...]:
    items = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = []
    for a in items:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise call.error(OperandError, f"axis {axis!r} must be an int or a tuple of ints")
        a = int(a) + x.ndim if a < 0 else int(a)
        if not 1 <= a < x.ndim:
            raise call.error(ShapeError, f"axis {axis!r} must name free dims (1 to {x.ndim - 1}) of {list(x.shape)}")
        axes.append(a)
    if not axes:
        raise call.error(ShapeError, "axis must name at least one free dim")
    return tuple(sorted(set(axes)))


def _reduced_shape(x: Tensor, axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """The result shape; on chip a tile keeps one free dim, so reducing all of them gives ``(P, 1)``."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return shape if len(shape) >= 2 else (*shape, 1)


def _reduce(call: _Call, op: Op, x: Tensor, axes: tuple[int, ...], dtype: np.dtype, keepdims: bool) -> Tensor:
    dst = call.tile(_reduced_shape(x, axes, keepdims), dtype)
    call.emit("tensor_reduce", dst=dst, op=op, data=x, axis=axes, keepdims=keepdims)
    return dst


def _reduction(helper: str, op_name: str) -> Callable[..., Tensor]:
    op = OPS[op_name]

    def reduce(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False) -> Tensor:
        call = _Call(helper)
        x = call.on_chip("x", x)
        return _reduce(call, op, x, _axes(call, x, axis), call.dtype(dtype, x.dtype), keepdims)

    reduce.__name__ = reduce.__qualname__ = helper
    reduce.__doc__ = (
        f"``nl.{helper}(x, axis, dtype=None, keepdims=False)``: {op_name} over free ``axis`` in float32 "
        "(tensor_reduce)."
    )
    return reduce


def _mean(call: _Call, x: Tensor, axes: tuple[int, ...], dtype: np.dtype, keepdims: bool) -> Tensor:
    total = _reduce(call, _ADD, x, axes, _FP32, keepdims)
    dst = call.tile(total.shape, dtype)
    call.emit("tensor_scalar", dst=dst, data=total, op0=_DIV, operand0=float(_count(x, axes)))
    return dst


def _count(x: Tensor, axes: tuple[int, ...]) -> int:
    return math.prod(x.shape[a] for a in axes)


def mean(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over free ``axis``, in float32 (tensor_reduce add, then tensor_scalar divide)."""
    call = _Call("mean")
    x = call.on_chip("x", x)
    return _mean(call, x, _axes(call, x, axis), call.dtype(dtype, x.dtype), keepdims)


def var(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False) -> Tensor:
    """Population variance over free ``axis``: the mean of squared deviations from the mean, in float32."""
    call = _Call("var")
    x = call.on_chip("x", x)
    axes = _axes(call, x, axis)
    center = _mean(call, x, axes, _FP32, keepdims=True)
    deviation = _elementwise(call, _SUB, x, center, _FP32)
    squared = call.tile(x.shape, _FP32)
    call.emit("tensor_tensor", dst=squared, data1=deviation, data2=deviation, op=_MUL)
    return _mean(call, squared, axes, call.dtype(dtype, x.dtype), keepdims)


def softmax(x: Any, axis: Any = -1, dtype: Any = None) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` over free ``axis``, in float32.

    Over all free dims: tensor_reduce (negated max), one activation computing exp
    with the max as bias and summing it, and tensor_scalar divide. Over some of
    them: the shift and the division are tensor_tensor over broadcast views.
    """
    call = _Call("softmax")
    x = call.on_chip("x", x)
    axes = _axes(call, x, axis)
    out = call.dtype(dtype, x.dtype)
    p = x.partitions
    neg_max = call.tile(_reduced_shape(x, axes, True), _FP32)
    call.emit("tensor_reduce", dst=neg_max, op=OPS["maximum"], data=x, axis=axes, negate=True, keepdims=True)
    exp = call.tile(x.shape, _FP32)
    if neg_max.free_size == 1:
        total = call.tile((p, 1), _FP32)
        call.emit(
            "activation",
            dst=exp,
            op=OPS["exp"],
            data=x,
            bias=neg_max.reshape((p, 1)),
            reduce_op=_ADD,
            reduce_res=total,
            reduce_cmd=reduce_cmd.reset_reduce,
        )
    else:
        shifted = _elementwise(call, _ADD, x, neg_max, _FP32)
        call.emit("activation", dst=exp, op=OPS["exp"], data=shifted)
        total = _reduce(call, _ADD, exp, axes, _FP32, keepdims=True)
    return _elementwise(call, _DIV, exp, total, out)


def rms_norm(
    x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-6, dtype: Any = None, compute_dtype: Any = None
) -> Tensor:
    """``x / sqrt(sum(x**2, axis) / n + epsilon) * w``.

    Lowered to tensor_tensor (squares, in ``compute_dtype``, default float32),
    tensor_reduce, tensor_scalar (``/ n + epsilon``), activation (rsqrt) and two
    multiplications.
    """
    call = _Call("rms_norm")
    x = call.on_chip("x", x)
    axes = _axes(call, x, axis)
    work = call.dtype(compute_dtype, _FP32)
    squares = call.tile(x.shape, work)
    call.emit("tensor_tensor", dst=squares, data1=x, data2=x, op=_MUL)
    total = _reduce(call, _ADD, squares, axes, _FP32, keepdims=True)
    ms = call.tile(total.shape, _FP32)
    call.emit("tensor_scalar", dst=ms, data=total, op0=_DIV, operand0=float(n), op1=_ADD, operand1=float(epsilon))
    inv = call.tile(total.shape, _FP32)
    call.emit("activation", dst=inv, op=OPS["rsqrt"], data=ms)
    normed = _elementwise(call, _MUL, x, inv, work)
    return _elementwise(call, _MUL, normed, w, call.dtype(dtype, x.dtype))


# -- data movement and layout ---------------------------------------------------------


def load(src: Any, dtype: Any = None) -> Tensor:
    """A new SBUF tile holding ``src`` (an HBM tensor or view), cast to ``dtype`` (dma_copy)."""
    call = _Call("load")
    if not isinstance(src, Tensor):
        raise call.error(OperandError, f"src must be an HBM tensor, got {type(src).__name__}")
    dst = call.tile(src.shape, call.dtype(dtype, src.dtype))
    call.emit("dma_copy", dst=dst, src=src)
    return dst


def store(dst: Any, value: Any) -> None:
    """Copy the SBUF tile ``value`` into the HBM tensor ``dst`` (dma_copy)."""
    call = _Call("store")
    if not isinstance(dst, Tensor):
        raise call.error(OperandError, f"dst must be an HBM tensor, got {type(dst).__name__}")
    call.emit("dma_copy", dst=dst, src=call.on_chip("value", value))


def transpose(x: Any, dtype: Any = None) -> Tensor:
    """Swap the partition dim and the free dims of a 2-D tile (nc_transpose).

    An SBUF tile goes through the Tensor Engine and the result is in PSUM; a PSUM
    tile goes through the Vector Engine (at most 32 x 32) into SBUF. A ``dtype``
    other than ``x``'s adds a tensor_copy into SBUF.
    """
    call = _Call("transpose")
    x = call.on_chip("x", x)
    if x.ndim != 2:
        raise call.error(ShapeError, f"x must be a 2-D tile, got shape {list(x.shape)}")
    shape = (x.shape[1], x.shape[0])
    result = call.tile(shape, x.dtype, Buffer.psum if x.buffer is Buffer.sbuf else Buffer.sbuf)
    call.emit("nc_transpose", dst=result, data=x)
    out = call.dtype(dtype, x.dtype)
    if out == x.dtype and is_tfloat32(out) == is_tfloat32(x.dtype):
        return result
    cast = call.tile(shape, out)
    call.emit("tensor_copy", dst=cast, src=result)
    return cast


def matmul(x: Any, y: Any, transpose_x: bool = False) -> Tensor:
    """``x @ y`` (or ``x.T @ y`` with ``transpose_x=True``) as a new float32 PSUM tile (nc_matmul).

    The Tensor Engine contracts over the partition dim, so with ``transpose_x=False``
    ``x`` is first transposed (nc_transpose into PSUM, tensor_copy back to SBUF).
    """
    call = _Call("matmul")
    x, y = call.on_chip("x", x), call.on_chip("y", y)
    if x.ndim != 2:
        raise call.error(ShapeError, f"x must be a 2-D tile, got shape {list(x.shape)}")
    k = x.shape[0] if transpose_x else x.shape[1]
    if k != y.partitions:
        side = "partition" if transpose_x else "free"
        raise call.error(ShapeError, f"x's {side} dim {k} must match y's partition dim {y.partitions}")
    stationary = x
    if not transpose_x:
        flipped = call.tile((x.shape[1], x.shape[0]), x.dtype, Buffer.psum)
        call.emit("nc_transpose", dst=flipped, data=_to_sbuf(call, x))
        stationary = call.tile(flipped.shape, x.dtype)
        call.emit("tensor_copy", dst=stationary, src=flipped)
    dst = call.tile((stationary.shape[1], *y.shape[1:]), _FP32, Buffer.psum)
    call.emit("nc_matmul", dst=dst, stationary=_to_sbuf(call, stationary), moving=_to_sbuf(call, y))
    return dst


def broadcast_to(x: Any, shape: Any, dtype: Any = None) -> Tensor:
    """``x`` broadcast to ``shape`` (same rank; size-1 dims repeat) in a new SBUF tile.

    Free dims broadcast with a stride-0 tensor_copy; the partition dim with a
    stride-0 dma_copy. Equal shapes return ``x`` itself (or a cast copy).
    """
    call = _Call("broadcast_to")
    x = call.on_chip("x", x)
    target = tuple(int(d) for d in shape)
    if len(target) != x.ndim or any(a != b and a != 1 for a, b in zip(x.shape, target)):
        raise call.error(ShapeError, f"cannot broadcast shape {list(x.shape)} to {list(target)}")
    out = call.dtype(dtype, x.dtype)
    if target == x.shape:
        if out == x.dtype and is_tfloat32(out) == is_tfloat32(x.dtype):
            return x
        dst = call.tile(target, out)
        call.emit("tensor_copy", dst=dst, src=x)
        return dst
    dst = call.tile(target, out)
    if x.partitions != target[0]:
        call.emit("dma_copy", dst=dst, src=_expand(_to_sbuf(call, x), target))
    else:
        call.emit("tensor_copy", dst=dst, src=_expand(x, target))
    return dst


def expand_dims(x: Any, axis: int) -> Tensor:
    """A view of ``x`` with a new size-1 dim at free position ``axis`` (no instruction)."""
    call = _Call("expand_dims")
    if not isinstance(x, Tensor) or not isinstance(axis, (int, np.integer)):
        raise call.error(OperandError, f"takes a tensor and an integer axis, got {type(x).__name__} and {axis!r}")
    a = int(axis) + x.ndim + 1 if axis < 0 else int(axis)
    if not (1 if x.buffer.is_on_chip else 0) <= a <= x.ndim:
        raise call.error(ShapeError, f"axis {axis} is not a free position of {list(x.shape)}")
    return x.reshape((*x.shape[:a], 1, *x.shape[a:]))


def where(condition: Any, x: Any, y: Any, dtype: Any = None) -> Tensor:
    """Elements of ``x`` where ``condition`` is nonzero, else of ``y``.

    ``condition != 0`` becomes a uint8 predicate (tensor_scalar); ``y`` is copied
    into the result (tensor_copy) and ``x`` copied over it where the predicate
    holds (tensor_copy_predicated). ``x`` or ``y`` may be a scalar.
    """
    call = _Call("where")
    cond = call.on_chip("condition", condition)
    tiles = [call.on_chip(n, v) for n, v in (("x", x), ("y", y)) if not _is_scalar(v)]
    default = tiles[0].dtype if len(tiles) == 1 else promote(tiles[0].dtype, tiles[1].dtype) if tiles else _FP32
    out = call.dtype(dtype, default)
    for name, t in zip(("x", "y"), tiles):
        if t.shape != cond.shape:
            raise call.error(ShapeError, f"{name} shape {list(t.shape)} differs from condition's {list(cond.shape)}")
    predicate = call.tile(cond.shape, _UINT8)
    call.emit("tensor_scalar", dst=predicate, data=cond, op0=OPS["not_equal"], operand0=0.0)
    dst = call.tile(cond.shape, out)
    if _is_scalar(y):
        call.emit("memset", dst=dst, value=_scalar(y))
    else:
        call.emit("tensor_copy", dst=dst, src=y)
    source: Any = _scalar(x) if _is_scalar(x) else x
    if isinstance(source, Tensor) and (source.dtype != out or is_tfloat32(source.dtype) != is_tfloat32(out)):
        cast = call.tile(cond.shape, out)
        call.emit("tensor_copy", dst=cast, src=source)
        source = cast
    call.emit("tensor_copy_predicated", dst=dst, src=source, predicate=predicate)
    return dst


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    """``with nl.no_reorder():`` keeps program order; nkisim always issues in program order."""
    yield


# -- registration ---------------------------------------------------------------------

#: ``nl`` helpers that are not operator constants, by their ``nki.language`` name.
HELPERS: dict[str, Callable[..., Any]] = {
    "load": load,
    "store": store,
    "sum": _reduction("sum", "add"),
    "max": _reduction("max", "maximum"),
    "min": _reduction("min", "minimum"),
    "prod": _reduction("prod", "multiply"),
    "all": _reduction("all", "logical_and"),
    "mean": mean,
    "var": var,
    "softmax": softmax,
    "rms_norm": rms_norm,
    "matmul": matmul,
    "transpose": transpose,
    "broadcast_to": broadcast_to,
    "expand_dims": expand_dims,
    "where": where,
    "negative": negative,
    "logical_not": logical_not,
    "no_reorder": no_reorder,
}

_SPECIAL: dict[str, Callable[..., Tensor]] = {"copy": copy, "invert": invert}


def _register() -> None:
    """Make every operator constant callable: ``nl.add(a, b)``, ``nl.exp(x)``, ..."""
    for name, op in OPS.items():
        if name in _SPECIAL:
            VALUE_HELPERS[name] = _SPECIAL[name]
        elif op.is_activation:
            VALUE_HELPERS[name] = _unary_helper(op)
        else:
            VALUE_HELPERS[name] = _binary_helper(op)


_register()

__all__ = ["HELPERS", "promote"]
