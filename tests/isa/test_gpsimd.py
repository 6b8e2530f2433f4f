"""GpSimd Engine: nisa.iota, and the operators that run there (nl.power, rsqrt via tensor_scalar)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim
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
    PER_OP,
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


# -- tensor_tensor on int32/uint32 tiles: GpSimd's integer arithmetic -----------------

#: The documented int32/uint32 arithmetic, on Python-sized integers; the result is taken modulo 2^32.
INTEGER_REFERENCE = {
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x * y,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "abs_max": lambda x, y: np.maximum(abs(x), abs(y)),
    "abs_min": lambda x, y: np.minimum(abs(x), abs(y)),
    "abs": lambda x, y: abs(x),
    "square": lambda x, y: x * x,
    "equal": lambda x, y: (x == y) * 1,
    "not_equal": lambda x, y: (x != y) * 1,
    "greater": lambda x, y: (x > y) * 1,
    "greater_equal": lambda x, y: (x >= y) * 1,
    "less": lambda x, y: (x < y) * 1,
    "less_equal": lambda x, y: (x <= y) * 1,
    "logical_and": lambda x, y: ((x != 0) & (y != 0)) * 1,
    "logical_or": lambda x, y: ((x != 0) | (y != 0)) * 1,
    "logical_xor": lambda x, y: ((x != 0) ^ (y != 0)) * 1,
}

INT32_KINDS = (INT32, np.dtype(np.uint32))


def wrap_to(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Python integers taken modulo 2^32, as ``dtype``'s 32-bit two's complement pattern."""
    return (
        np.array([int(v) % 2**32 for v in values.ravel()], np.uint64)
        .astype(np.uint32)
        .view(dtype)
        .reshape(values.shape)
    )


def test_tensor_tensor_int32_hand_cases():
    """All-int32 tiles default to GpSimd's integer ALU: 2^24 + 1 survives, and int32 overflow wraps."""
    a = np.array([[2**24 + 1, 2**31 - 1, -5, 70000]], np.int32)
    b = np.array([[2, 1, 3, 70000]], np.int32)
    got = run_tile(lambda d, x, y: nisa.tensor_tensor(d, x, y, nl.add), [a, b], a.shape, INT32)
    np.testing.assert_array_equal(got, [[2**24 + 3, -(2**31), -2, 140000]])
    got = run_tile(lambda d, x, y: nisa.tensor_tensor(d, x, y, nl.multiply), [a, b], a.shape, INT32)
    # 70000^2 = 4,900,000,000 = 2^32 + 605,032,704
    np.testing.assert_array_equal(got, [[2**25 + 2, 2**31 - 1, -15, 605_032_704]])
    got = run_tile(lambda d, x, y: nisa.tensor_tensor(d, x, y, nl.equal), [a, a + 1], a.shape, INT32)
    np.testing.assert_array_equal(got, [[0, 0, 0, 0]])  # in float32, 2^24 + 1 and 2^24 + 2 are equal
    big = np.array([[2**24 + 1, 2**24, 2**24 + 3, -(2**24) - 1]], np.int32)
    other = np.array([[2**24, 2**24 + 1, 2**24 + 3, -(2**24)]], np.int32)  # float32 rounds each pair together
    for op, expected in (
        ("greater", [1, 0, 0, 0]),
        ("less", [0, 1, 0, 1]),
        ("not_equal", [1, 1, 0, 1]),
        ("greater_equal", [1, 0, 1, 0]),
    ):
        got = run_tile(
            lambda d, x, y, op=op: nisa.tensor_tensor(d, x, y, getattr(nl, op)), [big, other], big.shape, INT32
        )
        np.testing.assert_array_equal(got, [expected], err_msg=op)


