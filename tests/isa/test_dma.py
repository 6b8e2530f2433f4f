"""nisa.dma_copy: copies between HBM and SBUF, dtype casts through float32, and dst_rmw_op=nl.add."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

from .conftest import (
    ALL_DTYPES,
    BF16,
    FAST,
    FLOATS,
    FP8S,
    FP16,
    FP32,
    INT8,
    INT32,
    INTS,
    UINT8,
    UINT16,
    UINT32,
    assert_bits_equal,
    assert_values_equal,
    f32,
    load,
    random_bits,
    random_values,
    ref_cast,
    run_kernel,
    seeds,
    store,
    targets,
    tile_shapes,
)

BIT_DTYPES = (*ALL_DTYPES, UINT16, UINT32)


def cast_inputs(rng: np.random.Generator, shape: tuple[int, ...], src: np.dtype, dst: np.dtype) -> np.ndarray:
    """Inputs for a cast test: ties, out-of-range values and (when ``dst`` can hold them) NaN and infinities."""
    n = int(np.prod(shape))
    if src.kind in "iu":
        values = random_values(rng, shape, src)
        return np.clip(values, -200, 200).astype(src) if dst in FP8S else values
    big = 8.0 if src in FP8S else 400.0
    pool = np.concatenate(
        [
            rng.standard_normal(n) * big,
            rng.integers(-300, 300, size=n) + 0.5,  # ties round to even
            rng.uniform(-3, 3, size=n),
        ]
    )
    if dst not in FP8S:
        pool = np.concatenate([pool, [np.nan, np.inf, -np.inf, -0.0]])
    values = rng.choice(pool, size=n).reshape(shape)
    if dst in FP8S:
        values = np.clip(values, -200, 200)  # fp8 overflow behaviour is not documented
    return values.astype(src)


@FAST
@given(shape=tile_shapes(), dtype=st.sampled_from(BIT_DTYPES), target=targets, seed=seeds)
def test_round_trip_is_bit_exact(shape, dtype, target, seed):
    """HBM -> SBUF -> HBM with one dtype copies every bit, NaN payloads included."""
    a = random_bits(np.random.default_rng(seed), shape, dtype)

    def kernel(x):
        return store(load(x))

    assert_bits_equal(run_kernel(kernel, [a], target), a)


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@FAST
@given(
    shape=tile_shapes(max_dims=2),
    src=st.sampled_from(ALL_DTYPES),
    dst=st.sampled_from(ALL_DTYPES),
    direction=st.sampled_from(["hbm_to_sbuf", "sbuf_to_hbm", "sbuf_to_sbuf", "hbm_to_hbm"]),
    target=targets,
    seed=seeds,
)
def test_dtype_cast_goes_through_float32(shape, src, dst, direction, target, seed):
    """A dtype change casts src -> float32 -> dst (RNE; to integers: saturate, NaN -> 0)."""
    a = cast_inputs(np.random.default_rng(seed), shape, src, dst)
    expected = a.copy() if src == dst else ref_cast(f32(a), dst)

    def kernel(x):
        if direction == "hbm_to_sbuf":
            tile = nl.ndarray(x.shape, dtype=dst, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x)
            return store(tile)
        out = nl.ndarray(x.shape, dtype=dst, buffer=nl.shared_hbm)
        if direction == "sbuf_to_hbm":
            nisa.dma_copy(dst=out, src=load(x))
        elif direction == "hbm_to_hbm":
            nisa.dma_copy(dst=out, src=x)
        else:
            tile = nl.ndarray(x.shape, dtype=dst, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=load(x))
            nisa.dma_copy(dst=out, src=tile)
        return out

    assert_values_equal(run_kernel(kernel, [a], target), expected)


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
def test_cast_hand_cases():
    """float32 -> int32/int8/uint8 and bf16, worked by hand."""
    a = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, 2.6, np.nan, np.inf, -np.inf, 1e10, -1e10, 200.0]], np.float32)
    expected = {
        INT32: [0, 2, 2, 0, -2, 3, 0, 2**31 - 1, -(2**31), 2**31 - 1, -(2**31), 200],
        INT8: [0, 2, 2, 0, -2, 3, 0, 127, -128, 127, -128, 127],
        UINT8: [0, 2, 2, 0, 0, 3, 0, 255, 0, 255, 0, 200],
    }
    for dtype, values in expected.items():

        def kernel(x, dtype=dtype):
            tile = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=tile, src=x)
            return store(tile)

        np.testing.assert_array_equal(run_kernel(kernel, [a]), np.array([values], dtype=dtype))

    # 1 + 2^-8 is a tie between bf16 neighbours 1 and 1 + 2^-7: round to even gives 1.
    b = np.array([[1 + 2**-8, 1 + 3 * 2**-8, 16777217]], np.float64).astype(np.float32)

    def to_bf16(x):
        tile = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        return store(tile)

    got = run_kernel(to_bf16, [b])
    np.testing.assert_array_equal(got.astype(np.float64), [[1.0, 1 + 2**-6, 16777216.0]])

    # int32 -> float32 rounds to nearest even: 2^24 + 1 -> 2^24, 2^24 + 3 -> 2^24 + 4.
    c = np.array([[2**24 + 1, 2**24 + 3, -(2**24) - 1]], np.int32)

    def to_f32(x):
        tile = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        return store(tile)

    np.testing.assert_array_equal(run_kernel(to_f32, [c]), [[2.0**24, 2.0**24 + 4, -(2.0**24)]])


@st.composite
def reshapes(draw):
    """An HBM shape and an SBUF tile shape with the same number of elements."""
    p = draw(st.integers(1, 128))
    free = draw(st.sampled_from([(f,) for f in range(1, 33)] + [(a, b) for a in (2, 3, 4) for b in (1, 2, 5, 8)]))
    total = p * int(np.prod(free))
    rows = draw(st.sampled_from([d for d in range(1, min(total, 256) + 1) if total % d == 0]))
    return (rows, total // rows), (p, *free)


@FAST
@given(shapes=reshapes(), dtype=st.sampled_from([FP32, BF16, INT8, INT32]), target=targets, seed=seeds)
def test_shapes_may_differ_row_major(shapes, dtype, target, seed):
    """Only element counts must match: elements move in row-major order."""
    hbm_shape, tile_shape = shapes
    a = random_values(np.random.default_rng(seed), hbm_shape, dtype)

    def kernel(x):
        tile = nl.ndarray(tile_shape, dtype=dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        back = nl.ndarray(hbm_shape, dtype=dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=back, src=tile)
        return store(tile), back

    got_tile, got_back = run_kernel(kernel, [a], target)
    assert_bits_equal(got_tile, a.reshape(tile_shape))
    assert_bits_equal(got_back, a)


@st.composite
def blocks(draw):
    rows, cols = draw(st.integers(1, 160)), draw(st.integers(1, 40))
    r0 = draw(st.integers(0, rows - 1))
    c0 = draw(st.integers(0, cols - 1))
    rstep = draw(st.integers(1, 3))
    r1 = draw(st.integers(r0 + 1, min(rows, r0 + 128 * rstep)))
    c1 = draw(st.integers(c0 + 1, cols))
    return (rows, cols), (slice(r0, r1, rstep), slice(c0, c1))


@FAST
@given(case=blocks(), dtype=st.sampled_from([FP32, BF16, FP16, INT32, INT8]), target=targets, seed=seeds)
def test_sliced_hbm_block_into_tile_slice(case, dtype, target, seed):
    """A (strided) block of an HBM tensor lands in the matching part of a tile; the rest is untouched."""
    (rows, cols), (rs, cs) = case
    rng = np.random.default_rng(seed)
    a = random_values(rng, (rows, cols), dtype)
    block = a[rs, cs]
    p, f = block.shape
    background = random_values(rng, (p, f + 3), dtype)

    def kernel(x, bg):
        tile = load(bg)
        nisa.dma_copy(dst=tile[:, 1 : 1 + f], src=x[rs, cs])
        return store(tile)

    expected = background.copy()
    expected[:, 1 : 1 + f] = block
    assert_bits_equal(run_kernel(kernel, [a, background], target), expected)


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@FAST
@given(
    shape=tile_shapes(max_dims=2),
    dst_dtype=st.sampled_from((*FLOATS, INT32)),
    src_dtype=st.sampled_from((*FLOATS, INT32)),
    n_adds=st.integers(1, 3),
    dst_in_hbm=st.booleans(),
    src_in_hbm=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_rmw_add_accumulates_in_float32(shape, dst_dtype, src_dtype, n_adds, dst_in_hbm, src_in_hbm, target, seed):
    """dst_rmw_op=nl.add stores dst + src computed in float32 and cast to dst's dtype, each time."""
    rng = np.random.default_rng(seed)
    if dst_dtype == INT32:
        base = rng.integers(-1000, 1000, size=shape).astype(dst_dtype)
    else:
        base = random_values(rng, shape, dst_dtype)
    adds = [random_values(rng, shape, src_dtype, scale=100.0) for _ in range(n_adds)]

    def kernel(b, *srcs):
        if dst_in_hbm:
            dst = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=dst, src=b)
        else:
            dst = load(b)
        for s in srcs:
            nisa.dma_copy(dst=dst, src=s if src_in_hbm else load(s), dst_rmw_op=nl.add)
        return dst if dst_in_hbm else store(dst)

    expected = base
    for s in adds:
        expected = ref_cast(f32(expected) + f32(s), dst_dtype)
    assert_values_equal(run_kernel(kernel, [base, *adds], target), expected)


