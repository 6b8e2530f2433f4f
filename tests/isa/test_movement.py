"""Data movement: dma_copy modes, dma_transpose, dma_compute, tensor_copy_predicated,
local_gather, nc_n_gather and nc_stream_shuffle.

Every expected value is a numpy port of the NKI 0.2 docstring (or its pseudo-code),
written here; every expected time is the documented formula over the hw constants.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim import BoundsError, DtypeError, MemoryKindError, OperandError, ShapeError, TargetError
from nkisim.hw import load_target

from .conftest import (
    ALL_DTYPES,
    BF16,
    FAST,
    FLOATS,
    INT8,
    INT32,
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
)

BIT_DTYPES = (*ALL_DTYPES, UINT16, UINT32)
REL = 1e-9
P = 128


def sbuf(shape, dtype=nl.float32):
    return nl.ndarray(tuple(shape), dtype=dtype, buffer=nl.sbuf)


def psum(shape, dtype=nl.float32):
    return nl.ndarray(tuple(shape), dtype=dtype, buffer=nl.psum)


def hbm(shape, dtype=nl.float32):
    return nl.ndarray(tuple(shape), dtype=dtype, buffer=nl.shared_hbm)


def only_instruction(kernel, inputs=(), target="trn1", opcode=None):
    """The profile record of the one instruction named ``opcode`` (or of the only instruction)."""
    profile = nkisim.run(kernel, list(inputs), target=target).profile
    recs = [r for r in profile.instructions if opcode is None or r.opcode == opcode]
    assert len(recs) == 1
    return recs[0]


def dma_bandwidth(hw):
    return hw.dma.engines * hw.dma.bytes_per_ns_per_engine


# == dma_copy: DGE modes, oob_mode, unique_indices ===================================


@FAST
@given(
    p=st.integers(1, 128),
    f=st.integers(1, 64),
    dtype=st.sampled_from(BIT_DTYPES),
    dge=st.sampled_from(list(nisa.dge_mode)),
    oob=st.sampled_from(list(nisa.oob_mode)),
    unique=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_dma_copy_modes_do_not_change_a_static_copy(p, f, dtype, dge, oob, unique, target, seed):
    """With static addresses nothing is out of bounds: every legal mode copies every bit."""
    if dge is nisa.dge_mode.hwdge and target == "trn1":
        dge = nisa.dge_mode.swdge
    a = random_bits(np.random.default_rng(seed), (p, f), dtype)

    def kernel(x):
        tile = sbuf(x.shape, x.dtype)
        nisa.dma_copy(tile, x, None, oob, dge, unique)  # every argument by position
        return store(tile)

    assert_bits_equal(run_kernel(kernel, [a], target), a)


@pytest.mark.parametrize("dge", [nisa.dge_mode.unknown, nisa.dge_mode.none, nisa.dge_mode.swdge])
def test_dma_copy_rmw_with_oob_skip_only_in_static_modes(dge):
    """dst_rmw_op with oob_mode.skip is legal unless the DGE mode is dynamic (swdge/hwdge)."""
    d0 = np.arange(12, dtype=np.float32).reshape(3, 4)
    s = np.full((3, 4), 0.5, np.float32)

    def kernel(d, x):
        tile = load(d)
        nisa.dma_copy(dst=tile, src=x, dst_rmw_op=nl.add, oob_mode=nisa.oob_mode.skip, dge_mode=dge)
        return store(tile)

    if dge is nisa.dge_mode.swdge:
        with pytest.raises(OperandError, match=r"oob_mode must be oob_mode.error when dst_rmw_op is used"):
            run_kernel(kernel, [d0, s])
    else:
        np.testing.assert_array_equal(run_kernel(kernel, [d0, s]), d0 + 0.5)


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_dma_copy_rmw_hwdge_needs_oob_error(target):
    d0 = np.ones((2, 8), np.float32)

    def kernel(d, oob):
        tile = load(d)
        nisa.dma_copy(dst=tile, src=d, dst_rmw_op=nl.add, oob_mode=oob, dge_mode=nisa.dge_mode.hwdge)
        return store(tile)

    got = run_kernel(lambda d: kernel(d, nisa.oob_mode.error), [d0], target)
    np.testing.assert_array_equal(got, 2 * d0)
    with pytest.raises(OperandError, match=r"\[DMA, trn\d\]: oob_mode must be oob_mode.error"):
        run_kernel(lambda d: kernel(d, nisa.oob_mode.skip), [d0], target)


def test_dma_copy_hwdge_needs_neuroncore_v3():
    def kernel(x):
        nisa.dma_copy(dst=sbuf(x.shape), src=x, dge_mode=nisa.dge_mode.hwdge)

    with pytest.raises(TargetError, match=r"\[DMA, trn1\]: dge_mode hwdge .* needs NeuronCore-v3"):
        run_kernel(kernel, [np.zeros((4, 4), np.float32)], "trn1")
    run_kernel(kernel, [np.zeros((4, 4), np.float32)], "trn2")


def test_dma_copy_rejects_other_rmw_ops_and_psum():
    def rmw(x):
        nisa.dma_copy(dst=load(x), src=x, dst_rmw_op=nl.multiply)

    with pytest.raises(OperandError, match=r"dst_rmw_op nl.multiply is not supported; only nl.add"):
        run_kernel(rmw, [np.zeros((4, 4), np.float32)])

    def from_psum(x):
        nisa.dma_copy(dst=hbm(x.shape), src=psum(x.shape))

    with pytest.raises(MemoryKindError, match=r"src must be in HBM or .*SBUF, not PSUM"):
        run_kernel(from_psum, [np.zeros((4, 4), np.float32)])


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_dma_copy_rmw_cost_is_dma_compute(target):
    """dst += src is DMA compute over [dst, src]: max((dst + src bytes) / 2, dst bytes) at 50% of the DMA rate."""
    hw = load_target(target)

    def kernel():
        nisa.dma_copy(dst=sbuf((P, 256), nl.bfloat16), src=hbm((P, 256)), dst_rmw_op=nl.add)

    rec = only_instruction(kernel, target=target)
    paced = max((P * 256 * 2 + P * 256 * 4) / 2, P * 256 * 2)
    assert hw.dma.compute_efficiency == 0.5
    expected = hw.dma.fixed_latency_ns + paced / (dma_bandwidth(hw) * hw.dma.compute_efficiency)
    assert rec.end_ns == pytest.approx(expected, rel=REL)


# == dma_transpose ===================================================================

PERMUTATIONS = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


@st.composite
def transpose_shapes(draw):
    """A 2-D to 4-D source whose first and last dims both fit in 128 partitions."""
    ndim = draw(st.integers(2, 4))
    first = draw(st.integers(1, 128))
    last = draw(st.integers(1, 128))
    middle = [draw(st.integers(1, 5)) for _ in range(ndim - 2)]
    return (first, *middle, last)


def transpose_reference(a):
    """The docstring's rule: [1, 0] for 2-D, [2, 1, 0] for 3-D, [3, 1, 2, 0] for 4-D."""
    out_shape = [a.shape[i] for i in PERMUTATIONS[a.ndim]]
    out = np.empty(out_shape, a.dtype)
    for index in np.ndindex(*a.shape):
        out[tuple(index[i] for i in PERMUTATIONS[a.ndim])] = a[index]
    return out


