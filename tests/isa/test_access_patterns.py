"""Tensor.ap: static strided views, dynamic scalar offsets, and DMA gather/scatter by vector_offset.

The reference for every pattern is the docs' definition: flatten the allocation, then
element ``(i0, i1, ...)`` of the view is ``flat[offset + sum(i_k * step_k)]``; with a
``vector_offset`` the first index contributes ``idx[i0] * (row length)`` instead.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.errors import BoundsError, DtypeError, MemoryKindError, OperandError, ShapeError, TargetError
from nkisim.hw import load_target

from .conftest import BF16, FAST, INT8, INT32, UINT8, UINT32, load, run_kernel, seeds, store, targets


def ref_addresses(pattern, offset, first_rows=None, row_len=None):
    """Element addresses of a pattern, per the NKI docs' loop nest."""
    addr = np.full([num for _, num in pattern], offset, dtype=np.int64)
    for k, (step, num) in enumerate(pattern):
        shape = [1] * len(pattern)
        shape[k] = num
        index = np.arange(num).reshape(shape)
        if k == 0 and first_rows is not None:
            addr = addr + np.asarray(first_rows, dtype=np.int64).reshape(shape) * row_len
        else:
            addr = addr + index * step
    return addr


def ref_ap(flat, pattern, offset):
    return np.asarray(flat).reshape(-1)[ref_addresses(pattern, offset)]


# -- strategies -----------------------------------------------------------------------


@st.composite
def hbm_patterns(draw, total):
    """An in-bounds pattern (1 to 3 pairs, first num at most 32) with its offset, over ``total`` elements."""
    ndims = draw(st.integers(1, 3))
    pattern = [[draw(st.integers(-6, 12)), draw(st.integers(1, 32 if k == 0 else 6))] for k in range(ndims)]
    lo = sum(min(0, s * (n - 1)) for s, n in pattern)
    hi = sum(max(0, s * (n - 1)) for s, n in pattern)
    assume(hi - lo < total)
    offset = draw(st.integers(-lo, total - 1 - hi))
    return pattern, offset


# -- static patterns ------------------------------------------------------------------


@FAST
@given(rows=st.integers(1, 24), cols=st.integers(1, 40), data=st.data(), target=targets, seed=seeds)
def test_static_hbm_pattern_reads_the_flattened_tensor(rows, cols, data, target, seed):
    a = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    pattern, offset = data.draw(hbm_patterns(rows * cols))
    parts = pattern[0][1]
    free = int(np.prod([n for _, n in pattern[1:]], dtype=np.int64))

    def kernel(x):
        tile = nl.ndarray((parts, free), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x.ap(pattern, offset=offset))
        return store(tile)

    got = run_kernel(kernel, [a], target)
    np.testing.assert_array_equal(got, ref_ap(a, pattern, offset).reshape(parts, free))


def legal_starts(target: str, parts: int, p: int) -> list[int]:
    """Start partitions of a ``parts``-partition view of a ``p``-partition tile (trn1: by size, docs/checks.md)."""
    starts = range(p - parts + 1)
    if target != "trn1":
        return list(starts)
    step = 128 if parts > 64 else 64 if parts > 32 else 32
    return [s for s in starts if s % step == 0]


