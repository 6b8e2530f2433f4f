"""Vector Engine instructions: tensor_copy, tensor_tensor, tensor_scalar, tensor_reduce, memset.

Where an instruction also runs on the Scalar or GpSimd Engine, the engine is a parameter.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import nkisim.nki as nki
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
    INT8,
    INT16,
    INT32,
    NUMERIC,
    PER_OP,
    UINT8,
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


def bools(x):
    return (x != 0).astype(np.float32)


ARITH = {
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x * y,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": lambda x, y: (x == y).astype(np.float32),
    "not_equal": lambda x, y: (x != y).astype(np.float32),
    "greater": lambda x, y: (x > y).astype(np.float32),
    "greater_equal": lambda x, y: (x >= y).astype(np.float32),
    "less": lambda x, y: (x < y).astype(np.float32),
    "less_equal": lambda x, y: (x <= y).astype(np.float32),
    "logical_and": lambda x, y: bools(x) * bools(y),
    "logical_or": lambda x, y: np.maximum(bools(x), bools(y)),
    "logical_xor": lambda x, y: (bools(x) != bools(y)).astype(np.float32),
}


def shift_left(x, y):
    u = np.dtype(f"u{x.dtype.itemsize}")
    return (x.view(u) << np.asarray(y).astype(u)).view(x.dtype)


def shift_right_logical(x, y):
    u = np.dtype(f"u{x.dtype.itemsize}")
    return (x.view(u) >> np.asarray(y).astype(u)).view(x.dtype)


BITVEC = {
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "left_shift": shift_left,
    "right_shift": shift_right_logical,
}


SHIFTS = ("left_shift", "right_shift")


def arith_data(rng, shape, dtype, mode):
    """Small exact values (so comparisons and ties happen) or ordinary random values."""
    if mode == "small":
        return small_values(rng, shape, dtype, -6, 6)
    return random_values(rng, shape, dtype)


# -- tensor_copy ----------------------------------------------------------------------


@FAST
@given(
    shape=tile_shapes(),
    dtype=st.sampled_from((*FLOATS, *FP8S, *BITVEC_INTS)),
    engine=st.sampled_from(["unknown", "vector", "gpsimd"]),
    target=targets,
    seed=seeds,
)
def test_tensor_copy_same_dtype_is_bit_exact(shape, dtype, engine, target, seed):
    """Equal dtypes: a bit-accurate copy (NaN payloads, -0.0 and large int32 survive)."""
    a = random_bits(np.random.default_rng(seed), shape, dtype)
    got = run_tile(
        lambda dst, src: nisa.tensor_copy(dst=dst, src=src, engine=getattr(nisa, f"{engine}_engine")),
        [a],
        shape,
        dtype,
        target=target,
    )
    assert_bits_equal(got, a)


@FAST
@given(
    shape=tile_shapes(), dtype=st.sampled_from((*FLOATS, *FP8S)), target=st.sampled_from(["trn2", "trn3"]), seed=seeds
)
def test_tensor_copy_scalar_engine_same_dtype(shape, dtype, target, seed):
    """NeuronCore-v3+ Scalar Engine tensor_copy of finite floats with one dtype keeps every value."""
    a = random_values(np.random.default_rng(seed), shape, dtype)
    got = run_tile(
        lambda dst, src: nisa.tensor_copy(dst=dst, src=src, engine=nisa.scalar_engine), [a], shape, dtype, target=target
    )
    assert_bits_equal(got, a)


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@FAST
@given(
    shape=tile_shapes(),
    src=st.sampled_from(NUMERIC),
    dst=st.sampled_from((*NUMERIC, INT16, UINT8)),
    engine=st.sampled_from(["vector", "gpsimd", "scalar"]),
    target=targets,
    seed=seeds,
)
def test_tensor_copy_cast_goes_through_float32(shape, src, dst, engine, target, seed):
    """Different dtypes: src -> float32 -> dst with RNE, saturation and NaN -> 0."""
    assume(src != dst)
    assume(not (engine == "scalar" and target == "trn1"))
    rng = np.random.default_rng(seed)
    a = random_values(rng, shape, src, scale=300.0)
    if dst in FP8S:
        a = np.clip(f32(a), -200, 200).astype(src)
    if src in (FP32, BF16, FP16) and dst not in FP8S:
        flat = a.reshape(-1)
        flat[rng.integers(0, flat.size, size=3)] = np.array([np.nan, np.inf, 2.5], np.float32).astype(src)
    got = run_tile(
        lambda d, s: nisa.tensor_copy(dst=d, src=s, engine=getattr(nisa, f"{engine}_engine")),
        [a],
        shape,
        dst,
        target=target,
    )
    assert_values_equal(got, ref_cast(f32(a), dst))


@FAST
@given(
    p=partitions,
    free=free_shapes(max_dims=3, max_size=256),
    dtype=st.sampled_from((FP32, BF16, INT32)),
    where=st.sampled_from(["src", "dst", "both"]),
    target=targets,
    seed=seeds,
)
def test_tensor_copy_psum_and_reshaped_free_dims(p, free, dtype, where, target, seed):
    """PSUM tiles work on the Vector Engine; only elements per partition must match, in row-major order."""
    a = random_values(np.random.default_rng(seed), (p, *free), dtype)
    flat = (p, int(np.prod(free)))
    got = run_tile(
        lambda dst, src: nisa.tensor_copy(dst=dst, src=src),
        [a],
        flat,
        dtype,
        target=target,
        in_buffers=["psum" if where in ("src", "both") else "sbuf"],
        out_buffer="psum" if where in ("dst", "both") else "sbuf",
    )
    assert_bits_equal(got, a.reshape(flat))


# -- tensor_tensor --------------------------------------------------------------------


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@pytest.mark.parametrize("op", sorted(ARITH))
@PER_OP
@given(
    shape=tile_shapes(),
    d1=st.sampled_from(NUMERIC),
    d2=st.sampled_from(NUMERIC),
    out=st.sampled_from((*FLOATS, INT32, INT8)),
    psum_input=st.sampled_from([None, 0, 1]),
    dst_psum=st.booleans(),
    mode=st.sampled_from(["small", "random"]),
    target=targets,
    seed=seeds,
)
def test_tensor_tensor_arithmetic(op, shape, d1, d2, out, psum_input, dst_psum, mode, target, seed):
    """dst = op(data1, data2) in float32, cast to dst's dtype; one input and dst may be in PSUM."""
    # all-int32 tiles outside PSUM go to GpSimd's integer ALU instead (tests/isa/test_gpsimd.py)
    assume(not (d1 == d2 == out == INT32 and psum_input is None and not dst_psum))
    rng = np.random.default_rng(seed)
    a = arith_data(rng, shape, d1, mode)
    b = arith_data(rng, shape, d2, mode)
    buffers = ["sbuf", "sbuf"]
    if psum_input is not None:
        buffers[psum_input] = "psum"
    got = run_tile(
        lambda dst, x, y: nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=getattr(nl, op)),
        [a, b],
        shape,
        out,
        target=target,
        in_buffers=buffers,
        out_buffer="psum" if dst_psum else "sbuf",
    )
    with np.errstate(all="ignore"):
        expected = ref_cast(ARITH[op](f32(a), f32(b)), out)
    assert_values_equal(got, expected)


