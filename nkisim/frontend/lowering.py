"""One value-returning ``nl.<helper>(...)`` call, lowered to ``nki.isa`` instructions.

:class:`HelperCall` knows the kernel line the call was made at and emits the
instructions; the functions here are what element-wise helpers share: NKI's type
promotion, broadcasting of tile views, and the element-wise lowering.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nkisim.errors import DtypeError, KernelError, MemoryKindError, OperandError, ShapeError, user_location
from nkisim.frontend.context import current_context
from nkisim.isa.ops import OPS, Op
from nkisim.memory import Buffer, Tensor, is_float, is_integer, to_dtype
from nkisim.memory.dtypes import NKI_DTYPES, is_tfloat32

FP32 = NKI_DTYPES["float32"]
BF16 = NKI_DTYPES["bfloat16"]
UINT8 = NKI_DTYPES["uint8"]
ADD, MUL, DIV, SUB = OPS["add"], OPS["multiply"], OPS["divide"], OPS["subtract"]


# -- one helper call: where it was made, and how it emits ---------------------------


class HelperCall:
    """One ``nl.<helper>(...)`` call: its kernel line, and the tiles and instructions it makes."""

    def __init__(self, helper: str, namespace: str = "nl") -> None:
        self.helper = helper
        self.namespace = namespace  # how errors name the call: nl.<helper>, or nisa.<helper> for a legacy result
        self.loc = user_location()
        self.ctx = current_context()

    def error(self, cls: type[KernelError], rule: str) -> KernelError:
        return cls(rule, loc=self.loc, instruction=f"{self.namespace}.{self.helper}", target=self.ctx.hw.name)

    def tile(self, shape: tuple[int, ...], dtype: np.dtype, buffer: Buffer = Buffer.sbuf, name: str = "") -> Tensor:
        """A new on-chip tile for a result or an intermediate value."""
        partitions = self.ctx.hw.sbuf.partitions
        if len(shape) < 2:
            raise self.error(ShapeError, f"result shape {list(shape)} needs a partition dim and a free dim")
        if shape[0] > partitions:
            raise self.error(ShapeError, f"partition dim {shape[0]} exceeds {partitions}")
        return self.ctx.memory.new_tensor(tuple(int(d) for d in shape), dtype, buffer, name, self.loc)

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


def is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating))


def scalar_value(value: Any) -> int | float:
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
        return BF16 if a.itemsize == 1 else FP32
    a, b = (UINT8 if t.kind == "b" else t for t in (a, b))
    if a == b:
        return a
    if (a.kind == "i") == (b.kind == "i"):
        return a if a.itemsize > b.itemsize else b
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    width = 2 * unsigned.itemsize
    return NKI_DTYPES[f"int{8 * width}"] if width <= 4 else FP32


def scalar_result(op: Op, tile: np.dtype, scalar: Any) -> np.dtype:
    """A weakly typed scalar keeps the tile's dtype, but a float scalar turns an integer tile into float32."""
    if not op.is_bitvec and is_integer(tile) and isinstance(scalar, (float, np.floating)):
        return FP32
    return tile


# -- tile views -----------------------------------------------------------------------