def test_int32_magnitudes_are_exact_then_wrap():
    """|x| and x*x of int32 values are exact, then wrap to 32 bits: |INT32_MIN| is 2^31, which wraps to
    INT32_MIN; abs_max compares the exact magnitudes (2^31 > 5), then wraps (nkisim's choice, docs/semantics.md)."""
    x = np.array([[2**24 + 1, -(2**31), 46341, -7]], np.int32)
    y = np.array([[0, 5, 0, 4]], np.int32)
    got = run_tile(lambda d, a, b: nisa.tensor_tensor(d, a, b, nl.abs), [x, y], x.shape, INT32)
    np.testing.assert_array_equal(got, [[2**24 + 1, -(2**31), 46341, 7]])
    got = run_tile(lambda d, a, b: nisa.tensor_tensor(d, a, b, nl.square), [x, y], x.shape, INT32)
    # 46341^2 = 2,147,488,281 = 2^31 + 4,633 -> -2^31 + 4,633; (2^24 + 1)^2 = 2^48 + 2^25 + 1 -> 2^25 + 1
    np.testing.assert_array_equal(got, [[2**25 + 1, 0, -(2**31) + 4633, 49]])
    got = run_tile(lambda d, a, b: nisa.tensor_tensor(d, a, b, nl.abs_max), [x, y], x.shape, INT32)
    np.testing.assert_array_equal(got, [[2**24 + 1, -(2**31), 46341, 7]])
    got = run_tile(lambda d, a, b: nisa.tensor_tensor(d, a, b, nl.abs_min), [x, y], x.shape, INT32)
    np.testing.assert_array_equal(got, [[0, 5, 0, 4]])


def test_uint32_offsets_above_2_24():
    """The row offsets of a large cache (uint32 index + uint32 iota base) are exact, as a scatter needs them."""
    index = np.array([[6243], [6249], [7]], np.uint32)
    base = np.array([[33 * 524288], [35 * 524288], [2**31]], np.uint32)
    got = run_tile(lambda d, x, y: nisa.tensor_tensor(d, x, y, nl.add), [index, base], index.shape, np.uint32)
    np.testing.assert_array_equal(got, index.astype(np.int64) + base.astype(np.int64))


def test_int32_tensor_tensor_runs_on_gpsimd_unless_told():
    """The timeline has the default on GpSimd, engine=vector on the Vector Engine, and a PSUM dst there too."""
    a = np.arange(8, dtype=np.int32).reshape(1, 8)

    def engine_of(engine, buffer):
        def kernel(x):
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=buffer)
            nisa.tensor_tensor(dst=out, data1=t, data2=t, op=nl.add, engine=engine)

        profile = nkisim.run(kernel, [a]).profile
        return {row.engine for row in profile.instructions if row.opcode == "tensor_tensor"}

    assert engine_of(nisa.unknown_engine, nl.sbuf) == {"GpSimd"}
    assert engine_of(nisa.vector_engine, nl.sbuf) == {"Vector"}
    assert engine_of(nisa.unknown_engine, nl.psum) == {"Vector"}


@pytest.mark.parametrize("op", sorted(INTEGER_REFERENCE))
@PER_OP
@given(
    shape=st.tuples(partitions, st.integers(1, 32)),
    kinds=st.tuples(*[st.sampled_from(INT32_KINDS)] * 3),
    target=targets,
    seed=seeds,
)
def test_tensor_tensor_int32_matches_integer_reference(op, shape, kinds, target, seed):
    """Any mix of int32/uint32 tiles: the exact integer result of the values, wrapped into dst's 32 bits.

    Half the pairs differ by at most 2 above 2^24, where float32 math would round them together."""
    rng = np.random.default_rng(seed)
    k1, k2, out = kinds
    a = rng.integers(np.iinfo(k1).min, np.iinfo(k1).max, size=shape, endpoint=True).astype(k1)
    b = rng.integers(np.iinfo(k2).min, np.iinfo(k2).max, size=shape, endpoint=True).astype(k2)
    near = rng.integers(2**24, 2**30, size=shape) * rng.choice([-1, 1], size=shape) + rng.integers(-2, 3, size=shape)
    close = rng.random(shape) < 0.5
    a = np.where(close, near.clip(np.iinfo(k1).min, np.iinfo(k1).max), a).astype(k1)
    b = np.where(close, (near + rng.integers(-2, 3, size=shape)).clip(np.iinfo(k2).min, np.iinfo(k2).max), b)
    b = b.astype(k2)
    got = run_tile(lambda d, x, y: nisa.tensor_tensor(d, x, y, getattr(nl, op)), [a, b], shape, out, target=target)
    xs, ys = a.astype(object), b.astype(object)
    np.testing.assert_array_equal(got, wrap_to(INTEGER_REFERENCE[op](xs, ys), out))