@FAST
@given(
    shape=transpose_shapes(),
    dtype=st.sampled_from(BIT_DTYPES),
    from_sbuf=st.booleans(),
    explicit_axes=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_dma_transpose_permutes_bits(shape, dtype, from_sbuf, explicit_axes, target, seed):
    """dst is src with its axes permuted, bit-exact, from HBM or SBUF."""
    if math.prod(shape) > 4096:
        shape = (min(shape[0], 16), *shape[1:-1], min(shape[-1], 16))
    a = random_bits(np.random.default_rng(seed), shape, dtype)
    expected = transpose_reference(a)

    def kernel(x):
        src = load(x) if from_sbuf else x
        dst = sbuf(expected.shape, x.dtype)
        axes = PERMUTATIONS[len(shape)] if explicit_axes else None
        nisa.dma_transpose(dst, src, axes)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [a], target), expected)


def test_dma_transpose_hand_cases():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)

    def kernel(x):
        dst = sbuf((3, 2), nl.int32)
        nisa.dma_transpose(dst=dst, src=x)
        return store(dst)

    np.testing.assert_array_equal(run_kernel(kernel, [a]), [[0, 3], [1, 4], [2, 5]])

    # 4-D: dst[l, j, k, i] = src[i, j, k, l]
    b = np.arange(2 * 3 * 1 * 4, dtype=np.float32).reshape(2, 3, 1, 4)

    def kernel4(x):
        dst = sbuf((4, 3, 1, 2))
        nisa.dma_transpose(dst=dst, src=x, axes=(3, 1, 2, 0))
        return store(dst)

    got = run_kernel(kernel4, [b])
    assert got[3, 2, 0, 1] == b[1, 2, 0, 3] == 23.0
    assert got[1, 0, 0, 0] == b[0, 0, 0, 1] == 1.0


def test_dma_transpose_dst_free_dims_may_be_flattened():
    """NKI 0.2 accepts a dst with the transposed partition dim and element count (row-major free dims)."""
    a = np.arange(2 * 3 * 4, dtype=np.float16).reshape(2, 3, 4)

    def kernel(x):
        dst = sbuf((4, 6), nl.float16)
        nisa.dma_transpose(dst=dst, src=x)
        return store(dst)

    expected = np.stack([a[:, :, k].T.reshape(-1) for k in range(4)])
    assert_bits_equal(run_kernel(kernel, [a]), expected)


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_dma_transpose_hwdge(target):
    """hwdge: src.shape[0] == 16, src.shape[-1] % 128 == 0 and a 2-byte dtype."""
    a = random_values(np.random.default_rng(0), (16, 128), BF16)

    def kernel(x):
        dst = sbuf((128, 16), nl.bfloat16)
        nisa.dma_transpose(dst=dst, src=load(x), dge_mode=nisa.dge_mode.hwdge)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [a], target), a.T.copy())


@pytest.mark.parametrize(
    ("shape", "dtype", "error", "match"),
    [
        ((8, 128), nl.bfloat16, ShapeError, r"src shape\[0\] is 8; a hwdge transpose needs 16"),
        ((16, 96), nl.float16, ShapeError, r"src shape\[-1\] is 96; a hwdge transpose needs a multiple of 128"),
        ((16, 128), nl.float32, DtypeError, r"src dtype float32 is not a 2-byte type"),
    ],
)
def test_dma_transpose_hwdge_constraints(shape, dtype, error, match):
    def kernel():
        src = sbuf(shape, dtype)
        nisa.dma_transpose(dst=sbuf(shape[::-1], dtype), src=src, dge_mode=nisa.dge_mode.hwdge)

    with pytest.raises(error, match=match):
        run_kernel(kernel, [], "trn2")


