"""Selection: nisa.affine_select (GpSimd), nisa.select_reduce and nisa.range_select (Vector).

References port the NKI 0.2 pseudo-code and numpy equivalents of each docstring.
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
    FP8_E4M3,
    FP16,
    FP32,
    INT8,
    INT16,
    INT32,
    UINT8,
    UINT16,
    assert_bits_equal,
    assert_constraint_error,
    assert_values_equal,
    f32,
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

F32 = np.float32
FP32_MIN = np.finfo(np.float32).min
COMPARE = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "less": np.less,
    "less_equal": np.less_equal,
}


def tile(shape, dtype=nl.float32, buffer=nl.sbuf):
    return nl.ndarray(tuple(shape), dtype=dtype, buffer=buffer)


def profile_of(kernel, target="trn1"):
    return nkisim.run(kernel, [], target=target).profile


# -- affine_select --------------------------------------------------------------------


def affine_select_reference(on_true, pattern, offset, channel_multiplier, on_false, cmp_op, out_dtype):
    """The docstring's loops: dst[c, w, z, y, x] = on_true if cmp_op(affine, 0) else on_false."""
    p = on_true.shape[0]
    nums = [num for _, num in pattern]
    flat_true = on_true.reshape(p, -1)
    same = np.dtype(out_dtype) == on_true.dtype
    dst = np.empty((p, int(np.prod(nums))), dtype=out_dtype)
    false_value = ref_cast(np.float32(on_false), out_dtype)
    for c in range(p):
        for k, index in enumerate(np.ndindex(*nums)):
            affine = offset + c * channel_multiplier + sum(step * i for (step, _), i in zip(pattern, index))
            if COMPARE[cmp_op](affine, 0):
                dst[c, k] = flat_true[c, k] if same else ref_cast(f32(flat_true[c, k]), out_dtype)
            else:
                dst[c, k] = false_value
    return dst


@st.composite
def affine_cases(draw):
    ndims = draw(st.integers(1, 4))
    pattern = [[draw(st.integers(-5, 5)), draw(st.integers(1, 5))] for _ in range(ndims)]
    in_dtype = draw(st.sampled_from((FP32, BF16, FP16, INT8, INT32)))
    return {
        "p": draw(st.integers(1, 32)),
        "pattern": pattern,
        "offset": draw(st.integers(-40, 40)),
        "cm": draw(st.integers(-6, 6)),
        "cmp": draw(st.sampled_from(sorted(COMPARE))),
        "in_dtype": in_dtype,
        "out_dtype": draw(st.sampled_from((in_dtype, FP32, BF16, INT16))),
        "on_false": draw(st.sampled_from([0.0, -9.5, float(FP32_MIN), 3.0])),
        "shaped": draw(st.booleans()),
    }


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
@FAST
@given(case=affine_cases(), target=targets, seed=seeds)
def test_affine_select(case, target, seed):
    """Same dtype: a bit copy (NaN payloads too); other dtypes go through float32; on_false_value is float32."""
    p, pattern = case["p"], case["pattern"]
    nums = [num for _, num in pattern]
    shape = (p, *nums) if case["shaped"] else (p, int(np.prod(nums)))
    rng = np.random.default_rng(seed)
    if case["in_dtype"] == case["out_dtype"]:
        data = random_bits(rng, shape, case["in_dtype"])
    else:
        data = random_values(rng, shape, case["in_dtype"])

    def body(dst, x):
        nisa.affine_select(
            dst, pattern, case["offset"], case["cm"], x, case["on_false"], cmp_op=getattr(nl, case["cmp"])
        )

    got = run_tile(body, [data], shape, case["out_dtype"], target=target)
    want = affine_select_reference(
        data, pattern, case["offset"], case["cm"], case["on_false"], case["cmp"], case["out_dtype"]
    )
    assert_bits_equal(got.reshape(p, -1), want)


def test_affine_select_causal_mask():
    """cmp_op=greater_equal with offset 0, channel_multiplier 1 and step -1 keeps j <= i (lower triangle)."""
    n = 8
    a = np.arange(n * n, dtype=F32).reshape(n, n) + 1

    got = run_tile(
        lambda d, x: nisa.affine_select(d, [[-1, n]], 0, 1, x, -1e9, cmp_op=nl.greater_equal),
        [a],
        a.shape,
        FP32,
    )
    np.testing.assert_array_equal(got, np.where(np.tril(np.ones((n, n), bool)), a, F32(-1e9)))
    # the default cmp_op is nl.equal: only the diagonal (i - j == 0) survives
    got = run_tile(lambda d, x: nisa.affine_select(d, [[-1, n]], 0, 1, x, 0.0), [a], a.shape, FP32)
    np.testing.assert_array_equal(got, np.diag(np.diag(a)))


