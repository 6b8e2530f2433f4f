"""Dependency tracking is exact to the byte, whatever the tiles' alignment.

The reference here keeps, for every byte of a storage, the last writer and the latest
read, and visits bytes row by row in address order: the tracker must give the same
ready time and the same producer for any sequence of accesses.
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.memory import Region, Storage
from nkisim.sim import deps
from nkisim.sim import tracker as tracker_module
from nkisim.sim.tracker import AccessTracker

SYNC = 50.0


class ByteReference:
    """Per-byte records, the definition the tracker must meet."""

    def __init__(self, rows: int, row_bytes: int) -> None:
        shape = (rows, row_bytes)
        self.write_end, self.writer = np.zeros(shape), np.zeros(shape, dtype=np.int64)
        self.read_end, self.reader = np.zeros(shape), np.zeros(shape, dtype=np.int64)
        self.tracks: dict[int, int] = {}

    def _latest(self, ends, ids, region, track, best, who):
        for r in range(region.r0, region.r1):
            for b in range(region.b0, region.b1):
                producer = int(ids[r, b]) - 1
                if producer < 0:
                    continue
                t = ends[r, b] + (SYNC if self.tracks[producer] != track else 0.0)
                if t > best:
                    best, who = t, producer
        return best, who

    def ready_both(self, reads, writes, track):
        best, who = 0.0, -1
        for region in reads:
            best, who = self._latest(self.write_end, self.writer, region, track, best, who)
        after_reads = (best, who)
        for region in writes:
            best, who = self._latest(self.write_end, self.writer, region, track, best, who)
            best, who = self._latest(self.read_end, self.reader, region, track, best, who)
        return after_reads, (best, who)

    def commit(self, reads, writes, end, index, track, visible):
        self.tracks[index] = track
        for g in reads:
            rows, cols = slice(g.r0, g.r1), slice(g.b0, g.b1)
            later = self.read_end[rows, cols] < end
            self.read_end[rows, cols][later] = end
            self.reader[rows, cols][later] = index + 1
        for g in writes:
            self.write_end[g.r0 : g.r1, g.b0 : g.b1] = visible
            self.writer[g.r0 : g.r1, g.b0 : g.b1] = index + 1


ROWS, ROW_BYTES = 3, 300


@st.composite
def regions(draw, storage: Storage) -> Region:
    if draw(st.integers(0, 4)) == 0:  # all of the storage, as a DMA through a run-time offset: the whole-grid summary
        return Region(storage, 0, storage.rows, 0, storage.row_bytes)
    if draw(st.booleans()):  # every row, as a tile over all partitions: the columns a summary holds
        r0, r1 = 0, storage.rows
    else:
        r0 = draw(st.integers(0, storage.rows - 1))
        r1 = draw(st.integers(r0, storage.rows))
    # offsets near cell edges are the interesting ones: draw some there on purpose
    edge = st.sampled_from([0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 299, 300])
    b0 = draw(st.one_of(st.integers(0, storage.row_bytes), edge.filter(lambda b: b <= storage.row_bytes)))
    b1 = draw(st.one_of(st.integers(b0, storage.row_bytes), st.integers(b0, min(b0 + 3, storage.row_bytes))))
    return Region(storage, r0, r1, b0, b1)


@st.composite
def programs(draw, storage: Storage):
    """A list of instructions: (reads, writes, track, duration, latency)."""
    ops = []
    for _ in range(draw(st.integers(1, 40))):
        reads = draw(st.lists(regions(storage), max_size=2))
        writes = draw(st.lists(regions(storage), max_size=2))
        ops.append((reads, writes, draw(st.integers(0, 3)), draw(st.integers(0, 5)) * 10.0, draw(st.integers(0, 2))))
    return ops


def _run_both(storage: Storage, program) -> None:
    tracker, reference = AccessTracker(SYNC), ByteReference(storage.rows, storage.row_bytes)
    free = [0.0] * 4
    for index, (reads, writes, track, duration, latency) in enumerate(program):
        got = tracker.ready_both(reads, writes, track)
        expected = reference.ready_both(reads, writes, track)
        assert got == expected, f"instruction {index}: {got} != {expected}"
        start = max(expected[1][0], free[track])
        end = start + duration
        free[track] = end
        tracker.commit(reads, writes, end, index, track, end + latency * 7.0)
        reference.commit(reads, writes, end, index, track, end + latency * 7.0)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_tracker_matches_a_byte_level_reference_on_chip(data):
    storage = Storage("sbuf", ROWS, ROW_BYTES)
    _run_both(storage, data.draw(programs(storage)))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_tracker_matches_a_byte_level_reference_with_blocks_of_four_rows(data):
    """Columns of 21 rows in blocks of four (the last one a row): summaries, cells and both in one column."""
    storage = Storage("sbuf", 21, 130)
    with patch.object(tracker_module, "BLOCK_SHIFT", 2):
        _run_both(storage, data.draw(programs(storage)))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_tracker_matches_a_byte_level_reference_when_runs_of_rows_share_split_cells(data):
    """Tall columns (40 rows in blocks of eight) whose edge cells many rows split alike, then accesses to some of
    those rows: the cells of a run share one slot until an access changes some of them and not the others."""
    storage = Storage("sbuf", 40, 200)
    with patch.object(tracker_module, "BLOCK_SHIFT", 3):
        _run_both(storage, data.draw(programs(storage)))


def test_a_tile_off_the_granule_splits_its_edge_cells_into_one_slot_per_edge():
    storage = Storage("sbuf", 128, 4096)
    tracker = AccessTracker(SYNC)
    tile = Region(storage, 0, 128, 60, 60 + 1024)  # its first and last cells are split in all 128 partitions
    tracker.commit([], [tile], 10.0, 0, 0)
    assert tracker.split_cells(storage) == 2 * 128
    pool = tracker._pool
    assert len(pool) - 1 - int(pool[0, -1]["start"]) == 2  # two slots in use: one per edge, for 128 cells each
    # a read of half the partitions copies each edge's slot for those rows: the others keep theirs
    half = Region(storage, 0, 64, 60, 60 + 1024)
    tracker.commit([half], [], 20.0, 1, 1)
    pool = tracker._pool
    assert len(pool) - 1 - int(pool[0, -1]["start"]) == 4
    assert tracker.ready([half], [half], 0) == (20.0 + SYNC, 1)  # the read, from another track, ends last
    rest = Region(storage, 64, 128, 60, 60 + 1024)
    assert tracker.ready([rest], [rest], 0) == (10.0, 0)  # these partitions were only written
    everything = Region(storage, 0, 128, 0, 4096)
    tracker.commit([], [everything], 30.0, 2, 0)  # a write over everything: its map holds no split cell
    assert tracker.split_cells(storage) == 64 * 2  # the reads' map keeps the half read's edges, in their 2 slots
    assert len(tracker._pool) - 1 - int(tracker._pool[0, -1]["start"]) == 2
    tracker.commit([everything], [], 40.0, 3, 0)  # and a later read over everything merges those back
    assert tracker.split_cells(storage) == 0
    assert len(tracker._pool) - 1 - int(tracker._pool[0, -1]["start"]) == 0
    assert tracker.ready([], [half], 0) == (40.0, 3)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_tracker_matches_a_byte_level_reference_with_coarse_hbm_cells(data):
    storage = Storage("hbm", ROWS, ROW_BYTES)
    with patch.object(tracker_module, "HBM_CELLS", 4):  # 3 x 300 bytes in at most 4 cells: 256-byte cells
        assert tracker_module.granule_of(storage) == 256
        _run_both(storage, data.draw(programs(storage)))


class ManyStorages:
    """The byte-level reference over several storages (one :class:`ByteReference` each, tracks shared)."""

    def __init__(self, storages) -> None:
        self.refs = {s.uid: ByteReference(s.rows, s.row_bytes) for s in storages}
        self.tracks: dict[int, int] = {}

    def ready_both(self, reads, writes, track):
        best, who = 0.0, -1
        for region in reads:
            ref = self.refs[region.storage.uid]
            ref.tracks = self.tracks
            best, who = ref._latest(ref.write_end, ref.writer, region, track, best, who)
        after_reads = (best, who)
        for region in writes:
            ref = self.refs[region.storage.uid]
            ref.tracks = self.tracks
            best, who = ref._latest(ref.write_end, ref.writer, region, track, best, who)
            best, who = ref._latest(ref.read_end, ref.reader, region, track, best, who)
        return after_reads, (best, who)

    def commit(self, reads, writes, end, index, track, visible):
        self.tracks[index] = track
        for s_uid, ref in self.refs.items():
            ref.commit(
                [r for r in reads if r.storage.uid == s_uid],
                [w for w in writes if w.storage.uid == s_uid],
                end,
                index,
                track,
                visible,
            )


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_tracker_matches_the_reference_over_short_and_tall_storages_and_a_growing_arena(data):
    # one row (a batch-1 HBM tensor's shape), a few rows and a tall column of rows: both ways of visiting cells
    storages = [Storage("sbuf", 1, 300), Storage("hbm", 2, 200), Storage("sbuf", 16, 130)]
    tracker, reference = AccessTracker(SYNC), ManyStorages(storages)
    free = [0.0] * 4
    # the arena is not cleared beyond its grids: garbage there (what reused memory holds) must never be read
    dirty = data.draw(st.booleans())
    first_cells = data.draw(st.sampled_from([8, 1 << 12]))  # 8: every new storage grows the arena
    with patch.object(tracker_module, "FIRST_ARENA_CELLS", first_cells):
        for index in range(data.draw(st.integers(1, 30))):
            if dirty:
                tracker._ends[tracker._used :] = 1e9
                tracker._codes[tracker._used :] = 1  # "written by instruction 0", were it read
                _dirty_summarised_columns(tracker)
            reads = data.draw(st.lists(st.sampled_from(storages).flatmap(regions), max_size=3))
            writes = data.draw(st.lists(st.sampled_from(storages).flatmap(regions), max_size=2))
            track = data.draw(st.integers(0, 3))
            got, expected = tracker.ready_both(reads, writes, track), reference.ready_both(reads, writes, track)
            assert got == expected, f"instruction {index}: {got} != {expected}"
            end = max(expected[1][0], free[track]) + data.draw(st.integers(0, 3)) * 10.0
            free[track] = end
            tracker.commit(reads, writes, end, index, track, end + 7.0)
            reference.commit(reads, writes, end, index, track, end + 7.0)


def _block_summaries(tracker: AccessTracker, g: int) -> tuple[np.ndarray, np.ndarray]:
    """Grid ``g``'s block summary codes as stored, [map, column, block of rows], and its two whole-grid codes."""
    rows, cols = int(tracker._grids[g, 1]), int(tracker._grids[g, 2])
    offset, shift = int(tracker._grids[g, 5]), int(tracker._grids[g, 6])
    size = 2 * cols * ((rows - 1 >> shift) + 1)
    return tracker._sum_codes[offset : offset + size].reshape(2, cols, -1), tracker._sum_codes[offset + size :][:2]