def test_dma_transpose_dge_modes():
    def kernel(mode):
        nisa.dma_transpose(dst=sbuf((128, 16), nl.bfloat16), src=sbuf((16, 128), nl.bfloat16), dge_mode=mode)

    with pytest.raises(TargetError, match=r"\[DMA, trn1\]: dge_mode hwdge .* needs NeuronCore-v3"):
        run_kernel(lambda: kernel(nisa.dge_mode.hwdge), [], "trn1")
    with pytest.raises(OperandError, match=r"dge_mode swdge is not valid for a direct transpose"):
        run_kernel(lambda: kernel(nisa.dge_mode.swdge), [], "trn2")
    run_kernel(lambda: kernel(nisa.dge_mode.unknown), [], "trn1")
    run_kernel(lambda: kernel(nisa.dge_mode.none), [], "trn1")  # NKI 0.3: static descriptors, no DGE


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: (sbuf((4, 8)), hbm((8, 4))), MemoryKindError, r"dst must be in SBUF, not"),
        (lambda: (sbuf((4, 8)), psum((8, 4))), MemoryKindError, r"dst must be in SBUF, not PSUM"),
        (lambda: (psum((4, 8)), sbuf((8, 4))), MemoryKindError, r"src must be in HBM or .*SBUF, not PSUM"),
        (lambda: (sbuf((4, 8), nl.bfloat16), sbuf((8, 4))), DtypeError, r"dst dtype float32 differs from src"),
        (lambda: (sbuf((8, 4)), sbuf((8, 4))), ShapeError, r"dst shape \[8, 4\] must be the transposed shape \[4, 8\]"),
        (lambda: (hbm((2, 2, 2, 2, 2)), sbuf((2, 16))), ShapeError, r"src is 5-D .* takes 2-D to 4-D"),
        (lambda: (hbm((8,)), sbuf((8, 1))), ShapeError, r"src is 1-D"),
    ],
)
def test_dma_transpose_rejects(make, error, match):
    def kernel():
        src, dst = make()  # (src, dst)
        nisa.dma_transpose(dst=dst, src=src)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


@pytest.mark.parametrize(("shape", "axes"), [((4, 8), (0, 1)), ((2, 3, 4), (1, 0)), ((2, 3, 4, 5), (3, 2, 1, 0))])
def test_dma_transpose_rejects_unsupported_axes(shape, axes):
    def kernel():
        out = [shape[i] for i in PERMUTATIONS[len(shape)]]
        nisa.dma_transpose(dst=sbuf(out), src=hbm(shape), axes=axes)

    with pytest.raises(OperandError, match=r"axes .* is not supported for a \d-D src; use"):
        run_kernel(kernel)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("from_sbuf", [False, True])
def test_dma_transpose_cost(target, from_sbuf):
    """Source bytes at 90% (from HBM) or 50% (from SBUF) of the DMA rate, after the trigger latency."""
    hw = load_target(target)

    def kernel():
        src = sbuf((64, 128), nl.bfloat16) if from_sbuf else hbm((64, 128), nl.bfloat16)
        nisa.dma_transpose(dst=sbuf((128, 64), nl.bfloat16), src=src)

    rec = only_instruction(kernel, target=target)
    efficiency = 0.5 if from_sbuf else 0.9
    assert (hw.dma.transpose_sbuf_efficiency, hw.dma.transpose_hbm_efficiency) == (0.5, 0.9)
    assert rec.engine.startswith("DMA q")
    assert rec.bytes == 64 * 128 * 2
    expected = hw.dma.fixed_latency_ns + 64 * 128 * 2 / (dma_bandwidth(hw) * efficiency)
    assert rec.end_ns == pytest.approx(expected, rel=REL)


# == dma_compute =====================================================================


def dma_compute_reference(srcs, scales, dst_dtype):
    """dst = srcs[0] * scales[0] + srcs[1] * scales[1] + ... in float32 (left to right), cast to dst."""
    acc = np.float32(0) + f32(srcs[0]).reshape(-1) * np.float32(scales[0])
    for s, c in zip(srcs[1:], scales[1:]):
        acc = (acc + f32(s).reshape(-1) * np.float32(c)).astype(np.float32)
    return ref_cast(acc, dst_dtype)


@FAST
@given(
    k=st.integers(1, 16),
    p=st.integers(1, 128),
    f=st.integers(1, 24),
    dtypes=st.lists(st.sampled_from((*FLOATS, INT32, INT8)), min_size=16, max_size=16),
    dst_dtype=st.sampled_from((*FLOATS, INT32)),
    places=st.lists(st.booleans(), min_size=17, max_size=17),
    target=targets,
    seed=seeds,
)
def test_dma_compute_sums_in_float32(k, p, f, dtypes, dst_dtype, places, target, seed):
    """Up to 16 sources from HBM or SBUF are added in float32 and cast to dst's dtype, in HBM or SBUF."""
    rng = np.random.default_rng(seed)
    srcs = [random_values(rng, (p, f), dt, scale=50.0) for dt in dtypes[:k]]
    expected = dma_compute_reference(srcs, [1.0] * k, dst_dtype).reshape(p, f)

    def kernel(*xs):
        operands = [load(x) if on_chip else x for x, on_chip in zip(xs, places)]
        dst = sbuf((p, f), dst_dtype) if places[16] else hbm((p, f), dst_dtype)
        nisa.dma_compute(dst, operands, [1.0] * k, nl.add)
        return store(dst) if places[16] else dst

    assert_values_equal(run_kernel(kernel, srcs, target), expected)


