"""The ``op=`` values of NKI: ALU operators and activation functions, as tables.

Arithmetic operators compute in float32. Bitvec operators act on integer bit
patterns with no cast. Activation functions run on the Scalar Engine in float32;
the hardware approximates them with piecewise polynomials inside each function's
valid input range, and nkisim computes them exactly (see docs/semantics.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numba
import numpy as np

F32 = np.float32


class OpKind(Enum):
    bitvec = "bitvec"
    arithmetic = "arithmetic"


@dataclass(frozen=True, eq=False)
class Op:
    """One ``nl.*`` operator constant (``nl.add``, ``nl.exp``, ...), equal to any other of its name.

    The ``nki.language`` constants are callable subclasses (``nl.add(a, b)``), made by the
    front end; instructions take either.

    Attributes:
        name: the ``nki.language`` name.
        kind: bitvec or arithmetic, for ALU operators.
        binary: ``f(x, y)`` as an ALU operator, or None if it is not one.
        unary: ``f(x)`` as an activation function, or None if it is not one.
        reduce: the numpy ufunc that reduces with this operator, if it is a legal reduction.
        valid_range: the documented valid input range of the activation function.
        parametric: ``f(x, alpha)`` for a parameterized activation function (``prelu``'s
            ``relu_param``); ``unary`` is then ``f(x, 0)``.
        averages: a reduction that divides its sum by the element count (``nl.average``).
    """

    name: str
    kind: OpKind = OpKind.arithmetic
    binary: Callable[[Any, Any], Any] | None = None
    unary: Callable[[np.ndarray], np.ndarray] | None = None
    reduce: np.ufunc | None = None
    valid_range: str = "[-inf, inf]"
    parametric: Callable[[np.ndarray, Any], np.ndarray] | None = None
    averages: bool = False

    def outside_valid_range(self, x: np.ndarray) -> int:
        """How many of ``x`` lie outside :attr:`valid_range` (where the hardware's approximation is garbage)."""
        if self.valid_range == "[-inf, inf]":
            return 0
        low, high, mirrored = _parse_range(self.valid_range)
        magnitude = np.abs(x) if mirrored else x
        with np.errstate(invalid="ignore"):
            return int(np.count_nonzero(~((magnitude >= low) & (magnitude <= high))))

    @property
    def is_alu(self) -> bool:
        return self.binary is not None

    @property
    def is_activation(self) -> bool:
        return self.unary is not None

    @property
    def is_bypass(self) -> bool:
        """``nl.bypass``: a pipeline stage that passes its input through."""
        return self.binary is None and self.unary is None and self.reduce is None and not self.averages

    @property
    def is_bitvec(self) -> bool:
        return self.kind is OpKind.bitvec

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Op) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def _as_bool(x: np.ndarray) -> np.ndarray:
    return x != 0


def _flt(x: np.ndarray) -> np.ndarray:
    return x.astype(F32)