def _summaries(tracker: AccessTracker, g: int) -> np.ndarray:
    """Grid ``g``'s summary codes in effect, [map, column, block of rows] (deps._CELLS: the block's cells hold its
    records): a map's whole-grid summary, while it holds, stands for every block's."""
    blocks, whole = _block_summaries(tracker, g)
    codes = blocks.copy()
    for m in (deps.WRITES, deps.READS):
        if whole[m] != deps._CELLS:
            codes[m] = whole[m]
    return codes


def _dirty_summarised_columns(tracker: AccessTracker, code: int = 1) -> None:
    """Garbage in the cells of every summarised block, and in the block summaries of a map whose whole-grid
    summary holds (never cleared: only the summary in effect counts)."""
    for g in range(len(tracker._grid_of)):
        offset, rows, cols = (int(v) for v in tracker._grids[g, :3])
        cells_codes = tracker._codes[offset : offset + 2 * rows * cols].reshape(2, cols, rows)
        cells_ends = tracker._ends[offset : offset + 2 * rows * cols].reshape(2, cols, rows)
        rows_per_block = 1 << int(tracker._grids[g, 6])
        blocks, whole = _block_summaries(tracker, g)
        summarised = np.repeat(blocks != deps._CELLS, rows_per_block, axis=2)[:, :, :rows]
        for m in (deps.WRITES, deps.READS):
            if whole[m] != deps._CELLS:
                summarised[m] = True
                blocks[m] = code
        cells_ends[summarised] = 1e9
        cells_codes[summarised] = code  # "written by instruction 0", were it read