@FAST
@given(
    p=partitions,
    free=free_shapes(max_dims=2, max_size=128),
    free2=st.booleans(),
    op=st.sampled_from(["add", "multiply", "subtract"]),
    target=targets,
    seed=seeds,
)
def test_tensor_tensor_inputs_need_only_equal_elements_per_partition(p, free, free2, op, target, seed):
    """data1 [P, a, b] with data2 [P, a*b]: element-wise in row-major order within each partition."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(free))
    a = random_values(rng, (p, *free), FP32)
    b = random_values(rng, (p, n), BF16)
    out_shape = (p, n) if free2 else (p, *free)
    got = run_tile(
        lambda dst, x, y: nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=getattr(nl, op)),
        [a, b],
        out_shape,
        FP32,
        target=target,
    )
    expected = ARITH[op](f32(a).reshape(p, n), f32(b)).reshape(out_shape)
    assert_values_equal(got, expected)


@pytest.mark.parametrize("op", sorted(BITVEC))
@PER_OP
@given(
    shape=tile_shapes(),
    dtype=st.sampled_from(BITVEC_INTS),
    engine=st.sampled_from(["unknown", "vector"]),
    target=targets,
    seed=seeds,
)
def test_tensor_tensor_bitvec(op, shape, dtype, engine, target, seed):
    """Bitvec operators act on the integer bits with no cast; right_shift is logical."""
    rng = np.random.default_rng(seed)
    a = random_bits(rng, shape, dtype)
    if op in SHIFTS:
        b = rng.integers(0, 8 * dtype.itemsize, size=shape).astype(dtype)
    else:
        b = random_bits(rng, shape, dtype)
    got = run_tile(
        lambda dst, x, y: nisa.tensor_tensor(
            dst=dst, data1=x, data2=y, op=getattr(nl, op), engine=getattr(nisa, f"{engine}_engine")
        ),
        [a, b],
        shape,
        dtype,
        target=target,
    )
    assert_bits_equal(got, BITVEC[op](a, b))


def test_tensor_tensor_bitvec_hand_cases():
    """int32 -8 >> 1 is logical (0x7FFFFFFC); int8 1 << 7 wraps to -128; & | ^ on bits."""
    a = np.array([[-8, 1, 0x0F0F0F0F, -1]], np.int32)
    b = np.array([[1, 31, 4, 28]], np.int32)
    for op, expected in {
        "right_shift": [0x7FFFFFFC, 0, 0x00F0F0F0, 0xF],
        "left_shift": [-16, -(2**31), -252645136, -(2**28)],
        "bitwise_and": [0, 1, 4, 28],
        "bitwise_xor": [-7, 30, 0x0F0F0F0B, -29],
    }.items():
        got = run_tile(lambda dst, x, y, op=op: nisa.tensor_tensor(dst, x, y, getattr(nl, op)), [a, b], a.shape, INT32)
        np.testing.assert_array_equal(got, np.array([expected], np.int64).astype(np.int32), err_msg=op)

    c = np.array([[1, 3, -1]], np.int8)
    d = np.array([[7, 6, 4]], np.int8)
    got = run_tile(lambda dst, x, y: nisa.tensor_tensor(dst, x, y, nl.left_shift), [c, d], c.shape, INT8)
    np.testing.assert_array_equal(got, np.array([[-128, -64, -16]], np.int8))


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
def test_tensor_tensor_arithmetic_hand_cases():
    """On the Vector Engine int32 inputs are cast to float32 (2^24 + 1 -> 2^24); results round to even when
    cast back."""
    a = np.array([[2**24 + 1, 3, 5, -3, 7]], np.int32)
    b = np.array([[0, 2, 2, 2, -7]], np.int32)
    got = run_tile(
        lambda dst, x, y: nisa.tensor_tensor(dst, x, y, nl.add, engine=nisa.vector_engine), [a, b], a.shape, INT32
    )
    np.testing.assert_array_equal(got, [[2**24, 5, 7, -1, 0]])
    half = np.array([[0.5, 0.5, 0.5, 0.5, 0.5]], np.float32)
    got = run_tile(lambda dst, x, y: nisa.tensor_tensor(dst, x, y, nl.multiply), [a, half], a.shape, INT32)
    # 2^24 * 0.5 = 2^23; 1.5 -> 2; 2.5 -> 2; -1.5 -> -2; 3.5 -> 4
    np.testing.assert_array_equal(got, [[2**23, 2, 2, -2, 4]])
    got = run_tile(lambda dst, x, y: nisa.tensor_tensor(dst, x, y, nl.multiply), [a, a], a.shape, INT8)
    np.testing.assert_array_equal(got, [[127, 9, 25, 9, 49]])


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@FAST
@given(
    shape=tile_shapes(max_dims=2, max_size=128),
    op=st.sampled_from(["add", "multiply", "maximum", "subtract"]),
    target=targets,
    seed=seeds,
)
def test_tensor_tensor_int32_on_vector(shape, op, target, seed):
    """On the Vector Engine (asked for) int32 tiles get float32 arithmetic, rounded back to int32."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-(2**20), 2**20, size=shape).astype(INT32)
    b = rng.integers(-(2**20), 2**20, size=shape).astype(INT32)
    got = run_tile(
        lambda dst, x, y: nisa.tensor_tensor(dst=dst, data1=x, data2=y, op=getattr(nl, op), engine=nisa.vector_engine),
        [a, b],
        shape,
        INT32,
        target=target,
    )
    assert_values_equal(got, ref_cast(ARITH[op](f32(a), f32(b)), INT32))


