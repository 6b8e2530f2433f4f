"""Vector and Scalar Engine instructions with accumulators: scalar_tensor_tensor, exponential,
reciprocal, tensor_partition_reduce, activation_reduce, and their constraints and costs.

Every expected value is computed in the test from the NKI documentation, never from nkisim.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import DtypeError, MemoryKindError, OperandError, ShapeError, TargetError
from nkisim.hw import load_target

from .conftest import (
    BF16,
    FAST,
    FLOATS,
    FP16,
    FP32,
    INT8,
    INT16,
    INT32,
    PER_OP,
    UINT8,
    assert_bits_equal,
    assert_constraint_error,
    assert_values_equal,
    f32,
    load,
    random_values,
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


def profile_of(kernel, target="trn1"):
    return nkisim.run(kernel, [], target=target).profile


def _k(fn):
    """A kernel that only calls ``fn``."""

    def kernel():
        fn()

    return kernel


def cost_of(kernel, opcode, target="trn1"):
    """The one ``opcode`` instruction's duration in ns."""
    (rec,) = [r for r in profile_of(kernel, target).instructions if r.opcode == opcode]
    return rec.end_ns - rec.start_ns, rec.engine


# -- scalar_tensor_tensor -------------------------------------------------------------


@PER_OP
@given(
    shape=tile_shapes(max_dims=3, max_size=256),
    op0=st.sampled_from(SCAN_OPS),
    op1=st.sampled_from(SCAN_OPS),
    rev=st.tuples(st.booleans(), st.booleans()),
    dtypes=st.tuples(st.sampled_from((FP32, BF16, INT8)), st.sampled_from((FP32, FP16, BF16))),
    out=st.sampled_from((FP32, BF16, FP16, INT32)),
    vector=st.booleans(),
    psum=st.sampled_from([None, 0, 1]),
    target=targets,
    seed=seeds,
)
def test_scalar_tensor_tensor(shape, op0, op1, rev, dtypes, out, vector, psum, target, seed):
    """dst = (data op0 operand0) op1 operand1, float32 math; operand0 a scalar or a (P, 1) column."""
    rng = np.random.default_rng(seed)
    p = shape[0]
    data = small_values(rng, shape, dtypes[0])
    other = small_values(rng, shape, dtypes[1])
    col = small_values(rng, (p, 1), FP32)
    buffers = ["sbuf", "sbuf", "sbuf"]
    if psum is not None:
        buffers[psum] = "psum"

    def body(dst, x, y, c):
        nisa.scalar_tensor_tensor(
            dst=dst,
            data=x,
            op0=getattr(nl, op0),
            operand0=c if vector else -1.5,
            op1=getattr(nl, op1),
            operand1=y,
            reverse0=rev[0],
            reverse1=rev[1],
        )

    got = run_tile(body, [data, other, col], shape, out, target=target, in_buffers=buffers)
    rows = f32(data).reshape(p, -1)
    # a unary op reversed acts on the operand; its value is broadcast over the row
    t = np.broadcast_to(ref(op0, rows, col if vector else F32(-1.5), rev[0]), rows.shape)
    want = ref(op1, t, f32(other).reshape(p, -1), rev[1])
    assert_values_equal(got, ref_cast(want.reshape(shape), out))


# -- exponential ----------------------------------------------------------------------


@FAST
@given(
    shape=tile_shapes(max_dims=3, max_size=256),
    dtype=st.sampled_from((FP32, BF16, FP16, INT8)),
    out=st.sampled_from((FP32, BF16, FP16)),
    vector=st.booleans(),
    seed=seeds,
)
def test_exponential_values(shape, dtype, out, vector, seed):
    """dst = exp(src - max_value), max_value a scalar or a float32 (P, 1) column (NeuronCore-v4)."""
    rng = np.random.default_rng(seed)
    p = shape[0]
    src = small_values(rng, shape, dtype, -8, 8)
    mx = small_values(rng, (p, 1), FP32, -4, 4)

    def body(dst, x, m):
        nisa.exponential(dst=dst, src=x, max_value=m if vector else 1.5)

    got = run_tile(body, [src, mx], shape, out, target="trn3")
    z = f32(src).reshape(p, -1).astype(np.float64) - (mx if vector else 1.5)
    want = np.exp(z).reshape(shape)
    rtol = 4e-6 + ulp_rtol(out)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=1e-30)


