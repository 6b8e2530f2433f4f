"""Dtypes, reference casts, value generators and the helper runner shared by the nl helper tests.

Engines compute in float32 and cast on write (floats round to nearest even; integers round
to nearest even and saturate); these references say so in numpy.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.frontend import current_context

FP32, FP16, BF16 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3), np.dtype(ml_dtypes.float8_e5m2)
I32, I16, I8, U8, U16, U32 = (np.dtype(t) for t in (np.int32, np.int16, np.int8, np.uint8, np.uint16, np.uint32))
FLOATS = (FP32, BF16, FP16)
INTS = (I32, I16, I8, U8)
TARGETS = ("trn1", "trn2", "trn3")

FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
targets = st.sampled_from(TARGETS)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def tile_shapes(draw: st.DrawFn, max_free_dims: int = 2) -> tuple[int, ...]:
    free = [draw(st.integers(1, 24)) for _ in range(draw(st.integers(1, max_free_dims)))]
    return (draw(st.integers(1, 128)), *free)


# -- references -----------------------------------------------------------------------


def f32(a):
    return np.asarray(a).astype(np.float32)


def ref_cast(values, dtype):
    """The engines' write cast of float32 results."""
    x = np.asarray(values, dtype=np.float32)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        wide = np.nan_to_num(np.rint(x.astype(np.float64)), nan=0.0)
        return np.clip(wide, info.min, info.max).astype(dtype)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def values(rng, shape, dtype, lo=-8, hi=8):
    """Halves (floats) or integers that every dtype holds exactly, so ties and equal values occur."""
    ints = rng.integers(lo, hi, size=shape, endpoint=True)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(ints, info.min, info.max).astype(dtype)
    return (ints * 0.5).astype(dtype)


def assert_same(got, expected, rtol=0.0):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype, f"dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    if rtol:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got.astype(np.float64), expected.astype(np.float64))


def run_helper(body, inputs, target="trn1"):
    """Load each input into SBUF, call ``body(*tiles)``, store what it returns.

    Returns the outputs and the opcodes of the instructions ``body`` itself issued.
    """
    issued: list[int] = []

    def kernel(*hbm):
        tiles = []
        for h in hbm:
            t = nl.ndarray(h.shape, h.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=h)
            tiles.append(t)
        issued.append(len(current_context().machine.timeline))
        result = body(*tiles)
        issued.append(len(current_context().machine.timeline))
        results = result if isinstance(result, tuple) else (result,)
        outs = []
        for r in results:
            if r.buffer == nl.psum:
                staged = nl.ndarray(r.shape, r.dtype, buffer=nl.sbuf)
                nisa.tensor_copy(dst=staged, src=r)
                r = staged
            out = nl.ndarray(r.shape, r.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=r)
            outs.append(out)
        return tuple(outs) if isinstance(result, tuple) else outs[0]

    run = nkisim.run(kernel, list(inputs), target=target)
    opcodes = [i.opcode for i in run.profile.instructions[issued[0] : issued[1]]]
    return run.outputs, opcodes