def test_a_new_grid_has_no_record_and_tiles_over_whole_blocks_of_rows_keep_summaries():
    """No cell of a new grid is cleared; a write over every row of a 32-row block keeps one record for it, and an
    access to some rows of a block writes its cells first."""
    wide = Storage("sbuf", 128, 64 * 512)  # 512 cells a row, 128 rows: four blocks of 32
    tracker = AccessTracker(SYNC)
    _dirty_summarised_columns(tracker)  # no grid yet
    tracker.commit([], [Region(wide, 0, 128, 0, 64)], 5.0, 0, 0)
    g = tracker._grid_of[wide.uid]
    assert (_summaries(tracker, g)[deps.WRITES, 0] == 1).all()  # instruction 0 wrote every row of column 0
    assert (_summaries(tracker, g)[:, 1:] == 0).all()  # the others: no record, and their cells were never written
    _dirty_summarised_columns(tracker)
    far = Region(wide, 0, 128, 64 * 300, 64 * 301)
    assert tracker.ready([far], [], 0) == (0.0, -1)
    assert tracker.ready([], [Region(wide, 0, 128, 0, 64 * 301)], 1) == (5.0 + SYNC, 0)
    tracker.commit([], [Region(wide, 64, 128, 0, 64)], 6.0, 1, 0)  # the two upper blocks: summaries still
    tracker.commit([], [Region(wide, 3, 5, 0, 64)], 7.0, 2, 0)  # two rows of block 0: its cells hold them now
    assert list(_summaries(tracker, g)[deps.WRITES, 0]) == [deps._CELLS, 1, 2, 2]
    _dirty_summarised_columns(tracker)
    assert tracker.ready([Region(wide, 0, 3, 0, 64)], [], 0) == (5.0, 0)  # rows 0-2: instruction 0's still
    assert tracker.ready([Region(wide, 2, 40, 0, 64)], [], 0) == (7.0, 2)
    assert tracker.ready([Region(wide, 5, 100, 0, 64)], [], 0) == (6.0, 1)
    everything = Region(wide, 0, 128, 0, 64 * 512)
    tracker.commit([everything], [everything], 9.0, 3, 0)
    assert (_summaries(tracker, g) == 4).all()  # every block of both maps: one record again
    _dirty_summarised_columns(tracker)
    assert tracker.ready([everything], [everything], 0) == (9.0, 3)


