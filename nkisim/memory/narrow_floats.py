"""Fast, bit-exact conversions between float32 and the narrow float types (fp8, the MX scale type, fp16, bf16).

numpy and ml_dtypes convert some of these one element at a time: a one-byte float takes
about 6 ns an element to float32 (7 ns back), float16 2 ns, and bfloat16 13 times its
usual cost when the view's elements are not adjacent (an access pattern with a step). That
made the casts the largest part of simulating fp8 kernels. The conversions here are
table-driven or bit shifts, compiled, and give numpy's and ml_dtypes' bits exactly:

* **One-byte floats to float32**: the 256 codes decoded once by ml_dtypes; an element is a
  table lookup. **float16**: the same with its 65,536 codes (decoded by numpy).
* **bfloat16 to float32** is the exact widening: the 16 bits become the high half. Compiled in
  every 2-D layout: ml_dtypes' ``astype`` takes 1.5 times as long on an SBUF tile's view and 4 to 5
  times on a contiguous [128, 512] to [128, 8192] array.
* **float32 to bfloat16**, round to nearest even, is the high half of the bits after adding
  ``0x7FFF`` and the lowest kept bit; a NaN becomes the quiet NaN of its sign (``0x7FC0``
  or ``0xFFC0``), as ml_dtypes gives it. ml_dtypes' ``astype`` took about 3.5 times a float32
  multiply of the same elements.
* **float32 to a one-byte float**, round to nearest even: every rounding boundary of a
  one-byte type (a midpoint between neighbouring values, or the point past the largest
  finite value where the result becomes inf or NaN) is a float32 with at most five
  significant bits, so its low 16 bits are zero. Hence all float32 with the same high 16
  bits convert alike, except the one whose low 16 bits are zero, which may sit exactly on
  a boundary. Two codes per high half (131,072 bytes a type), worked out once by
  ml_dtypes, decide every input, NaN and inf included. ``benchmarks/check_float_tables.py``
  compares all 2^32 float32 against ml_dtypes.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numba
import numpy as np

#: The one-byte float types converted here.
BYTE_FLOATS = frozenset(
    np.dtype(t)
    for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3, ml_dtypes.float8_e8m0fnu)
)

_F32 = np.dtype(np.float32)
_F16 = np.dtype(np.float16)
_BF16 = np.dtype(ml_dtypes.bfloat16)


@functools.cache
def decode_table(dtype: np.dtype) -> np.ndarray:
    """The float32 value of each code of a one- or two-byte float ``dtype``, as ml_dtypes or numpy decodes it."""
    codes = np.arange(256**dtype.itemsize, dtype=np.uint8 if dtype.itemsize == 1 else np.uint16)
    return codes.view(dtype).astype(np.float32)


@functools.cache
def encode_table(dtype: np.dtype) -> np.ndarray:
    """``dtype``'s code for float32 bits ``b`` at ``[(b >> 16) * 2 + (b & 0xFFFF != 0)]``, as ml_dtypes rounds."""
    high = np.arange(65536, dtype=np.uint32) << 16
    representatives = np.stack([high, high | 1], axis=1).ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        return representatives.view(np.float32).astype(dtype).view(np.uint8)


def widen(array: np.ndarray) -> np.ndarray:
    """``array`` as float32 (itself when it is float32 already), bit-exact with ``array.astype(np.float32)``."""
    dtype = array.dtype
    if dtype in BYTE_FLOATS:
        codes = array.view(np.uint8)
    elif dtype == _F16:
        codes = array.view(np.uint16)
    elif dtype == _BF16:
        halves = array.view(np.uint16)
        if halves.ndim != 2:
            if not halves.flags.c_contiguous:
                return array.astype(_F32)
            halves = halves.reshape(1, -1)
        out = np.empty(halves.shape, np.uint32)
        _bf16_to_f32_2d(halves, out)
        return out.view(_F32).reshape(array.shape)
    else:
        return array.astype(_F32, copy=False)
    table = decode_table(dtype)
    if codes.ndim == 2:
        decoded = np.empty(codes.shape, _F32)
        _decode_2d(codes, table, decoded)
        return decoded
    return np.asarray(table[codes])  # a 0-d array for a 0-d input, as astype gives


def to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 ``values`` rounded to bfloat16, bit-exact with ``values.astype(ml_dtypes.bfloat16)`` (C order)."""
    bits = values.view(np.uint32)
    if bits.ndim != 2:
        bits = np.ascontiguousarray(bits).reshape(1, -1)
    out = np.empty(bits.shape, np.uint16)
    _f32_to_bf16_2d(bits, out)
    return out.view(_BF16).reshape(values.shape)


def narrow(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float32 ``values`` rounded to the one-byte float type ``dtype``, bit-exact with ``values.astype(dtype)``."""
    bits = np.ascontiguousarray(values).view(np.uint32).reshape(-1)
    out = np.empty(bits.size, np.uint8)
    _encode(bits, encode_table(dtype), out)
    return out.view(dtype).reshape(values.shape)


# The compiled loops write into arrays numpy allocated: numpy maps a large one in huge pages, where an array made
# inside a compiled function takes a page fault every 4 KiB (a [128, 65536] float32 result: 25 ms against 7.6).


@numba.njit(cache=True, nogil=True)
def _decode_2d(codes: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    rows, cols = codes.shape
    for r in range(rows):
        for c in range(cols):
            out[r, c] = table[codes[r, c]]


@numba.njit(cache=True, nogil=True)
def _bf16_to_f32_2d(halves: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    rows, cols = halves.shape
    for r in range(rows):
        for c in range(cols):
            out[r, c] = np.uint32(halves[r, c]) << 16


@numba.njit(cache=True, nogil=True)
def _f32_to_bf16_2d(bits: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    rows, cols = bits.shape
    for r in range(rows):
        for c in range(cols):
            b = bits[r, c]
            if b & 0x7FFFFFFF > 0x7F800000:  # NaN: the quiet NaN of its sign
                out[r, c] = ((b >> 16) & 0x8000) | 0x7FC0
            else:  # never past 0xFF808000 (-inf), so the sum stays in 32 bits
                out[r, c] = (b + 0x7FFF + ((b >> 16) & 1)) >> 16


@numba.njit(cache=True, nogil=True)
def _encode(bits: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in range(bits.size):
        b = bits[i]
        out[i] = table[((b >> 16) << 1) | ((b & 0xFFFF) != 0)]