# -- tensor_scalar --------------------------------------------------------------------

SCALAR_OK_PAIRS = [("multiply", "add"), ("multiply", None), ("add", None)]


def apply(op, x, operand, reverse):
    return op(operand, x) if reverse else op(x, operand)


@st.composite
def tensor_scalar_cases(draw):
    target = draw(targets)
    engine = draw(st.sampled_from(["vector", "scalar", "unknown"]))
    if engine == "scalar":
        op0, op1 = draw(st.sampled_from(SCALAR_OK_PAIRS))
    else:
        op0 = draw(st.sampled_from(sorted(ARITH)))
        op1 = draw(st.sampled_from([None, *sorted(ARITH)]))
    return {
        "target": target,
        "engine": engine,
        "op0": op0,
        "op1": op1,
        "reverse0": draw(st.booleans()),
        "reverse1": draw(st.booleans()),
        "vec0": draw(st.booleans()),
        "vec1": draw(st.booleans()),
        "imm0": draw(st.sampled_from([0.0, 1.0, -2.5, 0.1, 3.0, 1e-3])),
        "imm1": draw(st.sampled_from([0.0, 0.5, -1.0, 7.25, 0.3])),
        "psum_operands": draw(st.booleans()),
        "psum_dst": draw(st.booleans()),
    }


