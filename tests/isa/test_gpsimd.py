"""GpSimd Engine: nisa.iota, and the operators that run there (nl.power, rsqrt via tensor_scalar)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

from .conftest import (
    BF16,
    FAST,
    FLOATS,
    FP16,
    FP32,
    INT16,
    INT32,
    assert_values_equal,
    f32,
    partitions,
    ref_cast,
    run_kernel,
    run_tile,
    seeds,
    store,
    targets,
    ulp_rtol,
)


def iota_reference(p, pattern, offset, channel_multiplier):
    """value[c, w, z, y, x] = offset + c * channel_multiplier + sum(step * index), from the NKI pseudo-code."""
    nums = [num for _, num in pattern]
    values = np.zeros((p, *nums), dtype=np.int64)
    for c in range(p):
        for index in np.ndindex(*nums):
            values[(c, *index)] = offset + c * channel_multiplier + sum(s * i for (s, _), i in zip(pattern, index))
    return values.reshape(p, -1)


@st.composite
def iota_cases(draw):
    ndims = draw(st.integers(1, 4))
    pattern = [[draw(st.integers(-7, 7)), draw(st.integers(1, 6))] for _ in range(ndims)]
    return {
        "p": draw(partitions),
        "pattern": pattern,
        "offset": draw(st.integers(-1000, 1000)),
        "cm": draw(st.integers(-16, 16)),
        "dtype": draw(st.sampled_from((INT32, FP32, BF16, FP16, INT16))),
        "shaped": draw(st.booleans()),
    }


@FAST
@given(case=iota_cases(), target=targets)
def test_iota_pattern(case, target):
    """iota computes the affine pattern in int32 and casts it to dst's dtype; dst may be [P, F] or [P, *nums]."""
    p, pattern, dtype = case["p"], case["pattern"], case["dtype"]
    nums = [n for _, n in pattern]
    shape = (p, *nums) if case["shaped"] else (p, int(np.prod(nums)))

    def kernel():
        tile = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
        nisa.iota(dst=tile, pattern=pattern, offset=case["offset"], channel_multiplier=case["cm"])
        return store(tile)

    values = iota_reference(p, pattern, case["offset"], case["cm"])
    expected = values.astype(INT32) if dtype == INT32 else ref_cast(values.astype(np.float32), dtype)
    assert_values_equal(run_kernel(kernel, [], target), expected.reshape(shape))


def test_iota_hand_cases():
    def make(shape, dtype, pattern, offset, cm=0):
        def kernel():
            tile = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
            nisa.iota(tile, pattern, offset, channel_multiplier=cm)
            return store(tile)

        return run_kernel(kernel)

    np.testing.assert_array_equal(
        make((3, 4), INT32, [[1, 4]], 10, 100), [[10, 11, 12, 13], [110, 111, 112, 113], [210, 211, 212, 213]]
    )
    np.testing.assert_array_equal(make((1, 8), INT32, [[4, 2], [1, 4]], 0), [[0, 1, 2, 3, 4, 5, 6, 7]])
    # columns first: [[1, 2], [2, 3]] walks a transposed 3x2 grid
    np.testing.assert_array_equal(make((1, 2, 3), INT32, [[1, 2], [2, 3]], 0), [[[0, 2, 4], [1, 3, 5]]])
    np.testing.assert_array_equal(make((2, 3), FP32, [[-2, 3]], 5, -1), [[5, 3, 1], [4, 2, 0]])
    # 257 and 259 are ties in bfloat16 (spacing 2 above 256): round to even 256 and 260
    np.testing.assert_array_equal(make((1, 4), BF16, [[2, 4]], 255).astype(np.float32), [[255, 256, 260, 260]])


@FAST
@given(
    shape=st.tuples(partitions, st.integers(1, 64)),
    dtype=st.sampled_from(FLOATS),
    out=st.sampled_from(FLOATS),
    engine=st.sampled_from(["unknown", "gpsimd"]),
    target=targets,
    seed=seeds,
)
def test_tensor_tensor_power(shape, dtype, out, engine, target, seed):
    """nl.power (a GpSimd operator): data1 ** data2 in float32."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.25, 4.0, size=shape).astype(dtype)
    exponent = rng.uniform(-3.0, 3.0, size=shape).astype(dtype)
    got = run_tile(
        lambda d, x, y: nisa.tensor_tensor(
            dst=d, data1=x, data2=y, op=nl.power, engine=getattr(nisa, f"{engine}_engine")
        ),
        [base, exponent],
        shape,
        out,
        target=target,
    )
    expected = np.power(f32(base).astype(np.float64), f32(exponent).astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2e-6 + ulp_rtol(out))


def test_power_hand_case():
    x = np.array([[2.0, 9.0, 4.0, 10.0]], np.float32)
    y = np.array([[10.0, 0.5, -0.5, 0.0]], np.float32)
    got = run_tile(lambda d, a, b: nisa.tensor_tensor(d, a, b, nl.power), [x, y], x.shape, FP32)
    np.testing.assert_array_equal(got, [[1024.0, 3.0, 0.5, 1.0]])


@FAST
@given(
    shape=st.tuples(partitions, st.integers(1, 64)),
    dtype=st.sampled_from(FLOATS),
    op1=st.sampled_from([None, "multiply", "add"]),
    target=targets,
    seed=seeds,
)
def test_tensor_scalar_rsqrt_on_gpsimd(shape, dtype, op1, target, seed):
    """tensor_scalar(op0=nl.rsqrt, operand0=<ignored>) on GpSimd gives 1/sqrt(data), optionally then op1."""
    rng = np.random.default_rng(seed)
    data = rng.uniform(2.0**-10, 2.0**10, size=shape).astype(dtype)
    got = run_tile(
        lambda d, x: nisa.tensor_scalar(
            dst=d,
            data=x,
            op0=nl.rsqrt,
            operand0=0.0,
            op1=getattr(nl, op1) if op1 else None,
            operand1=3.0 if op1 else None,
            engine=nisa.gpsimd_engine,
        ),
        [data],
        shape,
        FP32,
        target=target,
    )
    expected = 1.0 / np.sqrt(f32(data).astype(np.float64))
    if op1 == "multiply":
        expected = expected * 3.0
    elif op1 == "add":
        expected = expected + 3.0
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=4e-7 * 4)
