"""Vector Engine tensor_reduce and memset, and operands that are views of bigger tiles.

Every expected value is computed in the test from the NKI documentation, never from nkisim.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

from .conftest import (
    BF16,
    BITVEC_INTS,
    FAST,
    FLOATS,
    FP8S,
    FP16,
    FP32,
    INT32,
    INTS,
    NUMERIC,
    PER_OP,
    assert_bits_equal,
    assert_values_equal,
    f32,
    free_shapes,
    load,
    partitions,
    random_bits,
    random_values,
    ref_cast,
    run_kernel,
    run_tile,
    seeds,
    small_values,
    store,
    targets,
    tile_shapes,
)

# -- tensor_reduce --------------------------------------------------------------------

REDUCE_EXACT = {
    "maximum": lambda x, axes: np.max(x, axis=axes),
    "minimum": lambda x, axes: np.min(x, axis=axes),
    "logical_and": lambda x, axes: np.all(x != 0, axis=axes).astype(np.float32),
    "logical_or": lambda x, axes: np.any(x != 0, axis=axes).astype(np.float32),
    "logical_xor": lambda x, axes: (np.sum(x != 0, axis=axes) % 2).astype(np.float32),
}
REDUCE_BITVEC = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}


@st.composite
def reduce_layouts(draw, max_size=256):
    """A data shape (P, *free), the reduced (trailing) axes, and keepdims."""
    p = draw(partitions)
    free = draw(free_shapes(max_dims=3, max_size=max_size))
    nfree = len(free)
    first = draw(st.integers(1, nfree))  # reduce axes first..nfree: always the trailing free axes
    axes = tuple(range(first, nfree + 1))
    as_int = len(axes) == 1 and draw(st.booleans())
    return (p, *free), (axes[0] if as_int else list(axes)), axes, draw(st.booleans())


def reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


@pytest.mark.parametrize("op", ["add", "multiply", *sorted(REDUCE_EXACT)])
@PER_OP
@given(
    layout=reduce_layouts(),
    dtype=st.sampled_from(NUMERIC),
    out=st.sampled_from((*FLOATS, INT32)),
    negate=st.booleans(),
    in_psum=st.booleans(),
    dst_psum=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_tensor_reduce_arithmetic_exact(op, layout, dtype, out, negate, in_psum, dst_psum, target, seed):
    """Arithmetic reduction over trailing free axes in float32, optional negate, cast to dst.

    Data are small integers or halves (and +-1/2 powers for multiply) so that float32
    results are exact in any order of summation.
    """
    shape, axis, axes, keepdims = layout
    rng = np.random.default_rng(seed)
    if op == "multiply":
        # few enough factors of 2 (or 1/2) that no partial product leaves the float32 range
        n_reduced = int(np.prod([shape[a] for a in axes]))
        pool = [1.0, -1.0] if n_reduced > 100 else [1.0, -1.0, 2.0, -2.0] + ([] if dtype.kind in "iu" else [0.5])
        data = rng.choice(np.array(pool), size=shape).astype(dtype)
    else:
        data = small_values(rng, shape, dtype, -8, 8)
    if len(reduced_shape(shape, axes, keepdims)) < 2:
        keepdims = True
    dst_shape = reduced_shape(shape, axes, keepdims)
    got = run_tile(
        lambda dst, x: nisa.tensor_reduce(
            dst=dst, op=getattr(nl, op), data=x, axis=axis, negate=negate, keepdims=keepdims
        ),
        [data],
        dst_shape,
        out,
        target=target,
        in_buffers=["psum" if in_psum else "sbuf"],
        out_buffer="psum" if dst_psum else "sbuf",
    )
    x64 = f32(data).astype(np.float64)
    if op == "add":
        result = np.sum(x64, axis=axes)
    elif op == "multiply":
        result = np.prod(x64, axis=axes)
    else:
        result = REDUCE_EXACT[op](x64, axes)
    result = result.astype(np.float32)
    if negate:
        result = -result
    assert_values_equal(got, ref_cast(result, out).reshape(dst_shape))


@FAST
@given(layout=reduce_layouts(max_size=512), dtype=st.sampled_from((FP32, BF16, FP16)), target=targets, seed=seeds)
def test_tensor_reduce_add_random_floats(layout, dtype, target, seed):
    """add-reduction of arbitrary floats matches a float64 sum within float32 accumulation error."""
    shape, axis, axes, _ = layout
    rng = np.random.default_rng(seed)
    data = random_values(rng, shape, dtype)
    dst_shape = reduced_shape(shape, axes, True)
    got = run_tile(
        lambda dst, x: nisa.tensor_reduce(dst=dst, op=nl.add, data=x, axis=axis, keepdims=True),
        [data],
        dst_shape,
        FP32,
        target=target,
    )
    x64 = f32(data).astype(np.float64)
    ref = np.sum(x64, axis=axes, keepdims=True)
    n = int(np.prod([shape[a] for a in axes]))
    bound = np.sum(np.abs(x64), axis=axes, keepdims=True) * n * 2.0**-24 + 1e-30
    assert np.all(np.abs(got.astype(np.float64) - ref) <= bound)


@FAST
@given(
    layout=reduce_layouts(),
    op=st.sampled_from(sorted(REDUCE_BITVEC)),
    dtype=st.sampled_from(BITVEC_INTS),
    target=targets,
    seed=seeds,
)
def test_tensor_reduce_bitvec(layout, op, dtype, target, seed):
    """bitwise_and/or/xor reductions act on integer bits without casting."""
    shape, axis, axes, keepdims = layout
    if len(reduced_shape(shape, axes, keepdims)) < 2:
        keepdims = True
    dst_shape = reduced_shape(shape, axes, keepdims)
    data = random_bits(np.random.default_rng(seed), shape, dtype)
    got = run_tile(
        lambda dst, x: nisa.tensor_reduce(dst=dst, op=getattr(nl, op), data=x, axis=axis, keepdims=keepdims),
        [data],
        dst_shape,
        dtype,
        target=target,
    )
    assert_bits_equal(got, REDUCE_BITVEC[op].reduce(data, axis=axes).reshape(dst_shape))


def test_tensor_reduce_hand_cases():
    x = np.array([[[1, 2, 3], [4, 5, 6]], [[-1, 0, 7], [2, 2, 2]]], np.float32)  # (2, 2, 3)
    got = run_tile(lambda d, s: nisa.tensor_reduce(d, nl.add, s, axis=[1, 2]), [x], (2, 1), FP32)
    np.testing.assert_array_equal(got, [[21], [12]])
    got = run_tile(lambda d, s: nisa.tensor_reduce(d, nl.maximum, s, axis=2, negate=True), [x], (2, 2), FP32)
    np.testing.assert_array_equal(got, [[-3, -6], [-7, -2]])
    got = run_tile(lambda d, s: nisa.tensor_reduce(d, nl.multiply, s, axis=[2], keepdims=True), [x], (2, 2, 1), INT32)
    np.testing.assert_array_equal(got, [[[6], [120]], [[0], [8]]])
    bits = np.array([[0b1100, 0b1010, 0b0110]], np.int32)
    got = run_tile(lambda d, s: nisa.tensor_reduce(d, nl.bitwise_xor, s, axis=1), [bits], (1, 1), INT32)
    np.testing.assert_array_equal(got, [[0b0000]])
    got = run_tile(lambda d, s: nisa.tensor_reduce(d, nl.bitwise_or, s, axis=1), [bits], (1, 1), INT32)
    np.testing.assert_array_equal(got, [[0b1110]])


# -- memset ---------------------------------------------------------------------------


@st.composite
def memset_cases(draw):
    dtype = draw(st.sampled_from((*FLOATS, *FP8S, *INTS)))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = draw(st.integers(max(int(info.min), -(2**24)), min(int(info.max), 2**24)))
    else:
        value = draw(st.floats(-200, 200, width=32) | st.sampled_from([0.0, -0.0, 1.0, 0.1]))
    return dtype, value


@FAST
@given(
    shape=tile_shapes(),
    case=memset_cases(),
    engine=st.sampled_from(["unknown", "vector", "gpsimd"]),
    in_psum=st.booleans(),
    target=targets,
)
def test_memset_fills_with_cast_constant(shape, case, engine, in_psum, target):
    """Every element becomes the constant, cast to dst's dtype (float values round to nearest even)."""
    dtype, value = case
    in_psum = in_psum and engine != "gpsimd"

    def kernel():
        tile = nl.ndarray(shape, dtype=dtype, buffer=nl.psum if in_psum else nl.sbuf)
        nisa.memset(dst=tile, value=value, engine=getattr(nisa, f"{engine}_engine"))
        return store(tile)

    got = run_kernel(kernel, [], target)
    expected = np.full(shape, value, dtype=np.int64).astype(dtype) if dtype.kind in "iu" else ref_cast(value, dtype)
    assert_values_equal(got, np.broadcast_to(expected, shape).copy())