@FAST
@given(
    shape=tile_shapes(),
    case=tensor_scalar_cases(),
    dtype=st.sampled_from(NUMERIC),
    out=st.sampled_from((*FLOATS, INT32, INT8)),
    mode=st.sampled_from(["small", "random"]),
    seed=seeds,
)
def test_tensor_scalar_arithmetic(shape, case, dtype, out, mode, seed):
    """dst = (data op0 operand0) op1 operand1 in float32; reverse swaps an operator's inputs.

    Operands are float32 scalars or (P, 1) float32 tiles broadcast along the free dims.
    """
    rng = np.random.default_rng(seed)
    p = shape[0]
    data = arith_data(rng, shape, dtype, mode)
    col0 = small_values(rng, (p, 1), FP32, -6, 6)
    col1 = random_values(rng, (p, 1), FP32)
    op0, op1 = case["op0"], case["op1"]
    inputs = [data, col0, col1]

    def body(dst, x, c0, c1):
        nisa.tensor_scalar(
            dst=dst,
            data=x,
            op0=getattr(nl, op0),
            operand0=c0 if case["vec0"] else case["imm0"],
            reverse0=case["reverse0"],
            op1=getattr(nl, op1) if op1 else None,
            operand1=(c1 if case["vec1"] else case["imm1"]) if op1 else None,
            reverse1=case["reverse1"],
            engine=getattr(nisa, f"{case['engine']}_engine"),
        )

    got = run_tile(
        body,
        inputs,
        shape,
        out,
        target=case["target"],
        in_buffers=["sbuf", "psum" if case["psum_operands"] else "sbuf", "sbuf"],
        out_buffer="psum" if case["psum_dst"] else "sbuf",
    )

    rows = f32(data).reshape(p, -1)
    s0 = col0 if case["vec0"] else np.float32(case["imm0"])
    s1 = col1 if case["vec1"] else np.float32(case["imm1"])
    with np.errstate(all="ignore"):
        result = apply(ARITH[op0], rows, s0, case["reverse0"])
        if op1:
            result = apply(ARITH[op1], result, s1, case["reverse1"])
    assert_values_equal(got, ref_cast(result, out).reshape(shape))


