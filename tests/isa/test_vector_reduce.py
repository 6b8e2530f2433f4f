"""Vector Engine reductions, scans and fused arithmetic; the GpSimd partition reduce; activation_reduce.

Expected values port the NKI 0.2 pseudo-code to numpy in this file: engines compute in
float32 and cast on write; scans run element by element in float32, so they are
compared bit for bit. The numba scan kernels are checked against their plain-numpy
references for every pair of arithmetic operators.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.isa import OPS
from nkisim.isa.kernels import (
    ALU_CODES,
    BINARY_F32_CODES,
    binary_f32,
    cumulative_kernel,
    tensor_tensor_scan_kernel,
    tensor_tensor_scan_reference,
)
from nkisim.isa.kernels import (
    cumulative_reference as cumulative_kernel_reference,
)

from .conftest import (
    BF16,
    FAST,
    FP8_E4M3,
    FP16,
    FP32,
    INT8,
    INT16,
    INT32,
    PER_OP,
    UINT8,
    UINT16,
    assert_bits_equal,
    assert_values_equal,
    f32,
    load,
    partitions,
    ref_cast,
    run_kernel,
    run_tile,
    seeds,
    small_values,
    store,
    targets,
    tile_shapes,
    ulp_rtol,
)
from .reduce_helpers import (
    F32,
    SCAN_OPS,
    ref,
    tile,
)

CUMULATIVE_OPS = ("add", "subtract", "multiply", "maximum", "minimum")


# -- numba kernels against their numpy references -------------------------------------


def special_values(rng, shape):
    """Normal values mixed with zeros of both signs, infinities, NaN, ones and subnormals."""
    x = (rng.standard_normal(shape) * 3).astype(F32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.0, 1e-40, 3e38], F32)
    pick = rng.random(shape) < 0.3
    x[pick] = rng.choice(specials, size=int(pick.sum()))
    return x


def test_scan_kernel_is_bit_identical_to_its_reference_for_every_operator_pair():
    """Every (op0, op1, reverse0, reverse1) of the 22 arithmetic operators, on data with NaN/inf/-0.0."""
    rng = np.random.default_rng(7)
    for op0 in ALU_CODES:
        for op1 in ALU_CODES:
            for rev0, rev1 in ((False, False), (True, False), (False, True), (True, True)):
                d0, d1 = special_values(rng, (4, 12)), special_values(rng, (4, 12))
                init = special_values(rng, (4,))
                got = tensor_tensor_scan_kernel(d0, d1, init, ALU_CODES[op0], ALU_CODES[op1], rev0, rev1)
                want = tensor_tensor_scan_reference(d0, d1, init, OPS[op0], OPS[op1], rev0, rev1)
                assert_bits_equal(got, want)


@FAST
@given(
    shape=st.tuples(partitions, st.integers(1, 300)),
    ufunc=st.sampled_from(sorted(BINARY_F32_CODES, key=lambda u: u.__name__)),
    in_place=st.booleans(),
    seed=seeds,
)
def test_binary_f32_kernel_gives_numpys_bits_on_strided_rows(shape, ufunc, in_place, seed):
    """Rows at a partition pitch, as tiles are; NaN, infinities, -0.0 and subnormals included. Where both operands
    are NaN either payload may stay (numpy's own loops differ), so only NaN-ness is compared there."""
    rng = np.random.default_rng(seed)
    rows, cols = shape
    pitch = 3 * cols + 5  # float32 elements per row of the backing array: no operand shares a byte with another
    backing = np.zeros((rows, pitch), F32)
    x, y, dst = (backing[:, k * cols : (k + 1) * cols] for k in range(3))
    x[...], y[...] = special_values(rng, shape), special_values(rng, shape)
    with np.errstate(all="ignore"):
        want = ufunc(x, y)
    both_nan = np.isnan(x) & np.isnan(y)
    binary_f32(BINARY_F32_CODES[ufunc], x if in_place else dst, x, y)
    got = x if in_place else dst
    assert np.isnan(got[both_nan]).all()
    assert_bits_equal(np.where(both_nan, F32(0), got), np.where(both_nan, F32(0), want))


@FAST
@given(shape=st.tuples(partitions, st.integers(1, 300)), op=st.sampled_from(sorted(ALU_CODES)), seed=seeds)
def test_cumulative_kernel_is_bit_identical_to_its_reference(shape, op, seed):
    rng = np.random.default_rng(seed)
    values = special_values(rng, shape)
    regs = special_values(rng, shape[:1])
    regs_ref = regs.copy()
    got = cumulative_kernel(values, regs, ALU_CODES[op])
    want = cumulative_kernel_reference(values, regs_ref, OPS[op])
    assert_bits_equal(got, want)
    assert_bits_equal(regs, regs_ref)


# -- tensor_tensor_scan ---------------------------------------------------------------


def scan_reference(d0, d1, initial, op0, op1, rev0, rev1):
    """The docstring pseudo-code, per partition: r[i] = op1(op0(d0[i], r[i-1]), d1[i])."""
    p = d0.shape[0]
    x0, x1 = f32(d0).reshape(p, -1), f32(d1).reshape(p, -1)
    out = np.empty_like(x0)
    r = np.broadcast_to(np.asarray(initial, F32).reshape(-1), (p,)).astype(F32)
    for i in range(x0.shape[1]):
        t = ref(op0, x0[:, i], r, rev0)
        r = ref(op1, t, x1[:, i], rev1)
        out[:, i] = r
    return out.reshape(d0.shape)


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@PER_OP
@given(
    shape=tile_shapes(max_dims=2, max_size=128),
    op0=st.sampled_from(SCAN_OPS),
    op1=st.sampled_from(SCAN_OPS),
    rev=st.tuples(st.booleans(), st.booleans()),
    dtypes=st.tuples(st.sampled_from((FP32, BF16, FP16, INT8)), st.sampled_from((FP32, BF16, INT16))),
    out=st.sampled_from((FP32, BF16, FP16, INT32)),
    initial=st.sampled_from(["scalar", "tile"]),
    psum=st.sampled_from([None, 0, 1]),
    target=targets,
    seed=seeds,
)
def test_tensor_tensor_scan(shape, op0, op1, rev, dtypes, out, initial, psum, target, seed):
    rng = np.random.default_rng(seed)
    d0 = small_values(rng, shape, dtypes[0])
    d1 = small_values(rng, shape, dtypes[1])
    init = small_values(rng, (shape[0], 1), FP32)
    buffers = ["sbuf", "sbuf", "sbuf"]
    if psum is not None:
        buffers[psum] = "psum"

    def body(dst, a, b, i):
        nisa.tensor_tensor_scan(
            dst=dst,
            data0=a,
            data1=b,
            initial=i if initial == "tile" else 1.5,
            op0=getattr(nl, op0),
            op1=getattr(nl, op1),
            reverse0=rev[0],
            reverse1=rev[1],
        )

    got = run_tile(body, [d0, d1, init], shape, out, target=target, in_buffers=buffers)
    start = init if initial == "tile" else F32(1.5)
    assert_values_equal(got, ref_cast(scan_reference(d0, d1, start, op0, op1, *rev), out))


def test_tensor_tensor_scan_hand_case():
    """A running sum r[i] = r[i-1] * 1 + d1[i] and a decaying recurrence r[i] = d0[i] * r[i-1] + d1[i]."""
    d0 = np.array([[1, 1, 1, 1], [0.5, 0.5, 2, 0]], F32)
    d1 = np.array([[1, 2, 3, 4], [1, 1, 1, 1]], F32)

    def body(dst, a, b):
        nisa.tensor_tensor_scan(dst, a, b, 10.0, nl.multiply, nl.add)

    got = run_tile(body, [d0, d1], d0.shape, FP32)
    # row 0: 11, 13, 16, 20; row 1: 5 + 1 = 6, 3 + 1 = 4, 8 + 1 = 9, 0 + 1 = 1
    np.testing.assert_array_equal(got, [[11, 13, 16, 20], [6, 4, 9, 1]])
    # reverse1 puts data1 on the left: r = d1 - (d0 + r)
    got = run_tile(
        lambda dst, a, b: nisa.tensor_tensor_scan(dst, a, b, 0.0, nl.add, nl.subtract, reverse1=True),
        [d0, d1],
        d0.shape,
        FP32,
    )
    np.testing.assert_array_equal(got[0], [0, 1, 1, 2])  # 1-1, 2-(1+0), 3-(1+1), 4-(1+1)


def test_tensor_tensor_scan_multi_dim_free_axes_scan_in_row_major_order():
    d0 = np.ones((2, 2, 3), F32)
    d1 = np.arange(12, dtype=F32).reshape(2, 2, 3)
    got = run_tile(
        lambda dst, a, b: nisa.tensor_tensor_scan(dst, a, b, 0.0, nl.multiply, nl.add), [d0, d1], d0.shape, FP32
    )
    np.testing.assert_array_equal(got, np.cumsum(d1.reshape(2, -1), axis=1).reshape(2, 2, 3))


# -- tensor_scalar_cumulative ---------------------------------------------------------

CUMULATIVE_DTYPES = (FP32, BF16, FP16, FP8_E4M3, UINT8, UINT16, INT8, INT16)
RESET_VALUE = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


def cumulative_reference(src, op0, imm0, op1, reg):
    """The docstring pseudo-code: reg = op1(op0(src[i], imm0), reg); out[i] = reg. Returns (out, reg)."""
    p = src.shape[0]
    x = f32(src).reshape(p, -1)
    v = ref(op0, x, np.asarray(imm0, F32).reshape(-1, 1) if np.ndim(imm0) else F32(imm0))
    out = np.empty_like(x)
    reg = np.array(reg, F32)
    for i in range(x.shape[1]):
        reg = ref(op1, v[:, i], reg)
        out[:, i] = reg
    return out.reshape(src.shape), reg


@st.composite
def cumulative_programs(draw):
    """One or two chained calls: the first resets or loads, the second may continue with reduce."""
    first = draw(st.sampled_from(["reset_reduce", "load_reduce"]))
    cmds = [first] + ([draw(st.sampled_from(["reduce", "reset_reduce", "load_reduce"]))] if draw(st.booleans()) else [])
    return cmds


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@PER_OP
@given(
    shape=tile_shapes(max_dims=2, max_size=96),
    op0=st.sampled_from(("add", "subtract", "multiply", "maximum", "minimum", "abs_max")),
    op1=st.sampled_from(CUMULATIVE_OPS),
    dtype=st.sampled_from(CUMULATIVE_DTYPES),
    out=st.sampled_from(CUMULATIVE_DTYPES),
    vector_imm=st.booleans(),
    cmds=cumulative_programs(),
    target=targets,
    seed=seeds,
)
def test_tensor_scalar_cumulative(shape, op0, op1, dtype, out, vector_imm, cmds, target, seed):
    rng = np.random.default_rng(seed)
    p = shape[0]
    src = small_values(rng, shape, dtype, 0 if dtype.kind == "u" else -4, 4)
    imm0 = small_values(rng, (p, 1), FP32, -2, 2)
    imm1 = small_values(rng, (p, 1), FP32, -3, 3)

    def kernel(x, i0, i1):
        s, t0, t1 = load(x), load(i0), load(i1)
        outs = []
        for cmd in cmds:
            dst = tile(shape, out)
            nisa.tensor_scalar_cumulative(
                dst=dst,
                src=s,
                op0=getattr(nl, op0),
                op1=getattr(nl, op1),
                imm0=t0 if vector_imm else 0.5,
                imm1=t1 if vector_imm else -1.0,
                reduce_cmd=getattr(nisa.reduce_cmd, cmd),
            )
            outs.append(store(dst))
        return tuple(outs)

    got = run_kernel(kernel, [src, imm0, imm1], target)
    reg = np.zeros(p, F32)
    for cmd, g in zip(cmds, got):
        if cmd == "reset_reduce":
            reg = np.full(p, RESET_VALUE[op1], F32)
        elif cmd == "load_reduce":
            reg = imm1.reshape(p) if vector_imm else np.full(p, -1.0, F32)
        want, reg = cumulative_reference(src, op0, imm0 if vector_imm else 0.5, op1, reg)
        assert_values_equal(g, ref_cast(want, out))


def test_tensor_scalar_cumulative_hand_cases():
    x = np.array([[1, 2, 3, 4], [4, -1, 2, -5]], F32)
    res = {}
    for op1 in CUMULATIVE_OPS:
        res[op1] = run_tile(
            lambda d, s, op1=op1: nisa.tensor_scalar_cumulative(d, s, nl.add, getattr(nl, op1), 0.0), [x], x.shape, FP32
        )
    np.testing.assert_array_equal(res["add"], [[1, 3, 6, 10], [4, 3, 5, 0]])
    np.testing.assert_array_equal(res["multiply"], [[1, 2, 6, 24], [4, -4, -8, 40]])
    np.testing.assert_array_equal(res["maximum"], [[1, 2, 3, 4], [4, 4, 4, 4]])
    np.testing.assert_array_equal(res["minimum"], [[1, 1, 1, 1], [4, -1, -1, -5]])
    # subtract, as the pseudo-code writes it: reg = value - reg
    np.testing.assert_array_equal(res["subtract"], [[1, 1, 2, 2], [4, -5, 7, -12]])
    # load_reduce starts from imm1: a scan with an initial value
    got = run_tile(
        lambda d, s: nisa.tensor_scalar_cumulative(d, s, nl.multiply, nl.add, 2.0, 100.0, nisa.reduce_cmd.load_reduce),
        [x],
        x.shape,
        FP32,
    )
    np.testing.assert_array_equal(got, [[102, 106, 112, 120], [108, 106, 110, 100]])


# -- tensor_scalar_reduce -------------------------------------------------------------


@PER_OP
@given(
    shape=tile_shapes(max_dims=3, max_size=256),
    op0=st.sampled_from(("add", "subtract", "multiply", "maximum", "divide", "abs_max", "greater")),
    reduce_op=st.sampled_from(CUMULATIVE_OPS),
    dtype=st.sampled_from((FP32, BF16, FP16, INT8)),
    out=st.sampled_from((FP32, BF16, INT16)),
    res_dtype=st.sampled_from((FP32, BF16)),
    vector=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_tensor_scalar_reduce(shape, op0, reduce_op, dtype, out, res_dtype, vector, target, seed):
    """dst = data op0 operand0; reduce_res = reduce_op of the float32 results over every free axis."""
    rng = np.random.default_rng(seed)
    p = shape[0]
    data = small_values(rng, shape, dtype, -4, 4)
    operand = (rng.integers(1, 3, size=(p, 1)) * rng.choice([-1, 1], size=(p, 1)) * 0.5).astype(F32)

    def kernel(x, o):
        dst, res = tile(shape, out), tile((p, 1), res_dtype)
        nisa.tensor_scalar_reduce(
            dst=dst,
            data=load(x),
            op0=getattr(nl, op0),
            operand0=load(o) if vector else 2.0,
            reduce_op=getattr(nl, reduce_op),
            reduce_res=res,
        )
        return store(dst), store(res)

    got_dst, got_res = run_kernel(kernel, [data, operand], target)
    values = ref(op0, f32(data).reshape(p, -1), operand if vector else F32(2.0))
    assert_values_equal(got_dst, ref_cast(values.reshape(shape), out))
    acc = values[:, 0]
    for i in range(1, values.shape[1]):  # in element order, in float32: subtract is x0 - x1 - x2 ...
        acc = ref(reduce_op, acc, values[:, i])
    want = acc.reshape(p, 1)
    if reduce_op in ("maximum", "minimum"):
        assert_values_equal(got_res, ref_cast(want, res_dtype))
    else:  # a float32 reduction may be summed in another order
        tol = ulp_rtol(res_dtype) + values.shape[1] * 2.0**-23
        np.testing.assert_allclose(got_res.astype(np.float64), want, rtol=tol, atol=tol * np.abs(values).sum())
