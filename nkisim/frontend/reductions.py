"""The reducing `nl` helpers: `nl.sum/max/min/prod/all`, `nl.mean`, `nl.var`, `nl.softmax`, `nl.rms_norm`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from nkisim.errors import OperandError, ShapeError
from nkisim.frontend.lowering import ADD, DIV, FP32, MUL, SUB, HelperCall, elementwise
from nkisim.isa.enums import reduce_cmd
from nkisim.isa.ops import OPS, Op
from nkisim.memory import Tensor

# -- reductions -----------------------------------------------------------------------


def _axes(call: HelperCall, x: Tensor, axis: Any) -> tuple[int, ...]:
    if not isinstance(axis, (int, np.integer, tuple, list)):
        raise call.error(OperandError, f"axis {axis!r} must be an int or a tuple of ints")
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


def _reduce(
    call: HelperCall, op: Op, x: Tensor, axes: tuple[int, ...], dtype: np.dtype, keepdims: bool, negate: bool = False
) -> Tensor:
    if list(axes) != list(range(axes[0], axes[0] + len(axes))) and not x.is_dynamic:
        # axes apart (such as [2, 4] of a pooling window): the access pattern lists them last, as the compiler
        # reorders it; the instruction then reduces its trailing axes
        kept = [a for a in range(x.ndim) if a not in axes]
        moved = Tensor(x.array.transpose((*kept, *axes)), x.dtype, x.buffer, x.name, x.storage, x._base or x)
        reduced = _reduce(call, op, moved, tuple(range(len(kept), x.ndim)), dtype, keepdims=False, negate=negate)
        return reduced.reshape(_reduced_shape(x, axes, keepdims)) if keepdims else reduced
    dst = call.tile(_reduced_shape(x, axes, keepdims), dtype)
    negated = {"negate": True} if negate else {}  # the instruction's default otherwise, as NKI would pass it
    call.emit("tensor_reduce", dst=dst, op=op, data=x, axis=axes, keepdims=keepdims, **negated)
    return dst


def reduction(helper: str, op_name: str) -> Callable[..., Tensor]:
    op = OPS[op_name]

    def reduce(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False) -> Tensor:
        call = HelperCall(helper)
        x = call.on_chip("x", x)
        return _reduce(call, op, x, _axes(call, x, axis), call.dtype(dtype, x.dtype), keepdims)

    reduce.__name__ = reduce.__qualname__ = helper
    reduce.__doc__ = (
        f"``nl.{helper}(x, axis, dtype=None, keepdims=False)``: {op_name} over free ``axis`` in float32 "
        "(tensor_reduce)."
    )
    return reduce


def _mean(call: HelperCall, x: Tensor, axes: tuple[int, ...], dtype: np.dtype, keepdims: bool) -> Tensor:
    total = _reduce(call, ADD, x, axes, FP32, keepdims)
    dst = call.tile(total.shape, dtype)
    call.emit("tensor_scalar", dst=dst, data=total, op0=DIV, operand0=float(_count(x, axes)))
    return dst


def _count(x: Tensor, axes: tuple[int, ...]) -> int:
    return math.prod(x.shape[a] for a in axes)


def mean(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over free ``axis``, in float32 (tensor_reduce add, then tensor_scalar divide)."""
    call = HelperCall("mean")
    x = call.on_chip("x", x)
    return _mean(call, x, _axes(call, x, axis), call.dtype(dtype, x.dtype), keepdims)


def var(x: Any, axis: Any, dtype: Any = None, keepdims: bool = False) -> Tensor:
    """Population variance over free ``axis``: the mean of squared deviations from the mean, in float32."""
    call = HelperCall("var")
    x = call.on_chip("x", x)
    axes = _axes(call, x, axis)
    center = _mean(call, x, axes, FP32, keepdims=True)
    deviation = elementwise(call, SUB, x, center, FP32)
    squared = call.tile(x.shape, FP32)
    call.emit("tensor_tensor", dst=squared, data1=deviation, data2=deviation, op=MUL)
    return _mean(call, squared, axes, call.dtype(dtype, x.dtype), keepdims)


def softmax(x: Any, axis: Any = -1, dtype: Any = None) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` over free ``axis``, in float32.

    Over all free dims: tensor_reduce (negated max), one activation computing exp
    with the max as bias and summing it, and tensor_scalar divide. Over some of
    them: the shift and the division are tensor_tensor over broadcast views.
    """
    call = HelperCall("softmax")
    x = call.on_chip("x", x)
    axes = _axes(call, x, axis)
    out = call.dtype(dtype, x.dtype)
    p = x.partitions
    neg_max = _reduce(call, OPS["maximum"], x, axes, FP32, keepdims=True, negate=True)
    exp = call.tile(x.shape, FP32)
    if neg_max.free_size == 1:
        total = call.tile((p, 1), FP32)
        call.emit(
            "activation",
            dst=exp,
            op=OPS["exp"],
            data=x,
            bias=neg_max.reshape((p, 1)),
            reduce_op=ADD,
            reduce_res=total,
            reduce_cmd=reduce_cmd.reset_reduce,
        )
    else:
        shifted = elementwise(call, ADD, x, neg_max, FP32)
        call.emit("activation", dst=exp, op=OPS["exp"], data=shifted)
        total = _reduce(call, ADD, exp, axes, FP32, keepdims=True)
    return elementwise(call, DIV, exp, total, out)


def rms_norm(
    x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-6, dtype: Any = None, compute_dtype: Any = None
) -> Tensor:
    """``x / sqrt(sum(x**2, axis) / n + epsilon) * w``.

    Lowered to tensor_tensor (squares, in ``compute_dtype``, default float32),
    tensor_reduce, tensor_scalar (``/ n + epsilon``), activation (rsqrt) and two
    multiplications.
    """
    call = HelperCall("rms_norm")
    x = call.on_chip("x", x)
    axes = _axes(call, x, axis)
    work = call.dtype(compute_dtype, FP32)
    squares = call.tile(x.shape, work)
    call.emit("tensor_tensor", dst=squares, data1=x, data2=x, op=MUL)
    total = _reduce(call, ADD, squares, axes, FP32, keepdims=True)
    ms = call.tile(total.shape, FP32)
    call.emit("tensor_scalar", dst=ms, data=total, op0=DIV, operand0=float(n), op1=ADD, operand1=float(epsilon))
    inv = call.tile(total.shape, FP32)
    call.emit("activation", dst=inv, op=OPS["rsqrt"], data=ms)
    normed = elementwise(call, MUL, x, inv, work)
    return elementwise(call, MUL, normed, w, call.dtype(dtype, x.dtype))