def test_dma_compute_hand_cases():
    """Left-to-right float32: (1e8 + 1) rounds back to 1e8, so 1e8 + 1 - 1e8 is 0; bf16 dst rounds to even."""
    a = np.array([[1e8, 1.0]], np.float32)
    b = np.array([[1.0, 2**-8]], np.float32)
    c = np.array([[-1e8, 0.0]], np.float32)

    def kernel(x, y, z):
        dst = sbuf((1, 2), nl.bfloat16)
        nisa.dma_compute(dst=dst, srcs=[x, y, z], scales=[1.0, 1.0, 1.0], reduce_op=nl.add)
        return store(dst)

    np.testing.assert_array_equal(run_kernel(kernel, [a, b, c]).astype(np.float64), [[0.0, 1.0]])


def test_dma_compute_shapes_may_differ_and_dst_may_be_a_source():
    """Elements pair in row-major order; dst may also be read as a source (read-modify-write)."""
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = np.arange(24, dtype=np.float32).reshape(6, 4) * 10

    def kernel(x, y):
        tile = load(x)
        nisa.dma_compute(dst=tile, srcs=(tile, y), scales=(1, 1), reduce_op=nl.add)
        return store(tile)

    np.testing.assert_array_equal(run_kernel(kernel, [a, b]), a + b.reshape(4, 6))


@pytest.mark.parametrize(
    ("n", "scales", "op", "error", "match"),
    [
        (17, None, nl.add, OperandError, r"srcs has 17 tensors; give 1 to 16"),
        (0, None, nl.add, OperandError, r"srcs has 0 tensors"),
        (2, [1.0], nl.add, OperandError, r"scales has 1 values for 2 srcs"),
        (2, [1.0, 2.0], nl.add, OperandError, r"scales \[1.0, 2.0\] must all be 1.0"),
        (2, None, nl.maximum, OperandError, r"reduce_op nl.maximum is not supported; only nl.add"),
    ],
)
def test_dma_compute_operand_rules(n, scales, op, error, match):
    def kernel():
        srcs = [hbm((4, 4)) for _ in range(n)]
        nisa.dma_compute(dst=sbuf((4, 4)), srcs=srcs, scales=[1.0] * n if scales is None else scales, reduce_op=op)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


def test_dma_compute_memory_and_size_rules():
    def count():
        nisa.dma_compute(dst=sbuf((4, 4)), srcs=[hbm((4, 4)), hbm((4, 5))], scales=[1.0, 1.0], reduce_op=nl.add)

    with pytest.raises(ShapeError, match=r"srcs\[1\] has 20 elements \(\[4, 5\]\) but dst has 16"):
        run_kernel(count)

    def from_psum():
        nisa.dma_compute(dst=sbuf((4, 4)), srcs=[hbm((4, 4)), psum((4, 4))], scales=[1.0, 1.0], reduce_op=nl.add)

    with pytest.raises(MemoryKindError, match=r"srcs\[1\] must be in HBM or SBUF, not PSUM"):
        run_kernel(from_psum)

    def into_psum():
        nisa.dma_compute(dst=psum((4, 4)), srcs=[hbm((4, 4))], scales=[1.0], reduce_op=nl.add)

    with pytest.raises(MemoryKindError, match=r"dst must be in HBM or .*SBUF, not PSUM"):
        run_kernel(into_psum)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_dma_compute_cost_and_dependencies(target):
    """It waits for a source made on Vector (its access latency, a semaphore), then runs at the DMA-compute rate."""
    hw = load_target(target)
    n = 512

    def kernel():
        a = sbuf((P, n))
        nisa.memset(dst=a, value=1.0)
        srcs = [a, hbm((P, n)), hbm((P, n), nl.bfloat16)]
        nisa.dma_compute(dst=hbm((P, n)), srcs=srcs, scales=[1.0] * 3, reduce_op=nl.add)

    profile = nkisim.run(kernel, [], target=target).profile
    memset, compute = profile.instructions
    src_bytes = P * n * (4 + 4 + 2)
    busy = max(src_bytes / 2, P * n * 4) / (dma_bandwidth(hw) * hw.dma.compute_efficiency)
    # the memset's result is visible an access latency after its end, then a semaphore
    start = memset.end_ns + hw.vector.access_latency_cycles / hw.vector.clock_ghz + hw.sync.semaphore_latency_ns
    assert compute.start_ns == pytest.approx(start, rel=REL)
    assert compute.end_ns == pytest.approx(start + hw.dma.fixed_latency_ns + busy, rel=REL)


# == tensor_copy_predicated ==========================================================


@FAST
@given(
    p=st.integers(1, 128),
    free=st.sampled_from([(1,), (7,), (64,), (3, 5), (2, 2, 4)]),
    dtype=st.sampled_from(BIT_DTYPES),
    pred_dtype=st.sampled_from((UINT8, UINT16, UINT32)),
    reverse=st.booleans(),
    where=st.sampled_from(["sbuf", "src_psum", "pred_psum", "scalar"]),
    target=targets,
    seed=seeds,
)
def test_tensor_copy_predicated(p, free, dtype, pred_dtype, reverse, where, target, seed):
    """dst = src where predicate != 0 (== 0 when reversed); elsewhere dst keeps its bits."""
    rng = np.random.default_rng(seed)
    shape = (p, *free)
    old = random_bits(rng, shape, dtype)
    src = random_bits(rng, shape, dtype)
    pred = rng.choice(np.array([0, 0, 1, 2, 255, np.iinfo(pred_dtype).max], dtype=np.uint64), size=shape)
    pred = pred.astype(pred_dtype)
    take = (pred != 0) != reverse
    if where == "scalar":
        value = 3 if dtype.kind in "iu" else -1.5
        new = np.full(shape, value, dtype=np.float64).astype(dtype)
    else:
        new = src
    expected = np.where(take, new.view(f"u{dtype.itemsize}"), old.view(f"u{dtype.itemsize}")).view(dtype)

    def kernel(o, s, pr):
        dst = load(o)
        source = value if where == "scalar" else load(s, "psum" if where == "src_psum" else "sbuf")
        predicate = load(pr, "psum" if where == "pred_psum" else "sbuf")
        nisa.tensor_copy_predicated(dst, source, predicate, reverse)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [old, src, pred], target), expected)