def test_a_storage_met_after_the_arena_held_other_values_starts_with_no_records():
    """The arena is not cleared beyond its grids; a new grid over old values (reused memory) starts empty."""
    first, second = Storage("sbuf", 4, 256), Storage("sbuf", 4, 256)
    tracker = AccessTracker(SYNC)
    with patch.object(tracker_module, "FIRST_ARENA_CELLS", 1 << 12):  # room for both grids: the second is made in place
        tracker.commit([], [Region(first, 0, 4, 0, 256)], 5.0, 0, 1)  # on another track: waited for by semaphore
        tracker._ends[tracker._used :] = 1e9
        tracker._codes[tracker._used :] = 1  # "written by instruction 0", were it read
        region = Region(second, 0, 4, 0, 256)
        assert tracker.ready([region], [], 0) == (0.0, -1)
        tracker.commit([region], [], 10.0, 1, 0)  # a read ending at 10
        assert tracker.ready([], [region], 0) == (10.0, 1)  # a write waits for it


def test_a_new_tracker_takes_the_arena_a_finished_one_left_and_records_nothing_of_it():
    storage = Storage("sbuf", 128, 4096)
    first = AccessTracker(SYNC)
    tile = Region(storage, 0, 128, 0, 4096)
    first.commit([tile], [tile], 10.0, 0, 0)
    arena = first._ends
    del first  # its arena is the spare now
    second = AccessTracker(SYNC)
    other = Storage("sbuf", 128, 4096)
    assert second.ready([Region(other, 0, 128, 0, 4096)], [], 0) == (0.0, -1)  # a new storage: no record
    assert second._ends is arena
    third = AccessTracker(SYNC)  # while the second holds it, another tracker makes its own
    third.ready([Region(other, 0, 128, 0, 64)], [], 0)
    assert third._ends is not arena


