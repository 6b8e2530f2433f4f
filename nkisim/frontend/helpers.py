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
import dataclasses
import difflib
import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nkisim.errors import DtypeError, MemoryKindError, OperandError, ShapeError, user_location
from nkisim.frontend.lowering import (
    FP32,
    MATH_HELPERS,
    MUL,
    UINT8,
    HelperCall,
    elementwise,
    expand,
    is_scalar,
    promote,
    scalar_value,
    to_sbuf,
)
from nkisim.frontend.reductions import mean, reduction, rms_norm, softmax, var
from nkisim.isa.ops import OPS, Op
from nkisim.memory import Buffer, Tensor
from nkisim.memory.dtypes import NKI_DTYPES, is_tfloat32
from nkisim.memory.pattern import is_int

UINT32 = NKI_DTYPES["uint32"]


def _binary_helper(op: Op) -> Callable[..., Tensor]:
    def helper(x: Any, y: Any, dtype: Any = None) -> Tensor:
        return elementwise(HelperCall(op.name), op, x, y, dtype)

    helper.__name__ = helper.__qualname__ = op.name
    helper.__doc__ = (
        f"``nl.{op.name}(x, y, dtype=None)``: element-wise {op.name} of two tiles, or of a tile and a "
        "scalar or (P, 1) column, in a new SBUF tile (tensor_tensor, or tensor_scalar)."
    )
    return helper


def _unary_helper(op: Op) -> Callable[..., Tensor]:
    def helper(x: Any, dtype: Any = None) -> Tensor:
        call = HelperCall(op.name)
        x = call.on_chip("x", x)
        dst = call.tile(x.shape, call.dtype(dtype, x.dtype))
        call.emit("activation", dst=dst, op=op, data=x)
        return dst

    helper.__name__ = helper.__qualname__ = op.name
    helper.__doc__ = f"``nl.{op.name}(x, dtype=None)``: {op.name} of each element in a new SBUF tile (activation)."
    return helper


def copy(x: Any, dtype: Any = None) -> Tensor:
    """A copy of an SBUF or PSUM tile in a new SBUF tile, cast to ``dtype`` (tensor_copy)."""
    call = HelperCall("copy")
    x = call.on_chip("x", x)
    dst = call.tile(x.shape, call.dtype(dtype, x.dtype))
    call.emit("tensor_copy", dst=dst, src=x)
    return dst


def _unary_alu(call: HelperCall, x: Any, op: Op, operand: int | float, dtype: Any) -> Tensor:
    x = call.on_chip("x", x)
    dst = call.tile(x.shape, call.dtype(dtype, x.dtype))
    call.emit("tensor_scalar", dst=dst, data=x, op0=op, operand0=operand)
    return dst


def negative(x: Any, dtype: Any = None) -> Tensor:
    """``-x`` element-wise (tensor_scalar multiply by -1)."""
    return _unary_alu(HelperCall("negative"), x, MUL, -1.0, dtype)


def invert(x: Any, dtype: Any = None) -> Tensor:
    """Bitwise NOT of an integer tile (tensor_scalar bitwise_xor with all-ones)."""
    call = HelperCall("invert")
    tile = call.on_chip("x", x)
    ones = -1 if tile.dtype.kind == "i" else int(np.iinfo(np.uint8 if tile.dtype.kind == "b" else tile.dtype).max)
    return _unary_alu(call, tile, OPS["bitwise_xor"], ones, dtype)


def logical_not(x: Any, dtype: Any = None) -> Tensor:
    """``x == 0`` as 1/0 for boolean-like (0/1) inputs (tensor_scalar logical_xor with 1)."""
    return _unary_alu(HelperCall("logical_not"), x, OPS["logical_xor"], 1.0, dtype)


# -- data movement and layout ---------------------------------------------------------


def load(src: Any, dtype: Any = None) -> Tensor:
    """A new SBUF tile holding ``src`` (an HBM tensor or view), cast to ``dtype`` (dma_copy)."""
    call = HelperCall("load")
    if not isinstance(src, Tensor):
        raise call.error(OperandError, f"src must be an HBM tensor, got {type(src).__name__}")
    dst = call.tile(src.shape, call.dtype(dtype, src.dtype))
    call.emit("dma_copy", dst=dst, src=src)
    return dst