def test_rmw_add_hand_case():
    """bf16 dst: 1 + 2^-8 rounds back to 1 (tie to even); float32 src added exactly before the cast."""
    dst0 = np.array([[1.0, 256.0, -3.0]], BF16)
    src = np.array([[2**-8, 1.0, 0.25]], np.float32)

    def kernel(d, s):
        tile = load(d)
        nisa.dma_copy(dst=tile, src=s, dst_rmw_op=nl.add)
        return store(tile)

    got = run_kernel(kernel, [dst0, src])
    np.testing.assert_array_equal(got.astype(np.float64), [[1.0, 256.0, -2.75]])


@FAST
@given(shape=tile_shapes(max_dims=2), dtype=st.sampled_from((FP32, BF16, FP16, *INTS)), target=targets, seed=seeds)
def test_sbuf_to_sbuf_and_hbm_to_hbm_copies(shape, dtype, target, seed):
    """SBUF -> SBUF and HBM -> HBM copies of one dtype are exact."""
    a = random_values(np.random.default_rng(seed), shape, dtype)

    def kernel(x):
        hbm_copy = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=hbm_copy, src=x)
        tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=load(hbm_copy))
        return hbm_copy, store(tile)

    got_hbm, got_sbuf = run_kernel(kernel, [a], target)
    assert_bits_equal(got_hbm, a)
    assert_bits_equal(got_sbuf, a)


def test_fp16_overflow_to_inf_and_float8_targets():
    """float32 -> float16 past 65504 rounds to inf (IEEE); float8 dsts round to nearest even."""
    a = np.array([[65504.0, 65520.0, 1e6, -1e6]], np.float32)

    def kernel(x):
        tile = nl.ndarray(x.shape, dtype=nl.float16, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        return store(tile)

    np.testing.assert_array_equal(run_kernel(kernel, [a]), np.array([[65504.0, np.inf, np.inf, -np.inf]], FP16))

    # e4m3 near 1: spacing 1/8, so 1.0625 is a tie -> 1.0 and 1.1875 is a tie -> 1.25.
    b = np.array([[1.0625, 1.1875, -2.3]], np.float32)

    def kernel8(x):
        tile = nl.ndarray(x.shape, dtype=nl.float8_e4m3, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        return store(tile)

    np.testing.assert_array_equal(run_kernel(kernel8, [b]).astype(np.float64), [[1.0, 1.25, -2.25]])