def test_tensor_copy_predicated_hand_case():
    old = np.array([[1, 2, 3, 4]], np.int32)
    src = np.array([[10, 20, 30, 40]], np.int32)
    pred = np.array([[0, 1, 0, 7]], np.uint8)

    def kernel(o, s, pr, reverse):
        dst = load(o)
        nisa.tensor_copy_predicated(dst=dst, src=load(s), predicate=load(pr), reverse_pred=reverse)
        return store(dst)

    np.testing.assert_array_equal(run_kernel(lambda *a: kernel(*a, False), [old, src, pred]), [[1, 20, 3, 40]])
    np.testing.assert_array_equal(run_kernel(lambda *a: kernel(*a, True), [old, src, pred]), [[10, 2, 30, 4]])


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: (sbuf((4, 8)), sbuf((4, 8)), sbuf((4, 8), nl.int8)),
            DtypeError,
            r"predicate dtype int8 must be uint8",
        ),
        (lambda: (sbuf((4, 8)), sbuf((4, 8)), sbuf((4, 8))), DtypeError, r"predicate dtype float32 must be"),
        (lambda: (sbuf((4, 8)), sbuf((4, 8), nl.bfloat16), sbuf((4, 8), nl.uint8)), DtypeError, r"src dtype bfloat16"),
        (lambda: (sbuf((4, 8)), sbuf((4, 9)), sbuf((4, 8), nl.uint8)), ShapeError, r"src has 9 elements per partition"),
        (lambda: (sbuf((4, 8)), sbuf((4, 8)), sbuf((2, 8), nl.uint8)), ShapeError, r"predicate partition dim 2"),
        (lambda: (sbuf((4, 8)), psum((4, 8)), psum((4, 8), nl.uint8)), MemoryKindError, r"must not both be in PSUM"),
        (lambda: (sbuf((4, 8)), hbm((4, 8)), sbuf((4, 8), nl.uint8)), MemoryKindError, r"src must be in SBUF or PSUM"),
        (lambda: (sbuf((4, 8), nl.int32), 1.5, sbuf((4, 8), nl.uint8)), DtypeError, r"src 1.5 is not an integer"),
    ],
)
def test_tensor_copy_predicated_rejects(make, error, match):
    def kernel():
        dst, src, pred = make()
        nisa.tensor_copy_predicated(dst=dst, src=src, predicate=pred)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize(
    ("src_buffer", "pred_buffer", "cycles_per_element"),
    [("sbuf", "sbuf", 2), ("sbuf", "psum", 1), ("psum", "sbuf", 1), ("scalar", "sbuf", 1)],
)
@pytest.mark.parametrize("n", [16, 512])
def test_tensor_copy_predicated_cost(target, src_buffer, pred_buffer, cycles_per_element, n):
    """max(MIN_II, 2N) with src and predicate both in SBUF, else max(MIN_II, N) Vector cycles."""
    hw = load_target(target)

    def kernel():
        src = 0.0 if src_buffer == "scalar" else nl.ndarray((P, n), dtype=nl.float32, buffer=src_buffer)
        pred = nl.ndarray((P, n), dtype=nl.uint8, buffer=pred_buffer)
        nisa.tensor_copy_predicated(dst=sbuf((P, n)), src=src, predicate=pred)

    rec = only_instruction(kernel, target=target)
    assert rec.engine == "Vector"
    expected = max(hw.vector.min_ii_cycles, cycles_per_element * n) / hw.vector.clock_ghz
    assert rec.end_ns == pytest.approx(expected, rel=REL)


# == local_gather ====================================================================


def local_gather_reference(src, index, nepi, num_valid):
    """Ported from the docstring: each 16-partition core flattens its index slice partition-first,
    keeps num_valid indices, and every partition of the core reads nepi elements from each index."""
    p = src.shape[0]
    flat_src = src.reshape(p, -1)
    flat_idx = index.reshape(p, -1)
    out = []
    for core in range(p // 16):
        rows = slice(16 * core, 16 * core + 16)
        indices_1d = flat_idx[rows].flatten(order="F")[:num_valid]
        for q in range(16 * core, 16 * core + 16):
            out.append(np.concatenate([flat_src[q, i : i + nepi] for i in indices_1d]))
    return np.stack(out)


@st.composite
def local_gather_cases(draw):
    cores = draw(st.integers(1, 8))
    nepi = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    k = draw(st.integers(1, 4))
    valid = draw(st.one_of(st.none(), st.integers(1, 16 * k)))
    src_free = draw(st.sampled_from([(nepi,), (40,), (8, 8), (2, 3, 16)]))
    if math.prod(src_free) < nepi:
        src_free = (nepi, 2)
    return cores * 16, nepi, k, valid, src_free


@FAST
@given(
    case=local_gather_cases(),
    dtype=st.sampled_from(BIT_DTYPES),
    shaped_dst=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_local_gather(case, dtype, shaped_dst, target, seed):
    """Every partition gathers its own elements at its core's shared offsets; bits are unchanged."""
    p, nepi, k, valid, src_free = case
    rng = np.random.default_rng(seed)
    src = random_bits(rng, (p, *src_free), dtype)
    f = math.prod(src_free)
    index = rng.integers(0, f - nepi + 1, size=(p, k)).astype(np.uint16)
    n_valid = 16 * k if valid is None else valid
    expected = local_gather_reference(src, index, nepi, n_valid)
    dst_shape = (p, n_valid, nepi) if shaped_dst else (p, n_valid * nepi)

    def kernel(s, i):
        dst = sbuf(dst_shape, s.dtype)
        nisa.local_gather(dst, load(s), load(i), nepi, valid)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [src, index], target).reshape(p, -1), expected)