@FAST
@given(
    p=st.integers(1, 128),
    f=st.integers(1, 48),
    data=st.data(),
    target=targets,
    seed=seeds,
)
def test_static_sbuf_pattern_is_a_strided_view_for_reads_and_writes(p, f, data, target, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((p, f)).astype(np.float32)
    parts = data.draw(st.integers(1, p))
    first = data.draw(st.sampled_from(legal_starts(target, parts, p)))
    n1 = data.draw(st.integers(1, f))
    step = data.draw(st.integers(1, max(1, (f - 1) // max(1, n1 - 1)))) if n1 > 1 else 1
    col = data.draw(st.integers(0, f - 1 - step * (n1 - 1)))
    pattern = [[f, parts], [step, n1]]
    offset = first * f + col
    fill = rng.standard_normal((parts, n1)).astype(np.float32)

    def kernel(x, y):
        tile = load(x)
        view = tile.ap(pattern, offset=offset)
        got = nl.ndarray((parts, n1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=got, src=view)  # read through the pattern
        nisa.tensor_copy(dst=view, src=load(y))  # then write through it
        return store(got), store(tile)

    read, written = run_kernel(kernel, [a, fill], target)
    np.testing.assert_array_equal(read, ref_ap(a, pattern, offset))
    expected = a.copy().reshape(-1)
    expected[ref_addresses(pattern, offset)] = fill
    np.testing.assert_array_equal(written, expected.reshape(p, f))


def test_docs_example_reads_the_right_half_of_each_partition():
    a = np.arange(256, dtype=np.float32).reshape(16, 16)

    def kernel(x):
        t = load(x)
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=t.ap(pattern=[[16, 16], [1, 8]], offset=8))
        return store(out)

    np.testing.assert_array_equal(run_kernel(kernel, [a]), a[:, 8:16])


def test_ap_ignores_the_view_it_is_called_on():
    a = np.arange(8 * 12, dtype=np.float32).reshape(8, 12)

    def kernel(x):
        t = load(x)
        out = nl.ndarray((8, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=t[2:4, 1:3].ap([[12, 8], [2, 6]], offset=1))
        return store(out)

    np.testing.assert_array_equal(run_kernel(kernel, [a]), a[:, 1::2])


def test_three_free_dims_and_a_negative_step():
    a = np.arange(4 * 60, dtype=np.float32).reshape(4, 60)
    pattern = [[60, 4], [20, 3], [-1, 5], [2, 2]]  # element (w, z, y, x) = 10 + 60w + 20z - y + 2x

    def kernel(x):
        t = load(x)
        out = nl.ndarray((4, 3, 5, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=t.ap(pattern, offset=10))
        return store(out)

    expected = np.array(
        [[[[10 + 60 * w + 20 * z - y + 2 * x for x in range(2)] for y in range(5)] for z in range(3)] for w in range(4)]
    )
    np.testing.assert_array_equal(run_kernel(kernel, [a]), expected.astype(np.float32))


@pytest.mark.parametrize("view_dtype", [BF16, np.dtype(np.uint16), INT8, UINT8])
def test_dtype_reinterprets_the_bytes_with_counts_in_the_new_type(view_dtype):
    a = np.random.default_rng(3).integers(-(2**31), 2**31 - 1, size=(8, 16), dtype=np.int32)
    ratio = 4 // view_dtype.itemsize

    def kernel(x):
        t = load(x)
        view = t.ap([[16 * ratio, 8], [1, 16 * ratio]], dtype=view_dtype)
        out = nl.ndarray((8, 16 * ratio), dtype=view_dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=out, src=view)
        return store(out)

    got = run_kernel(kernel, [a])
    np.testing.assert_array_equal(got.view(np.uint8), a.view(view_dtype).view(np.uint8))


# -- scalar_offset --------------------------------------------------------------------


@FAST
@given(rows=st.integers(2, 40), cols=st.integers(1, 32), data=st.data(), target=targets, seed=seeds)
def test_scalar_offset_tile_selects_rows_at_run_time(rows, cols, data, target, seed):
    a = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    n = data.draw(st.integers(1, rows))
    start = data.draw(st.integers(0, rows - n))

    def kernel(x, s):
        where = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=s)
        tile = nl.ndarray((n, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x.ap([[cols, n], [1, cols]], scalar_offset=where, indirect_dim=0))
        return store(tile)

    got = run_kernel(kernel, [a, np.array([[start]], dtype=np.int32)], target)
    np.testing.assert_array_equal(got, a[start : start + n])


@FAST
@given(
    rows=st.integers(1, 24),
    cols=st.integers(1, 40),
    data=st.data(),
    accumulate=st.booleans(),
    target=targets,
    seed=seeds,
)
def test_scalar_offset_hbm_patterns_read_the_flattened_tensor_or_skip_rows_outside(
    rows, cols, data, accumulate, target, seed
):
    """Any pattern (negative and zero steps too) at any run-time offset, in bounds or not: oob_mode.skip drops
    the rows outside; an accumulating copy (which needs oob_mode.error) raises for them."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    pattern, at = data.draw(hbm_patterns(rows * cols))
    value = data.draw(st.integers(0, rows + 2))  # past the last row too: some or all of the view outside
    offset = at - value * cols  # .ap's static offset; the run time adds value * cols (indirect_dim=0)
    parts = pattern[0][1]
    free = int(np.prod([n for _, n in pattern[1:]], dtype=np.int64))
    start = rng.standard_normal((parts, free)).astype(np.float32)

    def kernel(x, s, initial):
        where = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=s)
        tile = load(initial)
        view = x.ap(pattern, offset=offset, scalar_offset=where, indirect_dim=0)
        if accumulate:
            nisa.dma_copy(dst=tile, src=view, dst_rmw_op=nl.add, oob_mode=nisa.oob_mode.error)
        else:
            nisa.dma_copy(dst=tile, src=view, oob_mode=nisa.oob_mode.skip)
        return store(tile)

    addresses = ref_addresses(pattern, offset + value * cols).reshape(parts, free)
    inside = ((addresses >= 0) & (addresses < rows * cols)).all(axis=1, keepdims=True)
    read = a.reshape(-1)[np.clip(addresses, 0, rows * cols - 1)]
    inputs = [a, np.array([[value]], np.int32), start]
    if accumulate and not inside.all():
        with pytest.raises(BoundsError, match=f"scalar_offset {value}"):
            run_kernel(kernel, inputs, target)
        return
    expected = np.where(inside, start + read if accumulate else read, start)
    np.testing.assert_array_equal(run_kernel(kernel, inputs, target), expected)


def test_scalar_offset_on_dim_1_moves_by_elements_and_works_on_chip():
    a = np.arange(6 * 20, dtype=np.float32).reshape(6, 20)

    def kernel(x, s):
        where = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=s)
        hbm_cols = nl.ndarray((6, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=hbm_cols, src=x.ap([[20, 6], [1, 4]], offset=1, scalar_offset=where, indirect_dim=1))
        t = load(x)
        sbuf_cols = nl.ndarray((6, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=sbuf_cols, src=t.ap([[20, 6], [1, 4]], offset=1, scalar_offset=where, indirect_dim=1))
        return store(hbm_cols), store(sbuf_cols)

    from_hbm, from_sbuf = run_kernel(kernel, [a, np.array([[7]], dtype=np.uint32)])
    np.testing.assert_array_equal(from_hbm, a[:, 8:12])
    np.testing.assert_array_equal(from_sbuf, a[:, 8:12])


def test_scalar_offset_scatter_writes_the_selected_rows():
    base = np.zeros((10, 8), dtype=np.float32)
    src = np.arange(16, dtype=np.float32).reshape(2, 8)

    def kernel(out, x, s):
        where = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=s)
        nisa.dma_copy(dst=out.ap([[8, 2], [1, 8]], scalar_offset=where, indirect_dim=0), src=load(x))
        return out

    expected = base.copy()
    expected[5:7] = src
    np.testing.assert_array_equal(run_kernel(kernel, [base, src, np.array([[5]], np.int32)]), expected)


# -- vector_offset gather and scatter -------------------------------------------------


def table_rows_and_indices(seed, rows, cols, parts, idx_dtype):
    """A (rows, cols) HBM table, a (parts, cols) block of rows, and one table row index per partition."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((rows, cols)).astype(np.float32)
    block = rng.standard_normal((parts, cols)).astype(np.float32)
    return table, block, rng.integers(0, rows, size=(parts, 1)).astype(idx_dtype)


@FAST
@given(
    rows=st.integers(1, 64),
    cols=st.integers(1, 48),
    parts=st.integers(1, 128),
    idx_dtype=st.sampled_from([INT32, UINT32]),
    target=targets,
    seed=seeds,
)
def test_vector_offset_gathers_one_row_per_partition(rows, cols, parts, idx_dtype, target, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    idx = rng.integers(0, rows, size=(parts, 1)).astype(idx_dtype)  # repeats allowed

    def kernel(x, i):
        index = load(i)
        dst = nl.ndarray((parts, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x.ap([[cols, parts], [1, cols]], vector_offset=index, indirect_dim=0))
        return store(dst)

    got = run_kernel(kernel, [a, idx], target)
    np.testing.assert_array_equal(got, a[idx[:, 0].astype(np.int64)])


def test_vector_offset_gather_with_an_inner_pattern_and_offset():
    a = np.arange(12 * 10, dtype=np.float32).reshape(12, 10)
    idx = np.array([[3], [0], [11], [3]], dtype=np.int32)

    def kernel(x, i):
        dst = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        # the first step is ignored: the row stride is the tensor's row length (10)
        nisa.dma_copy(dst=dst, src=x.ap([[999, 4], [2, 4]], offset=1, vector_offset=load(i), indirect_dim=0))
        return store(dst)

    addresses = ref_addresses([[999, 4], [2, 4]], 1, first_rows=idx[:, 0], row_len=10)
    np.testing.assert_array_equal(run_kernel(kernel, [a, idx]), a.reshape(-1)[addresses])


@FAST
@given(rows=st.integers(1, 40), cols=st.integers(1, 16), parts=st.integers(1, 64), target=targets, seed=seeds)
def test_vector_offset_scatter_writes_rows_in_partition_order(rows, cols, parts, target, seed):
    base, src, idx = table_rows_and_indices(seed, rows, cols, parts, np.uint32)

    def kernel(out, x, i):
        nisa.dma_copy(dst=out.ap([[cols, parts], [1, cols]], vector_offset=load(i), indirect_dim=0), src=load(x))
        return out

    expected = base.copy()
    for p in range(parts):  # a repeated index keeps the last partition's row
        expected[idx[p, 0]] = src[p]
    np.testing.assert_array_equal(run_kernel(kernel, [base, src, idx], target), expected)


def test_scatter_add_accumulates_repeated_indices_in_float32_in_order():
    rng = np.random.default_rng(7)
    base = rng.standard_normal((6, 5)).astype(np.float32)
    src = rng.standard_normal((9, 5)).astype(np.float32)
    idx = np.array([[1], [4], [1], [1], [0], [4], [5], [1], [2]], dtype=np.int32)

    def kernel(out, x, i):
        nisa.dma_copy(
            dst=out.ap([[5, 9], [1, 5]], vector_offset=load(i), indirect_dim=0), src=load(x), dst_rmw_op=nl.add
        )
        return out

    expected = base.copy()
    for p in range(9):
        expected[idx[p, 0]] = np.float32(expected[idx[p, 0]] + src[p])
    np.testing.assert_array_equal(run_kernel(kernel, [base, src, idx]), expected)


def _rows_reference(table_shape, parts, inner, offset, idx):
    """Per row of a vector_offset view: its element addresses (row-major) and whether all lie in the table."""
    total = int(np.prod(table_shape))
    addr = ref_addresses([[0, parts], *inner], offset, first_rows=idx[:, 0], row_len=table_shape[1])
    rows = addr.reshape(parts, -1)
    return rows, ((rows >= 0) & (rows < total)).all(axis=1)


@st.composite
def row_views(draw):
    """A table, a vector_offset pattern over it (inner steps may go back, stand still or overlap) and indices
    (repeated, adjacent or out of the table)."""
    rows, cols, parts = draw(st.integers(1, 10)), draw(st.integers(1, 10)), draw(st.integers(1, 12))
    inner = [[draw(st.integers(-2, 6)), draw(st.integers(1, 4))] for _ in range(draw(st.integers(0, 2)))]
    idx = np.array(draw(st.lists(st.integers(-2, rows + 1), min_size=parts, max_size=parts)), dtype=np.int32)
    return (rows, cols), parts, inner, draw(st.integers(0, 3)), idx.reshape(parts, 1)


@FAST
@given(view=row_views(), skip=st.booleans(), seed=seeds)
def test_vector_offset_gather_matches_the_docs_addresses_row_by_row(view, skip, seed):
    """Rows out of the table raise with oob_mode.error, or leave the destination as it was with skip."""
    table_shape, parts, inner, offset, idx = view
    table = np.random.default_rng(seed).standard_normal(table_shape).astype(np.float32)
    addr, inside = _rows_reference(table_shape, parts, inner, offset, idx)
    pattern = [[table_shape[1], parts], *inner]
    mode = nisa.oob_mode.skip if skip else nisa.oob_mode.error

    def kernel(x, i):
        dst = nl.ndarray((parts, addr.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=dst, value=-7.0)
        view = x.ap(pattern, offset=offset, vector_offset=load(i), indirect_dim=0)
        nisa.dma_copy(dst=dst, src=view, oob_mode=mode)
        return store(dst)

    if not skip and not inside.all():
        with pytest.raises(BoundsError, match="out of bounds"):
            run_kernel(kernel, [table, idx])
        return
    expected = np.full(addr.shape, -7.0, dtype=np.float32)
    expected[inside] = table.reshape(-1)[addr[inside]]
    np.testing.assert_array_equal(run_kernel(kernel, [table, idx]), expected)


@FAST
@given(view=row_views(), skip=st.booleans(), add=st.booleans(), seed=seeds)
def test_vector_offset_scatter_writes_element_by_element_in_row_major_order(view, skip, add, seed):
    """A scatter stores the source's elements in row-major order, so a later write to an element (a repeated
    or overlapping row, an inner pattern naming an element twice) wins, and with dst_rmw_op=add they sum in
    float32 in that order; rows out of the table are skipped or raise."""
    assume(not (skip and add))  # a read-modify-write through run-time addresses stops at bad rows (a rule)
    table_shape, parts, inner, offset, idx = view
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(table_shape).astype(np.float32)
    addr, inside = _rows_reference(table_shape, parts, inner, offset, idx)
    src = rng.standard_normal(addr.shape).astype(np.float32)
    pattern = [[table_shape[1], parts], *inner]
    mode = nisa.oob_mode.skip if skip else nisa.oob_mode.error

    def kernel(out, x, i):
        view = out.ap(pattern, offset=offset, vector_offset=load(i), indirect_dim=0)
        nisa.dma_copy(dst=view, src=load(x), oob_mode=mode, dst_rmw_op=nl.add if add else None)
        return out

    if not skip and not inside.all():
        with pytest.raises(BoundsError, match="out of bounds"):
            run_kernel(kernel, [base, src, idx])
        return
    expected = base.copy().reshape(-1)
    for row in np.flatnonzero(inside):
        for a, value in zip(addr[row], src[row]):
            expected[a] = np.float32(expected[a] + value) if add else value
    np.testing.assert_array_equal(run_kernel(kernel, [base, src, idx]), expected.reshape(table_shape))


def test_a_row_ending_on_the_tables_last_element_is_inside_and_one_past_it_is_out():
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[1], [2]], dtype=np.int32)  # with offset 1: elements 5-8 (inside), 9-12 (one past the end)

    def kernel(x, i):
        dst = nl.ndarray((2, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=dst, value=-1.0)
        view = x.ap([[4, 2], [1, 4]], offset=1, vector_offset=load(i), indirect_dim=0)
        nisa.dma_copy(dst=dst, src=view, oob_mode=nisa.oob_mode.skip)
        return store(dst)

    np.testing.assert_array_equal(run_kernel(kernel, [table, idx]), [[5, 6, 7, 8], [-1, -1, -1, -1]])


def test_a_one_element_dim_with_a_step_beyond_numpys_strides_is_never_stepped():
    table = np.arange(24, dtype=np.float32).reshape(4, 6)
    idx = np.array([[2], [0]], dtype=np.int32)

    def kernel(x, i):
        dst = nl.ndarray((2, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x.ap([[6, 2], [2**62, 1], [1, 6]], vector_offset=load(i), indirect_dim=0))
        return store(dst)

    np.testing.assert_array_equal(run_kernel(kernel, [table, idx]), table[[2, 0]])

    def static(x):
        dst = nl.ndarray((2, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x.ap([[12, 2], [2**62, 1], [1, 6]], offset=6))
        return store(dst)

    np.testing.assert_array_equal(run_kernel(static, [table]), table[[1, 3]])


def test_scatter_add_through_an_inner_pattern_that_names_elements_twice_adds_every_element():
    base = np.zeros((4, 8), dtype=np.float32)
    src = np.arange(1, 13, dtype=np.float32).reshape(2, 6)
    idx = np.array([[3], [0]], dtype=np.int32)

    def kernel(out, x, i):
        view = out.ap([[8, 2], [1, 3], [1, 2]], vector_offset=load(i), indirect_dim=0)  # offsets 0 1 1 2 2 3
        nisa.dma_copy(dst=view, src=load(x), dst_rmw_op=nl.add)
        return out

    expected = base.copy()
    for row, first in enumerate((24, 0)):
        for k, offset in enumerate((0, 1, 1, 2, 2, 3)):
            expected.reshape(-1)[first + offset] += src[row, k]
    np.testing.assert_array_equal(run_kernel(kernel, [base, src, idx]), expected)


@pytest.mark.parametrize("add", [False, True])
def test_scatter_rows_that_share_one_element_write_it_in_row_order(add):
    base = np.zeros((4, 3), dtype=np.float32)
    src = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
    idx = np.array([[1], [0]], dtype=np.int32)  # rows of 4 from elements 3 and 0: element 3 is in both

    def kernel(out, x, i):
        view = out.ap([[3, 2], [1, 4]], vector_offset=load(i), indirect_dim=0)
        nisa.dma_copy(dst=view, src=load(x), dst_rmw_op=nl.add if add else None)
        return out

    expected = base.reshape(-1).copy()
    for row, first in enumerate((3, 0)):
        for k in range(4):
            expected[first + k] = expected[first + k] + src[row, k] if add else src[row, k]
    np.testing.assert_array_equal(run_kernel(kernel, [base, src, idx]), expected.reshape(4, 3))


def test_scatter_from_a_gather_skips_exactly_the_elements_of_rows_out_of_either_table():
    """HBM to HBM through two vector_offset views whose rows differ in length: a source row out of its table
    drops half a destination row, a destination row out of its table drops its elements; all out: no change."""
    table = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    base = -np.arange(1, 3 * 6 + 1, dtype=np.float32).reshape(3, 6)
    src_idx = np.array([[1], [9], [3], [0]], dtype=np.int32)  # row 9 is out of the table: 3 elements dropped
    dst_idx = np.array([[2], [0]], dtype=np.int32)

    def kernel(out, x, i, j):
        src = x.ap([[6, 4], [2, 3]], vector_offset=load(i), indirect_dim=0)  # 4 rows of 3 (every other element)
        dst = out.ap([[6, 2], [1, 6]], vector_offset=load(j), indirect_dim=0)  # 2 rows of 6
        nisa.dma_copy(dst=dst, src=src, oob_mode=nisa.oob_mode.skip)
        return out

    gathered = [table[1, 0::2], None, table[3, 0::2], table[0, 0::2]]
    expected = base.copy()
    expected[2, :3], expected[0, :3], expected[0, 3:] = gathered[0], gathered[2], gathered[3]
    np.testing.assert_array_equal(run_kernel(kernel, [base, table, src_idx, dst_idx]), expected)
    nowhere = np.array([[5], [-1]], dtype=np.int32)
    np.testing.assert_array_equal(run_kernel(kernel, [base, table, src_idx, nowhere]), base)


@pytest.mark.parametrize("skip", [False, True])
def test_an_indirect_transpose_on_trn3_transposes_the_gathered_rows(skip):
    """Rows gathered by index, transposed; with oob_mode.skip a row out of the table leaves its column alone."""
    table = np.arange(8 * 6, dtype=np.float16).reshape(8, 6)  # an indirect transpose moves 2-byte elements
    idx = np.array([[3], [9 if skip else 0], [5]], dtype=np.int32)
    mode = nisa.oob_mode.skip if skip else nisa.oob_mode.error

    def kernel(x, i):
        dst = nl.ndarray((6, 3), dtype=nl.float16, buffer=nl.sbuf)
        nisa.memset(dst=dst, value=-1.0)
        nisa.dma_transpose(dst=dst, src=x.ap([[6, 3], [1, 6]], vector_offset=load(i), indirect_dim=0), oob_mode=mode)
        return store(dst)

    expected = np.full((6, 3), -1.0, dtype=np.float16)
    for column, row in enumerate(idx[:, 0]):
        if row < 8:
            expected[:, column] = table[row]
    np.testing.assert_array_equal(run_kernel(kernel, [table, idx], "trn3"), expected)


def test_gather_casts_through_float32_like_any_dma():
    a = np.arange(40, dtype=np.float32).reshape(8, 5) / 3
    idx = np.array([[7], [2]], dtype=np.int32)

    def kernel(x, i):
        dst = nl.ndarray((2, 5), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x.ap([[5, 2], [1, 5]], vector_offset=load(i), indirect_dim=0))
        return store(dst)

    np.testing.assert_array_equal(run_kernel(kernel, [a, idx]), a[[7, 2]].astype(BF16))


# -- out of bounds --------------------------------------------------------------------


def gather_kernel(rows_out, cols, mode):
    def kernel(x, i):
        dst = nl.ndarray((rows_out, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=dst, value=-1.0)
        nisa.dma_copy(
            dst=dst, src=x.ap([[cols, rows_out], [1, cols]], vector_offset=load(i), indirect_dim=0), oob_mode=mode
        )
        return store(dst)

    return kernel


def test_out_of_bounds_index_raises_with_oob_mode_error():
    a = np.zeros((4, 3), dtype=np.float32)
    idx = np.array([[0], [4]], dtype=np.int32)
    with pytest.raises(BoundsError, match=r"src .*row 1 \(index 4\) is out of bounds"):
        run_kernel(gather_kernel(2, 3, nisa.oob_mode.error), [a, idx])


@FAST
@given(rows=st.integers(1, 12), parts=st.integers(1, 32), seed=seeds, target=targets)
def test_out_of_bounds_rows_are_skipped_with_oob_mode_skip(rows, parts, seed, target):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, 3)).astype(np.float32)
    idx = rng.integers(-3, rows + 3, size=(parts, 1)).astype(np.int32)
    got = run_kernel(gather_kernel(parts, 3, nisa.oob_mode.skip), [a, idx], target)
    expected = np.full((parts, 3), -1.0, dtype=np.float32)
    ok = (idx[:, 0] >= 0) & (idx[:, 0] < rows)
    expected[ok] = a[idx[ok, 0]]
    np.testing.assert_array_equal(got, expected)


def test_scatter_skips_out_of_bounds_rows_and_keeps_the_destination():
    base = np.arange(12, dtype=np.float32).reshape(4, 3)
    src = -np.ones((3, 3), dtype=np.float32)
    idx = np.array([[2], [9], [0]], dtype=np.uint32)

    def kernel(out, x, i):
        nisa.dma_copy(
            dst=out.ap([[3, 3], [1, 3]], vector_offset=load(i), indirect_dim=0),
            src=load(x),
            oob_mode=nisa.oob_mode.skip,
        )
        return out

    expected = base.copy()
    expected[[2, 0]] = -1.0
    np.testing.assert_array_equal(run_kernel(kernel, [base, src, idx]), expected)


def test_scalar_offset_out_of_bounds_raises_or_skips():
    a = np.arange(20, dtype=np.float32).reshape(5, 4)

    def kernel(x, s, mode):
        where = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=s)
        dst = nl.zeros((2, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x.ap([[4, 2], [1, 4]], scalar_offset=where, indirect_dim=0), oob_mode=mode)
        return store(dst)

    with pytest.raises(BoundsError, match="scalar_offset 4"):
        run_kernel(kernel, [a, np.array([[4]], np.int32), nisa.oob_mode.error])
    got = run_kernel(kernel, [a, np.array([[4]], np.int32), nisa.oob_mode.skip])
    np.testing.assert_array_equal(got, np.stack([a[4], np.zeros(4, np.float32)]))  # row 5 does not exist


def test_scalar_offset_on_chip_out_of_bounds_raises_in_a_compute_instruction():
    def kernel(s):
        where = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=where, src=s)
        t = nl.zeros((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=t.ap([[8, 4], [1, 4]], scalar_offset=where, indirect_dim=1))

    run_kernel(kernel, [np.array([[4]], np.int32)])
    with pytest.raises(BoundsError, match="scalar_offset 5"):
        run_kernel(kernel, [np.array([[5]], np.int32)])


# -- timing and dependencies ----------------------------------------------------------


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_gather_waits_for_its_index_tile_and_a_later_index_write_waits_for_it(target):
    hw = load_target(target)

    def kernel(x):
        idx = nl.ndarray((8, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(idx, [[1, 1]], 0, 1)
        dst = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=dst, src=x.ap([[16, 8], [1, 16]], vector_offset=idx, indirect_dim=0))
        nisa.iota(idx, [[1, 1]], 0, 2)

    iota1, gather, iota2 = nkisim.run(kernel, [np.zeros((8, 16), np.float32)], target=target).profile.instructions
    assert gather.producer == iota1.index
    # iota's result is visible a GpSimd access latency after its end; a DMA's at its end
    access = hw.gpsimd.access_latency_cycles / hw.gpsimd.clock_ghz
    assert gather.start_ns == pytest.approx(iota1.end_ns + access + hw.sync.semaphore_latency_ns)
    assert iota2.producer == gather.index  # write-after-read on the index tile
    assert iota2.start_ns == pytest.approx(gather.end_ns + hw.sync.semaphore_latency_ns)
    # the SBUF side spans partitions 0-7: one DMA engine; its packets are one 64-byte row
    # (the run-time-addressed HBM side has no static layout to cost)
    nbytes, row = 8 * 16 * 4, 16 * 4
    (first_size, first_efficiency) = hw.dma.payload_efficiency[0]
    assert row <= first_size  # at or below the curve's first point: its efficiency
    busy = nbytes / (hw.dma.bytes_per_ns_per_engine * first_efficiency)
    assert gather.end_ns - gather.start_ns == pytest.approx(hw.dma.fixed_latency_ns + busy)


def test_a_dynamic_view_depends_on_the_whole_allocation():
    def kernel(x):
        where = nl.zeros((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        t = nl.ndarray((4, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[:, 48:64], src=x)  # writes only the last quarter
        out = nl.ndarray((4, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=out, src=t.ap([[64, 4], [1, 16]], scalar_offset=where, indirect_dim=1))

    prof = nkisim.run(kernel, [np.zeros((4, 16), np.float32)]).profile
    _, load_, copy = prof.instructions
    assert copy.start_ns >= load_.end_ns  # offset 0 reads columns 0:16, but the view may read any of them


# -- rules ----------------------------------------------------------------------------


def run_ap(make):
    """Run a kernel that builds one view from an SBUF tile ``t`` (4 x 8 fp32) and an HBM input ``x`` (6 x 8).

    The view is then copied: a pattern reaching outside its tensor is an error only once used.
    """

    def kernel(x):
        t = nl.zeros((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        idx = nl.zeros((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        view = make(t, x, idx)
        nisa.dma_copy(dst=nl.ndarray(view.shape, view.dtype, buffer=nl.shared_hbm), src=view)

    return run_kernel(kernel, [np.zeros((6, 8), np.float32)])


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda t, x, i: t.ap([[8, 4]]), OperandError, "partition_step, partitions"),
        (lambda t, x, i: t.ap([[8, 4], [1, 1], [1, 1], [1, 1], [1, 1], [1, 1]]), OperandError, "got 6 pairs"),
        (lambda t, x, i: t.ap([[8, 4], [1, 0]]), OperandError, "num below 1"),
        (lambda t, x, i: t.ap([[8, 4], [1.0, 8]]), OperandError, r"\[step, num\] integer pairs"),
        (lambda t, x, i: t.ap([8, 4]), OperandError, r"\[step, num\] integer pairs"),
        (lambda t, x, i: t.ap([[16, 2], [1, 8]]), OperandError, "partition step 16 must be 8"),
        (lambda t, x, i: t.ap([[8, 4], [1, 8]], offset=8), BoundsError, "partitions"),
        (lambda t, x, i: t.ap([[8, 4], [1, 8]], offset=1), BoundsError, "stays inside each partition"),
        (lambda t, x, i: t.ap([[8, 4], [-1, 2]]), BoundsError, "outside"),
        (lambda t, x, i: x.ap([[8, 6], [1, 9]]), BoundsError, "outside the 48"),
        (lambda t, x, i: x.ap([[8, 6], [1, 8]], offset=0.5), OperandError, "offset 0.5 must be an integer"),
        (lambda t, x, i: t.ap([[8, 4], [1, 8]], dtype="float64"), DtypeError, "float64"),
        (lambda t, x, i: x.ap([[8, 4], [1, 8]], scalar_offset=i[0:1, 0:1], vector_offset=i), OperandError, "at most"),
        (lambda t, x, i: x.ap([[8, 4], [1, 8]], vector_offset=t[:, 0:1]), DtypeError, "int32 or uint32"),
        (lambda t, x, i: x.ap([[8, 4], [1, 8]], vector_offset=i[0:2]), ShapeError, "has 2 indices"),
        (lambda t, x, i: x.ap([[8, 4], [1, 8]], vector_offset=i, indirect_dim=1), OperandError, "indirect_dim=0"),
        (lambda t, x, i: t.ap([[8, 4], [1, 8]], vector_offset=i), MemoryKindError, "indexes an HBM tensor"),
        (lambda t, x, i: x.ap([[8, 4], [1, 8]], vector_offset=x), MemoryKindError, "must be in SBUF"),
        (lambda t, x, i: x.ap([[8, 1], [1, 8]], scalar_offset=x[0:1, 0:1]), MemoryKindError, "must be in SBUF"),
        (lambda t, x, i: x.ap([[8, 1], [1, 8]], scalar_offset=t[0:1, 0:1]), DtypeError, "integer type"),
        (lambda t, x, i: x.ap([[8, 1], [1, 8]], scalar_offset=i[0:2, 0:1]), ShapeError, r"\(1, 1\)"),
        (lambda t, x, i: x.ap([[8, 1], [1, 8]], scalar_offset=3), OperandError, "or a register"),
        (lambda t, x, i: x.ap([[8, 1], [1, 8]], scalar_offset=i[0:1, 0:1], indirect_dim=2), OperandError, "not a dim"),
        (lambda t, x, i: t.ap([[8, 1], [1, 8]], scalar_offset=i[0:1, 0:1]), OperandError, "partition dim"),
        (lambda t, x, i: t.ap([[8, 4], [1, 8]], scalar_offset=i[0:1, 0:1], indirect_dim=1)[0], OperandError, "index"),
        (
            lambda t, x, i: nl.ndarray((2, 3), nl.int8).ap([[1, 2], [1, 1]], dtype=nl.int16),
            OperandError,
            "whole number",
        ),
    ],
)
def test_malformed_patterns_and_offsets_are_rejected(make, error, match):
    with pytest.raises(error, match=match):
        run_ap(make)


def test_unusable_views_are_errors_only_when_an_instruction_uses_them():
    """A traced kernel may build a view on a path it never takes (a guarded tail, an empty shard)."""

    def kernel(x, use):
        t = nl.zeros((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        past_the_end = t.ap([[8, 4], [1, 8]], offset=1)  # the last element of each partition is one too far
        empty = x[3:3]
        assert empty.shape == (0, 8) and past_the_end.shape == (4, 8)
        out = nl.ndarray((4, 8), nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src={"none": t, "ap": past_the_end, "slice": x[0:4]}[use])
        if use == "slice":
            nisa.dma_copy(dst=out[0:0], src=empty)
        return out

    x = np.arange(48, dtype=np.float32).reshape(6, 8)
    np.testing.assert_array_equal(run_kernel(kernel, [x, "none"]), np.zeros((4, 8), np.float32))
    with pytest.raises(BoundsError) as info:
        run_kernel(kernel, [x, "ap"])
    line = test_unusable_views_are_errors_only_when_an_instruction_uses_them.__code__.co_firstlineno
    where = f"test_access_patterns.py:{line + 9}: nisa.dma_copy [DMA, trn1]"
    assert str(info.value).startswith(f"{where}: src cannot be used")
    assert f"(the view made at test_access_patterns.py:{line + 5})" in str(info.value)
    assert "elements 1..8 of a partition fall outside its 8" in str(info.value)
    with pytest.raises(BoundsError, match=r"src cannot be used: slice selects no elements of dim 0"):
        run_kernel(kernel, [x, "slice"])


def test_vector_offset_views_are_dma_copy_only():
    # NKI 0.3 adds an indirect dma_transpose (NeuronCore-v3+, see tests/test_nkilib_compat.py); trn1 has none
    def kernel(x):
        idx = nl.zeros((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        out = nl.ndarray((8, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=out, src=x.ap([[8, 4], [1, 8]], vector_offset=idx))

    with pytest.raises(TargetError, match=r"indirect \(vector_offset\) transpose needs NeuronCore-v3"):
        run_kernel(kernel, [np.zeros((6, 8), np.float32)])


def test_static_pattern_view_keeps_its_element_type_and_shape():
    def kernel(x):
        t = nl.ndarray((4, 8), dtype=nl.int32, buffer=nl.sbuf)
        v = t.ap([[8, 4], [2, 2], [1, 2]], offset=3)
        assert (v.shape, v.dtype, v.buffer) == ((4, 2, 2), np.dtype(np.int32), nl.sbuf)
        assert not v.is_dynamic
        w = x.ap([[8, 2], [1, 8]], scalar_offset=nl.zeros((1, 1), nl.int32), indirect_dim=0)
        assert (w.shape, w.size, w.partitions, w.free_size, w.is_dynamic) == ((2, 8), 16, 2, 8, True)

    run_kernel(kernel, [np.zeros((6, 8), np.float32)])


# -- dma_compute read-modify-write (NKI 0.3) ---------------------------------------------


@FAST
@given(rows=st.integers(1, 40), cols=st.integers(1, 16), parts=st.integers(1, 64), target=targets, seed=seeds)
def test_dma_compute_gather_rmw_adds_indexed_rows_to_an_sbuf_tile(rows, cols, parts, target, seed):
    """dst(SBUF) = dst + src(HBM)[indices], summed in float32 (no scales: NKI 0.3's default)."""
    table, acc, idx = table_rows_and_indices(seed, rows, cols, parts, np.int32)

    def kernel(x, a, i):
        t = load(a)
        src = x.ap([[cols, parts], [1, cols]], vector_offset=load(i), indirect_dim=0)
        nisa.dma_compute(dst=t, srcs=[src, t], reduce_op=nl.add, unique_indices=True)
        return store(t)

    expected = (table[idx[:, 0]] + acc).astype(np.float32)
    np.testing.assert_array_equal(run_kernel(kernel, [table, acc, idx], target), expected)


def test_dma_compute_scatter_rmw_adds_sbuf_rows_into_indexed_hbm_rows():
    base = np.arange(24, dtype=np.float32).reshape(6, 4)
    rows = np.array([[1.0] * 4, [10.0] * 4, [100.0] * 4], dtype=np.float32)
    idx = np.array([[4], [0], [2]], dtype=np.int32)

    def kernel(out, x, i):
        index = load(i)
        view = out.ap([[4, 3], [1, 4]], vector_offset=index, indirect_dim=0)
        nisa.dma_compute(dst=view, srcs=[view, load(x)], reduce_op=nl.add)
        return out

    expected = base.copy()
    expected[4] += 1.0
    expected[0] += 10.0
    expected[2] += 100.0
    np.testing.assert_array_equal(run_kernel(kernel, [base, rows, idx]), expected)


def test_dma_compute_gather_skips_out_of_bounds_rows_with_oob_skip():
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[2], [7], [0]], dtype=np.int32)  # 7 is past the 3 rows

    def kernel(x, i):
        t = nl.zeros((3, 4), dtype=nl.float32, buffer=nl.sbuf)
        src = x.ap([[4, 3], [1, 4]], vector_offset=load(i), indirect_dim=0)
        nisa.dma_compute(dst=t, srcs=[t, src], reduce_op=nl.add, oob_mode=nisa.oob_mode.skip)
        return store(t)

    expected = np.stack([table[2], np.zeros(4, np.float32), table[0]])
    np.testing.assert_array_equal(run_kernel(kernel, [table, idx]), expected)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda t, src: nisa.dma_compute(dst=t, srcs=[src, t, t], reduce_op=nl.add), "give 2 sources"),
        (lambda t, src: nisa.dma_compute(dst=t, srcs=[src, src], reduce_op=nl.add), "exactly one indirect"),
        (
            lambda t, src: nisa.dma_compute(dst=t, srcs=[src, t], reduce_op=nl.add, unique_indices=False),
            "unique_indices must be True",
        ),
    ],
)
def test_dma_compute_rmw_rules(call, match):
    def kernel(x):
        t = nl.zeros((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        idx = nl.zeros((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        call(t, x.ap([[8, 4], [1, 8]], vector_offset=idx, indirect_dim=0))

    with pytest.raises(OperandError, match=rf"nisa\.dma_compute \[DMA, trn1\]: .*{match}"):
        run_kernel(kernel, [np.zeros((6, 8), np.float32)])