def test_memset_part_of_a_tile():
    """memset of a view writes only that view."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)

    def kernel(x):
        tile = load(x)
        nisa.memset(dst=tile[1:3, 2:5], value=-1.5)
        return store(tile)

    expected = base.copy()
    expected[1:3, 2:5] = -1.5
    # trn2: trn1's partition-start rule (docs/checks.md) would refuse a view starting at partition 1
    np.testing.assert_array_equal(run_kernel(kernel, [base], "trn2"), expected)


# -- operands that are views of bigger tiles ------------------------------------------


@st.composite
def views(draw):
    """A legal partition range (start 0/32/64/96 by size) and a free range, maybe strided."""
    p = draw(st.integers(1, 128))
    starts = [0] if p > 64 else [0, 64] if p > 32 else [0, 32, 64, 96]
    p0 = draw(st.sampled_from([s for s in starts if s + p <= 128]))
    step = draw(st.integers(1, 2))
    f = draw(st.integers(1, 20))
    f0 = draw(st.integers(0, 40 - step * f))
    return slice(p0, p0 + p), slice(f0, f0 + step * f, step)


@FAST
@given(
    view=views(),
    instr=st.sampled_from(["tensor_tensor", "tensor_copy", "tensor_scalar", "activation", "memset", "tensor_reduce"]),
    target=targets,
    seed=seeds,
)
def test_instructions_on_tile_views(view, instr, target, seed):
    """Instructions read and write exactly the views they are given; the rest of dst is untouched."""
    ps, fs = view
    rng = np.random.default_rng(seed)
    a, b, background = (random_values(rng, (128, 40), FP32) for _ in range(3))

    def kernel(xa, xb, xc):
        ta, tb, tc = load(xa), load(xb), load(xc)
        if instr == "tensor_tensor":
            nisa.tensor_tensor(dst=tc[ps, fs], data1=ta[ps, fs], data2=tb[ps, fs], op=nl.subtract)
        elif instr == "tensor_copy":
            nisa.tensor_copy(dst=tc[ps, fs], src=ta[ps, fs])
        elif instr == "tensor_scalar":
            nisa.tensor_scalar(dst=tc[ps, fs], data=ta[ps, fs], op0=nl.multiply, operand0=tb[ps, 0:1])
        elif instr == "activation":
            nisa.activation(dst=tc[ps, fs], op=nl.relu, data=ta[ps, fs], bias=tb[ps, 39:40])
        elif instr == "memset":
            nisa.memset(dst=tc[ps, fs], value=2.5)
        else:
            nisa.tensor_reduce(dst=tc[ps, 0:1], op=nl.maximum, data=ta[ps, fs], axis=1)
        return store(tc)

    expected = background.copy()
    if instr == "tensor_tensor":
        expected[ps, fs] = a[ps, fs] - b[ps, fs]
    elif instr == "tensor_copy":
        expected[ps, fs] = a[ps, fs]
    elif instr == "tensor_scalar":
        expected[ps, fs] = a[ps, fs] * b[ps, 0:1]
    elif instr == "activation":
        expected[ps, fs] = np.maximum(a[ps, fs] + b[ps, 39:40], 0)
    elif instr == "memset":
        expected[ps, fs] = 2.5
    else:
        expected[ps, 0:1] = a[ps, fs].max(axis=1, keepdims=True)
    assert_bits_equal(run_kernel(kernel, [a, b, background], target), expected)
