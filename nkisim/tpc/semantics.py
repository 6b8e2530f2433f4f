"""Batched numpy semantics of the TPC intrinsics: each function maps rows of vectors to rows of results.

``fn(args, statics)``: ``args`` are ``(n, lanes)`` arrays (vector operands) or ``(n, 1)`` columns
(scalar operands, already in the operation's element type); ``statics`` are the call's constant
switches. 16-bit floats are computed in float32 and rounded once when the result is stored in its
vector type (round to nearest even), fp32 multiply-accumulate is fused (one rounding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: Switch bits (TPC-C names; nkisim's values).
SW_NEG = 1 << 1
SW_RHNE = 0
SW_RZ = 1 << 16
SW_RU = 2 << 16
SW_RD = 3 << 16
_ROUNDING = 3 << 16

Fn = Callable[[list[np.ndarray], tuple[Any, ...]], np.ndarray]
#: Every semantics function, by id (a node's key names its id).
SEMANTICS: list[Fn] = []
#: Semantics ids by name.
SEM: dict[str, int] = {}


def _register(name: str, fn: Fn) -> None:
    SEM[name] = len(SEMANTICS)
    SEMANTICS.append(fn)


def _wide(x: np.ndarray) -> np.ndarray:
    """Floats widened to float64 (for one rounding of fused operations)."""
    return x.astype(np.float64) if x.dtype.kind == "f" or _is_bf16(x) else x


def _is_bf16(x: np.ndarray) -> bool:
    return str(x.dtype) == "bfloat16"


def _f(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if _is_bf16(x) or x.dtype == np.float16 else x


_BINARY: dict[str, np.ufunc] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}
for _name, _ufunc in _BINARY.items():
    _register(_name, lambda a, s, u=_ufunc: u(_f(a[0]), _f(a[1])))

#: ``fn(args, statics, out)``: semantics that write their result straight into ``out`` (of the
#: result type), valid when every operand is of that type and it is float32 or an integer type (the
#: 16-bit floats compute in float32). They are elementwise: operands may be of any shapes that
#: broadcast to ``out``'s.
INTO: dict[int, Callable[[list[np.ndarray], tuple[Any, ...], np.ndarray], Any]] = {
    SEM[name]: lambda a, s, out, u=ufunc: u(a[0], a[1], out=out) for name, ufunc in _BINARY.items()
}

_register("abs", lambda a, s: np.abs(a[0]))
_register("mov", lambda a, s: a[0])


def _mac(a: list[np.ndarray], s: tuple[Any, ...]) -> np.ndarray:
    product = _wide(a[0]) * _wide(a[1])
    acc = _wide(a[2])
    return acc - product if s[0] & SW_NEG else acc + product


_register("mac", _mac)

_CMP: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "eq": np.equal,
    "neq": np.not_equal,
    "less": np.less,
    "leq": np.less_equal,
    "grt": np.greater,
    "geq": np.greater_equal,
}
for _name, _ufunc in _CMP.items():
    _register(f"cmp_{_name}", lambda a, s, u=_ufunc: u(_f(a[0]), _f(a[1])))
    _register(f"sel_{_name}", lambda a, s, u=_ufunc: np.where(u(_f(a[0]), _f(a[1])), a[2], a[3]))


def _tree(x: np.ndarray, op: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """A lane-halving reduction tree (log2(lanes) steps), the result in every lane."""
    x = _f(x)
    lanes = x.shape[1]
    while x.shape[1] > 1:
        half = x.shape[1] // 2
        x = op(x[:, :half], x[:, half:])
    return np.broadcast_to(x, (x.shape[0], lanes))


for _name, _ufunc in (("add", np.add), ("max", np.maximum), ("min", np.minimum)):
    _register(f"reduce_{_name}", lambda a, s, u=_ufunc: _tree(a[0], u))


def _special(fn: Callable[[np.ndarray], np.ndarray]) -> Fn:
    if isinstance(fn, np.ufunc):  # the float64 loop on the widened operand, without a widened copy

        def run(a: list[np.ndarray], s: tuple[Any, ...]) -> np.ndarray:
            with np.errstate(all="ignore"):
                return fn(a[0], dtype=np.float64)

        return run

    def run_widened(a: list[np.ndarray], s: tuple[Any, ...]) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(a[0].astype(np.float64))

    return run_widened


SPECIAL_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "reciprocal": lambda x: 1.0 / x,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
}
for _name, _fn in SPECIAL_FUNCTIONS.items():
    _register(_name, _special(_fn))
    if isinstance(_fn, np.ufunc):  # the float64 loop, its result rounded to float32 as it is stored

        def _special_into(a: list[np.ndarray], s: tuple[Any, ...], out: np.ndarray, fn: np.ufunc = _fn) -> None:
            with np.errstate(all="ignore"):
                fn(a[0], dtype=np.float64, out=out, casting="unsafe")

        INTO[SEM[_name]] = _special_into

_ROUNDERS = {SW_RHNE: np.rint, SW_RZ: np.trunc, SW_RU: np.ceil, SW_RD: np.floor}


def _to_int(a: list[np.ndarray], s: tuple[Any, ...]) -> np.ndarray:
    """Float to integer: round by the switch, saturate to the target type (``s[1]``)."""
    info = np.iinfo(s[1])
    with np.errstate(invalid="ignore"):
        rounded = _ROUNDERS[s[0] & _ROUNDING](_f(a[0]).astype(np.float64))
    return np.clip(np.nan_to_num(rounded, nan=0.0), info.min, info.max)


_register("to_int", _to_int)
_register("to_float", lambda a, s: a[0].astype(np.float64))
_register("half", lambda a, s: a[0][:, s[0] * a[0].shape[1] // 2 : (s[0] + 1) * a[0].shape[1] // 2].astype(np.float32))
_register("join", lambda a, s: np.concatenate([a[0], a[1]], axis=1))
_register("bits", lambda a, s: np.ascontiguousarray(a[0]).view(s[0]))
_register("lane_id", lambda a, s: np.arange(s[0]))


def _shuffle(a: list[np.ndarray], s: tuple[Any, ...]) -> np.ndarray:
    lane_map = np.asarray(s[0], dtype=np.int64)
    source = lane_map & 0x7F
    enabled = (lane_map & 0x80) != 0
    income = a[1] if len(a) > 1 else np.zeros_like(a[0])
    return np.where(enabled, a[0][:, source % a[0].shape[1]], income)


_register("shuffle", _shuffle)