# -- select_reduce --------------------------------------------------------------------


@FAST
@given(
    shape=tile_shapes(max_dims=3, max_size=256),
    true_dtype=st.sampled_from((FP32, BF16, FP16, FP8_E4M3, INT8, INT16, UINT8)),
    out=st.sampled_from((FP32, BF16, FP16)),
    pred_dtype=st.sampled_from((INT8, UINT8, INT16, UINT16)),
    on_false=st.sampled_from(["vector", -2.5, float(FP32_MIN)]),
    reverse=st.booleans(),
    psum=st.sampled_from([None, "on_true", "predicate", "dst"]),
    target=targets,
    seed=seeds,
)
def test_select_reduce(shape, true_dtype, out, pred_dtype, on_false, reverse, psum, target, seed):
    """dst = where(predicate, on_true, on_false); reduce_res = per-partition max of that (reset_reduce)."""
    rng = np.random.default_rng(seed)
    p = shape[0]
    on_true = small_values(rng, shape, true_dtype, 0 if true_dtype == UINT8 else -8, 8)
    pred = rng.integers(0, 3, size=shape).astype(pred_dtype)  # 0, 1 and 2: any nonzero is true
    col = small_values(rng, (p, 1), FP32, -8, 8)

    def kernel(t, pr, c):
        t_tile = load(t, "psum" if psum == "on_true" else "sbuf")
        p_tile = load(pr, "psum" if psum == "predicate" else "sbuf")
        dst = tile(shape, out, nl.psum if psum == "dst" else nl.sbuf)
        res = tile((p, 1))
        nisa.select_reduce(
            dst=dst,
            predicate=p_tile,
            on_true=t_tile,
            on_false=load(c) if on_false == "vector" else on_false,
            reduce_res=res,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
            reduce_op=nl.maximum,
            reverse_pred=reverse,
        )
        return store(dst), store(res)

    got_dst, got_res = run_kernel(kernel, [on_true, pred, col], target)
    keep = pred.reshape(p, -1) != 0
    if reverse:
        keep = ~keep
    false_values = col if on_false == "vector" else F32(on_false)
    result = np.where(keep, f32(on_true).reshape(p, -1), false_values).astype(F32)
    assert_values_equal(got_dst, ref_cast(result.reshape(shape), out))
    assert_values_equal(got_res, result.max(axis=1, keepdims=True))


CMDS = ("idle", "reset_reduce", "reduce")


@FAST
@given(
    shape=tile_shapes(max_dims=2, max_size=128),
    cmds=st.lists(st.sampled_from(CMDS), min_size=1, max_size=4),
    target=targets,
    seed=seeds,
)
def test_select_reduce_accumulates_a_max_across_calls(shape, cmds, target, seed):
    """reset_reduce starts from -inf, reduce keeps the running max, idle leaves the accumulators."""
    cmds = ["reset_reduce", *cmds]
    rng = np.random.default_rng(seed)
    p = shape[0]
    xs = [small_values(rng, shape, FP32, -20, 20) for _ in cmds]
    preds = [rng.integers(0, 2, size=shape).astype(np.uint8) for _ in cmds]

    def kernel(*hbm):
        res = tile((p, len(cmds)))
        for i, cmd in enumerate(cmds):
            nisa.select_reduce(
                dst=tile(shape),
                predicate=load(hbm[2 * i + 1]),
                on_true=load(hbm[2 * i]),
                on_false=-100.0,
                reduce_res=res[:, i : i + 1],
                reduce_cmd=getattr(nisa.reduce_cmd, cmd),
            )
        return store(res)

    got = run_kernel(kernel, [a for pair in zip(xs, preds) for a in pair], target)
    acc = np.full(p, -np.inf, F32)
    for i, cmd in enumerate(cmds):
        row_max = np.where(preds[i] != 0, xs[i], F32(-100)).reshape(p, -1).max(axis=1)
        if cmd == "reset_reduce":
            acc[:] = -np.inf
        if cmd != "idle":
            acc = np.maximum(acc, row_max)
        assert_values_equal(got[:, i], acc)