def test_tensor_scalar_hand_cases():
    """(x * 0.5) rounds half to even into int32; reverse subtract computes operand - data."""
    x = np.array([[1, 3, 5, -3, -5, 7]], np.int32)
    got = run_tile(lambda d, s: nisa.tensor_scalar(d, s, nl.multiply, 0.5), [x], x.shape, INT32)
    np.testing.assert_array_equal(got, [[0, 2, 2, -2, -2, 4]])
    got = run_tile(
        lambda d, s: nisa.tensor_scalar(d, s, nl.subtract, 10.0, reverse0=True, op1=nl.multiply, operand1=2.0),
        [x],
        x.shape,
        FP32,
    )
    np.testing.assert_array_equal(got, [[18, 14, 10, 26, 30, 6]])
    got = run_tile(
        lambda d, s: nisa.tensor_scalar(d, s, nl.add, 1.0, op1=nl.subtract, operand1=100.0, reverse1=True),
        [x],
        x.shape,
        FP32,
    )
    np.testing.assert_array_equal(got, [[98, 96, 94, 102, 104, 92]])
    # (P, 1) operands: one value per partition.
    y = np.arange(6, dtype=np.float32).reshape(3, 2)
    col = np.array([[1.0], [10.0], [100.0]], np.float32)
    got = run_tile(
        lambda d, s, c: nisa.tensor_scalar(d, s, nl.multiply, c, op1=nl.maximum, operand1=15.0), [y, col], y.shape, FP32
    )
    np.testing.assert_array_equal(got, [[15, 15], [20, 30], [400, 500]])


@st.composite
def bitvec_scalar_cases(draw):
    dtype = draw(st.sampled_from(BITVEC_INTS))
    op0 = draw(st.sampled_from(sorted(BITVEC)))
    op1 = draw(st.sampled_from([None, *sorted(BITVEC)]))
    bits = 8 * dtype.itemsize
    info = np.iinfo(dtype)

    def operand(op):
        if op in SHIFTS:
            return draw(st.integers(0, bits - 1))
        return draw(st.integers(int(info.min), int(info.max)))

    return {
        "dtype": dtype,
        "op0": op0,
        "op1": op1,
        "imm0": operand(op0),
        "imm1": operand(op1) if op1 else None,
        "vec0": draw(st.booleans()),
        "vec1": draw(st.booleans()),
        # reversing a shift would shift the operand by the data; only commutative ops are reversed
        "reverse0": op0 not in SHIFTS and draw(st.booleans()),
        "reverse1": op1 is not None and op1 not in SHIFTS and draw(st.booleans()),
    }


@FAST
@given(shape=tile_shapes(), case=bitvec_scalar_cases(), target=targets, seed=seeds)
def test_tensor_scalar_bitvec(shape, case, target, seed):
    """Bitvec tensor_scalar on integer tiles: bit operations with integer scalars or (P, 1) tiles, no cast."""
    rng = np.random.default_rng(seed)
    dtype, p = case["dtype"], shape[0]
    data = random_bits(rng, shape, dtype)
    bits = 8 * dtype.itemsize

    def column(op):
        if op in SHIFTS:
            return rng.integers(0, bits, size=(p, 1)).astype(dtype)
        return random_bits(rng, (p, 1), dtype)

    col0 = column(case["op0"])
    col1 = column(case["op1"]) if case["op1"] else col0

    def body(dst, x, c0, c1):
        nisa.tensor_scalar(
            dst=dst,
            data=x,
            op0=getattr(nl, case["op0"]),
            operand0=c0 if case["vec0"] else case["imm0"],
            reverse0=case["reverse0"],
            op1=getattr(nl, case["op1"]) if case["op1"] else None,
            operand1=(c1 if case["vec1"] else case["imm1"]) if case["op1"] else None,
            reverse1=case["reverse1"],
            engine=nisa.vector_engine,
        )

    got = run_tile(body, [data, col0, col1], shape, dtype, target=target)

    def operand(vec, col, imm):
        return col if vec else np.array(imm).astype(dtype)

    rows = data.reshape(p, -1)
    result = apply(BITVEC[case["op0"]], rows, operand(case["vec0"], col0, case["imm0"]), case["reverse0"])
    if case["op1"]:
        result = apply(BITVEC[case["op1"]], result, operand(case["vec1"], col1, case["imm1"]), case["reverse1"])
    assert_bits_equal(got, result.astype(dtype).reshape(shape))


