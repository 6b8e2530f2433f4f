"""Shared helpers for the instruction semantics tests.

Every expected value in these tests is computed here or in the test itself from the
NKI 0.2 documentation, never from nkisim: engines compute in float32 and cast on
write (round to nearest even; float to integer rounds to nearest even, saturates and
maps NaN to 0); bitvec operators act on integer bits with no cast.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

# -- dtypes ---------------------------------------------------------------------------

FP32 = np.dtype(np.float32)
FP16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
FP8_E4M3 = np.dtype(ml_dtypes.float8_e4m3)
FP8_E5M2 = np.dtype(ml_dtypes.float8_e5m2)
INT32 = np.dtype(np.int32)
INT16 = np.dtype(np.int16)
INT8 = np.dtype(np.int8)
UINT8 = np.dtype(np.uint8)
UINT16 = np.dtype(np.uint16)
UINT32 = np.dtype(np.uint32)

FLOATS = (FP32, BF16, FP16)
FP8S = (FP8_E4M3, FP8_E5M2)
INTS = (INT32, INT16, INT8, UINT8)
BITVEC_INTS = (INT32, INT16, INT8, UINT8, UINT16, UINT32)
ALL_DTYPES = FLOATS + FP8S + INTS
NUMERIC = (*FLOATS, *FP8S, INT32, INT8)

TARGETS = ("trn1", "trn2", "trn3")

# -- hypothesis -----------------------------------------------------------------------

FAST = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: For tests parametrized by operator: fewer examples each, as many in all.
PER_OP = settings(FAST, max_examples=15)

targets = st.sampled_from(TARGETS)
seeds = st.integers(0, 2**32 - 1)
partitions = st.integers(1, 128)


@st.composite
def free_shapes(draw: st.DrawFn, max_dims: int = 3, max_size: int = 512) -> tuple[int, ...]:
    """One to ``max_dims`` free dims with at most ``max_size`` elements in all."""
    ndims = draw(st.integers(1, max_dims))
    dims: list[int] = []
    budget = max_size
    for _ in range(ndims):
        limit = max(1, min(budget, 64 if ndims == 1 else 12))
        n = draw(st.integers(1, limit))
        dims.append(n)
        budget = max(1, budget // n)
    return tuple(dims)


@st.composite
def tile_shapes(draw: st.DrawFn, max_partitions: int = 128, max_dims: int = 3, max_size: int = 512) -> tuple[int, ...]:
    """An on-chip tile shape: ``(P, *free)``."""
    return (draw(st.integers(1, max_partitions)), *draw(free_shapes(max_dims, max_size)))


# -- reference numerics ---------------------------------------------------------------


def f32(a: Any) -> np.ndarray:
    """Values as float32 (every engine input cast; exact for every float dtype, RNE for int32)."""
    return np.asarray(a).astype(np.float32)


def ref_cast(values: Any, dtype: Any) -> np.ndarray:
    """The engine's write cast of float32 results to ``dtype``.

    Floats: IEEE round to nearest even (ml_dtypes for bf16/fp8). Integers: round to
    nearest even, saturate at the type's range, NaN becomes 0.
    """
    x = np.asarray(values, dtype=np.float32)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        wide = np.rint(x.astype(np.float64))
        wide = np.where(np.isnan(wide), 0.0, wide)
        return np.clip(wide, info.min, info.max).astype(dtype)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def uint_view(a: np.ndarray) -> np.ndarray:
    """The bit patterns of ``a`` as unsigned integers of the same width."""
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def assert_bits_equal(got: np.ndarray, expected: np.ndarray) -> None:
    """Same dtype, same shape and the very same bits (NaN payloads and -0.0 included)."""
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype, f"dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    np.testing.assert_array_equal(uint_view(got), uint_view(expected))


def assert_values_equal(got: np.ndarray, expected: np.ndarray) -> None:
    """Same dtype, shape and values (NaN matches NaN; -0.0 matches 0.0)."""
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype, f"dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_array_equal(got.astype(np.float64), expected.astype(np.float64))


def ulp_rtol(dtype: Any) -> float:
    """Relative size of one unit in the last place of a float dtype (integers: 0)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return 0.0
    return float(ml_dtypes.finfo(dtype).eps)


# -- random data ----------------------------------------------------------------------


