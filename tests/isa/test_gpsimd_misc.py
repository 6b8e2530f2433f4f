"""GpSimd index instructions: sequence_bounds and nonzero_with_count.

sequence_bounds (docs): for each id, the start and end of its segment (a run of equal
ids, end one past the last), padding id 0 giving start ``n`` and end ``-1``.
nonzero_with_count (docs, NeuronCore-v3+): on partitions 0, 16, ..., 112 only, the
nonzero positions plus ``index_offset``, then ``padding_val``, then the count.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import DtypeError, MemoryKindError, OperandError, ShapeError, TargetError
from nkisim.hw import load_target

from .conftest import FAST, FP32, INT32, load, run_kernel, seeds, store, targets

# -- sequence_bounds ------------------------------------------------------------------


def bounds_reference(ids):
    """Forward pass for starts, backward pass for ends (exclusive), padding (0) -> (n, -1)."""
    n = len(ids)
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if ids[i] == 0:
            start[i] = n
        elif i > 0 and ids[i] == ids[i - 1]:
            start[i] = start[i - 1]
        else:
            start[i] = i
    for i in range(n - 1, -1, -1):
        if ids[i] == 0:
            end[i] = -1
        elif i < n - 1 and ids[i] == ids[i + 1]:
            end[i] = end[i + 1]
        else:
            end[i] = i + 1
    return np.stack([start, end])[None]


def bounds_kernel(dst_dtype):
    def kernel(ids):
        t = load(ids)
        dst = nl.ndarray((1, 2, ids.shape[1]), dtype=dst_dtype, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=dst, segment_ids=t)
        return store(dst)

    return kernel


def test_sequence_bounds_documented_example():
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], dtype=np.int32)
    got = run_kernel(bounds_kernel(nl.int32), [ids])
    np.testing.assert_array_equal(got, [[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]])


@FAST
@given(
    n=st.integers(1, 600),
    dtype=st.sampled_from((FP32, INT32)),
    dst_dtype=st.sampled_from((FP32, INT32)),
    sort=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_sequence_bounds_matches_run_reference(n, dtype, dst_dtype, sort, target, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, max(2, n // 8), size=n)
    if sort:
        ids = np.sort(ids)
    ids = ids.reshape(1, n).astype(dtype)
    got = run_kernel(bounds_kernel(dst_dtype), [ids], target)
    assert got.dtype == dst_dtype
    np.testing.assert_array_equal(got, bounds_reference(ids[0]).astype(dst_dtype))


# -- nonzero_with_count ---------------------------------------------------------------


def nonzero_reference(src, before, offset, padding):
    out = before.astype(np.int64).copy()
    n = src.shape[1]
    for p in range(0, src.shape[0], 16):
        hits = [i + offset for i in range(n) if src[p, i] != 0]
        row = hits + [padding] * (n - len(hits)) + [len(hits)]
        out[p] = row
    return out.astype(np.int32)


def nonzero_kernel(offset, padding):
    def kernel(src, before):
        s, d = load(src), load(before)
        nisa.nonzero_with_count(dst=d, src=s, index_offset=offset, padding_val=padding)
        return store(d)

    return kernel


@FAST
@given(
    p=st.integers(1, 128),
    n=st.integers(1, 300),
    dtype=st.sampled_from((FP32, INT32)),
    density=st.sampled_from([0.0, 0.3, 1.0]),
    offset=st.integers(-1000, 1000),
    padding=st.sampled_from([-1, 0, 7, -(2**31)]),
    target=st.sampled_from(["trn2", "trn3"]),
    seed=seeds,
)
def test_nonzero_with_count_on_every_16th_partition(p, n, dtype, density, offset, padding, target, seed):
    rng = np.random.default_rng(seed)
    src = np.where(rng.random((p, n)) < density, rng.integers(-5, 6, size=(p, n)), 0).astype(dtype)
    before = rng.integers(-(2**31), 2**31, size=(p, n + 1)).astype(np.int32)
    got = run_kernel(nonzero_kernel(offset, padding), [src, before], target)
    np.testing.assert_array_equal(got, nonzero_reference(src, before, offset, padding))


def test_nonzero_with_count_documented_example_and_signed_zero():
    src = np.zeros((17, 8), dtype=np.float32)
    src[0] = [0, 1, 1, 0, 0, 1, 0, 0]
    src[16] = [-0.0, np.nan, 0, 0, 0, 0, 0, 2]
    before = np.full((17, 9), 5, dtype=np.int32)
    got = run_kernel(nonzero_kernel(16, -1), [src, before], "trn2")
    np.testing.assert_array_equal(got[0], [17, 18, 21, -1, -1, -1, -1, -1, 3])
    np.testing.assert_array_equal(got[16], [17, 23, -1, -1, -1, -1, -1, -1, 2])
    np.testing.assert_array_equal(got[1:16], before[1:16])


# -- costs ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_costs_are_gpsimd_start_plus_n(target):
    hw = load_target(target)
    n = 300

    def kernel():
        ids = nl.ndarray((1, n), dtype=nl.int32, buffer=nl.sbuf)
        b = nl.ndarray((1, 2, n), dtype=nl.int32, buffer=nl.sbuf)
        nisa.sequence_bounds(dst=b, segment_ids=ids)
        src = nl.ndarray((128, n), dtype=nl.float32, buffer=nl.sbuf)
        dst = nl.ndarray((128, n + 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.nonzero_with_count(dst=dst, src=src)

    profile = nkisim.profile(kernel, [], target=target)
    expected = (hw.gpsimd.startup_cycles + n) / hw.gpsimd.clock_ghz
    for rec in profile.instructions:
        assert rec.engine == "GpSimd"
        assert rec.end_ns - rec.start_ns == pytest.approx(expected)


# -- validation -----------------------------------------------------------------------


def fails(kernel, error, match, target="trn2"):
    with pytest.raises(error, match=match):
        nkisim.run(kernel, [], target=target)


def sb(shape, dtype=nl.int32, buffer=nl.sbuf):
    return nl.ndarray(shape, dtype=dtype, buffer=buffer)


def test_sequence_bounds_validation():
    fails(lambda: nisa.sequence_bounds(dst=sb((2, 2, 8)), segment_ids=sb((2, 8))), ShapeError, r"partition dim 2")
    fails(lambda: nisa.sequence_bounds(dst=sb((1, 2, 8)), segment_ids=sb((1, 8), nl.bfloat16)), DtypeError, r"bf")
    fails(lambda: nisa.sequence_bounds(dst=sb((1, 2, 8), nl.uint32), segment_ids=sb((1, 8))), DtypeError, r"dst")
    fails(lambda: nisa.sequence_bounds(dst=sb((1, 2, 7)), segment_ids=sb((1, 8))), ShapeError, r"dst.*\[1, 2, 8\]")
    fails(lambda: nisa.sequence_bounds(dst=sb((1, 4, 4)), segment_ids=sb((1, 8))), ShapeError, r"dst.*\[1, 2, 8\]")
    fails(
        lambda: nisa.sequence_bounds(dst=sb((1, 2, 8), buffer=nl.psum), segment_ids=sb((1, 8))),
        MemoryKindError,
        r"PSUM",
    )


def test_nonzero_with_count_validation():
    def call(dst=((128, 9), nl.int32), src=((128, 8), nl.float32), offset=0, padding=-1, src_buffer=nl.sbuf):
        return lambda: nisa.nonzero_with_count(
            dst=sb(*dst), src=sb(*src, buffer=src_buffer), index_offset=offset, padding_val=padding
        )

    fails(call(), TargetError, r"NeuronCore-v3", target="trn1")
    fails(call(src=((128, 8), nl.bfloat16)), DtypeError, r"src.*float32 or int32")
    fails(call(dst=((128, 9), nl.float32)), DtypeError, r"dst.*int32")
    fails(call(dst=((128, 8), nl.int32)), ShapeError, r"dst.*plus 1")
    fails(call(dst=((64, 9), nl.int32)), ShapeError, r"dst.*partition dim")
    fails(call(offset=2**31), OperandError, r"index_offset.*int32")
    fails(call(padding=-(2**31) - 1), OperandError, r"padding_val.*int32")
    fails(call(src_buffer=nl.psum), MemoryKindError, r"src")
    fails(lambda: nisa.nonzero_with_count(dst=sb((4, 9)), src=sb((4, 8)), index_offset=1.5), OperandError, r"index")