def store(dst: Any, value: Any) -> None:
    """Copy the SBUF tile ``value`` into the HBM tensor ``dst`` (dma_copy)."""
    call = HelperCall("store")
    if not isinstance(dst, Tensor):
        raise call.error(OperandError, f"dst must be an HBM tensor, got {type(dst).__name__}")
    value = call.on_chip("value", value)
    if value.buffer is Buffer.psum:  # DMA does not read PSUM
        raise call.error(
            MemoryKindError, f"value {value.name} is a PSUM tile; copy it into SBUF first (nl.copy or nisa.tensor_copy)"
        )
    call.emit("dma_copy", dst=dst, src=value)


def transpose(x: Any, dtype: Any = None) -> Tensor:
    """Swap the partition dim and the free dims of a 2-D tile (nc_transpose).

    An SBUF tile goes through the Tensor Engine and the result is in PSUM; a PSUM
    tile goes through the Vector Engine (at most 32 x 32) into SBUF. A ``dtype``
    other than ``x``'s adds a tensor_copy into SBUF.
    """
    call = HelperCall("transpose")
    x = call.on_chip("x", x)
    if x.ndim != 2:
        raise call.error(ShapeError, f"x must be a 2-D tile, got shape {list(x.shape)}")
    shape = (x.shape[1], x.shape[0])
    result = call.tile(shape, x.dtype, Buffer.psum if x.buffer is Buffer.sbuf else Buffer.sbuf)
    call.emit("nc_transpose", dst=result, data=x)
    return _cast(call, result, dtype)


def matmul(x: Any, y: Any, transpose_x: bool = False) -> Tensor:
    """``x @ y`` (or ``x.T @ y`` with ``transpose_x=True``) as a new float32 PSUM tile (nc_matmul).

    The Tensor Engine contracts over the partition dim, so with ``transpose_x=False``
    ``x`` is first transposed (nc_transpose into PSUM, tensor_copy back to SBUF).
    """
    call = HelperCall("matmul")
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
        call.emit("nc_transpose", dst=flipped, data=to_sbuf(call, x))
        stationary = call.tile(flipped.shape, x.dtype)
        call.emit("tensor_copy", dst=stationary, src=flipped)
    dst = call.tile((stationary.shape[1], *y.shape[1:]), FP32, Buffer.psum)
    call.emit("nc_matmul", dst=dst, stationary=to_sbuf(call, stationary), moving=to_sbuf(call, y))
    return dst


def broadcast_to(x: Any, shape: Any, dtype: Any = None) -> Tensor:
    """``x`` broadcast to ``shape`` (same rank; size-1 dims repeat) in a new SBUF tile.

    Free dims broadcast with a stride-0 tensor_copy; the partition dim with a
    stride-0 dma_copy. Equal shapes return ``x`` itself (or a cast copy).
    """
    call = HelperCall("broadcast_to")
    x = call.on_chip("x", x)
    if not isinstance(shape, (tuple, list)) or not all(is_int(d) for d in shape):
        raise call.error(OperandError, f"shape {shape!r} must be a tuple of integers")
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
        call.emit("dma_copy", dst=dst, src=expand(to_sbuf(call, x), target))
    else:
        call.emit("tensor_copy", dst=dst, src=expand(x, target))
    return dst


def expand_dims(x: Any, axis: int) -> Tensor:
    """A view of ``x`` with a new size-1 dim at free position ``axis`` (no instruction)."""
    call = HelperCall("expand_dims")
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
    call = HelperCall("where")
    cond = call.on_chip("condition", condition)
    tiles = [call.on_chip(n, v) for n, v in (("x", x), ("y", y)) if not is_scalar(v)]
    default = tiles[0].dtype if len(tiles) == 1 else promote(tiles[0].dtype, tiles[1].dtype) if tiles else FP32
    out = call.dtype(dtype, default)
    for name, t in zip(("x", "y"), tiles):
        if t.shape != cond.shape:
            raise call.error(ShapeError, f"{name} shape {list(t.shape)} differs from condition's {list(cond.shape)}")
    predicate = call.tile(cond.shape, UINT8)
    call.emit("tensor_scalar", dst=predicate, data=cond, op0=OPS["not_equal"], operand0=0.0)
    dst = call.tile(cond.shape, out)
    if is_scalar(y):
        call.emit("memset", dst=dst, value=scalar_value(y))
    else:
        call.emit("tensor_copy", dst=dst, src=y)
    source: Any = scalar_value(x) if is_scalar(x) else x
    if isinstance(source, Tensor) and (source.dtype != out or is_tfloat32(source.dtype) != is_tfloat32(out)):
        cast = call.tile(cond.shape, out)
        call.emit("tensor_copy", dst=cast, src=source)
        source = cast
    call.emit("tensor_copy_predicated", dst=dst, src=source, predicate=predicate)
    return dst