def random_bits(rng: np.random.Generator, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """Arbitrary bit patterns (NaNs, infinities, -0.0, subnormals included)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    return rng.integers(0, 256, size=n, dtype=np.uint8).view(dtype).reshape(shape)


def random_values(rng: np.random.Generator, shape: Sequence[int], dtype: Any, scale: float = 4.0) -> np.ndarray:
    """Ordinary values of ``dtype``: normal floats (fp8 kept in range) or uniform integers."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    if dtype in FP8S:
        scale = min(scale, 8.0)
    return (rng.standard_normal(shape) * scale).astype(dtype)


def small_values(rng: np.random.Generator, shape: Sequence[int], dtype: Any, lo: int = -8, hi: int = 8) -> np.ndarray:
    """Small integers (or halves for floats) that every dtype holds exactly, so ties and equalities occur."""
    dtype = np.dtype(dtype)
    ints = rng.integers(lo, hi, size=shape, endpoint=True)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(ints, info.min, info.max).astype(dtype)
    return (ints * 0.5).astype(dtype)


# -- running tiny kernels -------------------------------------------------------------


def load(hbm: Any, buffer: Any = "sbuf") -> Any:
    """Copy an HBM tensor into a new on-chip tile of the same shape and dtype."""
    tile = nl.ndarray(hbm.shape, dtype=hbm.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=hbm)
    if buffer == "psum":
        staged = nl.ndarray(hbm.shape, dtype=hbm.dtype, buffer=nl.psum)
        nisa.tensor_copy(dst=staged, src=tile)
        tile = staged
    return tile


def store(tile: Any) -> Any:
    """Copy an on-chip tile (staging PSUM through SBUF, bit-exactly) to a new kernel output."""
    if tile.buffer == "psum":
        staged = nl.ndarray(tile.shape, dtype=tile.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=staged, src=tile)
        tile = staged
    out = nl.ndarray(tile.shape, dtype=tile.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tile)
    return out


def run_kernel(kernel: Callable[..., Any], inputs: Sequence[Any] = (), target: str = "trn1") -> Any:
    """Run ``kernel`` on ``inputs`` on ``target`` and return its outputs as numpy."""
    return nkisim.run(kernel, list(inputs), target=target).outputs


def run_tile(
    body: Callable[..., None],
    inputs: Sequence[np.ndarray],
    out_shape: Sequence[int],
    out_dtype: Any,
    *,
    target: str = "trn1",
    in_buffers: Sequence[str] | None = None,
    out_buffer: str = "sbuf",
) -> np.ndarray:
    """Load each input into a tile, call ``body(dst, *tiles)`` once, and return ``dst``.

    ``in_buffers`` puts inputs in ``"sbuf"`` (default) or ``"psum"``; ``out_buffer``
    places ``dst``.
    """
    buffers = list(in_buffers) if in_buffers is not None else ["sbuf"] * len(inputs)
    assert len(buffers) == len(inputs)

    def kernel(*hbm: Any) -> Any:
        tiles = [load(h, buf) for h, buf in zip(hbm, buffers)]
        dst = nl.ndarray(tuple(out_shape), dtype=out_dtype, buffer=nl.psum if out_buffer == "psum" else nl.sbuf)
        body(dst, *tiles)
        return store(dst)

    return run_kernel(kernel, inputs, target)


# -- small math helpers for references ------------------------------------------------

erf64 = np.vectorize(math.erf, otypes=[np.float64])


def assert_constraint_error(name, engine, target, call, error, message):
    """Calling ``call`` inside a kernel raises ``error`` whose message names the instruction, its engine
    (if any), the target, then ``message`` (a regex naming the operand and the rule)."""

    def kernel():
        call()

    where = rf"\[{engine}, {target}\]" if engine else rf"\[{target}\]"
    with pytest.raises(error, match=rf"nisa\.{name} {where}: {message}"):
        nkisim.run(kernel, [], target=target)


# -- shared by the data-movement tests ---------------------------------------------------

BIT_DTYPES = (*ALL_DTYPES, UINT16, UINT32)
REL = 1e-9
P = 128


def sbuf(shape, dtype=nl.float32):
    return nl.ndarray(tuple(shape), dtype=dtype, buffer=nl.sbuf)


def psum(shape, dtype=nl.float32):
    return nl.ndarray(tuple(shape), dtype=dtype, buffer=nl.psum)


def hbm(shape, dtype=nl.float32):
    return nl.ndarray(tuple(shape), dtype=dtype, buffer=nl.shared_hbm)


def only_instruction(kernel, inputs=(), target="trn1", opcode=None):
    """The profile record of the one instruction named ``opcode`` (or of the only instruction)."""
    profile = nkisim.run(kernel, list(inputs), target=target).profile
    recs = [r for r in profile.instructions if opcode is None or r.opcode == opcode]
    assert len(recs) == 1
    return recs[0]