def test_stale_cells_of_a_reused_arena_cost_no_slots():
    """The spare arena holds what an earlier run left, split codes included, under blocks that are summarised as
    having no record: a read over them must neither count nor copy slots for those cells."""
    cells = tracker_module.FIRST_ARENA_CELLS
    stale = (np.full(cells, 5.0), np.full(cells, -3, dtype=np.int32))  # every cell "split", pointing to slot 3
    tracker_module._SPARE_ARENA.append(stale)
    tracker = AccessTracker(SYNC)
    storage = Storage("sbuf", 128, 65536)
    tracker.commit([], [Region(storage, 0, 128, 60, 124)], 10.0, 0, 0)  # a split cell of its own: some slot in use
    assert tracker._ends is stale[0]
    whole = Region(storage, 0, 128, 1024, 65536)  # never accessed: summarised, its cells stale
    slots = len(tracker._pool)
    tracker.commit([whole], [], 20.0, 1, 0)
    assert len(tracker._pool) == slots  # no slot for the 129,024 stale "split" cells (4 blocks of 1,008 columns)
    assert tracker.ready([], [whole], 0) == (20.0, 1)
    assert tracker.ready([Region(storage, 0, 128, 60, 124)], [], 0) == (10.0, 0)


def test_a_tracker_that_outgrows_the_spare_arena_gives_it_back_after_copying_it():
    with patch.object(tracker_module, "FIRST_ARENA_CELLS", 2 * 128 * 64):  # one 128 x 4096 storage's maps
        tracker = AccessTracker(SYNC)
        a, b = Storage("sbuf", 128, 4096), Storage("sbuf", 128, 4096)
        tracker.commit([], [Region(a, 0, 128, 0, 4096)], 10.0, 0, 0)
        first = tracker._ends
        tracker.commit([], [Region(b, 0, 128, 0, 4096)], 20.0, 1, 0)  # a second grid: the arena grows
        assert tracker._ends is not first and len(tracker._ends) > len(first)
        assert tracker_module._SPARE_ARENA[-1][0] is first
        assert tracker.ready([Region(a, 0, 128, 0, 4096)], [], 0) == (10.0, 0)  # the copy kept a's records
        assert tracker.ready([Region(b, 0, 128, 0, 4096)], [], 0) == (20.0, 1)


def test_split_cells_merge_back_when_covered_whole():
    storage = Storage("sbuf", 2, 256)
    tracker = AccessTracker(SYNC)
    for i, b0 in enumerate(range(0, 256, 24)):  # 24-byte pieces: most cells split
        piece = Region(storage, 0, 2, b0, min(b0 + 24, 256))
        tracker.commit([piece], [piece], 10.0 + i, i, 0)
    assert tracker.split_cells(storage) > 0
    whole = Region(storage, 0, 2, 0, 256)
    tracker.commit([whole], [whole], 100.0, 99, 0)  # a later read and a write over everything
    assert tracker.split_cells(storage) == 0
    assert tracker.ready([whole], [whole], 0) == (100.0, 99)


def test_pool_grows_for_many_segments_in_one_cell():
    storage = Storage("sbuf", 1, 64)
    tracker = AccessTracker(SYNC)
    for b in range(0, 64, 2):  # 32 two-byte writes by distinct instructions: 32 segments in one cell
        tracker.commit([], [Region(storage, 0, 1, b, b + 2)], b + 1.0, b, 0)
    for b in range(0, 64, 2):
        assert tracker.ready([Region(storage, 0, 1, b, b + 2)], [], 0) == (b + 1.0, b)


