"""Stand-ins for the helper packages AWS's NKI kernel library test suite imports.

:mod:`nkisim.compat.nkilib` serves these as modules while it is active:

* ``neuron_dtypes``: numpy casts between NKI data types (``static_cast``),
  including the packed MX ``*_x4`` types, plus ``sizeinbytes``, ``finfo`` and
  ``is_float_type``. Written from the names and behaviour the suite relies on:
  float casts round to nearest even (ml_dtypes), the ``x4`` types pack four
  consecutive values of the last axis into one element, value ``i`` in byte
  (fp8) or nibble (fp4) ``i`` from the least significant end, the layout
  nkisim's ``quantize_mx`` / ``nc_matmul_mx`` use (docs/semantics.md).
* the two harness modules the public suite imports but does not ship
  (``perf_analysis_private`` and ``scripts.remote_lock_scripts``); they are used
  only with real hardware hosts, so here they only have to import.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from nkisim.memory.dtypes import container, dtype_name, is_float, to_dtype
from nkisim.memory.narrow_floats import BYTE_FLOATS, narrow, to_bfloat16
from nkisim.nki.language import (  # noqa: F401 - served as neuron_dtypes names (NEURON_DTYPES_API)
    bfloat16,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
)

# -- neuron_dtypes ----------------------------------------------------------------------

float4_e2m1fn = np.dtype(ml_dtypes.float4_e2m1fn)
_FLOAT32 = np.dtype(np.float32)
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

#: Packed type name -> (element type, bits per element).
_X4: dict[str, tuple[np.dtype, int]] = {
    "float8_e5m2_x4": (float8_e5m2, 8),
    "float8_e4m3fn_x4": (float8_e4m3fn, 8),
    "float4_e2m1fn_x4": (float4_e2m1fn, 4),
}


def _dtype(value: Any) -> np.dtype:
    """A dtype given as an ``nl`` constant, a string, a numpy/ml_dtypes type or a torch dtype."""
    try:
        return to_dtype(value)
    except TypeError:
        pass
    if isinstance(value, str) and value == "float4_e2m1fn":
        return float4_e2m1fn
    return np.dtype(value)


def _x4(dtype: np.dtype) -> tuple[np.dtype, int] | None:
    return _X4.get(dtype_name(dtype)) if dtype.metadata else None


def _pack(values: np.ndarray, element: np.dtype, bits: int, packed_type: np.dtype) -> np.ndarray:
    if values.ndim == 0 or values.shape[-1] % 4:
        raise ValueError(f"static_cast to a x4 type needs a last axis divisible by 4, got shape {values.shape}")
    raw = values.astype(np.float32).astype(element).view(np.uint8).astype(np.uint32) & ((1 << bits) - 1)
    groups = raw.reshape(*values.shape[:-1], values.shape[-1] // 4, 4)
    packed = np.zeros(groups.shape[:-1], dtype=np.uint32)
    for i in range(4):
        packed |= groups[..., i] << np.uint32(bits * i)
    return packed.astype(container(packed_type)).view(packed_type)


def _unpack(values: np.ndarray, element: np.dtype, bits: int) -> np.ndarray:
    words = values.view(container(values.dtype)).astype(np.uint32)
    parts = [(words >> np.uint32(bits * i)) & np.uint32((1 << bits) - 1) for i in range(4)]
    raw = np.stack(parts, axis=-1).astype(np.uint8).reshape(*values.shape[:-1], values.shape[-1] * 4)
    return raw.view(element)


def static_cast(array: Any, dtype: Any) -> np.ndarray:
    """``array`` converted to ``dtype``: floats round to nearest even, x4 types pack or unpack.

    Casting to a packed ``*_x4`` type quantizes each value to the element type and
    packs four consecutive values of the last axis into one element (the last axis
    shrinks by 4); casting from one unpacks (the last axis grows by 4).
    """
    values = np.asarray(array)
    target = _dtype(dtype)
    source = _x4(values.dtype)
    if source is not None:
        values = _unpack(values, *source)
    packed = _x4(target)
    if packed is not None:
        return _pack(values, *packed, target)
    if values.dtype == target:
        return values.copy()
    if values.dtype == _FLOAT32:  # compiled rounding, the same bits as ml_dtypes' astype and a few times faster
        if target == _BFLOAT16:
            return to_bfloat16(values)
        if target in BYTE_FLOATS:
            return narrow(values, target)
    if is_float(values.dtype) and values.dtype.itemsize < 4 and is_float(target):
        values = values.astype(np.float32)  # ml_dtypes converts between its small types through f32
    return values.astype(target)


def sizeinbytes(dtype: Any) -> int:
    """Bytes per element of ``dtype`` (a packed x4 type counts its container)."""
    return int(_dtype(dtype).itemsize)


def is_float_type(dtype: Any) -> bool:
    """True for float types, including bfloat16, fp8 and the packed MX float types."""
    dt = _dtype(dtype)
    return _x4(dt) is not None or is_float(dt)


def finfo(dtype: Any) -> Any:
    """Float limits of ``dtype`` (``ml_dtypes.finfo``, which also knows bf16 and fp8)."""
    dt = _dtype(dtype)
    x4 = _x4(dt)
    return ml_dtypes.finfo(x4[0] if x4 else dt)


NEURON_DTYPES_API = (
    "bfloat16",
    "finfo",
    "float4_e2m1fn",
    "float4_e2m1fn_x4",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e4m3fn_x4",
    "float8_e5m2",
    "float8_e5m2_x4",
    "is_float_type",
    "sizeinbytes",
    "static_cast",
)

# -- harness modules missing from the public suite -------------------------------------


def analyze_trace(*args: Any, **kwargs: Any) -> None:
    """Performance analysis of a hardware trace: needs AWS's private tooling, not available here."""
    raise RuntimeError("perf analysis of hardware traces is not available under nkisim")


class LockStatus(enum.Enum):
    """Outcome of a remote core-lock request (hardware hosts only; the exit codes are nkisim's)."""

    ALLOCATED = 0
    NO_CORES = 10
    DRAINING = 11
    RELEASED = 12
    DRAINED = 13
    UNDRAINED = 14
    FLOCK_TIMEOUT = 15
    ERROR = 1

    @property
    def exit_code(self) -> int:
        return int(self.value)

    @classmethod
    def from_exit_code(cls, code: int) -> LockStatus:
        for status in cls:
            if status.value == code:
                return status
        return cls.ERROR


@dataclass
class LockResult:
    """A remote core-lock result (hardware hosts only)."""

    status: LockStatus
    cores: list[int] = field(default_factory=list)
    version: int | None = None
    max_lock_expiry: float | None = None
    message: str = ""

    @classmethod
    def from_json(cls, text: str) -> LockResult:
        data = json.loads(text)
        status = data.pop("status", "ERROR")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(status=LockStatus[status] if isinstance(status, str) else LockStatus(status), **known)


__all__ = [*NEURON_DTYPES_API, "LockResult", "LockStatus", "analyze_trace"]