def test_local_gather_hand_case():
    """Core 0 gets offsets [3, 0, 5] (partition-first from a (16, 2) index slice), 2 elements each."""
    src = np.arange(16 * 8, dtype=np.int16).reshape(16, 8)
    index = np.zeros((16, 2), np.uint16)
    index[0, 0], index[1, 0], index[0, 1] = 3, 0, 5  # flattened partition-first: [3, 0, 0, ..., 0, 5, 0, ...]

    def kernel(s, i):
        dst = sbuf((16, 6), nl.int16)
        nisa.local_gather(dst=dst, src_buffer=load(s), index=load(i), num_elem_per_idx=2, num_valid_indices=3)
        return store(dst)

    got = run_kernel(kernel, [src, index])
    np.testing.assert_array_equal(got[0], [3, 4, 0, 1, 0, 1])
    np.testing.assert_array_equal(got[5], [43, 44, 40, 41, 40, 41])


def test_local_gather_out_of_bounds_index_is_an_error():
    def kernel(i):
        dst = sbuf((16, 2))
        nisa.local_gather(dst=dst, src_buffer=sbuf((16, 8)), index=load(i), num_elem_per_idx=2, num_valid_indices=1)

    index = np.full((16, 1), 7, np.uint16)
    with pytest.raises(BoundsError, match=r"nisa.local_gather.*index value 7 \+ num_elem_per_idx 2 reaches past"):
        run_kernel(kernel, [index])


def gather_operands(dst, src, idx):
    """SBUF tiles from (shape, dtype) pairs: dst, src_buffer and index."""
    return tuple(sbuf(shape, dtype) for shape, dtype in (dst, src, idx))


F4, U16 = nl.float32, nl.uint16


@pytest.mark.parametrize(
    ("dst", "src", "idx", "kwargs", "error", "match"),
    [
        (((16, 4), F4), ((16, 8), F4), ((16, 1), nl.uint32), {}, DtypeError, r"index dtype uint32 must be uint16"),
        (((16, 16), nl.bfloat16), ((16, 8), F4), ((16, 1), U16), {}, DtypeError, r"dst dtype bfloat16 differs"),
        (((24, 24), F4), ((24, 8), F4), ((24, 1), U16), {}, ShapeError, r"partition dim 24 is not a multiple of 16"),
        (((32, 16), F4), ((32, 8), F4), ((16, 1), U16), {}, ShapeError, r"index partition dim 16 differs"),
        (((16, 16), F4), ((32, 8), F4), ((32, 1), U16), {}, ShapeError, r"dst partition dim 16 differs"),
        (((16, 48), F4), ((16, 8), F4), ((16, 1), U16), {"num_elem_per_idx": 3}, OperandError, r"num_elem_per_idx 3"),
        (((16, 17), F4), ((16, 8), F4), ((16, 1), U16), {"num_valid_indices": 17}, OperandError, r"17 must be from"),
        (((16, 1), F4), ((16, 8), F4), ((16, 1), U16), {"num_valid_indices": 0}, OperandError, r"0 must be from 1"),
        (((16, 4112), F4), ((16, 8), F4), ((16, 257), U16), {}, OperandError, r"4112 indices per core exceed 4096"),
        (((16, 15), F4), ((16, 8), F4), ((16, 1), U16), {}, ShapeError, r"dst has 15 elements per partition; 16"),
    ],
)
def test_local_gather_rejects(dst, src, idx, kwargs, error, match):
    def kernel():
        d, s, i = gather_operands(dst, src, idx)
        nisa.local_gather(dst=d, src_buffer=s, index=i, **kwargs)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


def test_local_gather_memories():
    def kernel():
        nisa.local_gather(dst=psum((16, 16)), src_buffer=sbuf((16, 8)), index=sbuf((16, 1), nl.uint16))

    with pytest.raises(MemoryKindError, match=r"\[GpSimd, trn1\]: dst is in PSUM"):
        run_kernel(kernel)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize(("nepi", "dtype", "valid"), [(1, nl.float32, 64), (32, nl.bfloat16, 100), (4, nl.int8, 16)])
def test_local_gather_cost(target, nepi, dtype, valid):
    """GPSIMD_START + num_valid * nepi * C, C = ((28 + 4 n) / (4 n)) / min(4 / dtype_size, n) cycles per element."""
    hw = load_target(target)
    size = np.dtype(nl.bfloat16 if dtype is nl.bfloat16 else dtype).itemsize

    def kernel(i):
        nisa.local_gather(sbuf((P, valid * nepi), dtype), sbuf((P, 64), dtype), load(i), nepi, valid)

    rec = only_instruction(kernel, [np.zeros((P, 8), np.uint16)], target, opcode="local_gather")
    c = ((28 + 4 * nepi) / (4 * nepi)) / min(4 / size, nepi)
    assert rec.engine == "GpSimd"
    expected = (150 + valid * nepi * c) / hw.gpsimd.clock_ghz
    assert rec.end_ns - rec.start_ns == pytest.approx(expected, rel=REL)
    # by hand, for fp32 and one element per index: 150 + 64 * 8 = 662 cycles
    if (nepi, dtype) == (1, nl.float32):
        assert expected * hw.gpsimd.clock_ghz == pytest.approx(662)