CMDS = ("idle", "reset_reduce", "reduce", "load_reduce")


@FAST
@given(
    shape=tile_shapes(max_dims=2, max_size=128),
    cmds=st.lists(st.sampled_from(CMDS), min_size=1, max_size=4),
    seed=seeds,
)
def test_exponential_running_sum_in_the_vector_accumulators(shape, cmds, seed):
    """reset_reduce zeroes, load_reduce loads reduce_init, reduce keeps; each then adds sum(exp); idle leaves."""
    cmds = ["reset_reduce", *cmds]  # a defined start
    rng = np.random.default_rng(seed)
    p = shape[0]
    xs = [small_values(rng, shape, FP32, -6, 2) for _ in cmds]
    inits = [float(rng.integers(-4, 4)) for _ in cmds]

    def kernel(*hbm):
        res = tile((p, len(cmds)), nl.float32)
        for i, (x, cmd) in enumerate(zip(hbm, cmds)):
            kwargs = {"reduce_init": inits[i]} if cmd == "load_reduce" else {}
            nisa.exponential(
                dst=tile(shape),
                src=load(x),
                reduce_res=res[:, i : i + 1],
                reduce_cmd=getattr(nisa.reduce_cmd, cmd),
                **kwargs,
            )
        return store(res)

    got = run_kernel(kernel, xs, "trn3")
    acc = np.zeros(p)
    bound = np.zeros(p)
    for i, cmd in enumerate(cmds):
        e = np.exp(f32(xs[i]).reshape(p, -1).astype(np.float64)).sum(axis=1)
        if cmd == "reset_reduce":
            acc[:], bound[:] = 0.0, 0.0
        elif cmd == "load_reduce":
            acc[:], bound[:] = inits[i], abs(inits[i])
        if cmd != "idle":
            acc += e
            bound += e
        np.testing.assert_allclose(got[:, i], acc, rtol=0, atol=1e-30 + 1e-5 * bound.max())


def test_exponential_hand_case():
    x = np.array([[0.0, 1.0, 2.0], [3.0, 3.0, 3.0]], F32)

    def kernel(a):
        dst, res = tile((2, 3)), tile((2, 1))
        nisa.exponential(
            dst, load(a), max_value=2.0, reduce_res=res, reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=1.0
        )
        return store(dst), store(res)

    dst, res = run_kernel(kernel, [x], "trn3")
    e = np.exp(np.array([[-2.0, -1.0, 0.0], [1.0, 1.0, 1.0]]))
    np.testing.assert_allclose(dst, e, rtol=1e-6)
    np.testing.assert_allclose(res[:, 0], 1.0 + e.sum(axis=1), rtol=1e-6)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_exponential_needs_neuroncore_v4(target):
    def kernel():
        nisa.exponential(dst=tile((4, 4)), src=tile((4, 4)))

    with pytest.raises(
        TargetError,
        match=rf"nisa\.exponential \[Vector, {target}\]: needs vector_exponential, which trn3 \(NeuronCore-v4\) has$",
    ):
        profile_of(kernel, target)


# -- reciprocal -----------------------------------------------------------------------