def test_select_reduce_hand_case():
    on_true = np.array([[1.0, 5.0, 3.0], [-1.0, -2.0, -3.0]], F32)
    pred = np.array([[1, 0, 1], [0, 0, 0]], np.int8)
    on_false = np.array([[-7.0], [-0.5]], F32)

    def kernel(t, pr, f):
        dst, res = tile((2, 3)), tile((2, 1))
        nisa.select_reduce(dst, load(pr), load(t), load(f), res, nisa.reduce_cmd.reset_reduce)
        return store(dst), store(res)

    dst, res = run_kernel(kernel, [on_true, pred, on_false])
    np.testing.assert_array_equal(dst, [[1.0, -7.0, 3.0], [-0.5, -0.5, -0.5]])
    np.testing.assert_array_equal(res, [[3.0], [-0.5]])


# -- range_select ---------------------------------------------------------------------

RANGE_COMPARE = ("equal", "less", "less_equal", "greater", "greater_equal")


@FAST
@given(
    shape=tile_shapes(max_dims=3, max_size=256),
    ops=st.tuples(st.sampled_from(RANGE_COMPARE), st.sampled_from(RANGE_COMPARE)),
    dtype=st.sampled_from((FP32, BF16, FP16, FP8_E4M3)),
    out=st.sampled_from((FP32, BF16, FP16)),
    range_start=st.integers(-300, 300),
    cmd=st.sampled_from(("reset_reduce", "reduce", "idle")),
    target=st.sampled_from(("trn2", "trn3")),
    seed=seeds,
)
@pytest.mark.placeholder_tiles
def test_range_select(shape, ops, dtype, out, range_start, cmd, target, seed):
    """The docstring's numpy equivalent; on_false_value and reduce_cmd are ignored (FP32_MIN, reset_reduce)."""
    rng = np.random.default_rng(seed)
    p = shape[0]
    n = int(np.prod(shape[1:]))
    data = random_values(rng, shape, dtype)
    b0 = rng.integers(range_start - 5, range_start + n + 5, size=(p, 1)).astype(F32)
    b1 = rng.integers(range_start - 5, range_start + n + 5, size=(p, 1)).astype(F32)

    def kernel(x, l0, l1):
        # a previous max in the accumulators, which range_select must not keep
        nisa.select_reduce(tile(shape), tile(shape, nl.uint8), load(x), 1e30, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        dst, res = tile(shape, out), tile((p, 1))
        nisa.range_select(
            dst=dst,
            on_true_tile=load(x),
            comp_op0=getattr(nl, ops[0]),
            comp_op1=getattr(nl, ops[1]),
            bound0=load(l0),
            bound1=load(l1),
            reduce_cmd=getattr(nisa.reduce_cmd, cmd),
            reduce_res=res,
            range_start=range_start,
            on_false_value=0.0,
        )
        return store(dst), store(res)

    got_dst, got_res = run_kernel(kernel, [data, b0, b1], target)
    indices = np.zeros((p, n), dtype=np.float32)
    indices[:] = range_start + np.arange(n)
    mask = COMPARE[ops[0]](indices, b0) & COMPARE[ops[1]](indices, b1)
    selected = np.where(mask, f32(data).reshape(p, -1), FP32_MIN)
    assert_values_equal(got_dst, ref_cast(selected.reshape(shape), out))
    assert_values_equal(got_res, selected.max(axis=1, keepdims=True).astype(F32))


def test_range_select_fill_becomes_minus_inf_in_low_precision():
    """FP32_MIN written to bf16 rounds to -inf; reduce_res in float32 keeps FP32_MIN."""
    x = np.ones((2, 4), F32)
    b0 = np.array([[1.0], [10.0]], F32)
    b1 = np.array([[3.0], [20.0]], F32)

    def kernel(a, l0, l1):
        dst, res = tile((2, 4), nl.bfloat16), tile((2, 1))
        nisa.range_select(dst, load(a), nl.greater_equal, nl.less, load(l0), load(l1), reduce_res=res)
        return store(dst), store(res)

    dst, res = run_kernel(kernel, [x, b0, b1], "trn2")
    np.testing.assert_array_equal(dst.astype(F32), [[-np.inf, 1, 1, -np.inf], [-np.inf] * 4])
    np.testing.assert_array_equal(res, [[1.0], [FP32_MIN]])


def test_range_select_needs_neuroncore_v3():
    def kernel():
        nisa.range_select(tile((4, 4)), tile((4, 4)), nl.less, nl.less, tile((4, 1)), tile((4, 1)))

    with pytest.raises(
        TargetError,
        match=r"nisa\.range_select \[Vector, trn1\]: needs vector_range_select, which trn2 \(NeuronCore-v3\) and trn3",
    ):
        profile_of(kernel, "trn1")


# -- constraints ----------------------------------------------------------------------


def T(*shape, dtype=nl.float32, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


PS = {"buffer": nl.psum}
U8 = {"dtype": nl.uint8}
aff, sel, rng_sel = nisa.affine_select, nisa.select_reduce, nisa.range_select
V, G = "Vector", "GpSimd"

# (instruction, engine, target, call, error, message)
CONSTRAINTS = [
    ("affine_select", G, "trn1", lambda: aff(T(4, 8, **PS), [[1, 8]], 0, 1, T(4, 8), 0.0),
     MemoryKindError, "dst is in PSUM, which the GpSimd Engine cannot access"),
    ("affine_select", G, "trn1", lambda: aff(T(4, 8), [[1, 8]], 0, 1, T(4, 8, **PS), 0.0),
     MemoryKindError, "on_true_tile is in PSUM"),
    ("affine_select", G, "trn2", lambda: aff(T(4, 8), [[1, 4]], 0, 1, T(4, 8), 0.0),
     ShapeError, "pattern yields 4 elements per partition but dst has 8"),
    ("affine_select", G, "trn1", lambda: aff(T(4, 8), [[1, 2]] * 5, 0, 1, T(4, 8), 0.0),
     OperandError, r"pattern must be 1 to 4 \[step, num\] pairs"),
    ("affine_select", G, "trn1", lambda: aff(T(4, 8), [[1, 8]], 0, 1, T(3, 8), 0.0),
     ShapeError, "dst partition dim 4 differs from on_true_tile partition dim 3"),
    ("affine_select", G, "trn1", lambda: aff(T(4, 8), [[1, 8]], 2**31, 1, T(4, 8), 0.0),
     OperandError, "offset 2147483648 is not an int32 value"),
    ("affine_select", G, "trn1", lambda: aff(T(4, 8), [[1, 8]], 0, 1, T(4, 8), 1e39),
     DtypeError, "on_false_value 1e\\+39 is not a float32 value"),
    ("affine_select", G, "trn1", lambda: aff(T(4, 8), [[1, 8]], 0, 1, T(4, 8), 0.0, nl.add),
     OperandError, "cmp_op nl.add is not supported"),
    ("affine_select", "", "trn1", lambda: aff(T(4, 8), [[1, 8]], 0, T(4, 8), 0.0),
     OperandError, "channel_multiplier"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 8), T(4, 8, **PS, **U8), T(4, 8, **PS), 0.0),
     MemoryKindError, "on_true and predicate must not both be in PSUM"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 8), T(4, 8, dtype=nl.int32), T(4, 8), 0.0),
     DtypeError, "predicate dtype int32 is not supported"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 8), T(4, 8, **U8), T(4, 8, dtype=nl.int32), 0.0),
     DtypeError, "on_true dtype int32 is not supported"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 8), T(4, 8, **U8), T(4, 8, dtype=nl.tfloat32), 0.0),
     DtypeError, "on_true dtype tfloat32 is not supported"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 8), T(4, 9, **U8), T(4, 8), 0.0),
     ShapeError, "predicate has 9 elements"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 7), T(4, 8, **U8), T(4, 8), 0.0),
     ShapeError, "dst has 7 elements"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 8), T(4, 8, **U8), T(4, 8), T(4, 2)),
     ShapeError, r"on_false shape \[4, 2\]"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 8), T(4, 8, **U8), T(4, 8), 0.0, T(4, 1, dtype=nl.int16)),
     DtypeError, "reduce_res dtype int16 must be a float type"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 8), T(4, 8, **U8), T(4, 8), 0.0, T(4, 2)),
     ShapeError, r"reduce_res shape \[4, 2\] must be \(4, 1\)"),
    ("select_reduce", V, "trn1", lambda: sel(T(4, 8), T(4, 8, **U8), T(4, 8), 0.0, reduce_op=nl.add),
     OperandError, "reduce_op nl.add is not supported"),
    ("select_reduce", V, "trn1",
     lambda: sel(T(4, 8), T(4, 8, **U8), T(4, 8), 0.0, reduce_cmd=nisa.reduce_cmd.load_reduce),
     OperandError, "reduce_cmd load_reduce is not supported"),
    ("range_select", V, "trn2", lambda: rng_sel(T(4, 8), T(4, 8), nl.not_equal, nl.less, T(4, 1), T(4, 1)),
     OperandError, "comp_op0 nl.not_equal is not supported"),
    ("range_select", V, "trn2",
     lambda: rng_sel(T(4, 8), T(4, 8), nl.less, nl.less, T(4, 1, dtype=nl.bfloat16), T(4, 1)),
     DtypeError, "bound0 dtype bfloat16 must be float32"),
    ("range_select", V, "trn3", lambda: rng_sel(T(4, 8), T(4, 8), nl.less, nl.less, T(4, 1), T(4, 2)),
     ShapeError, r"bound1 shape \[4, 2\] must be \(4, 1\)"),
    ("range_select", V, "trn2", lambda: rng_sel(T(4, 8), T(4, 8, dtype=nl.int16), nl.less, nl.less, T(4, 1), T(4, 1)),
     DtypeError, "on_true_tile dtype int16 must be a float type"),
    ("range_select", V, "trn2",
     lambda: rng_sel(T(4, 8), T(4, 8), nl.less, nl.less, T(4, 1), T(4, 1), reduce_op=nl.minimum),
     OperandError, "reduce_op nl.minimum is not supported"),
    ("range_select", V, "trn2", lambda: rng_sel(T(4, 8), T(4, 8), nl.less, nl.less, T(4, 1), T(4, 1), range_start=0.5),
     OperandError, "range_start 0.5 must be an integer"),
    ("range_select", V, "trn2",
     lambda: rng_sel(T(4, 8), T(4, 8), nl.less, nl.less, T(4, 1), T(4, 1), range_start=2**24),
     OperandError, "range_start \\+ free index reaches 16777223, beyond the 2\\^24"),
    ("range_select", V, "trn2", lambda: rng_sel(T(4, 9), T(4, 8), nl.less, nl.less, T(4, 1), T(4, 1)),
     ShapeError, "dst has 9 elements"),
    ("range_select", V, "trn2",
     lambda: rng_sel(T(4, 8), T(4, 8), nl.less, nl.less, T(4, 1), T(4, 1), reduce_res=T(4, 3)),
     ShapeError, r"reduce_res shape \[4, 3\]"),
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


