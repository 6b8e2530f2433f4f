"""Fast, bit-exact conversions between float32 and the one-byte float types (fp8, the MX scale type).

ml_dtypes converts these one element at a time (about 6 ns an element to float32, 7 ns back
on a 2-core machine), which made the casts the largest part of simulating an fp8 kernel.
Both directions here are table-driven and compiled, and give ml_dtypes' bits exactly:

* **To float32**: the 256 codes decoded once by ml_dtypes; an element is a table lookup.
* **From float32**, round to nearest even: every rounding boundary of a one-byte type (a
  midpoint between neighbouring values, or the point past the largest finite value where
  the result becomes inf or NaN) is a float32 with at most five significant bits, so its low
  16 bits are zero. Hence all float32 with the same high 16 bits convert alike, except the
  one whose low 16 bits are zero, which may sit exactly on a boundary. Two codes per
  high half (131,072 bytes a type), worked out once by ml_dtypes, decide every input,
  NaN and inf included. ``benchmarks/check_fp8_tables.py`` compares all 2^32 float32
  against ml_dtypes.
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


@functools.cache
def decode_table(dtype: np.dtype) -> np.ndarray:
    """The float32 value of each of ``dtype``'s 256 codes, as ml_dtypes decodes them."""
    return np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)


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
    if dtype not in BYTE_FLOATS:
        return array.astype(_F32, copy=False)
    codes = array.view(np.uint8)
    table = decode_table(dtype)
    if codes.ndim == 2:
        return _decode_2d(codes, table)
    return table[codes]


def narrow(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float32 ``values`` rounded to the one-byte float type ``dtype``, bit-exact with ``values.astype(dtype)``."""
    bits = np.ascontiguousarray(values).view(np.uint32)
    return _encode(bits.reshape(-1), encode_table(dtype)).view(dtype).reshape(values.shape)


@numba.njit(cache=True, nogil=True)
def _decode_2d(codes: np.ndarray, table: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    rows, cols = codes.shape
    out = np.empty((rows, cols), np.float32)
    for r in range(rows):
        for c in range(cols):
            out[r, c] = table[codes[r, c]]
    return out


@numba.njit(cache=True, nogil=True)
def _encode(bits: np.ndarray, table: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(bits.size, np.uint8)
    for i in range(bits.size):
        b = bits[i]
        out[i] = table[((b >> 16) << 1) | ((b & 0xFFFF) != 0)]
    return out