@FAST
@given(
    shape=tile_shapes(),
    dtype=st.sampled_from((FP32, BF16, FP16, INT16)),
    out=st.sampled_from((FP32, BF16, FP16, INT32)),
    psum=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_reciprocal(shape, dtype, out, psum, target, seed):
    """dst = 1 / data in float32 (1/0 = inf), cast on write."""
    data = random_values(np.random.default_rng(seed), shape, dtype)
    got = run_tile(
        lambda d, x: nisa.reciprocal(dst=d, data=x),
        [data],
        shape,
        out,
        target=target,
        in_buffers=["psum" if psum else "sbuf"],
    )
    with np.errstate(divide="ignore"):
        want = F32(1.0) / f32(data)
    assert_values_equal(got, ref_cast(want, out))


# -- tensor_partition_reduce ----------------------------------------------------------


@FAST
@given(
    shape=tile_shapes(max_dims=3, max_size=256),
    op=st.sampled_from(("add", "maximum")),
    dtype=st.sampled_from((FP32, BF16, INT8)),
    out=st.sampled_from((FP32, BF16, INT32)),
    target=targets,
    seed=seeds,
)
def test_tensor_partition_reduce_arithmetic(shape, op, dtype, out, target, seed):
    """dst[0] = op over the partitions; small halves keep float32 sums exact in any order."""
    data = small_values(np.random.default_rng(seed), shape, dtype)
    got = run_tile(
        lambda d, x: nisa.tensor_partition_reduce(dst=d, op=getattr(nl, op), data=x),
        [data],
        (1, *shape[1:]),
        out,
        target=target,
    )
    ufunc = {"add": np.add, "maximum": np.maximum}[op]
    assert_values_equal(got, ref_cast(ufunc.reduce(f32(data), axis=0, keepdims=True), out))


@FAST
@given(
    shape=tile_shapes(max_dims=2, max_size=128),
    op=st.sampled_from(("bitwise_or", "bitwise_and")),
    dtype=st.sampled_from((INT32, INT16, UINT8)),
    target=targets,
    seed=seeds,
)
def test_tensor_partition_reduce_bitwise(shape, op, dtype, target, seed):
    data = random_values(np.random.default_rng(seed), shape, dtype)
    got = run_tile(
        lambda d, x: nisa.tensor_partition_reduce(d, getattr(nl, op), x), [data], (1, *shape[1:]), dtype, target=target
    )
    ufunc = {"bitwise_or": np.bitwise_or, "bitwise_and": np.bitwise_and}[op]
    assert_bits_equal(got, ufunc.reduce(data, axis=0, keepdims=True))


# -- activation_reduce (Scalar Engine) ------------------------------------------------


@FAST
@given(
    shape=tile_shapes(max_dims=3, max_size=256),
    op=st.sampled_from(("copy", "exp", "relu", "square", "tanh")),
    reduce_op=st.sampled_from(("add", "maximum", "minimum")),
    out=st.sampled_from(FLOATS),
    target=targets,
    seed=seeds,
)
def test_activation_reduce(shape, op, reduce_op, out, target, seed):
    """dst = op(data * scale + bias); reduce_res = reduce_op over every free axis (v2: add only)."""
    if target == "trn1" and reduce_op != "add":
        reduce_op = "add"
    fns = {"copy": lambda z: z, "exp": np.exp, "relu": lambda z: np.maximum(z, 0), "square": np.square, "tanh": np.tanh}
    rng = np.random.default_rng(seed)
    p = shape[0]
    data = np.clip(rng.standard_normal(shape), -3, 3).astype(F32)
    bias = rng.uniform(-1, 1, size=(p, 1)).astype(F32)

    def kernel(x, b):
        dst, res = tile(shape, out), tile((p, 1))
        nisa.activation_reduce(
            dst=dst,
            op=getattr(nl, op),
            data=load(x),
            reduce_op=getattr(nl, reduce_op),
            reduce_res=res,
            bias=load(b),
            scale=0.5,
        )
        return store(dst), store(res)

    got_dst, got_res = run_kernel(kernel, [data, bias], target)
    act = fns[op]((data.reshape(p, -1) * F32(0.5) + bias).astype(np.float64))
    np.testing.assert_allclose(got_dst.astype(np.float64), act.reshape(shape), rtol=4e-6 + ulp_rtol(out), atol=1e-6)
    want = {"add": np.sum, "maximum": np.max, "minimum": np.min}[reduce_op](act, axis=1, keepdims=True)
    bound = np.abs(act).sum(axis=1, keepdims=True) * (act.shape[1] * 2.0**-24 + 4e-6)
    assert np.all(np.abs(got_res - want) <= bound + 1e-30)


def test_activation_reduce_resets_the_registers_it_shares_with_activation():
    """activation_reduce resets reduce_regs, so an activation with reduce_cmd=reduce adds onto its result."""
    a = np.array([[1.0, 2.0], [3.0, -4.0]], F32)

    def kernel(x):
        t = load(x)
        r1, r2 = tile((2, 1)), tile((2, 1))
        nisa.activation(dst=tile((2, 2)), op=nl.copy, data=t, reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.activation_reduce(dst=tile((2, 2)), op=nl.copy, data=t, reduce_op=nl.add, reduce_res=r1, scale=2.0)
        nisa.activation(
            dst=tile((2, 2)), op=nl.copy, data=t, reduce_op=nl.add, reduce_res=r2, reduce_cmd=nisa.reduce_cmd.reduce
        )
        return store(r1), store(r2)

    r1, r2 = run_kernel(kernel, [a])
    np.testing.assert_array_equal(r1, [[6.0], [-2.0]])
    np.testing.assert_array_equal(r2, [[9.0], [-3.0]])


# -- the Vector accumulators are shared -----------------------------------------------


@pytest.mark.placeholder_tiles
def test_vector_accumulators_carry_from_one_instruction_to_the_next():
    """tensor_scalar_reduce leaves its sum; tensor_scalar_cumulative(reduce) and exponential(reduce) continue it."""
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]], F32)

    def kernel(a):
        t = load(a)
        r = tile((2, 1))
        nisa.tensor_scalar_reduce(dst=tile((2, 3)), data=t, op0=nl.add, operand0=0.0, reduce_op=nl.add, reduce_res=r)
        cum = tile((2, 3))
        nisa.tensor_scalar_cumulative(cum, t, nl.add, nl.add, 0.0, reduce_cmd=nisa.reduce_cmd.reduce)
        e = tile((2, 1))
        nisa.exponential(
            tile((2, 3)), tile((2, 3), nl.float32), max_value=0.0, reduce_res=e, reduce_cmd=nisa.reduce_cmd.idle
        )
        return store(r), store(cum), store(e)

    def kernel_v4(a):
        t = load(a)
        nisa.tensor_scalar_cumulative(tile((2, 3)), t, nl.add, nl.add, 0.0)  # leaves 6 and 1
        z = tile((2, 3))
        nisa.memset(z, 0.0)
        e = tile((2, 1))
        nisa.exponential(tile((2, 3)), z, reduce_res=e, reduce_cmd=nisa.reduce_cmd.reduce)  # + 3 * exp(0)
        return store(e)

    r, cum, e = run_kernel(kernel, [x], "trn3")
    np.testing.assert_array_equal(r, [[6.0], [1.0]])
    np.testing.assert_array_equal(cum, [[7.0, 9.0, 12.0], [1.0, 1.0, 2.0]])
    np.testing.assert_array_equal(e, [[12.0], [2.0]])  # idle leaves the registers as the scan left them
    np.testing.assert_array_equal(run_kernel(kernel_v4, [x], "trn3"), [[9.0], [4.0]])


