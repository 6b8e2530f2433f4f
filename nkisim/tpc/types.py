"""TPC-C value types: 2048-bit vectors, predicates, pairs and ``int5`` coordinates.

A vector value is an immutable handle (:class:`Vec`) on a value of the kernel's trace; its lanes are
computed in batches with numpy (see :mod:`nkisim.tpc.trace`). Like on the hardware, a kernel cannot
read a lane back into a scalar, so its control flow never waits for vector data.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

#: The vector register width, in bytes (every vector type fills it).
VECTOR_BYTES = 256


@dataclass(frozen=True, slots=True)
class VType:
    """A TPC-C vector or predicate type.

    Attributes:
        name: the TPC-C name (``float64``, ``bfloat128``, ``bool64``, ...).
        prefix: the intrinsic-name prefix of its element type (``f32``, ``bf16``, ...).
        dtype: the numpy element type (``bool`` for predicates).
        lanes: elements per vector.
        code: a small integer id.
    """

    name: str
    prefix: str
    dtype: np.dtype
    lanes: int
    code: int

    @property
    def is_predicate(self) -> bool:
        return self.dtype == np.bool_

    @property
    def is_float(self) -> bool:
        return self.prefix in ("f32", "bf16", "f16")


_SPECS = [
    ("float64", "f32", np.float32),
    ("bfloat128", "bf16", ml_dtypes.bfloat16),
    ("half128", "f16", np.float16),
    ("int64", "i32", np.int32),
    ("uint64", "u32", np.uint32),
    ("short128", "i16", np.int16),
    ("ushort128", "u16", np.uint16),
    ("char256", "i8", np.int8),
    ("uchar256", "u8", np.uint8),
]

#: Vector types by TPC-C name.
VTYPES: dict[str, VType] = {}
#: Vector types by intrinsic prefix (``f32`` -> ``float64``).
BY_PREFIX: dict[str, VType] = {}
for _code, (_name, _prefix, _dt) in enumerate(_SPECS):
    _vt = VType(_name, _prefix, np.dtype(_dt), VECTOR_BYTES // np.dtype(_dt).itemsize, _code)
    VTYPES[_name] = _vt
    BY_PREFIX[_prefix] = _vt
for _lanes in (64, 128, 256):
    _code += 1
    VTYPES[f"bool{_lanes}"] = VType(f"bool{_lanes}", f"b{_lanes}", np.dtype(np.bool_), _lanes, _code)
#: Every type by its code.
BY_CODE = {vt.code: vt for vt in VTYPES.values()}
#: Vector types by numpy dtype (for tensors).
BY_DTYPE = {vt.dtype: vt for vt in BY_PREFIX.values()}


def predicate_type(lanes: int) -> VType:
    """``bool64``, ``bool128`` or ``bool256``."""
    return VTYPES[f"bool{lanes}"]


def _no_arithmetic(name: str) -> Any:
    def refuse(self: Vec, *other: object) -> Any:
        raise TypeError(
            f"{name} on a {self.vtype.name} value: use the intrinsics (ctx.v_{self.vtype.prefix}_add_b, ...), "
            "which record the instruction the TPC runs"
        )

    return refuse


class Vec(int):
    """An immutable vector (or predicate) value: a handle on a value of the trace and its type.

    A small integer (``k * 16 + type code``: the trace's ``k``-th value of that type), so that millions
    of them cost the garbage collector nothing. Each type's vectors are of its own subclass
    (``VEC_OF[code]``), so the recording fast paths test a value's type with one identity check.
    Handles are interned (:func:`handles`): a run hands out existing objects instead of making new
    ones. Its lanes are not readable by the kernel.

    Attributes:
        id: ``k``, the value's number among its type's values in the trace.
        vtype: its :class:`VType`.
    """

    __slots__ = ()

    @property
    def id(self) -> int:
        return int.__rshift__(self, 4)

    @property
    def vtype(self) -> VType:
        return BY_CODE[int.__and__(self, 15)]

    def __repr__(self) -> str:
        return f"<{self.vtype.name} #{self.id}>"

    def __bool__(self) -> bool:
        raise TypeError(
            f"a {self.vtype.name} is a vector of lanes, not one truth value: a TPC kernel cannot branch on "
            "vector data; use a select (v_*_sel_*) or a predicated intrinsic (_vb)"
        )

    def __index__(self) -> int:
        raise TypeError(f"a {self.vtype.name} value is not an index: a TPC kernel cannot read vector lanes")

    __add__ = __radd__ = _no_arithmetic("+")
    __sub__ = __rsub__ = _no_arithmetic("-")
    __mul__ = __rmul__ = _no_arithmetic("*")
    __truediv__ = __rtruediv__ = _no_arithmetic("/")
    __floordiv__ = __mod__ = _no_arithmetic("// or %")
    __neg__ = __abs__ = __invert__ = _no_arithmetic("a unary operator")
    __and__ = __or__ = __xor__ = __lshift__ = __rshift__ = _no_arithmetic("a bitwise operator")
    __lt__ = __le__ = __gt__ = __ge__ = _no_arithmetic("a comparison")
    __float__ = __int__ = _no_arithmetic("a conversion to a Python number")


#: The class of each type's vectors, by type code: ``VEC_OF[code](k << 4 | code)`` makes one.
VEC_OF: dict[int, type[Vec]] = {
    code: type(f"Vec[{vt.name}]", (Vec,), {"__slots__": (), "__module__": __name__}) for code, vt in BY_CODE.items()
}

#: Handles kept for reuse per type code (at most ``_POOL_CAP`` each): making an int subclass
#: object costs about as much as the rest of a recorded call, and equal handles are interchangeable.
_POOL: dict[int, list[Vec]] = {code: [] for code in VEC_OF}
_POOL_CAP = 1 << 18
_CHUNK = 4096


def handles(code: int) -> Iterator[Vec]:
    """The handles ``k = 0, 1, ...`` of type ``code``, in order: interned ones first, then new ones.

    The pool grows, chunk by chunk, as far as a run takes it (up to its cap), so later runs of the
    same size make no handle objects at all.
    """
    pool, cls = _POOL[code], VEC_OF[code]

    def chunks() -> Iterator[list[Vec]]:
        k = 0
        while True:
            chunk = pool[k : k + _CHUNK]
            if not chunk:
                chunk = list(map(cls, range(k << 4 | code, (k + _CHUNK) << 4 | code, 16)))
                if len(pool) == k and k < _POOL_CAP:
                    pool.extend(chunk)
            k += len(chunk)
            yield chunk

    return itertools.chain.from_iterable(chunks())


#: ``k`` and type code of a Vec.
id_of = int.__rshift__
code_of = int.__and__


@dataclass(frozen=True, slots=True)
class Pair:
    """A pair of vectors (``float128`` = two ``float64``), as the conversions between widths make.

    Attributes:
        v1: the first vector (lanes 0..63 of the wider type in nkisim's model).
        v2: the second vector (the following lanes).
    """

    v1: Vec
    v2: Vec


def int5(values: object = (0, 0, 0, 0, 0)) -> np.ndarray:
    """An ``int5`` coordinate: a numpy int32[5], dim0 (the fastest-changing dimension) first."""
    array = np.zeros(5, dtype=np.int32)
    given = np.asarray(values, dtype=np.int64).reshape(-1)
    array[: min(5, given.size)] = given[:5]
    return array
