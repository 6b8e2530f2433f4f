"""The sanitizer's record of who last touched each byte: boxes split exactly, strided views fall back to bytes.

The reference is a per-byte numpy array of event ids painted by hand for each access.
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nkisim.memory import Buffer, Tensor
from nkisim.memory.space import Storage
from nkisim.sim import loops
from nkisim.sim.loops import _Shadow

ROWS, ROW_BYTES = 8, 64


def _tensor(storage: Storage, view: np.ndarray) -> Tensor:
    return Tensor(view, view.dtype, Buffer.sbuf, "t", storage, None)


views = st.tuples(
    st.integers(0, ROWS - 1),
    st.integers(1, ROWS),
    st.integers(0, ROW_BYTES // 4 - 1),
    st.integers(1, ROW_BYTES // 4),
    st.sampled_from([1, 1, 1, 2, 3]),
)


@settings(max_examples=400, deadline=None)
@given(accesses=st.lists(views, min_size=1, max_size=12), probe=views)
def test_events_match_a_per_byte_reference(accesses, probe):
    _events_match_a_per_byte_reference(accesses, probe)


@settings(max_examples=300, deadline=None)
@given(accesses=st.lists(views, min_size=1, max_size=12), probe=views)
def test_events_match_a_per_byte_reference_with_boxes_over_many_index_buckets(accesses, probe):
    """Buckets of 2 rows by 16 bytes: boxes span several of them in both directions (as an HBM tensor's row
    blocks do the 128-row buckets)."""
    with patch.object(loops, "BUCKET_ROWS", 2), patch.object(loops, "BUCKET_BYTES", 16):
        _events_match_a_per_byte_reference(accesses, probe)


@settings(max_examples=200, deadline=None)
@given(accesses=st.lists(views, min_size=1, max_size=12), probe=views)
def test_events_match_a_per_byte_reference_with_bands_made_taller_for_a_tall_storage(accesses, probe):
    """At most three bands of rows: the storage's 8 rows in bands of 3 (the last one 2), not of the 1 asked."""
    with (
        patch.object(loops, "BUCKET_ROWS", 1),
        patch.object(loops, "MAX_BANDS", 3),
        patch.object(loops, "BUCKET_BYTES", 16),
    ):
        assert _Shadow(Storage("sbuf", ROWS, ROW_BYTES)).band_rows == 3
        _events_match_a_per_byte_reference(accesses, probe)