# -- constraints ----------------------------------------------------------------------


def T(*shape, dtype=nl.float32, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


PS = {"buffer": nl.psum}
RC = nisa.reduce_cmd
scan, cum, tsr, stt = (
    nisa.tensor_tensor_scan,
    nisa.tensor_scalar_cumulative,
    nisa.tensor_scalar_reduce,
    nisa.scalar_tensor_tensor,
)
exp, tpr, act_r = nisa.exponential, nisa.tensor_partition_reduce, nisa.activation_reduce

V, G, S = "Vector", "GpSimd", "Scalar"

# (instruction, engine, target, call, error, message)
CONSTRAINTS = [
    ("tensor_tensor_scan", V, "trn1", lambda: scan(T(8, 16), T(8, 16), T(8, 16), 0.0, nl.bitwise_and, nl.add),
     OperandError, "op0 bitvec operator nl.bitwise_and is not supported"),
    ("tensor_tensor_scan", V, "trn2", lambda: scan(T(8, 16), T(8, 16), T(8, 16), 0.0, nl.add, nl.exp),
     OperandError, "op1 nl.exp is not an ALU operator"),
    ("tensor_tensor_scan", V, "trn1", lambda: scan(T(8, 16), T(8, 16), T(8, 15), 0.0, nl.add, nl.add),
     ShapeError, "data1 has 15 elements per partition but data0 has 16"),
    ("tensor_tensor_scan", V, "trn1", lambda: scan(T(8, 15), T(8, 16), T(8, 16), 0.0, nl.add, nl.add),
     ShapeError, "dst has 15 elements"),
    ("tensor_tensor_scan", V, "trn1", lambda: scan(T(8, 16), T(8, 16), T(8, 16), T(8, 2), nl.add, nl.add),
     ShapeError, r"initial shape \[8, 2\] must be \(8, 1\)"),
    ("tensor_tensor_scan", V, "trn3", lambda: scan(T(8, 16), T(8, 16, **PS), T(8, 16, **PS), 0.0, nl.add, nl.add),
     MemoryKindError, "data0 and data1 must not both be in PSUM"),
    ("tensor_scalar_cumulative", V, "trn1", lambda: cum(T(4, 8), T(4, 8, dtype=nl.int32), nl.add, nl.add, 0.0),
     DtypeError, "src dtype int32 is not supported"),
    ("tensor_scalar_cumulative", V, "trn2", lambda: cum(T(4, 8, dtype=nl.uint32), T(4, 8), nl.add, nl.add, 0.0),
     DtypeError, "dst dtype uint32 is not supported"),
    ("tensor_scalar_cumulative", V, "trn1", lambda: cum(T(4, 8), T(4, 8), nl.add, nl.divide, 0.0),
     OperandError, "op1 nl.divide is not supported"),
    ("tensor_scalar_cumulative", V, "trn1", lambda: cum(T(4, 8), T(4, 8), nl.left_shift, nl.add, 0.0),
     OperandError, "op0 bitvec operator"),
    ("tensor_scalar_cumulative", V, "trn1", lambda: cum(T(4, 8), T(4, 8), nl.add, nl.add, T(4, 1, dtype=nl.bfloat16)),
     DtypeError, "imm0 dtype bfloat16 must be float32"),
    ("tensor_scalar_cumulative", V, "trn1",
     lambda: cum(T(4, 8), T(4, 8), nl.add, nl.add, 0.0, T(4, 1, dtype=nl.float16), RC.load_reduce),
     DtypeError, "imm1 dtype float16 must be float32"),
    ("tensor_scalar_cumulative", V, "trn1",
     lambda: cum(T(4, 8), T(4, 8), nl.add, nl.add, 0.0, reduce_cmd=RC.load_reduce),
     OperandError, "imm1 is required with reduce_cmd=load_reduce"),
    ("tensor_scalar_cumulative", V, "trn1", lambda: cum(T(4, 8), T(4, 8), nl.add, nl.add, 0.0, reduce_cmd=RC.idle),
     OperandError, "reduce_cmd idle is not supported"),
    ("tensor_scalar_cumulative", V, "trn1", lambda: cum(T(4, 9), T(4, 8), nl.add, nl.add, 0.0),
     ShapeError, "dst has 9 elements"),
    ("tensor_scalar_reduce", V, "trn1", lambda: tsr(T(4, 8), T(4, 8), nl.add, 1.0, nl.add, T(4, 2)),
     ShapeError, r"reduce_res shape \[4, 2\] must be \(4, 1\)"),
    ("tensor_scalar_reduce", V, "trn1", lambda: tsr(T(4, 8), T(4, 8), nl.add, 1.0, nl.divide, T(4, 1)),
     OperandError, "reduce_op nl.divide is not supported"),
    ("tensor_scalar_reduce", V, "trn1", lambda: tsr(T(4, 8), T(4, 8), nl.bitwise_or, 1, nl.add, T(4, 1)),
     OperandError, "op0 bitvec operator"),
    ("tensor_scalar_reduce", V, "trn1", lambda: tsr(T(4, 8), T(4, 8), nl.subtract, 1.0, nl.add, T(4, 1), True),
     OperandError, "reverse0 is not supported yet"),
    ("tensor_scalar_reduce", V, "trn1", lambda: tsr(T(4, 8), T(4, 8), nl.add, T(4, 2), nl.add, T(4, 1)),
     ShapeError, r"operand0 shape \[4, 2\]"),
    ("tensor_scalar_reduce", V, "trn1", lambda: tsr(T(4, 7), T(4, 8), nl.add, 1.0, nl.add, T(4, 1)),
     ShapeError, "dst has 7 elements"),
    ("scalar_tensor_tensor", V, "trn1", lambda: stt(T(4, 8), T(4, 8), nl.add, 1.0, nl.add, T(4, 9)),
     ShapeError, "operand1 has 9 elements"),
    ("scalar_tensor_tensor", V, "trn1", lambda: stt(T(4, 8), T(4, 8), nl.add, 1.0, nl.bitwise_xor, T(4, 8)),
     OperandError, "op1 bitvec operator"),
    ("scalar_tensor_tensor", V, "trn1", lambda: stt(T(4, 8), T(4, 8), nl.add, T(4, 8), nl.add, T(4, 8)),
     ShapeError, r"operand0 shape \[4, 8\]"),
    ("scalar_tensor_tensor", V, "trn1", lambda: stt(T(4, 8), T(4, 8, **PS), nl.add, 1.0, nl.add, T(4, 8, **PS)),
     MemoryKindError, "data and operand1 must not both be in PSUM"),
    ("scalar_tensor_tensor", "", "trn1", lambda: stt(T(4, 8), T(4, 8), nl.add, 1.0, nl.add),
     OperandError, "operand1 is a required argument"),
    ("exponential", V, "trn3", lambda: exp(T(4, 9), T(4, 8)), ShapeError, "dst has 9 elements"),
    ("exponential", V, "trn3", lambda: exp(T(4, 2, 2, 1, 2), T(4, 2, 2, 1, 2)),
     ShapeError, "src has 5 dims; at most 4"),
    ("exponential", V, "trn3", lambda: exp(T(4, 8), T(4, 8, dtype=nl.tfloat32)),
     DtypeError, "src dtype tfloat32 is not supported"),
    ("exponential", V, "trn3", lambda: exp(T(4, 8, dtype=nl.uint32), T(4, 8)),
     DtypeError, "dst dtype uint32 is not supported"),
    ("exponential", V, "trn3", lambda: exp(T(4, 8), T(4, 8), T(4, 1, dtype=nl.bfloat16)),
     DtypeError, "max_value dtype bfloat16 must be float32"),
    ("exponential", V, "trn3", lambda: exp(T(4, 8), T(4, 8), T(4, 3)), ShapeError, r"max_value shape \[4, 3\]"),
    ("exponential", V, "trn3", lambda: exp(T(4, 8), T(4, 8), reduce_res=T(4, 1, dtype=nl.int32)),
     DtypeError, "reduce_res dtype int32 is not supported"),
    ("exponential", V, "trn3", lambda: exp(T(4, 8), T(4, 8), reduce_res=T(4, 2)),
     ShapeError, r"reduce_res shape \[4, 2\]"),
    ("exponential", V, "trn3", lambda: exp(T(4, 8), T(4, 8), reduce_cmd=RC.reset),
     OperandError, "reduce_cmd reset is not supported"),
    ("exponential", V, "trn3", lambda: exp(T(4, 8), T(4, 8), reduce_cmd=RC.reduce, reduce_init=1.0),
     OperandError, "reduce_init must be unset or 0.0 unless reduce_cmd is load_reduce"),
    ("reciprocal", V, "trn1", lambda: nisa.reciprocal(T(4, 9), T(4, 8)), ShapeError, "dst has 9 elements"),
    ("tensor_partition_reduce", G, "trn1", lambda: tpr(T(2, 8), nl.add, T(4, 8)),
     ShapeError, r"dst shape \[2, 8\] must have partition dim 1"),
    ("tensor_partition_reduce", G, "trn1", lambda: tpr(T(1, 7), nl.add, T(4, 8)),
     ShapeError, "dst has 7 elements per partition but data has 8"),
    ("tensor_partition_reduce", G, "trn1", lambda: tpr(T(1, 8), nl.multiply, T(4, 8)),
     OperandError, "op nl.multiply is not supported"),
    ("tensor_partition_reduce", G, "trn1", lambda: tpr(T(1, 8), nl.bitwise_or, T(4, 8)),
     DtypeError, "data dtype float32 is not an integer type"),
    ("tensor_partition_reduce", G, "trn1", lambda: tpr(T(1, 8), nl.add, T(4, 8, **PS)),
     MemoryKindError, "data is in PSUM, which the GpSimd Engine cannot access"),
    ("activation_reduce", S, "trn1", lambda: act_r(T(4, 8), nl.exp, T(4, 8), nl.maximum, T(4, 1)),
     TargetError, "reduce_op nl.maximum needs NeuronCore-v3 or newer"),
    ("activation_reduce", S, "trn2", lambda: act_r(T(4, 8), nl.exp, T(4, 8), nl.multiply, T(4, 1)),
     OperandError, "reduce_op nl.multiply is not supported"),
    ("activation_reduce", S, "trn1", lambda: act_r(T(4, 8), nl.exp, T(4, 8), nl.add, T(4, 3)),
     ShapeError, r"reduce_res shape \[4, 3\]"),
    ("activation_reduce", S, "trn1", lambda: act_r(T(4, 8), nl.add, T(4, 8), nl.add, T(4, 1)),
     OperandError, "op nl.add is not an activation function"),
    ("activation_reduce", S, "trn1", lambda: act_r(T(4, 8), nl.exp, T(4, 8), nl.add, T(4, 1), bias=1.0),
     TargetError, "bias must be a"),
    ("activation_reduce", "", "trn1", lambda: act_r(T(4, 8), nl.exp, T(4, 8), nl.add),
     OperandError, "reduce_res is a required argument"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "engine", "target", "call", "error", "message"),
    CONSTRAINTS,
    ids=[f"{row[0]}-{i}" for i, row in enumerate(CONSTRAINTS)],
)
def test_documented_constraints_are_checked(name, engine, target, call, error, message):
    """Each rule names the instruction, its engine and the target, then the operand and the rule."""
    assert_constraint_error(name, engine, target, call, error, message)


# -- costs ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("n", [16, 512])
def test_costs_follow_the_published_formulas(target, n):
    hw = load_target(target)
    v, s, g = hw.vector, hw.scalar, hw.gpsimd
    p = 128

    def each(fn, opcode):
        return cost_of(_k(fn), opcode, target)

    dur, eng = each(
        lambda: nisa.tensor_tensor_scan(tile((p, n)), tile((p, n)), tile((p, n)), 0.0, nl.add, nl.add),
        "tensor_tensor_scan",
    )
    assert eng == "Vector" and dur == pytest.approx(max(v.min_ii_cycles, 2 * n) / v.clock_ghz)
    dur, _ = each(lambda: nisa.reciprocal(tile((p, n)), tile((p, n))), "reciprocal")
    assert dur == pytest.approx(max(v.min_ii_cycles, 8 * n) / v.clock_ghz)
    dur, _ = each(
        lambda: nisa.tensor_scalar_reduce(tile((p, n)), tile((p, n)), nl.add, 1.0, nl.add, tile((p, 1))),
        "tensor_scalar_reduce",
    )
    assert dur == pytest.approx((max(v.min_ii_cycles, n) + v.min_ii_cycles) / v.clock_ghz)
    dur, _ = each(
        lambda: nisa.tensor_scalar_cumulative(tile((p, n)), tile((p, n)), nl.add, nl.add, 0.0),
        "tensor_scalar_cumulative",
    )
    assert dur == pytest.approx(max(v.min_ii_cycles, n) / v.clock_ghz)
    dur, eng = each(
        lambda: nisa.activation_reduce(tile((p, n)), nl.exp, tile((p, n)), nl.add, tile((p, 1))), "activation_reduce"
    )
    # the kernel's first exp loads its activation table first
    exp_cycles = max(s.min_ii_cycles, n) + s.min_ii_cycles
    assert eng == "Scalar" and dur == pytest.approx(s.table_load_ns + exp_cycles / s.clock_ghz)
    dur, eng = each(lambda: nisa.tensor_partition_reduce(tile((1, n)), nl.add, tile((p, n))), "tensor_partition_reduce")
    assert eng == "GpSimd" and dur == pytest.approx((g.startup_cycles + 2 * n) / g.clock_ghz)


@pytest.mark.parametrize(
    ("dtype", "op0", "op1", "n", "cycles_per_element"),
    [
        (nl.bfloat16, nl.subtract, nl.multiply, 512, 1),
        (nl.bfloat16, nl.subtract, nl.multiply, 511, 2),  # N must be even
        (nl.bfloat16, nl.add, nl.multiply, 512, 2),
        (nl.float32, nl.subtract, nl.multiply, 512, 2),
        (nl.bfloat16, nl.subtract, nl.multiply, 16, 1),  # MIN_II
    ],
)
def test_scalar_tensor_tensor_cost(dtype, op0, op1, n, cycles_per_element):
    """N if data and operand1 are bf16, op0 subtract, op1 multiply and N even; else 2N (at least MIN_II)."""
    hw = load_target("trn1")
    dur, _ = cost_of(
        _k(
            lambda: nisa.scalar_tensor_tensor(
                tile((128, n)), tile((128, n), dtype), op0, 1.0, op1, tile((128, n), dtype)
            )
        ),
        "scalar_tensor_tensor",
    )
    assert dur == pytest.approx(max(hw.vector.min_ii_cycles, cycles_per_element * n) / hw.vector.clock_ghz)


@pytest.mark.parametrize("with_res", [False, True])
def test_exponential_cost_is_a_quarter_of_an_activation(with_res):
    hw = load_target("trn3")
    n = 2048
    res = {"reduce_res": None}

    def kernel():
        res["reduce_res"] = tile((128, 1)) if with_res else None
        nisa.exponential(
            tile((128, n)), tile((128, n)), reduce_res=res["reduce_res"], reduce_cmd=nisa.reduce_cmd.reset_reduce
        )

    dur, _ = cost_of(kernel, "exponential", "trn3")
    cycles = max(hw.vector.min_ii_cycles, n / 4) + (hw.vector.min_ii_cycles if with_res else 0)
    assert dur == pytest.approx(cycles / hw.vector.clock_ghz)
