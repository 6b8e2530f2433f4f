"""The bytes a sliced view says it touches (``Tensor.region``, ``Tensor.row_box``), against every element's address.

Dependencies, the sanitizer's shadow and the loop checks all go by these rectangles, so a rectangle narrower
than the view's bytes hides a dependency or reports a read of written memory as uninitialised. The reference
works out each element's byte address from the numpy view alone: rows are the storage's rows, and the
rectangle is the smallest one holding every byte of every element.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl


def reference_box(view) -> tuple[tuple[int, int, int, int], bool]:
    """The rectangle of rows x bytes that the view's elements cover, and whether they fill it exactly."""
    array = view.array
    row_bytes = view.storage.row_bytes
    start = array.__array_interface__["data"][0] - view.storage.bytes.__array_interface__["data"][0]
    index = np.indices(array.shape).reshape(array.ndim, -1)
    element = start + (index * np.array(array.strides)[:, None]).sum(axis=0)
    touched = (element[:, None] + np.arange(array.itemsize)[None, :]).ravel()
    rows, cols = np.divmod(touched, row_bytes)
    box = (int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1)
    area = (box[1] - box[0]) * (box[3] - box[2])
    return box, len(np.unique(touched)) == area


def _slice(draw, extent: int) -> slice:
    start = draw(st.integers(0, extent - 1))
    stop = draw(st.integers(start + 1, extent))
    return slice(start, stop)


def _index(draw, shape: tuple[int, ...]) -> tuple:
    """An index of a view of ``shape``: mostly one or two unit-step slices, sometimes the empty index, and the
    second item sometimes an integer or a slice with a step (which the box of the parent does not give)."""
    if draw(st.integers(0, 9)) == 0:
        return ()
    key = [_slice(draw, shape[0])]
    if len(shape) >= 2:
        second = draw(st.sampled_from(["none", "slice", "slice", "int", "step"]))
        if second == "slice":
            key.append(_slice(draw, shape[1]))
        elif second == "int":
            key.append(draw(st.integers(0, shape[1] - 1)))
        elif second == "step":
            unit = _slice(draw, shape[1])
            key.append(slice(unit.start, unit.stop, draw(st.integers(2, 3))))
    return tuple(key)


@st.composite
def indexes(draw, shape: tuple[int, ...]) -> tuple:
    return _index(draw, shape)


BUFFERS = {"sbuf": nl.sbuf, "psum": nl.psum, "hbm": nl.shared_hbm}


@settings(max_examples=250, deadline=None)
@given(st.data())
def test_a_sliced_views_rectangle_holds_every_byte_of_its_elements(data):
    """Tiles of 2 to 4 dims in SBUF, PSUM and HBM, indexed once or twice (a view of a view)."""
    draw = data.draw
    free = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3), label="free dims"))
    shape = (draw(st.integers(1, 128), label="partitions"), *free)
    buffer = draw(st.sampled_from(sorted(BUFFERS)), label="buffer")
    dtype = draw(st.sampled_from([nl.float32, nl.bfloat16]), label="dtype")
    depth = draw(st.integers(1, 2), label="indexes")
    seen = []

    @nki.jit
    def kernel(a):
        view = nl.ndarray(shape, dtype=dtype, buffer=BUFFERS[buffer])
        for _ in range(depth):
            view = view[draw(indexes(tuple(view.shape)), label="index")]
            seen.append((tuple(view.region)[1:], view.row_box, reference_box(view), view.ndim))
        return a

    nkisim.profile(kernel, [((128, 8), np.float32)])
    for region, row_box, (box, exact), ndim in seen:
        assert region == box
        if exact and ndim >= 2:  # a box is rows of partitions (row_box_of): a 1-D view has none
            assert row_box == box
        else:
            assert row_box is None


def test_the_empty_index_is_the_whole_view():
    """``t[()]`` of a tile or an HBM tensor is the same elements and bytes as ``t``."""
    seen = []

    @nki.jit
    def kernel(a):
        tile = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        for t in (tile, a):
            whole = t[()]
            seen.append((whole.shape, tuple(whole.region)[1:], t.shape, tuple(t.region)[1:], reference_box(t)[0]))
        return a

    nkisim.profile(kernel, [((256, 8), np.float32)])
    for whole_shape, whole_region, shape, region, box in seen:
        assert whole_shape == shape
        assert whole_region == region == box