def only_cost(kernel, opcode, target):
    (rec,) = [r for r in profile_of(kernel, target).instructions if r.opcode == opcode]
    return rec.end_ns - rec.start_ns, rec.engine


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("n", [16, 1024])
def test_affine_select_cost_is_gpsimd_startup_plus_n(target, n):
    hw = load_target(target)

    def kernel():
        nisa.affine_select(tile((128, n)), [[1, n]], 0, -1, tile((128, n)), 0.0)

    dur, engine = only_cost(kernel, "affine_select", target)
    assert engine == "GpSimd"
    assert dur == pytest.approx((hw.gpsimd.startup_cycles + n) / hw.gpsimd.clock_ghz)


@pytest.mark.parametrize("target", ["trn2", "trn3"])
@pytest.mark.parametrize("n", [16, 1024])
def test_range_select_cost(target, n):
    hw = load_target(target)

    def kernel():
        nisa.range_select(tile((128, n)), tile((128, n)), nl.less, nl.less, tile((128, 1)), tile((128, 1)))

    dur, engine = only_cost(kernel, "range_select", target)
    assert engine == "Vector"
    assert dur == pytest.approx(max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz)


@pytest.mark.parametrize(
    ("on_true", "predicate", "reduce_res", "cycles_per_element", "readout"),
    [
        (nl.sbuf, nl.sbuf, False, 2, 0),
        (nl.psum, nl.sbuf, False, 1, 0),
        (nl.sbuf, nl.psum, True, 1, 1),
        (nl.sbuf, nl.sbuf, True, 2, 1),
    ],
)
def test_select_reduce_cost(on_true, predicate, reduce_res, cycles_per_element, readout):
    """Estimate: max(MIN_II, N) split across SBUF/PSUM, else max(MIN_II, 2N); + MIN_II to read out reduce_res."""
    hw = load_target("trn1")
    n = 512

    def kernel():
        res = tile((128, 1)) if reduce_res else None
        nisa.select_reduce(
            tile((128, n)), tile((128, n), nl.uint8, predicate), tile((128, n), buffer=on_true), 0.0, res
        )

    dur, _ = only_cost(kernel, "select_reduce", "trn1")
    v = hw.vector
    assert dur == pytest.approx(
        (max(v.min_ii_cycles, cycles_per_element * n) + readout * v.min_ii_cycles) / v.clock_ghz
    )


@FAST
@given(p=partitions, target=targets)
def test_affine_select_accepts_every_partition_count(p, target):
    a = np.arange(p * 3, dtype=F32).reshape(p, 3)
    got = run_tile(lambda d, x: nisa.affine_select(d, [[0, 3]], 1, 0, x, 0.0, nl.not_equal), [a], a.shape, FP32)
    np.testing.assert_array_equal(got, a)  # 1 != 0 everywhere