def _events_match_a_per_byte_reference(accesses, probe):
    storage = Storage("sbuf", ROWS, ROW_BYTES)
    floats = storage.bytes.view(np.float32)  # 8 x 16 float32 over the storage's bytes
    shadow = _Shadow(storage)
    reference = np.zeros((ROWS, ROW_BYTES), dtype=np.int64)

    def view_of(spec):
        r0, nr, c0, nc, step = spec
        return floats[r0 : min(ROWS, r0 + nr), c0 : min(ROW_BYTES // 4, c0 + nc * step) : step]

    def painted(view: np.ndarray) -> np.ndarray:
        mask = np.zeros(storage.bytes.shape, dtype=bool)
        as_bytes = np.ndarray(
            (*view.shape, 4),
            np.bool_,
            buffer=mask,
            offset=view.__array_interface__["data"][0] - storage.bytes.__array_interface__["data"][0],
            strides=(*view.strides, 1),
        )
        as_bytes[...] = True
        return mask

    for event, spec in enumerate(accesses, start=1):
        view = view_of(spec)
        # as the loop tracker does: an access's bytes are checked, then stamped (the lookup made once for both)
        before = sorted({int(e) for e in reference[painted(view)] if e})
        assert shadow.events(_tensor(storage, view)) == before
        shadow.stamp(_tensor(storage, view), event)
        reference[painted(view)] = event
    probe_view = view_of(probe)
    expected = sorted({int(e) for e in reference[painted(probe_view)] if e})
    assert shadow.events(_tensor(storage, probe_view)) == expected


typed_views = st.tuples(
    st.integers(0, ROWS - 1),
    st.integers(1, ROWS),
    st.integers(0, ROW_BYTES - 1),  # the first byte: any, so that items need not be aligned to their size
    st.integers(1, 16),
    st.sampled_from([1, 1, 2, 3, 4, -1, -2]),  # negative: the items in reverse
    st.sampled_from([np.uint8, np.float16, np.float32, np.float64]),
    st.booleans(),  # flat: one axis over the storage's bytes, across rows (an HBM tensor seen as 1-d)
)


def _typed_view(storage: Storage, spec) -> np.ndarray:
    r0, nr, c0, items, step, dtype, flat = spec
    size = np.dtype(dtype).itemsize
    if flat:
        start = min(r0 * ROW_BYTES + c0, ROWS * ROW_BYTES - size)
        items = max(1, min(items * nr, (ROWS * ROW_BYTES - start) // size))
        flat_view = storage.bytes.reshape(-1)[start : start + items * size].view(dtype)
        if items % 2 == 0:  # two rows of its own, whose step is neither a whole row of the storage nor less
            return flat_view.reshape(2, items // 2)[:, ::step]
        return flat_view[::step]
    items = max(1, min(items, (ROW_BYTES - c0) // size))
    if c0 + size > ROW_BYTES:
        c0 = ROW_BYTES - size
    view = storage.bytes[r0 : min(ROWS, r0 + nr), c0 : c0 + items * size].view(dtype)
    return view[:, ::step]


def _painted(storage: Storage, view: np.ndarray) -> np.ndarray:
    """The bytes ``view`` touches, as a mask over the storage (worked out from its address and strides)."""
    mask = np.zeros(storage.bytes.shape, dtype=bool)
    np.ndarray(
        (*view.shape, view.itemsize),
        np.bool_,
        buffer=mask,
        offset=view.__array_interface__["data"][0] - storage.bytes.__array_interface__["data"][0],
        strides=(*view.strides, 1),
    )[...] = True
    return mask


@settings(max_examples=400, deadline=None)
@given(accesses=st.lists(typed_views, min_size=1, max_size=12), probe=typed_views)
def test_events_of_views_of_any_item_size_match_a_per_byte_reference(accesses, probe):
    """Strided views of 1-, 2-, 4- and 8-byte items at any byte: the record's grain follows them, exactly."""
    storage = Storage("sbuf", ROWS, ROW_BYTES)
    shadow = _Shadow(storage)
    reference = np.zeros(storage.bytes.shape, dtype=np.int64)
    for event, spec in enumerate(accesses, start=1):
        view = _typed_view(storage, spec)
        shadow.stamp(_tensor(storage, view), event)
        reference[_painted(storage, view)] = event
        probe_view = _typed_view(storage, probe)
        expected = sorted({int(e) for e in reference[_painted(storage, probe_view)] if e})
        assert shadow.events(_tensor(storage, probe_view)) == expected


def test_a_strided_view_of_two_byte_items_keeps_one_entry_per_item():
    """A bf16-sized strided view over float32 tiles: two bytes per entry, not one (a view of n items stays n
    entries in one run); a one-byte view later splits the grain and loses nothing."""
    storage = Storage("sbuf", ROWS, ROW_BYTES)
    shadow = _Shadow(storage)
    tile = storage.bytes[:, 0:32].view(np.float32)
    shadow.stamp(_tensor(storage, tile), 1)
    shadow.stamp(_tensor(storage, storage.bytes[:, 32:64].view(np.float16)[:, ::4]), 2)
    assert shadow.granule == 2 and shadow.per_granule.size == ROWS * ROW_BYTES // 2
    assert shadow.events(_tensor(storage, tile)) == [1]
    shadow.stamp(_tensor(storage, storage.bytes[:, 33:34]), 3)
    assert shadow.granule == 1
    assert shadow.events(_tensor(storage, storage.bytes[:, 32:40])) == [2, 3]
    assert shadow.events(_tensor(storage, storage.bytes[:, 34:36])) == []


@settings(deadline=None)  # the first example compiles the numba scan
@given(
    marks=st.lists(st.integers(0, 255), min_size=1, max_size=64).flatmap(
        lambda row: st.tuples(st.just(row), st.integers(1, 4), st.sampled_from([1, 2]))
    )
)
def test_the_written_box_scan_matches_a_numpy_formula(marks):
    from nkisim.sim.checks import _box_written

    row, rows, mostly = marks
    box = np.full((rows, 96), mostly, dtype=np.uint8)[:, 8 : 8 + len(row)]  # a box of rows inside wider rows
    box[rows - 1] = row
    assert _box_written(box) == bool(np.all((box >= 1) & (box <= 2)))  # 1: engine write, 2: Tensor Engine


# -- the shadow of written bytes: fills of whole tiles are deferred until something reads the shadow -------

_TILE_ROWS = st.sampled_from([32, 64, 128])
_TILE_BYTES = st.sampled_from([64, 96, 128, 256, 512])
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(0, 3), _TILE_ROWS, _TILE_BYTES),
        st.tuples(st.just("whole"), st.integers(0, 3), st.sampled_from([1, 2])),
        st.tuples(st.just("part"), st.integers(0, 3), st.integers(0, 127), st.integers(0, 511), st.integers(1, 64)),
        st.tuples(st.just("drop"), st.integers(0, 3)),
        st.tuples(st.just("place"), st.integers(0, 3), st.sampled_from([0, 64, 192, 1024, 1536]), _TILE_BYTES),
        st.tuples(
            st.just("look"),
        ),
    ),
    max_size=40,
)


def _run_against_reference(operations, limit: int) -> None:
    """Tiles are allocated (zeroed unless placed), written whole or in part (marked), dropped (their bytes
    freed for the next tile) and placed over each other's bytes; at every look and at the end the shadow
    equals a per-byte array painted by hand at each event."""
    from unittest import mock

    from nkisim.errors import CapacityError
    from nkisim.hw import Engine, load_target
    from nkisim.memory.system import MemorySystem
    from nkisim.sim import checks

    hw = load_target("trn2")  # with 2 KiB partitions, so that the allocator soon reuses freed bytes
    hw = hw.model_copy(update={"sbuf": hw.sbuf.model_copy(update={"bytes_per_partition": 2048})})
    memory = MemorySystem(hw, poison=False)
    checker = checks.Checker(checks.Findings("warn"), hw)
    memory.on_allocate = checker.allocated
    storage = memory.sbuf.storage
    reference = np.zeros(storage.bytes.shape, dtype=np.uint8)
    tiles: dict[int, Tensor] = {}

    def box_of(t: Tensor) -> tuple[slice, slice]:
        r0, r1, b0, b1 = t.row_box
        return slice(r0, r1), slice(b0, b1)

    def apply(op: str, *args: int) -> None:  # a function, so that no local keeps a dropped tile alive
        if op == "alloc":
            slot, rows, nbytes = args
            tiles.pop(slot, None)  # the tile it replaces dies first: its bytes are free for this one
            try:
                tiles[slot] = memory.new_tensor((rows, nbytes), np.dtype(np.uint8), Buffer.sbuf)
            except CapacityError:
                return
            reference[box_of(tiles[slot])] = 0
        elif op == "place":
            slot, offset, nbytes = args
            tiles.pop(slot, None)
            if any(not a.placed and a.overlaps(offset, nbytes, 0, 128) for a in memory.sbuf.live.values()):
                return  # placed tiles may not overlap automatic ones
            tiles[slot] = memory.new_tensor((128, nbytes), np.dtype(np.uint8), Buffer.sbuf, address=(0, offset))
        elif op == "drop":
            tiles.pop(args[0], None)
        elif op == "look":
            np.testing.assert_array_equal(checker._shadow(storage), reference)
        elif args[0] in tiles:
            t = tiles[args[0]]
            if op == "whole":
                engine = Engine.tensor if args[1] == 2 else Engine.vector
                checker.after(None, engine, [("dst", t)])
                reference[box_of(t)] = args[1]
            else:
                row, col, width = args[1] % t.shape[0], args[2] % t.shape[1], args[3]
                view = t[row:, col : min(col + width, t.shape[1])]
                checker.after(None, Engine.vector, [("dst", view)])
                reference[view.row_box[0] : view.row_box[1], view.row_box[2] : view.row_box[3]] = 1

    with mock.patch.object(checks, "MAX_DEFERRED_FILLS", limit):
        for operation in operations:
            apply(*operation)
        np.testing.assert_array_equal(checker._shadow(storage), reference)


@settings(max_examples=150, deadline=None)
@given(operations=_operations, limit=st.sampled_from([2, 4096]))
def test_the_shadow_equals_a_per_byte_reference_whatever_fills_are_deferred(operations, limit):
    _run_against_reference(operations, limit)


def test_a_box_taken_again_after_a_smaller_tile_used_part_of_it_is_filled_last():
    # next fit in 2 KiB partitions: a at bytes 0..512, f at 512..2048, c wraps to 0..256, b takes 0..512 again;
    # the fill of b's box comes after c's, though a filled the same box before c
    _run_against_reference(
        [
            ("alloc", 0, 128, 512), ("whole", 0, 1), ("drop", 0),
            ("alloc", 1, 128, 1536),
            ("alloc", 2, 128, 256), ("drop", 2),
            ("alloc", 3, 128, 512), ("whole", 3, 1),
            ("look",),
        ],
        limit=4096,
    )  # fmt: skip


def test_placed_tiles_that_share_bytes_are_marked_at_each_whole_write():
    # p and q share bytes 192..512: p's second whole write must reach them again after q's
    _run_against_reference(
        [("place", 0, 0, 512), ("place", 1, 192, 512), ("whole", 0, 1), ("whole", 1, 2), ("whole", 0, 1), ("look",)],
        limit=4096,
    )


@settings(max_examples=300, deadline=None)
@given(
    view=views,
    how=st.sampled_from(["plain", "broadcast", "transposed", "one row"]),
)
def test_a_view_is_dense_exactly_when_it_touches_each_byte_of_its_box_once(view, how):
    """``_dense`` (which trusts a view's row box when it has one) against a count of the bytes the view touches."""
    from nkisim.sim.loops import _dense

    storage = Storage("sbuf", ROWS, ROW_BYTES)
    floats = storage.bytes.view(np.float32)
    r0, nr, c0, nc, step = view
    array = floats[r0 : min(ROWS, r0 + nr), c0 : min(ROW_BYTES // 4, c0 + nc * step) : step]
    if how == "broadcast":
        array = np.broadcast_to(array[:, :1], array.shape)
    elif how == "transposed":
        array = array.T
    elif how == "one row":
        array = array[:1]
    start = array.__array_interface__["data"][0] - storage.bytes.__array_interface__["data"][0]
    offsets = start + sum(
        np.arange(n).reshape([-1 if d == axis else 1 for d in range(array.ndim)]) * s
        for axis, (n, s) in enumerate(zip(array.shape, array.strides))
    )
    touched = (np.asarray(offsets).reshape(-1, 1) + np.arange(4)).ravel()
    rows, cols = np.divmod(touched, ROW_BYTES)
    box_area = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
    every_byte_once = len(np.unique(touched)) == touched.size == box_area
    assert _dense(_tensor(storage, array)) == every_byte_once
