"""NKI data types, stored exactly with numpy and ml_dtypes, and the casts engines do on write.

NKI names its types with ``nki.language`` constants (``nl.bfloat16``) or strings
(``'bfloat16'``). Here each is a numpy dtype, so ``tile.dtype == nl.float32`` and
``tile.dtype == 'float32'`` both hold. ``tfloat32`` is stored as float32 whose
mantissa is rounded to 10 bits on every write; it carries numpy dtype metadata to
tell it apart.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import ml_dtypes
import numpy as np

from nkisim.memory.narrow_floats import BYTE_FLOATS, narrow, to_bfloat16

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

TFLOAT32 = np.dtype(np.float32, metadata={"nki": "tfloat32"})


def _packed(name: str, container: str) -> np.dtype:
    """A packed type: one unsigned-integer field named after the type, so each is a dtype of its own."""
    return np.dtype([(name, container)], metadata={"nki": name})


#: NeuronCore-v4 MX types that pack four values in one element (``quantize_mx``, ``nc_matmul_mx``):
#: containers of 32 bits (four fp8 bytes) or 16 bits (four fp4 nibbles), value ``i`` in byte
#: (nibble) ``i`` from the least significant end. See docs/semantics.md. Each is a numpy record
#: type with one unsigned field, so that the three differ from each other and from uint32/uint16
#: (``nl.float8_e4m3fn_x4 != nl.float8_e5m2_x4``) and their names show in ``str(dtype)``;
#: :func:`container` gives the integer words (``array.view(container(dtype))``).
FLOAT8_E5M2_X4 = _packed("float8_e5m2_x4", "<u4")
FLOAT8_E4M3FN_X4 = _packed("float8_e4m3fn_x4", "<u4")
FLOAT4_E2M1FN_X4 = _packed("float4_e2m1fn_x4", "<u2")

#: Every data type of NKI by its ``nki.language`` name (``float8_e8m0fnu``: the MX scales of NKI 0.6).
NKI_DTYPES: dict[str, np.dtype] = {
    "bool_": np.dtype(np.bool_),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "tfloat32": TFLOAT32,
    "float32": np.dtype(np.float32),
    "float8_e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "float8_e5m2_x4": FLOAT8_E5M2_X4,
    "float8_e4m3fn_x4": FLOAT8_E4M3FN_X4,
    "float4_e2m1fn_x4": FLOAT4_E2M1FN_X4,
}

_BY_NAME: dict[str, np.dtype] = {**NKI_DTYPES, "bool": NKI_DTYPES["bool_"]}
_SUPPORTED = set(NKI_DTYPES.values())
#: The plain NKI dtype objects (no metadata) by identity: ``nl.float32`` and the like, told apart without hashing
#: (``PLAIN_DTYPES.get(id(value), sentinel) is value``, with a default that is no dtype: plain ``.get`` gives
#: None, which ``is`` a None value).
PLAIN_DTYPES: dict[int, np.dtype] = {id(d): d for d in NKI_DTYPES.values() if not d.metadata}
_NOT_FOUND = object()
_FLOAT8 = {NKI_DTYPES[n] for n in ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")}


def to_dtype(value: Any) -> np.dtype:
    """Normalise a dtype given as an ``nl`` constant, a string, a numpy or a torch dtype.

    Raises:
        TypeError: if the value names no NKI data type.
    """
    # the usual case, an ``nl`` constant (dtype equality ignores metadata: tfloat32 == float32, hence the test)
    if PLAIN_DTYPES.get(id(value), _NOT_FOUND) is value:
        return value
    if isinstance(value, np.dtype) and not value.metadata and value in _SUPPORTED:
        return value
    if value is None:  # np.dtype(None) would be float64
        raise TypeError("a dtype is required, got None")
    if isinstance(value, str) or type(value).__module__ == "torch":
        name = str(value).removeprefix("torch.")
        if name not in _BY_NAME:
            raise TypeError(f"{value!r} is not an NKI data type (supported: {', '.join(NKI_DTYPES)})")
        return _BY_NAME[name]
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"{value!r} is not a data type") from None
    if is_tfloat32(dtype):
        return TFLOAT32
    if dtype not in _SUPPORTED:
        raise TypeError(f"{dtype} is not an NKI data type (supported: {', '.join(NKI_DTYPES)})")
    return dtype


def dtype_name(dtype: np.dtype) -> str:
    """The NKI name of a dtype (``tfloat32`` and the packed x4 types are told apart by metadata)."""
    if dtype.metadata and "nki" in dtype.metadata:
        return str(dtype.metadata["nki"])
    return "bool_" if dtype == np.bool_ else dtype.name


def is_tfloat32(dtype: np.dtype) -> bool:
    return bool(dtype.metadata) and dtype.metadata.get("nki") == "tfloat32"


def is_packed(dtype: np.dtype) -> bool:
    """True for the packed MX ``*_x4`` types."""
    return dtype.names is not None


def container(dtype: np.dtype) -> np.dtype:
    """The unsigned-integer words of a packed ``*_x4`` type (any other type: itself)."""
    return dtype.fields[dtype.names[0]][0] if is_packed(dtype) else dtype


def is_float(dtype: np.dtype) -> bool:
    """True for float types, including bf16, tf32 and fp8 (ml_dtypes report kind 'V'); not the packed x4 types."""
    return dtype.kind == "f" or (dtype.kind == "V" and not is_packed(dtype))


def is_integer(dtype: np.dtype) -> bool:
    """True for signed, unsigned and boolean integer types."""
    return dtype.kind in "iub"


def is_float8(dtype: np.dtype) -> bool:
    return dtype in _FLOAT8


def round_tfloat32(values: np.ndarray) -> np.ndarray:
    """Round float32 values to tfloat32 (10 mantissa bits), nearest-even; NaN and inf pass."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = (bits + (0xFFF + ((bits >> 13) & 1))) & np.uint32(0xFFFFE000)
    return np.where(finite, rounded, bits).view(np.float32)


def cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Convert engine results (usually float32) to ``dtype`` the way the hardware writes them.

    Floats round to nearest even (float32 to bf16 and to the one-byte floats by
    :mod:`nkisim.memory.narrow_floats`, which gives ml_dtypes' bits). Integers round to
    nearest even and saturate at the type's range; NaN becomes 0. Booleans are
    nonzero tests.
    """
    if values.dtype == dtype and not is_tfloat32(dtype):
        return values
    if is_packed(dtype):  # its integer words
        return cast(values, container(dtype)).view(dtype)
    if is_tfloat32(dtype):
        return round_tfloat32(values.astype(np.float32, copy=False))
    if dtype.kind in "iu" and is_float(values.dtype):
        info = np.iinfo(dtype)
        wide = np.rint(values.astype(np.float64, copy=False))
        log = _CONVERSIONS.get()
        if log is not None:
            log.note(wide, info)
        wide = np.nan_to_num(wide, nan=0.0, posinf=info.max, neginf=info.min)
        return np.clip(wide, info.min, info.max).astype(dtype)
    if dtype.kind == "b":
        return values != 0
    if values.dtype == np.float32:
        if dtype == _BFLOAT16:
            return to_bfloat16(values)
        if dtype in BYTE_FLOATS:
            return narrow(values, dtype)
    with np.errstate(over="ignore"):  # a float too large for a narrow float type becomes inf, as on the engines
        return values.astype(dtype)


class ConversionLog:
    """Counts float-to-integer conversions that saturated or met NaN, while it is active (see :func:`logging`).

    Attributes:
        saturated: values outside the integer type's range, written as its minimum or maximum.
        nan: NaN values, written as 0.
        dtype: the integer type of the last conversion that lost values.
    """

    __slots__ = ("dtype", "nan", "outside", "saturated")

    def __init__(self) -> None:
        self.saturated = 0
        self.nan = 0
        self.dtype: np.dtype | None = None
        #: ``(function, valid range, count)`` of inputs outside an approximated function's valid range.
        self.outside: list[tuple[str, str, int]] = []

    def note(self, rounded: np.ndarray, info: np.iinfo) -> None:
        """Count the values of ``rounded`` (float64) that ``info``'s type cannot hold."""
        nan = int(np.count_nonzero(np.isnan(rounded)))
        with np.errstate(invalid="ignore"):
            saturated = int(np.count_nonzero((rounded < info.min) | (rounded > info.max)))
        if nan or saturated:
            self.nan += nan
            self.saturated += saturated
            self.dtype = info.dtype

    def clear(self) -> None:
        self.saturated = self.nan = 0
        self.dtype = None
        self.outside = []


_CONVERSIONS: ContextVar[ConversionLog | None] = ContextVar("nkisim_conversions", default=None)


#: ``logging(log)``: make ``log`` count the lossy conversions of :func:`cast` in this context; returns a token for
#: :data:`stop_logging`. The context variable's own methods: they run around every instruction, and a Python
#: function around them would be one more call each time.
logging = _CONVERSIONS.set
#: ``stop_logging(token)``: undo the :data:`logging` that returned ``token``.
stop_logging = _CONVERSIONS.reset


def note_outside_range(function: str, valid_range: str, count: int) -> None:
    """Count inputs of an approximated function outside its valid range, if a log is active."""
    log = _CONVERSIONS.get()
    if log is not None and count:
        log.outside.append((function, valid_range, count))


def logging_active() -> bool:
    """True while a :class:`ConversionLog` counts (the sanitizer is on)."""
    return _CONVERSIONS.get() is not None