@FAST
@given(
    shape=tile_shapes(max_dims=2),
    op=st.sampled_from(["abs", "reciprocal"]),
    imm=st.sampled_from([0.0, 1.0, -3.0]),
    dtype=st.sampled_from(FLOATS),
    target=targets,
    seed=seeds,
)
def test_tensor_scalar_unary_operators_ignore_operand(shape, op, imm, dtype, target, seed):
    """Unary ALU operators (abs, reciprocal) apply to data; their operand is ignored."""
    rng = np.random.default_rng(seed)
    data = random_values(rng, shape, dtype)
    data = np.where(np.abs(f32(data)) < 1e-3, np.float32(1.0), f32(data)).astype(dtype)
    got = run_tile(
        lambda d, s: nisa.tensor_scalar(dst=d, data=s, op0=getattr(nl, op), operand0=imm),
        [data],
        shape,
        FP32,
        target=target,
    )
    x = f32(data).astype(np.float64)
    expected = np.abs(x) if op == "abs" else 1.0 / x
    np.testing.assert_allclose(got, expected.astype(np.float32), rtol=1e-6, atol=0)


@pytest.mark.filterwarnings("ignore::nkisim.CheckWarning")  # overlapping operands on purpose
@FAST
@given(
    op=st.sampled_from(["add", "multiply", "subtract", "maximum", "divide"]),
    shift=st.integers(-3, 3),
    target=targets,
    seed=seeds,
)
def test_tensor_tensor_float32_in_place_and_overlapping_reads_the_old_values(op, shift, target, seed):
    """dst over data1 (in place) or shifted along the free dim over it: every input is read before any write."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    y = rng.standard_normal((8, 16)).astype(np.float32)
    lo, hi = max(shift, 0), 16 + min(shift, 0)
    width = hi - lo

    @nki.jit
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        xt, yt = load(a), load(b)
        nisa.tensor_tensor(
            dst=xt[:, lo - shift : hi - shift], data1=xt[:, lo:hi], data2=yt[:, :width], op=getattr(nl, op)
        )
        nisa.dma_copy(dst=out, src=xt)
        return out

    got = run_kernel(kernel, [x, y], target)
    fn = {"add": np.add, "multiply": np.multiply, "subtract": np.subtract, "maximum": np.maximum}.get(op, np.divide)
    expected = x.copy()
    with np.errstate(all="ignore"):
        expected[:, lo - shift : hi - shift] = fn(x[:, lo:hi], y[:, :width])
    assert_bits_equal(got, expected)


@pytest.mark.filterwarnings("ignore::nkisim.CheckWarning")  # overlapping operands on purpose
@FAST
@given(
    op0=st.sampled_from(["add", "multiply", "subtract", "divide", "maximum"]),
    op1=st.sampled_from([None, "add", "subtract", "multiply", "minimum"]),
    reverse0=st.booleans(),
    reverse1=st.booleans(),
    column=st.sampled_from(["scalar", "other", "dst"]),
    target=targets,
    seed=seeds,
)
def test_tensor_scalar_float32_reads_its_operands_before_writing(op0, op1, reverse0, reverse1, column, target, seed):
    """dst is data (in place); the per-partition operands are a scalar, another tile's column, or dst's own column."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    c = rng.standard_normal((8, 1)).astype(np.float32)
    fns = {"add": np.add, "multiply": np.multiply, "subtract": np.subtract, "divide": np.divide}
    fns |= {"maximum": np.maximum, "minimum": np.minimum}

    @nki.jit
    def kernel(a, col):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        xt, ct = load(a), load(col)
        operand = {"scalar": 1.75, "other": ct, "dst": xt[:, 3:4]}[column]
        nisa.tensor_scalar(
            dst=xt, data=xt, op0=getattr(nl, op0), operand0=operand, reverse0=reverse0,
            op1=None if op1 is None else getattr(nl, op1), operand1=None if op1 is None else operand,
            reverse1=reverse1,
        )  # fmt: skip
        nisa.dma_copy(dst=out, src=xt)
        return out

    got = run_kernel(kernel, [x, c], target)
    y = {"scalar": np.float32(1.75), "other": c, "dst": x[:, 3:4].copy()}[column]
    with np.errstate(all="ignore"):
        expected = fns[op0](y, x) if reverse0 else fns[op0](x, y)
        if op1 is not None:
            expected = fns[op1](y, expected) if reverse1 else fns[op1](expected, y)
    assert_bits_equal(got, expected.astype(np.float32))