def _logical_right_shift(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    unsigned = np.dtype(f"u{x.dtype.itemsize}")
    return np.right_shift(x.view(unsigned), np.asarray(y).astype(unsigned)).view(x.dtype)


def _shift_left(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.left_shift(x, np.asarray(y).astype(x.dtype))


@numba.vectorize(["float32(float32)"], cache=True)
def _erf(x: float) -> float:
    return math.erf(x)


_SQRT_2_OVER_PI = F32(math.sqrt(2.0 / math.pi))
_INV_SQRT_2 = F32(1.0 / math.sqrt(2.0))
_INV_SQRT_PI = F32(1.0 / math.sqrt(math.pi))
_INV_SQRT_2PI = F32(1.0 / math.sqrt(2.0 * math.pi))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return F32(1) / (F32(1) + np.exp(-x))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(F32(0), x).astype(F32)


def _gelu(x: np.ndarray) -> np.ndarray:
    return F32(0.5) * x * (F32(1) + _erf(x * _INV_SQRT_2))


def _gelu_dx(x: np.ndarray) -> np.ndarray:
    return F32(0.5) * (F32(1) + _erf(x * _INV_SQRT_2)) + x * _INV_SQRT_2PI * np.exp(F32(-0.5) * x * x)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return F32(0.5) * x * (F32(1) + np.tanh(_SQRT_2_OVER_PI * (x + F32(0.044715) * x**3)))


def _gelu_sigmoid(x: np.ndarray) -> np.ndarray:
    return x * _sigmoid(F32(1.702) * x)


def _gelu_sigmoid_dx(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(F32(1.702) * x)
    return s + F32(1.702) * x * s * (F32(1) - s)


def _silu_dx(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(x)
    return s * (F32(1) + x * (F32(1) - s))


def _prelu(x: np.ndarray, alpha: Any) -> np.ndarray:
    return np.where(x >= 0, x, x * np.asarray(alpha, dtype=F32)).astype(F32, copy=False)


def _arith(name: str, fn: Callable[[Any, Any], Any], reduce: np.ufunc | None = None) -> Op:
    return Op(name, OpKind.arithmetic, binary=fn, reduce=reduce)


def _bitvec(name: str, fn: Callable[[Any, Any], Any], reduce: np.ufunc | None = None) -> Op:
    return Op(name, OpKind.bitvec, binary=fn, reduce=reduce)


def _bound(text: str) -> float:
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("-")
    if text.startswith("pi"):
        return sign * np.pi / (float(text.split("/")[1]) if "/" in text else 1.0)
    if text.startswith("2^"):
        return sign * 2.0 ** int(text[2:])
    return sign * float(text)


def _parse_range(text: str) -> tuple[float, float, bool]:
    """``"[2^-64, 2^64]"`` -> (low, high, False); ``"±[a, b]"``: the magnitude must lie in [a, b]."""
    mirrored = text.startswith("±")
    low, high = text.lstrip("±").strip("[]").split(",")
    return _bound(low), _bound(high), mirrored


def _act(name: str, fn: Callable[[np.ndarray], np.ndarray], valid_range: str = "[-inf, inf]") -> Op:
    return Op(name, unary=fn, valid_range=valid_range)


_ALL: list[Op] = [
    # bitvec: integer bit patterns, no cast
    _bitvec("invert", lambda x, y: np.invert(x)),
    _bitvec("bitwise_and", np.bitwise_and, np.bitwise_and),
    _bitvec("bitwise_or", np.bitwise_or, np.bitwise_or),
    _bitvec("bitwise_xor", np.bitwise_xor, np.bitwise_xor),
    _bitvec("left_shift", _shift_left),
    _bitvec("right_shift", _logical_right_shift),
    # arithmetic: float32
    _arith("add", np.add, np.add),
    _arith("subtract", np.subtract, np.subtract),
    _arith("multiply", np.multiply, np.multiply),
    _arith("maximum", np.maximum, np.maximum),
    _arith("minimum", np.minimum, np.minimum),
    _arith("divide", np.divide),
    _arith("equal", lambda x, y: _flt(x == y)),
    _arith("not_equal", lambda x, y: _flt(x != y)),
    _arith("greater", lambda x, y: _flt(x > y)),
    _arith("greater_equal", lambda x, y: _flt(x >= y)),
    _arith("less", lambda x, y: _flt(x < y)),
    _arith("less_equal", lambda x, y: _flt(x <= y)),
    _arith("logical_and", lambda x, y: _flt(_as_bool(x) & _as_bool(y)), np.logical_and),
    _arith("logical_or", lambda x, y: _flt(_as_bool(x) | _as_bool(y)), np.logical_or),
    _arith("logical_xor", lambda x, y: _flt(_as_bool(x) ^ _as_bool(y)), np.logical_xor),
    _arith("power", np.power),
    _arith("abs_max", lambda x, y: np.maximum(np.abs(x), np.abs(y))),
    _arith("abs_min", lambda x, y: np.minimum(np.abs(x), np.abs(y))),
    # activation functions only (Scalar Engine)
    _act("copy", lambda x: x),
    _act("sigmoid", _sigmoid),
    _act("relu", lambda x: np.maximum(x, F32(0))),
    _act("gelu", _gelu),
    _act("gelu_dx", _gelu_dx),
    _act("gelu_apprx_tanh", _gelu_tanh),
    _act("gelu_apprx_sigmoid", _gelu_sigmoid),
    _act("gelu_apprx_sigmoid_dx", _gelu_sigmoid_dx),
    _act("silu", lambda x: x * _sigmoid(x)),
    _act("silu_dx", _silu_dx),
    _act("tanh", np.tanh),
    _act("softplus", _softplus),
    _act("mish", lambda x: x * np.tanh(_softplus(x))),
    _act("erf", _erf),
    _act("erf_dx", lambda x: F32(2) * _INV_SQRT_PI * np.exp(-x * x)),
    _act("exp", np.exp),
    _act("log", np.log, "[2^-64, 2^64]"),
    _act("sin", np.sin, "[-pi, pi]"),
    _act("arctan", np.arctan, "[-pi/2, pi/2]"),
    _act("sqrt", np.sqrt, "[2^-116, 2^118]"),
    _act("sign", np.sign),
    # parameterized activation: x for x >= 0, relu_param * x below (relu_param 0: relu)
    Op("prelu", unary=lambda x: _prelu(x, F32(0)), parametric=_prelu),
    # not an operator: a tensor-scalar stage that passes its input through (activate2's op0/op1)
    Op("bypass"),
    # the mean over the partitions (tensor_partition_reduce only)
    Op("average", averages=True),
]

# Operators that are both ALU operators (unary: the operand is ignored) and activation functions.
_BOTH = [
    Op("abs", binary=lambda x, y: np.abs(x), unary=np.abs),
    Op("square", binary=lambda x, y: x * x, unary=lambda x: x * x),
    Op(
        "rsqrt",
        binary=lambda x, y: F32(1) / np.sqrt(x),
        unary=lambda x: F32(1) / np.sqrt(x),
        valid_range="[2^-87, 2^97]",
    ),
    Op("reciprocal", binary=lambda x, y: F32(1) / x, unary=lambda x: F32(1) / x, valid_range="±[2^-42, 2^42]"),
]

#: Every operator by its ``nki.language`` name.
OPS: dict[str, Op] = {op.name: op for op in (*_ALL, *_BOTH)}