# -- in a kernel: the nki-library mlp_tkg placement ---------------------------------

#: mlp_tkg H8192 I448 on trn2: a matmul's moving tile at [17032, 17928), the next weights at [17928, 32264)
MOVING_AT, MOVING_BYTES, WEIGHTS_BYTES = 17032, 896, 14336


def _matmul_then_prefetch(weights_at: int):
    """A matmul reads a tile placed at 17032; then a DMA writes a tile placed at ``weights_at``."""

    def kernel(w):
        moving = nl.ndarray((128, MOVING_BYTES // 2), nl.bfloat16, buffer=nl.sbuf, address=(0, MOVING_AT))
        stationary = nl.ndarray((128, 128), nl.bfloat16, buffer=nl.sbuf, address=(0, 0))
        nisa.memset(dst=moving, value=1.0)
        nisa.memset(dst=stationary, value=1.0)
        acc = nl.ndarray((128, MOVING_BYTES // 2), nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=stationary, moving=moving)
        weights = nl.ndarray((128, WEIGHTS_BYTES // 2), nl.bfloat16, buffer=nl.sbuf, address=(0, weights_at))
        nisa.dma_copy(dst=weights, src=w)

    w = np.zeros((128, WEIGHTS_BYTES // 2), dtype=np.float32).astype(nl.bfloat16)
    profile = nkisim.run(kernel, [w], target="trn2").profile
    matmul = next(r for r in profile.instructions if r.opcode == "nc_matmul")
    dma = next(r for r in profile.instructions if r.opcode == "dma_copy")
    return matmul, dma


def test_adjacent_unaligned_tiles_do_not_depend_on_each_other():
    matmul, dma = _matmul_then_prefetch(MOVING_AT + MOVING_BYTES)
    assert (MOVING_AT + MOVING_BYTES) % 64 != 0  # the two tiles share a 64-byte cell
    assert dma.start_ns == 0.0  # the prefetch waits for nothing
    assert dma.start_ns < matmul.end_ns


def test_one_shared_byte_is_a_dependency():
    matmul, dma = _matmul_then_prefetch(MOVING_AT + MOVING_BYTES - 1)
    assert dma.start_ns >= matmul.end_ns  # write after read of byte 17927


@pytest.mark.parametrize(("second_at", "depends"), [(6, False), (7, False), (5, True)])
def test_slices_of_one_tile_at_byte_offsets(second_at: int, depends: bool):
    """Two bn_stats into 24-byte column groups of one tile (as the layernorm example): only overlap orders them."""

    def kernel(x):
        tile = nl.ndarray((128, 512), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x)
        stats = nl.ndarray((128, 16), nl.float32, buffer=nl.sbuf)
        nisa.bn_stats(dst=stats[:, 0:6], data=tile)
        nisa.bn_stats(dst=stats[:, second_at : second_at + 6], data=tile)

    profile = nkisim.run(kernel, [np.ones((128, 512), np.float32)], target="trn2").profile
    first, second = (r for r in profile.instructions if r.opcode == "bn_stats")
    assert (second.producer == first.index) is depends


def test_split_cells_counts_only_the_columns_whose_cells_hold_records():
    """A summarised column's cells hold whatever the reused memory held; they are not counted as split."""
    wide = Storage("sbuf", 48, 64 * 512)  # a block of 32 rows and one of 16
    tracker = AccessTracker(SYNC)
    tracker.commit([], [Region(wide, 0, 48, 0, 64)], 5.0, 0, 0)  # whole cells
    _dirty_summarised_columns(tracker, code=-1)  # "split", were they read
    assert tracker.split_cells(wide) == 0
    tracker.commit([], [Region(wide, 0, 48, 10, 20)], 6.0, 1, 0)  # part of a cell: one split cell per row
    assert tracker.split_cells(wide) == 48