# == nc_n_gather =====================================================================


@FAST
@given(
    p=st.integers(1, 128),
    data_free=st.sampled_from([(1,), (9,), (4, 8), (2, 3, 5), (600,)]),
    idx_free=st.sampled_from([(1,), (5,), (3, 4), (40,)]),
    dtype=st.sampled_from(BIT_DTYPES),
    target=targets,
    seed=seeds,
)
def test_nc_n_gather(p, data_free, idx_free, dtype, target, seed):
    """Within each partition, dst[j] = data.flat[indices.flat[j]], bit for bit; indices' shape shapes dst."""
    rng = np.random.default_rng(seed)
    data = random_bits(rng, (p, *data_free), dtype)
    indices = rng.integers(0, math.prod(data_free), size=(p, *idx_free)).astype(np.uint32)
    expected = np.stack([data[q].reshape(-1)[indices[q].reshape(-1)].reshape(idx_free) for q in range(p)])

    def kernel(d, i):
        dst = sbuf((p, *idx_free), d.dtype)
        nisa.nc_n_gather(dst, load(d), load(i))
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [data, indices], target), expected)


def test_nc_n_gather_hand_case_and_bounds():
    data = np.array([[10, 11, 12], [20, 21, 22]], np.float16)
    indices = np.array([[2, 2, 0, 1], [1, 0, 0, 2]], np.uint32)

    def kernel(d, i):
        dst = sbuf((2, 4), nl.float16)
        nisa.nc_n_gather(dst=dst, data=load(d), indices=load(i))
        return store(dst)

    np.testing.assert_array_equal(run_kernel(kernel, [data, indices]), [[12, 12, 10, 11], [21, 20, 20, 22]])
    with pytest.raises(BoundsError, match=r"nisa.nc_n_gather.*indices value 3 is outside \[0, 3\)"):
        run_kernel(kernel, [data, indices + 1])


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: (sbuf((4, 8)), sbuf((4, 8)), sbuf((4, 8), nl.int32)),
            DtypeError,
            r"indices dtype int32 must be uint32",
        ),
        (lambda: (sbuf((4, 8), nl.int32), sbuf((4, 8)), sbuf((4, 8), nl.uint32)), DtypeError, r"dst dtype int32"),
        (lambda: (sbuf((4, 8)), sbuf((2, 8)), sbuf((4, 8), nl.uint32)), ShapeError, r"indices partition dim 4 differs"),
        (
            lambda: (sbuf((4, 6)), sbuf((4, 8)), sbuf((4, 8), nl.uint32)),
            ShapeError,
            r"dst has 6 elements per partition",
        ),
        (
            lambda: (sbuf((4, 8)), psum((4, 8)), sbuf((4, 8), nl.uint32)),
            MemoryKindError,
            r"data is in PSUM, which the GpSimd Engine cannot",
        ),
    ],
)
def test_nc_n_gather_rejects(make, error, match):
    def kernel():
        dst, data, idx = make()
        nisa.nc_n_gather(dst=dst, data=data, indices=idx)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("n", [1, 512, 513, 2000])
def test_nc_n_gather_cost(target, n):
    """Our estimate: ceil(N / 512) groups, each GPSIMD_START cycles, plus one cycle per gathered element."""
    hw = load_target(target)

    def kernel(i):
        nisa.nc_n_gather(dst=sbuf((P, n)), data=sbuf((P, 64)), indices=load(i))

    rec = only_instruction(kernel, [np.zeros((P, n), np.uint32)], target, opcode="nc_n_gather")
    assert rec.engine == "GpSimd"
    expected = (math.ceil(n / 512) * 150 + n) / hw.gpsimd.clock_ghz
    assert rec.end_ns - rec.start_ns == pytest.approx(expected, rel=REL)


# == nc_stream_shuffle ===============================================================


def shuffle_reference(dst, src, mask):
    """Per quadrant of 32 partitions: dst[i] = src[mask[i]], and mask[i] == 255 keeps dst[i]."""
    out = dst.copy()
    for d in range(dst.shape[0]):
        q, i = divmod(d, 32)
        if mask[i] != 255:
            out[d] = src[32 * q + mask[i]]
    return out


@st.composite
def shuffle_cases(draw):
    quadrants = draw(st.integers(1, 4))
    dst_p = draw(st.integers(32 * quadrants - 31, 32 * quadrants))
    src_p = draw(st.integers(32 * (quadrants - 1) + 1, 32 * quadrants))
    # src partitions that every quadrant of dst can reach
    reach = src_p - 32 * (quadrants - 1)
    mask = [draw(st.one_of(st.integers(0, reach - 1), st.just(255))) for _ in range(32)]
    return dst_p, src_p, mask