# -- gathers, random values and transposed loads (NKI 0.3+) ----------------------------


def _cast(call: HelperCall, t: Tensor, dtype: Any) -> Tensor:
    """``t``, or a tensor_copy of it cast to ``dtype`` when that differs."""
    out = call.dtype(dtype, t.dtype)
    if out == t.dtype and is_tfloat32(out) == is_tfloat32(t.dtype):
        return t
    cast = call.tile(t.shape, out)
    call.emit("tensor_copy", dst=cast, src=t)
    return cast


def gather_flattened(data: Any, indices: Any, axis: int = 0, dtype: Any = None) -> Tensor:
    """``result[p].flat[j] = data[p].flat[indices[p].flat[j]]`` in each partition (nc_n_gather).

    The free dims of ``data`` are flattened; ``axis`` must be 0, the only value the
    documentation shows. Indices that are not uint32 are first converted (tensor_copy).
    """
    call = HelperCall("gather_flattened")
    data, idx = call.on_chip("data", data), call.on_chip("indices", indices)
    if isinstance(axis, bool) or axis != 0:
        raise call.error(OperandError, f"axis {axis!r} is not supported; the free dims are gathered flattened (axis=0)")
    if idx.dtype.kind not in "iu":
        raise call.error(DtypeError, f"indices dtype {idx.dtype} must be an integer type")
    data, idx = to_sbuf(call, data), to_sbuf(call, idx)
    if idx.dtype != UINT32:
        converted = call.tile(idx.shape, UINT32)
        call.emit("tensor_copy", dst=converted, src=idx)
        idx = converted
    dst = call.tile(idx.shape, data.dtype)
    call.emit("nc_n_gather", dst=dst, data=data, indices=idx)
    return _cast(call, dst, dtype)


def dropout(x: Any, rate: Any, dtype: Any = None) -> Tensor:
    """``x`` with each element zeroed with probability ``rate`` (a scalar or a (P, 1) tile) (dropout).

    As the instruction: kept elements are not rescaled.
    """
    call = HelperCall("dropout")
    x = call.on_chip("x", x)
    prob: Any = scalar_value(rate) if is_scalar(rate) else call.on_chip("rate", rate)
    dst = call.tile(x.shape, x.dtype)
    call.emit("dropout", dst=dst, data=x, prob=prob)
    return _cast(call, dst, dtype)


def random_seed(seed: Any) -> None:
    """Seed the Vector Engine's generator from a [1, 1] 32-bit tile (set_rng_seed), for ``nl.rand``/``nl.dropout``."""
    call = HelperCall("random_seed")
    call.emit("set_rng_seed", src_seeds=call.on_chip("seed", seed))


def rand(shape: Any, dtype: Any, buffer: Any = Buffer.sbuf, name: str = "") -> Tensor:
    """A new tensor of uniform random values in [0, 1), from the Vector Engine's generator.

    With the ``vector_rand2`` capability one rand2 instruction; without it, rng into
    uint32, then tensor_scalar keeps the top 24 bits and scales them by 2**-24.
    A tensor in HBM is filled from an SBUF tile by dma_copy.
    """
    call = HelperCall("rand")
    out = call.dtype(dtype, FP32)
    try:
        where = Buffer(buffer)
    except ValueError:
        raise call.error(OperandError, f"unknown buffer {buffer!r}") from None
    dims = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    staged = call.tile(dims, out, where if where.is_on_chip else Buffer.sbuf, name)
    if call.ctx.hw.capabilities.vector_rand2:
        call.emit("rand2", dst=staged, min=0.0, max=1.0)
    else:
        bits = call.tile(dims, UINT32)
        call.emit("rng", dst=bits)
        top = call.tile(dims, UINT32)
        call.emit("tensor_scalar", dst=top, data=bits, op0=OPS["right_shift"], operand0=8)
        call.emit("tensor_scalar", dst=staged, data=top, op0=MUL, operand0=2.0**-24)
    if where.is_on_chip:
        return staged
    hbm = call.ctx.memory.new_tensor(dims, out, where, name, call.loc)
    call.emit("dma_copy", dst=hbm, src=staged)
    return hbm