def test_writing_a_range_of_a_3d_tiles_dim_1_makes_those_bytes_written():
    """[128, 4, 8] float32: ``t[:, 0:2]`` is bytes 0-63 of each partition (8 floats a step of dim 1), so
    reading ``t[:, 1:2, 0:8]`` (bytes 32-63) after it reads written memory."""

    @nki.jit
    def kernel(a):
        out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        tile = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=tile[0:128, 0:2], value=3.0)
        row = nl.ndarray((128, 1, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=row, src=tile[0:128, 1:2, 0:8])
        nisa.dma_copy(dst=out, src=row.reshape((128, 8)))
        return out

    result = nkisim.run(kernel, [np.zeros((128, 8), np.float32)], check="strict")
    assert np.array_equal(result.outputs, np.full((128, 8), 3.0, np.float32))
    assert not [d for d in result.profile.diagnostics if d.check == "uninitialized-read"]


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_a_read_of_bytes_a_dim_1_range_wrote_waits_for_that_write(target):
    """The Scalar Engine's copy of ``t[:, 1:2, :]`` reads bytes the memset of ``t[:, 0:2]`` wrote: it starts after
    that write ends."""

    @nki.jit
    def kernel(a):
        tile = nl.ndarray((128, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=tile[0:128, 0:2], value=1.0)
        row = nl.ndarray((128, 1, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=row, op=nl.copy, data=tile[0:128, 1:2, 0:8])
        return a

    timeline = nkisim.profile(kernel, [((128, 8), np.float32)], target=target).instructions
    memset = next(r for r in timeline if r.opcode == "memset")
    copy = next(r for r in timeline if r.opcode == "activation")
    assert copy.start_ns >= memset.end_ns


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_an_hbm_block_sliced_again_is_the_same_view(data):
    """HBM views keep the blocks sliced from them (a loop slices the same blocks again): a block sliced a second
    time, as ``nl.ds``, after more than the kept number, or with numpy integers (never kept), is the same elements
    and bytes as the first, by the reference's addresses."""
    draw = data.draw
    shape = (draw(st.integers(1, 300), label="rows"), draw(st.integers(1, 6), label="cols"))
    picks = draw(st.lists(indexes(shape), min_size=1, max_size=6), label="indexes")
    seen = []

    @nki.jit
    def kernel(a):
        for index in picks:
            spellings = [
                index,
                tuple(np.int64(i) if isinstance(i, int) else i for i in index),  # never kept
                tuple(
                    nl.ds(i.start, i.stop - i.start) if isinstance(i, slice) and i.step is None else i for i in index
                ),
            ]
            views = [a[spelling] for spelling in spellings] + [a[index]]
            for i in range(1100):  # as many other blocks, past MAX_VIEWS: the memo starts again
                a[i % shape[0] : i % shape[0] + 1 : 1 + i // shape[0]]
            views.append(a[index])
            seen.append(
                [(v.shape, v.array.strides, v.byte_offset, tuple(v.region)[1:], reference_box(v)) for v in views]
            )
        return a

    nkisim.profile(kernel, [(shape, np.float32)])
    for described in seen:
        assert all(d == described[0] for d in described)
        assert described[0][3] == described[0][4][0]


def test_an_empty_or_out_of_bounds_hbm_slice_fails_each_time():
    """Neither is kept: the second use of ``a[3:3]`` raises as the first, and so does ``a[0:999]``."""
    errors = []

    @nki.jit
    def kernel(a):
        for _ in range(2):
            tile = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            try:
                nisa.dma_copy(dst=tile, src=a[3:3])
            except nkisim.KernelError as exc:
                errors.append(str(exc))
            try:
                a[0:999]
            except nkisim.KernelError as exc:
                errors.append(str(exc))
        return a

    nkisim.profile(kernel, [((256, 8), np.float32)])
    assert len(errors) == 4
    assert errors[0] == errors[2] and "no elements" in errors[0]
    assert errors[1] == errors[3] and "out of bounds" in errors[1]
