"""NKI 0.3+ value-returning ``nl.*`` helpers, ``nc_matmul(accumulate=)``, ``nl.ndarray(address=)`` and ``nki.simulate``.

Every expected value is a numpy formula written here from the NKI documentation:
engines compute in float32 and cast on write (floats round to nearest even;
integers round to nearest even and saturate). Element-wise results take NKI's
promoted dtype (the "NKI Type Promotion" table of the API reference). Each helper
is also checked for the instructions it lowers to.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nl_reference import (
    BF16,
    E4M3,
    E5M2,
    FAST,
    FLOATS,
    FP16,
    FP32,
    I8,
    I16,
    I32,
    INTS,
    U8,
    U16,
    U32,
    assert_same,
    f32,
    ref_cast,
    run_helper,
    seeds,
    targets,
    tile_shapes,
    values,
)

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import ShapeError

# -- element-wise binary operators ----------------------------------------------------

BINARY = {
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x * y,
    "divide": lambda x, y: x / y,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": lambda x, y: np.power(x, y),
    "equal": lambda x, y: (x == y).astype(np.float32),
    "not_equal": lambda x, y: (x != y).astype(np.float32),
    "greater": lambda x, y: (x > y).astype(np.float32),
    "greater_equal": lambda x, y: (x >= y).astype(np.float32),
    "less": lambda x, y: (x < y).astype(np.float32),
    "less_equal": lambda x, y: (x <= y).astype(np.float32),
    "logical_and": lambda x, y: ((x != 0) & (y != 0)).astype(np.float32),
    "logical_or": lambda x, y: ((x != 0) | (y != 0)).astype(np.float32),
    "logical_xor": lambda x, y: ((x != 0) ^ (y != 0)).astype(np.float32),
}


def operands(rng, name, shape, dx, dy):
    x, y = values(rng, shape, dx), values(rng, shape, dy)
    if name == "divide":
        y = np.where(f32(y) == 0, 1, y).astype(dy)
    if name == "power":
        x = values(rng, shape, dx, 1, 4)
        y = values(rng, shape, dy, 0, 3)
    return x, y


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@pytest.mark.parametrize("name", sorted(BINARY))
@FAST
@given(shape=tile_shapes(), dtype=st.sampled_from(FLOATS + INTS), target=targets, seed=seeds)
def test_binary_tile_tile_is_one_tensor_tensor(name, shape, dtype, target, seed):
    x, y = operands(np.random.default_rng(seed), name, shape, dtype, dtype)
    out, ops = run_helper(lambda a, b: getattr(nl, name)(a, b), [x, y], target)
    assert ops == ["tensor_tensor"]
    with np.errstate(all="ignore"):
        assert_same(out, ref_cast(BINARY[name](f32(x), f32(y)), dtype))


#: Documented promotions ("NKI Type Promotion"), each pair in both orders.
PROMOTIONS = [
    (I32, FP16, FP16),
    (FP32, BF16, FP32),
    (FP16, BF16, FP32),
    (E4M3, FP16, FP16),
    (E4M3, BF16, BF16),
    (E4M3, E5M2, BF16),
    (I16, I32, I32),
    (U8, U16, U16),
    (U16, I32, I32),
    (I8, U8, I16),
    (I8, U16, I32),
    (I32, U32, FP32),
]


@pytest.mark.parametrize(("a", "b", "promoted"), PROMOTIONS + [(b, a, p) for a, b, p in PROMOTIONS])
def test_mixed_dtypes_promote(a, b, promoted):
    rng = np.random.default_rng(7)
    x, y = values(rng, (16, 8), a, 0, 6), values(rng, (16, 8), b, 0, 6)
    out, ops = run_helper(lambda p, q: nl.add(p, q), [x, y])
    assert ops == ["tensor_tensor"]
    assert_same(out, ref_cast(f32(x) + f32(y), promoted))


def test_dtype_argument_sets_the_result_type():
    x = np.full((4, 8), 1.5, np.float32)
    out, _ = run_helper(lambda a: (nl.multiply(a, a, dtype=nl.int32), nl.exp(a, dtype=nl.bfloat16)), [x])
    assert_same(out[0], np.full((4, 8), 2, np.int32))  # 2.25 rounds to 2
    assert_same(out[1], ref_cast(np.exp(f32(x)), BF16))


@FAST
@given(shape=tile_shapes(), dtype=st.sampled_from((*FLOATS, I32, I16)), scalar=st.sampled_from([2.5, -3, 0.5, 4]))
def test_tile_and_scalar_is_one_tensor_scalar_either_side(shape, dtype, scalar):
    x = values(np.random.default_rng(1), shape, dtype)
    out, ops = run_helper(lambda a: (nl.subtract(a, scalar), nl.subtract(scalar, a), nl.maximum(scalar, a)), [x])
    assert ops == ["tensor_scalar"] * 3
    # a weakly typed float turns an integer tile into float32; otherwise the tile's dtype stays
    result = FP32 if dtype.kind == "i" and isinstance(scalar, float) else dtype
    assert_same(out[0], ref_cast(f32(x) - np.float32(scalar), result))
    assert_same(out[1], ref_cast(np.float32(scalar) - f32(x), result))
    assert_same(out[2], ref_cast(np.maximum(f32(x), np.float32(scalar)), result))


@FAST
@given(p=st.integers(1, 128), f=st.integers(2, 40), dtype=st.sampled_from(FLOATS), target=targets)
def test_tile_and_column_is_tensor_scalar(p, f, dtype, target):
    """A (P, 1) column is a tensor_scalar operand; one that is not float32 is first copied to float32."""
    rng = np.random.default_rng(p * f)
    x, col = values(rng, (p, f), dtype), values(rng, (p, 1), dtype, 1, 8)
    out, ops = run_helper(lambda a, c: (nl.divide(a, c), nl.divide(c, a)), [x, col], target)
    cast_op = [] if dtype == FP32 else ["tensor_copy"]
    assert ops == [*cast_op, "tensor_scalar"] * 2
    with np.errstate(divide="ignore"):
        assert_same(out[0], ref_cast(f32(x) / f32(col), dtype))
        assert_same(out[1], ref_cast(f32(col) / f32(x), dtype))


def test_free_dims_broadcast_with_stride_zero_tensor_tensor():
    rng = np.random.default_rng(3)
    x, y = values(rng, (8, 3, 5), FP32), values(rng, (8, 3, 1), BF16)
    out, ops = run_helper(lambda a, b: nl.multiply(a, b), [x, y])
    assert ops == ["tensor_tensor"]
    assert_same(out, ref_cast(f32(x) * f32(y), FP32))


def test_two_psum_inputs_stage_one_through_sbuf():
    x = values(np.random.default_rng(4), (16, 8), FP32)

    def body(a):
        p1 = nl.ndarray(a.shape, nl.float32, buffer=nl.psum)
        p2 = nl.ndarray(a.shape, nl.float32, buffer=nl.psum)
        nisa.tensor_copy(dst=p1, src=a)
        nisa.tensor_copy(dst=p2, src=a)
        return nl.add(p1, p2)

    out, ops = run_helper(body, [x])
    assert ops == ["tensor_copy", "tensor_copy", "tensor_copy", "tensor_tensor"]
    assert_same(out, 2 * x)


BITVEC = {
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "left_shift": lambda x, y: np.left_shift(x, y.astype(x.dtype)),
    "right_shift": lambda x, y: np.right_shift(x.view(f"u{x.itemsize}"), y.astype(f"u{x.itemsize}")).view(x.dtype),
}


@pytest.mark.parametrize("name", sorted(BITVEC))
@FAST
@given(shape=tile_shapes(), dtype=st.sampled_from((I32, I16, U8, U16)), seed=seeds)
def test_bitvec_operators_act_on_bits(name, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    y = rng.integers(0, 8 * dtype.itemsize, size=shape).astype(dtype)
    out, ops = run_helper(lambda a, b: (getattr(nl, name)(a, b), getattr(nl, name)(a, 3)), [x, y])
    assert ops == ["tensor_tensor", "tensor_scalar"]
    assert_same(out[0], BITVEC[name](x, y))
    assert_same(out[1], BITVEC[name](x, np.full(shape, 3, dtype)))


@FAST
@given(shape=tile_shapes(), dtype=st.sampled_from((I32, I8, U8, U16)), seed=seeds)
def test_invert_is_xor_with_all_ones(shape, dtype, seed):
    info = np.iinfo(dtype)
    x = np.random.default_rng(seed).integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    out, ops = run_helper(lambda a: nl.invert(a), [x])
    assert ops == ["tensor_scalar"]
    assert_same(out, np.invert(x))


def test_negative_and_logical_not():
    x = np.array([[0, 1, -2.5, 3]], np.float32).repeat(4, 0)
    b = np.array([[0, 1, 1, 0]], np.float32).repeat(4, 0)
    out, ops = run_helper(lambda a, c: (nl.negative(a), nl.logical_not(c, dtype=nl.uint8)), [x, b])
    assert ops == ["tensor_scalar", "tensor_scalar"]
    assert_same(out[0], -x)
    assert_same(out[1], (b == 0).astype(np.uint8))


def test_operator_constants_still_work_as_op_arguments():
    x = values(np.random.default_rng(5), (16, 8), FP32)

    def body(a):
        dst = nl.ndarray(a.shape, nl.float32)
        nisa.tensor_tensor(dst=dst, data1=a, data2=a, op=nl.add)
        nisa.activation(dst=dst, op=nl.exp, data=dst)
        return dst

    out, ops = run_helper(body, [x])
    assert ops == ["tensor_tensor", "activation"]
    assert_same(out, np.exp(2 * x))


# -- unary: activation ----------------------------------------------------------------

UNARY = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x,
    "abs": np.abs,
    "square": np.square,
    "sign": np.sign,
    "sin": np.sin,
    "arctan": np.arctan,
    "silu": lambda x: x / (1 + np.exp(-x)),
    "softplus": lambda x: np.log1p(np.exp(x)),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "erf": np.vectorize(math.erf),
}
POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal"}


@pytest.mark.parametrize("name", sorted(UNARY))
@FAST
@given(shape=tile_shapes(), dtype=st.sampled_from(FLOATS), target=targets, seed=seeds)
def test_unary_is_one_activation(name, shape, dtype, target, seed):
    rng = np.random.default_rng(seed)
    lo = 0.25 if name in POSITIVE else -3.0
    hi = 3.0
    if name == "arctan":  # its valid range is [-pi/2, pi/2] (docs/checks.md, activation-range)
        lo, hi = -1.5, 1.5
    x = rng.uniform(lo, hi, size=shape).astype(dtype)
    out, ops = run_helper(lambda a: getattr(nl, name)(a), [x], target)
    assert ops == ["activation"]
    expected = UNARY[name](f32(x).astype(np.float64))
    # computed in float32, then rounded once to dtype: within one ulp of dtype (and float32 error)
    rtol = float(ml_dtypes.finfo(dtype).eps) + 1e-6
    assert_same(out, ref_cast(expected, dtype), rtol=rtol)


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@FAST
@given(shape=tile_shapes(), src=st.sampled_from(FLOATS + INTS), dst=st.sampled_from(FLOATS + INTS), seed=seeds)
def test_copy_is_tensor_copy_with_optional_cast(shape, src, dst, seed):
    x = values(np.random.default_rng(seed), shape, src)
    out, ops = run_helper(lambda a: (nl.copy(a), nl.copy(a, dtype=dst)), [x])
    assert ops == ["tensor_copy", "tensor_copy"]
    assert_same(out[0], x)
    assert_same(out[1], ref_cast(f32(x), dst))


# -- reductions -----------------------------------------------------------------------

REDUCTIONS = {
    "sum": (np.sum, ["tensor_reduce"]),
    "max": (np.max, ["tensor_reduce"]),
    "min": (np.min, ["tensor_reduce"]),
    "prod": (np.prod, ["tensor_reduce"]),
    "all": (lambda x, axis, keepdims: np.all(x != 0, axis=axis, keepdims=keepdims), ["tensor_reduce"]),
    "mean": (np.mean, ["tensor_reduce", "tensor_scalar"]),
}


def reduced_shape(shape, axes, keepdims):
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    if keepdims:
        return kept
    rest = tuple(d for i, d in enumerate(shape) if i not in axes)
    return rest if len(rest) >= 2 else (*rest, 1)


@st.composite
def reduction_cases(draw):
    shape = draw(tile_shapes(max_free_dims=3))
    ndim = len(shape)
    first = draw(st.integers(1, ndim - 1))
    axes = tuple(range(first, ndim))  # the last contiguous free dims, as documented
    axis = draw(st.sampled_from([axes, axes[0] if len(axes) == 1 else axes, tuple(a - ndim for a in axes)]))
    return shape, axes, axis, draw(st.booleans())


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@FAST
@given(case=reduction_cases(), dtype=st.sampled_from((*FLOATS, I32)), target=targets, seed=seeds)
def test_reductions(name, case, dtype, target, seed):
    shape, axes, axis, keepdims = case
    x = values(np.random.default_rng(seed), shape, dtype, -4, 4)
    if name == "prod":
        x = values(np.random.default_rng(seed), shape, dtype, 1, 2)  # bounded products
    formula, lowering = REDUCTIONS[name]
    out, ops = run_helper(lambda a: getattr(nl, name)(a, axis=axis, keepdims=keepdims), [x], target)
    assert ops == lowering
    expected = np.asarray(formula(f32(x).astype(np.float64), axis=axes, keepdims=True), dtype=np.float64)
    expected = ref_cast(expected, dtype).reshape(reduced_shape(shape, axes, keepdims))
    assert_same(out, expected, rtol=1e-6 if name in ("sum", "mean", "prod") else 0.0)


@FAST
@given(case=reduction_cases(), dtype=st.sampled_from(FLOATS), seed=seeds)
def test_var_is_population_variance(case, dtype, seed):
    shape, axes, axis, keepdims = case
    x = values(np.random.default_rng(seed), shape, dtype)
    out, ops = run_helper(lambda a: nl.var(a, axis=axis, keepdims=keepdims, dtype=nl.float32), [x])
    assert ops[0:2] == ["tensor_reduce", "tensor_scalar"] and ops[-2:] == ["tensor_reduce", "tensor_scalar"]
    assert len(ops) == 6 and ops[3] == "tensor_tensor"
    expected = np.var(f32(x).astype(np.float64), axis=axes, keepdims=True).reshape(reduced_shape(shape, axes, keepdims))
    assert_same(out, expected.astype(np.float32), rtol=1e-5)


@pytest.mark.parametrize("keepdims", [False, True])
def test_a_reduction_over_axes_apart_reads_them_last(keepdims):
    # average pooling: [C, H/2, 2, W/2, 2] reduced over the two window axes, 2 and 4
    x = values(np.random.default_rng(4), (16, 3, 2, 5, 2), FP32)
    out, ops = run_helper(lambda a: nl.sum(a, axis=[4, 2], keepdims=keepdims), [x])
    assert ops == ["tensor_reduce"]
    assert_same(out, x.astype(np.float64).sum(axis=(2, 4), keepdims=keepdims).astype(np.float32), rtol=1e-6)


def test_softmax_over_axes_apart():
    x = values(np.random.default_rng(6), (8, 3, 4, 5), FP32)
    out, _ = run_helper(lambda a: nl.softmax(a, axis=(1, 3)), [x])
    shifted = np.exp(x.astype(np.float64) - x.max(axis=(1, 3), keepdims=True))
    assert_same(out, (shifted / shifted.sum(axis=(1, 3), keepdims=True)).astype(np.float32), rtol=1e-5)


def test_reduction_result_dtype_and_bad_axes():
    x = values(np.random.default_rng(9), (8, 6), BF16)
    out, _ = run_helper(lambda a: nl.sum(a, axis=1, dtype=nl.float32), [x])
    assert_same(out, f32(x).sum(axis=1, keepdims=True), rtol=1e-6)
    with pytest.raises(ShapeError, match=r"nl\.sum \[trn1\]: axis 0 must name free dims"):
        run_helper(lambda a: nl.sum(a, axis=0), [x])
    with pytest.raises(ShapeError, match=r"axis 2 must name free dims"):
        run_helper(lambda a: nl.max(a, axis=2), [x])


# -- softmax, rms_norm ----------------------------------------------------------------


@FAST
@given(
    shape=st.tuples(st.integers(1, 128), st.integers(2, 64)), dtype=st.sampled_from(FLOATS), target=targets, seed=seeds
)
def test_softmax_over_the_free_dim(shape, dtype, target, seed):
    x = np.random.default_rng(seed).normal(0, 3, size=shape).astype(dtype)
    out, ops = run_helper(lambda a: nl.softmax(a, axis=1), [x], target)
    assert ops == ["tensor_reduce", "activation", "tensor_scalar"]
    e = np.exp(f32(x).astype(np.float64) - f32(x).max(axis=1, keepdims=True))
    assert_same(out, ref_cast(e / e.sum(axis=1, keepdims=True), dtype), rtol=float(ml_dtypes.finfo(dtype).eps) + 1e-6)


def test_softmax_over_the_last_of_two_free_dims():
    x = np.random.default_rng(2).normal(0, 2, size=(16, 4, 10)).astype(np.float32)
    out, ops = run_helper(lambda a: nl.softmax(a), [x])
    assert ops == ["tensor_reduce", "tensor_tensor", "activation", "tensor_reduce", "tensor_tensor"]
    e = np.exp(x.astype(np.float64) - x.max(axis=2, keepdims=True))
    assert_same(out, (e / e.sum(axis=2, keepdims=True)).astype(np.float32), rtol=1e-6)


def test_rms_norm():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(32, 64)).astype(np.float32)
    w = rng.normal(size=(32, 64)).astype(np.float32)
    out, ops = run_helper(lambda a, b: nl.rms_norm(a, b, axis=1, n=64, epsilon=1e-3), [x, w])
    assert ops == ["tensor_tensor", "tensor_reduce", "tensor_scalar", "activation", "tensor_scalar", "tensor_tensor"]
    x64 = x.astype(np.float64)
    expected = x64 / np.sqrt((x64**2).sum(axis=1, keepdims=True) / 64 + 1e-3) * w
    assert_same(out, expected.astype(np.float32), rtol=1e-5)


# -- matmul, transpose, broadcast_to, where -------------------------------------------


@FAST
@given(
    k=st.integers(1, 128),
    m=st.integers(1, 128),
    n=st.integers(1, 512),
    dtype=st.sampled_from((FP32, BF16, FP16)),
    transpose_x=st.booleans(),
    target=targets,
)
def test_matmul(k, m, n, dtype, transpose_x, target):
    rng = np.random.default_rng(k * m + n)
    x = values(rng, (k, m) if transpose_x else (m, k), dtype)
    y = values(rng, (k, n), dtype)

    def body(a, b):
        result = nl.matmul(a, b, transpose_x=transpose_x)
        assert result.buffer == nl.psum and result.dtype == nl.float32
        return result

    out, ops = run_helper(body, [x, y], target)
    assert ops == (["nc_matmul"] if transpose_x else ["nc_transpose", "tensor_copy", "nc_matmul"])
    lhs = f32(x).T if transpose_x else f32(x)
    assert_same(out, (lhs.astype(np.float64) @ f32(y)).astype(np.float32), rtol=1e-6)


def test_matmul_contraction_mismatch():
    x, y = np.ones((64, 32), np.float32), np.ones((64, 16), np.float32)
    with pytest.raises(ShapeError, match=r"nl\.matmul \[trn1\]: x's free dim 32 must match y's partition dim 64"):
        run_helper(lambda a, b: nl.matmul(a, b), [x, y])


@FAST
@given(p=st.integers(1, 128), f=st.integers(1, 128), dtype=st.sampled_from((*FLOATS, I32)))
def test_transpose_is_nc_transpose_into_psum(p, f, dtype):
    x = values(np.random.default_rng(p + f), (p, f), dtype)

    def body(a):
        t = nl.transpose(a)
        assert t.buffer == nl.psum
        return t, nl.transpose(a, dtype=nl.float32)

    out, ops = run_helper(body, [x])
    assert ops == ["nc_transpose", "nc_transpose"] + ([] if dtype == FP32 else ["tensor_copy"])
    assert_same(out[0], x.T)
    assert_same(out[1], f32(x).T)


def test_broadcast_to():
    rng = np.random.default_rng(6)
    col, row = values(rng, (16, 1), BF16), values(rng, (1, 24), FP32)
    out, ops = run_helper(
        lambda c, r: (nl.broadcast_to(c, (16, 24)), nl.broadcast_to(r, (16, 24), dtype=nl.float16)), [col, row]
    )
    assert ops == ["tensor_copy", "dma_copy"]
    assert_same(out[0], np.broadcast_to(col, (16, 24)))
    assert_same(out[1], np.broadcast_to(row, (16, 24)).astype(FP16))
    same, ops = run_helper(lambda c: nl.broadcast_to(c, (16, 1)), [col])
    assert ops == [] and np.array_equal(same, col)
    with pytest.raises(ShapeError, match=r"cannot broadcast shape \[16, 1\] to \[16, 2, 3\]"):
        run_helper(lambda c: nl.broadcast_to(c, (16, 2, 3)), [col])


def test_where_selects_bits_without_mixing_the_other_side():
    rng = np.random.default_rng(8)
    cond = rng.integers(0, 2, size=(32, 16)).astype(np.float32)
    x = rng.normal(size=(32, 16)).astype(np.float32)
    y = np.where(rng.random((32, 16)) < 0.5, np.inf, np.nan).astype(np.float32)
    out, ops = run_helper(lambda c, a, b: (nl.where(c, a, b), nl.where(c, a, 0.0), nl.where(c, 2.0, a)), [cond, x, y])
    select = ["tensor_scalar", "tensor_copy", "tensor_copy_predicated"]  # predicate, y, x where it holds
    assert ops == [*select, "tensor_scalar", "memset", "tensor_copy_predicated", *select]
    np.testing.assert_array_equal(out[0].view(np.uint32), np.where(cond != 0, x, y).view(np.uint32))
    assert_same(out[1], np.where(cond != 0, x, 0).astype(np.float32))
    assert_same(out[2], np.where(cond != 0, 2, x).astype(np.float32))