@FAST
@given(
    case=shuffle_cases(),
    f=st.sampled_from([1, 5, 64]),
    dtype=st.sampled_from(BIT_DTYPES),
    buffers=st.sampled_from([("sbuf", "sbuf"), ("psum", "sbuf"), ("sbuf", "psum"), ("psum", "psum")]),
    in_place=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_nc_stream_shuffle(case, f, dtype, buffers, in_place, target, seed):
    dst_p, src_p, mask = case
    if in_place:
        src_p = dst_p = max(dst_p, src_p)
    rng = np.random.default_rng(seed)
    old = random_bits(rng, (dst_p, f), dtype)
    src = old if in_place else random_bits(rng, (src_p, f), dtype)
    expected = shuffle_reference(old, src, mask)

    def kernel(o, s):
        dst = load(o, buffers[0])
        source = dst if in_place else load(s, buffers[1])
        nisa.nc_stream_shuffle(dst, source, mask)
        return store(dst)

    assert_bits_equal(run_kernel(kernel, [old, src], target), expected)


def test_nc_stream_shuffle_hand_cases():
    """Rotate by one partition in place; broadcast one partition to 32."""
    a = np.arange(64 * 2, dtype=np.float32).reshape(64, 2)

    def rotate(x):
        t = load(x)
        nisa.nc_stream_shuffle(dst=t, src=t, shuffle_mask=[(i + 1) % 32 for i in range(32)])
        return store(t)

    got = run_kernel(rotate, [a])
    np.testing.assert_array_equal(got[0], [2, 3])
    np.testing.assert_array_equal(got[31], [0, 1])
    np.testing.assert_array_equal(got[32], [66, 67])  # the second quadrant rotates by itself
    np.testing.assert_array_equal(got[63], [64, 65])

    def broadcast(x):
        t = load(x)
        dst = sbuf((32, 2))
        nisa.nc_stream_shuffle(dst=dst, src=t[32:33, :], shuffle_mask=[0] * 32)
        return store(dst)

    np.testing.assert_array_equal(run_kernel(broadcast, [a]), np.tile([[64.0, 65.0]], (32, 1)))


@pytest.mark.parametrize(
    ("src_rows", "dst_rows", "ok"),
    [
        ((32, 64), (0, 32), True),  # 32 active: starts 0/32/64/96
        ((96, 128), (64, 96), True),
        ((16, 48), (0, 32), False),
        ((64, 128), (0, 64), True),  # 64 active: starts 0/64
        ((32, 96), (0, 64), False),
        ((0, 96), (0, 96), True),  # 96 active: start 0
        ((0, 65), (64, 128), False),
    ],
)
def test_nc_stream_shuffle_start_partitions(src_rows, dst_rows, ok):
    def kernel():
        big = sbuf((128, 4))
        out = sbuf((128, 4))
        mask = [0] * 32
        nisa.nc_stream_shuffle(
            dst=out[dst_rows[0] : dst_rows[1], :], src=big[src_rows[0] : src_rows[1], :], shuffle_mask=mask
        )

    if ok:
        run_kernel(kernel)
    else:
        with pytest.raises(ShapeError, match=r"starts at partition \d+; with \d+ active partitions it must start at"):
            run_kernel(kernel)


@pytest.mark.parametrize(
    ("make", "mask", "error", "match"),
    [
        (lambda: (sbuf((32, 4), nl.bfloat16), sbuf((32, 4))), [0] * 32, DtypeError, r"dst dtype bfloat16 differs"),
        (
            lambda: (sbuf((32, 4)), sbuf((32, 5))),
            [0] * 32,
            ShapeError,
            r"dst has 4 elements per partition but src has 5",
        ),
        (
            lambda: (sbuf((32, 4)), sbuf((32, 4))),
            [0] * 31,
            OperandError,
            r"shuffle_mask has 31 elements; it must have 32",
        ),
        (lambda: (sbuf((32, 4)), sbuf((32, 4))), [40] + [0] * 31, OperandError, r"shuffle_mask\[0\] 40 must be"),
        (
            lambda: (sbuf((32, 4)), sbuf((8, 4))),
            [0] * 31 + [9],
            ShapeError,
            r"shuffle_mask\[31\] 9 sends src partition 9",
        ),
        (lambda: (sbuf((64, 4)), sbuf((32, 4))), [0] * 32, ShapeError, r"sends src partition 32 to dst partition 32"),
        (lambda: (sbuf((32, 4)), hbm((32, 4))), [0] * 32, MemoryKindError, r"src must be in SBUF or PSUM"),
    ],
)
def test_nc_stream_shuffle_rejects(make, mask, error, match):
    def kernel():
        dst, src = make()
        nisa.nc_stream_shuffle(dst=dst, src=src, shuffle_mask=mask)

    with pytest.raises(error, match=match):
        run_kernel(kernel)


def test_nc_stream_shuffle_all_255_keeps_dst():
    a = np.arange(64 * 3, dtype=np.int32).reshape(64, 3)

    def kernel(x):
        t = load(x)
        nisa.nc_stream_shuffle(dst=t, src=sbuf((64, 3), nl.int32), shuffle_mask=[255] * 32)
        return store(t)

    np.testing.assert_array_equal(run_kernel(kernel, [a]), a)


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("n", [16, 100, 2048])
def test_nc_stream_shuffle_cost(target, n):
    """max(MIN_II, N) Vector cycles."""
    hw = load_target(target)

    def kernel():
        nisa.nc_stream_shuffle(
            dst=sbuf((P, n), nl.bfloat16), src=psum((P, n), nl.bfloat16), shuffle_mask=list(range(32))
        )

    rec = only_instruction(kernel, target=target)
    assert rec.engine == "Vector"
    assert rec.end_ns == pytest.approx(max(hw.vector.min_ii_cycles, n) / hw.vector.clock_ghz, rel=REL)