@pytest.mark.filterwarnings("ignore::nkisim.CheckWarning")
@pytest.mark.parametrize("case", ["dst is data1", "dst apart, inputs reversed"])
def test_tensor_tensor_into_a_view_that_writes_each_row_element_eight_times(case):
    """A dst access pattern of step 0 writes one element of a row eight times: which result stays is numpy's
    ufunc's order over the free dim (forward here, reversed with reversed inputs), which the compiled loop for
    float32 must not change."""
    x = np.arange(1, 33, dtype=np.float32).reshape(4, 8)
    y = np.arange(32, dtype=np.float32).reshape(4, 8) * 100

    @nki.jit
    def kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t, u, d = load(a), load(b), load(b)
        if case == "dst is data1":
            v = t.ap([[8, 4], [0, 8]], offset=0)
            nisa.tensor_tensor(dst=v, data1=v, data2=u, op=nl.add)
            nisa.dma_copy(dst=out, src=t)
        else:
            v = d.ap([[8, 4], [0, 8]], offset=0)
            nisa.tensor_tensor(
                dst=v, data1=t.ap([[8, 4], [-1, 8]], offset=7), data2=u.ap([[8, 4], [-1, 8]], offset=7), op=nl.add
            )
            nisa.dma_copy(dst=out, src=d)
        return out

    got = run_kernel(kernel, [x, y], "trn2")
    t, u, d = x.copy(), y.copy(), y.copy()
    column = np.lib.stride_tricks.as_strided
    if case == "dst is data1":
        v = column(t, shape=(4, 8), strides=(32, 0))
        np.add(v, u, out=v)
        expected = t
    else:
        np.add(t[:, ::-1], u[:, ::-1], out=column(d, shape=(4, 8), strides=(32, 0)))
        expected = d
    assert_bits_equal(got, expected)


@pytest.mark.parametrize("at", [0, 3, 8])
@pytest.mark.parametrize("in_place", [False, True])
def test_tensor_tensor_float32_on_a_view_at_a_run_time_offset(at, in_place):
    """data1 (and dst, in place) a view whose free offset is read from a tile when the instruction runs."""
    x = np.arange(64, dtype=np.float32).reshape(4, 16) / 8
    y = np.full((4, 8), 100.25, np.float32)

    @nki.jit
    def kernel(a, b, s):
        where = load(s)
        t, u = load(a), load(b)
        view = t.ap([[16, 4], [1, 8]], offset=0, scalar_offset=where, indirect_dim=1)
        if in_place:
            nisa.tensor_tensor(dst=view, data1=view, data2=u, op=nl.subtract)
            return store(t)
        d = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=d, data1=view, data2=u, op=nl.subtract)
        return store(d)

    got = run_kernel(kernel, [x, y, np.array([[at]], np.int32)], "trn2")
    if in_place:
        expected = x.copy()
        expected[:, at : at + 8] = x[:, at : at + 8] - y
    else:
        expected = x[:, at : at + 8] - y
    assert_bits_equal(got, expected)
