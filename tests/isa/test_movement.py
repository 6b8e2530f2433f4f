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
from nkisim import DtypeError, MemoryKindError, OperandError, ShapeError, TargetError
from nkisim.hw import load_target

from .conftest import (
    BF16,
    BIT_DTYPES,
    FAST,
    FLOATS,
    INT8,
    INT32,
    REL,
    P,
    assert_bits_equal,
    assert_values_equal,
    f32,
    hbm,
    load,
    only_instruction,
    psum,
    random_bits,
    random_values,
    ref_cast,
    run_kernel,
    sbuf,
    seeds,
    store,
    targets,
)


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


@pytest.mark.placeholder_tiles
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


@pytest.mark.filterwarnings(r"ignore:.*\[saturation\]:nkisim.CheckWarning")  # saturating casts on purpose
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