def load_transpose2d(src: Any, dtype: Any = None) -> Tensor:
    """A new SBUF tile holding the 2-D HBM tensor ``src`` transposed (dma_transpose), cast to ``dtype``."""
    call = HelperCall("load_transpose2d")
    if not isinstance(src, Tensor) or src.buffer.is_on_chip:
        raise call.error(OperandError, f"src must be a 2-D HBM tensor, got {src!r}")
    if src.ndim != 2:
        raise call.error(ShapeError, f"src must be 2-D, got shape {list(src.shape)}")
    dst = call.tile((src.shape[1], src.shape[0]), src.dtype)
    call.emit("dma_transpose", dst=dst, src=src)
    return _cast(call, dst, dtype)


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    """``with nl.no_reorder():`` keeps program order; nkisim always issues in program order."""
    yield


# -- registration ---------------------------------------------------------------------


def checked_arguments(name: str, helper: Callable[..., Any]) -> Callable[..., Any]:
    """``helper``, whose calls with arguments its signature does not take raise an :class:`OperandError`
    (``nl.add: missing a required argument: 'y'``) at the kernel's line rather than a TypeError from inside."""

    @functools.wraps(helper)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return helper(*args, **kwargs)
        except TypeError:
            signature = inspect.signature(helper)
            try:
                signature.bind(*args, **kwargs)
            except TypeError as exc:
                rule = str(exc)
                unknown = [k for k in kwargs if k not in signature.parameters]
                close = difflib.get_close_matches(unknown[0], signature.parameters, n=1) if unknown else []
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise OperandError(f"nl.{name}: {rule}{hint}", loc=user_location(2)) from None
            raise

    return call


#: ``nl`` helpers that are not operator constants, by their ``nki.language`` name.
HELPERS: dict[str, Callable[..., Any]] = {
    "load": load,
    "store": store,
    "sum": reduction("sum", "add"),
    "max": reduction("max", "maximum"),
    "min": reduction("min", "minimum"),
    "prod": reduction("prod", "multiply"),
    "all": reduction("all", "logical_and"),
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
    "gather_flattened": gather_flattened,
    "dropout": dropout,
    "rand": rand,
    "random_seed": random_seed,
    "load_transpose2d": load_transpose2d,
    **MATH_HELPERS,
}
HELPERS = {name: checked_arguments(name, helper) for name, helper in HELPERS.items()}

_SPECIAL: dict[str, Callable[..., Tensor]] = {"copy": copy, "invert": invert}


@dataclass(frozen=True, eq=False, repr=False)
class CallableOp(Op):
    """An ``nl`` operator constant that is also its value-returning helper: ``nl.add(a, b)``, ``nl.exp(x)``."""

    helper: Callable[..., Tensor] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor:
        if self.helper is None:
            raise OperandError(f"nl.{self.name} is an operator constant for an op= argument, not a function")
        return self.helper(*args, **kwargs)


def _callable(op: Op) -> CallableOp:
    helper: Callable[..., Tensor] | None
    if op.is_bypass or op.averages:
        helper = None
    elif op.name in _SPECIAL:
        helper = _SPECIAL[op.name]
    elif op.is_activation:
        helper = _unary_helper(op)
    else:
        helper = _binary_helper(op)
    fields = {f.name: getattr(op, f.name) for f in dataclasses.fields(Op)}
    return CallableOp(**fields, helper=None if helper is None else checked_arguments(op.name, helper))


#: The ``nl`` operator constants, each callable as its value-returning helper.
CALLABLE_OPS: dict[str, CallableOp] = {name: _callable(op) for name, op in OPS.items()}

__all__ = ["CALLABLE_OPS", "HELPERS", "CallableOp"]