def expand(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A read-only view of ``t`` broadcast to ``shape`` (stride-0 access pattern dims)."""
    if t.shape == shape:
        return t
    return Tensor(np.broadcast_to(t.array, shape), t.dtype, t.buffer, t.name, t.storage, t)


def broadcast_shape(call: HelperCall, x: Tensor, y: Tensor) -> tuple[int, ...]:
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


def column(call: HelperCall, op: Op, t: Tensor) -> Tensor:
    """A ``(P, 1)`` tile as a tensor_scalar operand: float32 for arithmetic operators."""
    col = t if t.ndim == 2 else t.reshape((t.partitions, 1))
    if op.is_bitvec or col.dtype == FP32:
        return col
    col32 = call.tile((t.partitions, 1), FP32)
    call.emit("tensor_copy", dst=col32, src=col)
    return col32


def to_sbuf(call: HelperCall, t: Tensor) -> Tensor:
    if t.buffer is Buffer.sbuf:
        return t
    staged = call.tile(t.shape, t.dtype)
    call.emit("tensor_copy", dst=staged, src=t)
    return staged


# -- element-wise ---------------------------------------------------------------------


def elementwise(call: HelperCall, op: Op, x: Any, y: Any, dtype: Any) -> Tensor:
    x_scalar, y_scalar = is_scalar(x), is_scalar(y)
    if x_scalar and y_scalar:
        raise call.error(OperandError, "x and y are both scalars; at least one must be a tile")
    if x_scalar or y_scalar:
        tile = call.on_chip("y" if x_scalar else "x", y if x_scalar else x)
        scalar = x if x_scalar else y
        dst = call.tile(tile.shape, call.dtype(dtype, scalar_result(op, tile.dtype, scalar)))
        call.emit("tensor_scalar", dst=dst, data=tile, op0=op, operand0=scalar_value(scalar), reverse0=x_scalar)
        return dst
    x, y = call.on_chip("x", x), call.on_chip("y", y)
    shape = broadcast_shape(call, x, y)
    out = call.dtype(dtype, promote(x.dtype, y.dtype))
    if y.free_size == 1 and x.shape == shape and x.free_size > 1:
        dst = call.tile(shape, out)
        call.emit("tensor_scalar", dst=dst, data=x, op0=op, operand0=column(call, op, y), reverse0=False)
        return dst
    if x.free_size == 1 and y.shape == shape and y.free_size > 1:
        dst = call.tile(shape, out)
        call.emit("tensor_scalar", dst=dst, data=y, op0=op, operand0=column(call, op, x), reverse0=True)
        return dst
    if x.buffer is Buffer.psum and y.buffer is Buffer.psum:  # an engine reads at most one input from PSUM
        y = to_sbuf(call, y)
    dst = call.tile(shape, out)
    call.emit("tensor_tensor", dst=dst, data1=expand(x, shape), data2=expand(y, shape), op=op)
    return dst


# -- rounding, remainders and trigonometry ------------------------------------------
#
# NKI documents no engine instruction for these, so they lower to documented ones:
# the Vector Engine rounds float -> int32 to nearest even on write (tensor_copy), and
# a comparison of that integer with the input corrects it to the floor or ceiling.
# Exact for |x| < 2**31 (int32's range); larger magnitudes saturate.

INT32 = NKI_DTYPES["int32"]
GREATER, LESS = OPS["greater"], OPS["less"]
TWO_PI = 2.0 * np.pi


def _rounded(call: HelperCall, x: Tensor) -> Tensor:
    """``x`` rounded to the nearest integer (ties to even) in an int32 tile (tensor_copy)."""
    r = call.tile(x.shape, INT32)
    call.emit("tensor_copy", dst=r, src=x)
    return r


def round_down(call: HelperCall, x: Tensor, out: np.dtype, up: bool = False) -> Tensor:
    """``floor(x)`` (``ceil(x)`` with ``up``) into a new ``out`` tile.

    ``r = round(x)`` (tensor_copy to int32), ``g = r > x`` (``r < x`` for ceil) as 1.0/0.0
    (tensor_tensor), then ``r - g`` (``r + g``) (tensor_tensor).
    """
    r = _rounded(call, x)
    g = call.tile(x.shape, FP32)
    call.emit("tensor_tensor", dst=g, data1=r, data2=x, op=LESS if up else GREATER)
    dst = call.tile(x.shape, out)
    call.emit("tensor_tensor", dst=dst, data1=r, data2=g, op=ADD if up else SUB)
    return dst


def truncated(call: HelperCall, x: Tensor, out: np.dtype) -> Tensor:
    """``trunc(x) = sign(x) * floor(|x|)``: tensor_scalar (abs), the floor, activation (sign), tensor_tensor."""
    a = call.tile(x.shape, FP32)
    call.emit("tensor_scalar", dst=a, data=x, op0=OPS["abs"], operand0=0.0)
    magnitude = round_down(call, a, FP32)
    sign = call.tile(x.shape, FP32)
    call.emit("activation", dst=sign, op=OPS["sign"], data=x)
    dst = call.tile(x.shape, out)
    call.emit("tensor_tensor", dst=dst, data1=magnitude, data2=sign, op=MUL)
    return dst


def result_dtype(call: HelperCall, op: Op, x: Any, y: Any, dtype: Any) -> np.dtype:
    """The dtype ``nl.<op>(x, y)`` returns: ``dtype``, or NKI's promotion of a tile pair or a tile and a scalar."""
    if is_scalar(x) and is_scalar(y):
        raise call.error(OperandError, "x and y are both scalars; at least one must be a tile")
    if is_scalar(x) or is_scalar(y):
        tile = call.on_chip("y" if is_scalar(x) else "x", y if is_scalar(x) else x)
        return call.dtype(dtype, scalar_result(op, tile.dtype, x if is_scalar(x) else y))
    return call.dtype(dtype, promote(call.on_chip("x", x).dtype, call.on_chip("y", y).dtype))


def remainder(call: HelperCall, x: Any, y: Any, dtype: Any, floored: bool) -> Tensor:
    """``x - y * floor(x / y)`` (``floored``, numpy's ``mod``) or ``x - y * trunc(x / y)`` (``fmod``).

    Lowered to tensor_tensor/tensor_scalar divide, the floor or trunc lowering,
    multiply and subtract, all in float32; exact while the float32 quotient rounds to
    the same integer part as the real one.
    """
    out = result_dtype(call, SUB, x, y, dtype)
    q = elementwise(call, DIV, x, y, FP32)
    whole = round_down(call, q, FP32) if floored else truncated(call, q, FP32)
    product = elementwise(call, MUL, whole, y, FP32)
    return elementwise(call, SUB, x, product, out)


def sine(call: HelperCall, x: Any, shift: float, out: np.dtype) -> Tensor:
    """``sin(x + shift)`` over the whole input domain: range reduction, then activation(sin).

    ``w = (x + shift + pi) mod 2pi - pi`` lies in the activation's valid range
    ``[-pi, pi]`` (tensor_scalar, the mod lowering, tensor_scalar), then activation(sin).
    """
    t = call.on_chip("x", x)
    v = call.tile(t.shape, FP32)
    call.emit("tensor_scalar", dst=v, data=t, op0=ADD, operand0=float(shift + np.pi))
    m = remainder(call, v, TWO_PI, FP32, floored=True)
    w = call.tile(t.shape, FP32)
    call.emit("tensor_scalar", dst=w, data=m, op0=SUB, operand0=float(np.pi))
    dst = call.tile(t.shape, out)
    call.emit("activation", dst=dst, op=OPS["sin"], data=w)
    return dst


def floor(x: Any, dtype: Any = None) -> Tensor:
    """The largest integer ``<= x``, element-wise (tensor_copy to int32, tensor_tensor x2)."""
    call = HelperCall("floor")
    t = call.on_chip("x", x)
    return round_down(call, t, call.dtype(dtype, t.dtype))


def ceil(x: Any, dtype: Any = None) -> Tensor:
    """The smallest integer ``>= x``, element-wise (tensor_copy to int32, tensor_tensor x2)."""
    call = HelperCall("ceil")
    t = call.on_chip("x", x)
    return round_down(call, t, call.dtype(dtype, t.dtype), up=True)


def trunc(x: Any, dtype: Any = None) -> Tensor:
    """``x`` with its fractional part discarded (rounded toward zero), element-wise."""
    call = HelperCall("trunc")
    t = call.on_chip("x", x)
    return truncated(call, t, call.dtype(dtype, t.dtype))


def fmod(x: Any, y: Any, dtype: Any = None) -> Tensor:
    """Remainder of ``x / y`` with the sign of ``x`` (C's ``fmod``, numpy's ``fmod``); x or y may be a scalar."""
    return remainder(HelperCall("fmod"), x, y, dtype, floored=False)


def mod(x: Any, y: Any, dtype: Any = None) -> Tensor:
    """Remainder of ``x / y`` with the sign of ``y`` (Python's ``%``, numpy's ``mod``); x or y may be a scalar."""
    return remainder(HelperCall("mod"), x, y, dtype, floored=True)


def cos(x: Any, dtype: Any = None) -> Tensor:
    """Cosine, element-wise: ``sin(x + pi/2)`` after range reduction (see :func:`sine`)."""
    call = HelperCall("cos")
    t = call.on_chip("x", x)
    return sine(call, t, np.pi / 2, call.dtype(dtype, t.dtype))


def tan(x: Any, dtype: Any = None) -> Tensor:
    """Tangent, element-wise: the range-reduced sine over the range-reduced cosine (tensor_tensor divide)."""
    call = HelperCall("tan")
    t = call.on_chip("x", x)
    s = sine(call, t, 0.0, FP32)
    c = sine(call, t, np.pi / 2, FP32)
    dst = call.tile(t.shape, call.dtype(dtype, t.dtype))
    call.emit("tensor_tensor", dst=dst, data1=s, data2=c, op=DIV)
    return dst


#: The math helpers by their ``nki.language`` name.
MATH_HELPERS = {"floor": floor, "ceil": ceil, "trunc": trunc, "fmod": fmod, "mod": mod, "cos": cos, "tan": tan}
