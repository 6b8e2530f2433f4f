"""The dependency tracker: the arena of every storage's maps, and the calls into the compiled scans of
:mod:`nkisim.sim.deps` (which says what the maps hold)."""

from __future__ import annotations

import weakref
from collections import deque

import numpy as np

from nkisim.memory import Region, Storage
from nkisim.sim.deps import _CELLS, _DONE, _NEEDS_SLOTS, FIRST_LONGEST, SEGMENT, _commit_all, _ready_all

#: Cells of one HBM tensor's map at most (before its granule grows): the same budget as the on-chip grids.
HBM_CELLS = 1 << 18
#: Cells of both maps the arena holds at first (48 MiB of address space: SBUF's maps and a few HBM tensors').
FIRST_ARENA_CELLS = 1 << 22
#: The arena (ends, codes) of :data:`FIRST_ARENA_CELLS` cells that a finished tracker left, for the next one: a new
#: arena is an mmap of fresh pages, and a run faulted in a few thousand of them (3 us each on a virtual machine)
#: whatever it ran. One at most is kept; ``pop`` and ``append`` of a deque are atomic, so threads share it safely.
_SPARE_ARENA: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=1)
#: Instructions whose track the tracker has room for at first (it doubles when more come).
FIRST_INSTRUCTIONS = 1024
#: Bytes per cell on chip.
ON_CHIP_GRANULE = 64
#: A column's rows are summarised in blocks of ``1 << BLOCK_SHIFT`` (32): a tile of 32, 64 or 128 partitions
#: starting on a multiple of 32 covers whole blocks. Read when a grid is made.
BLOCK_SHIFT = 5


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def granule_of(storage: Storage) -> int:
    """Bytes per cell of a storage's maps: 64 on chip; an HBM tensor's rows in at most :data:`HBM_CELLS` cells."""
    if storage.kind != "hbm":
        return ON_CHIP_GRANULE
    return max(ON_CHIP_GRANULE, _next_pow2(-(-storage.rows * storage.row_bytes // HBM_CELLS)))


class AccessTracker:
    """Answers "when may this instruction start?" and records when it is done.

    A producer on another engine or queue is waited for through a semaphore, which
    costs ``sync_ns`` more than waiting on the same in-order queue.

    Every storage's write map and read map live in one arena (``ends``, ``codes``), and their block
    summaries in another (``sum_ends``, ``sum_codes``), described by a row of ``grids``: (offset, rows,
    cells per row, granule, row bytes, summary offset, block shift); the pool of segment lists is shared. An
    instruction's regions are written to one small array, so that answering and
    recording cost one compiled call each, whatever the number of operands.
    """

    def __init__(self, sync_ns: float) -> None:
        self.sync_ns = sync_ns
        self._grid_of: dict[int, int] = {}  # storage uid -> row of _grids
        #: The kind of each grid's storage (``sbuf``, ``psum``, ``hbm``...), by row of _grids.
        self.kinds: list[str] = []
        self._grids = np.zeros((8, 7), dtype=np.int64)
        self._used = 0  # cells of the arena in use
        self._ends = np.zeros(0)
        self._codes = np.zeros(0, dtype=np.int32)
        #: Gives the spare arena this tracker took back (see :data:`_SPARE_ARENA`); None once given.
        self._returns: weakref.finalize | None = None
        self._sums_used = 0  # block summaries in use
        self._sum_ends = np.zeros(0)
        self._sum_codes = np.zeros(0, dtype=np.int32)
        self._pool = np.zeros((1, FIRST_LONGEST + 3), dtype=SEGMENT)
        self._more_slots(63)
        self._tracks = np.zeros(FIRST_INSTRUCTIONS, dtype=np.int32)
        self._regions = np.zeros((8, 5), dtype=np.int64)
        # the lists whose regions _regions holds (the scheduler asks and then records with the same lists)
        self._filled: tuple[list[Region], list[Region]] | None = None

    def _new_arena(self, capacity: int) -> tuple[np.ndarray, np.ndarray]:
        """Room for ``capacity`` cells of both maps: the first arena is the spare one when there is one, given
        back when this tracker is gone (or has outgrown it)."""
        if capacity != FIRST_ARENA_CELLS:
            return np.empty(capacity), np.empty(capacity, dtype=np.int32)
        try:
            arena = _SPARE_ARENA.pop()
        except IndexError:
            arena = None
        if arena is None or len(arena[0]) != capacity:
            arena = (np.empty(capacity), np.empty(capacity, dtype=np.int32))
        self._returns = weakref.finalize(self, _SPARE_ARENA.append, arena)
        self._returns.atexit = False
        return arena

    def _add_grid(self, storage: Storage) -> int:
        granule = granule_of(storage)
        rows, row_bytes = storage.rows, storage.row_bytes
        cols = -(-row_bytes // granule)
        g = len(self._grid_of)
        if g == len(self._grids):
            self._grids = np.concatenate([self._grids, np.zeros_like(self._grids)])
        size = 2 * rows * cols
        if self._used + size > len(self._ends):
            # A large first capacity spares most kernels the copy (and its transient peak) of growing. It is never
            # cleared: a new grid's blocks start summarised as "no record", and a block's cells are written
            # before they are read (deps._assign), so only the pages of cells some access reached are touched.
            capacity = max(self._used + size, 2 * len(self._ends), FIRST_ARENA_CELLS)
            outgrown, self._returns = self._returns, None
            ends, codes = self._new_arena(capacity)
            ends[: self._used] = self._ends[: self._used]
            codes[: self._used] = self._codes[: self._used]
            self._ends, self._codes = ends, codes
            if outgrown is not None:  # after the copy: another tracker may take the old arena at once
                outgrown()
        shift = BLOCK_SHIFT
        summaries = 2 * cols * (((rows - 1) >> shift) + 1) + 2  # the blocks', then the whole grid's (deps._whole)
        if self._sums_used + summaries > len(self._sum_ends):
            capacity = max(self._sums_used + summaries, 2 * len(self._sum_ends))
            sum_ends, sum_codes = np.empty(capacity), np.empty(capacity, dtype=np.int32)
            sum_ends[: self._sums_used] = self._sum_ends[: self._sums_used]
            sum_codes[: self._sums_used] = self._sum_codes[: self._sums_used]
            self._sum_ends, self._sum_codes = sum_ends, sum_codes
        self._sum_ends[self._sums_used : self._sums_used + summaries] = 0.0
        self._sum_codes[self._sums_used : self._sums_used + summaries] = 0  # every block and the grid: no record
        self._grids[g] = (self._used, rows, cols, granule, row_bytes, self._sums_used, shift)
        self._used += size
        self._sums_used += summaries
        self._grid_of[storage.uid] = g
        self.kinds.append(storage.kind)
        return g

    def _write_regions(self, reads: list[Region], writes: list[Region]) -> None:
        """Write the regions to :attr:`_regions` (reads first), unless these very lists are there already."""
        filled = self._filled
        if filled is not None and filled[0] is reads and filled[1] is writes:
            return
        count = len(reads) + len(writes)
        if count > len(self._regions):
            self._regions = np.zeros((_next_pow2(count), 5), dtype=np.int64)
        rows, k = self._regions, 0
        for regions in (reads, writes):
            for region in regions:
                rows[k] = self.row(region)
                k += 1
        self._filled = (reads, writes)

    def row(self, region: Region) -> tuple[int, int, int, int, int]:
        """``region`` as the compiled functions take it: (grid, r0, r1, b0, b1), its storage's grid made if new."""
        g = self._grid_of.get(region.storage.uid)
        if g is None:
            g = self._add_grid(region.storage)
        return (g, region.r0, region.r1, region.b0, region.b1)

    def reserve(self, instructions: int) -> None:
        """Room for the tracks of ``instructions`` instructions (the array at least doubles when it grows)."""
        if instructions > len(self._tracks):
            size = max(instructions, 2 * len(self._tracks))
            self._tracks = np.concatenate([self._tracks, np.zeros(size - len(self._tracks), np.int32)])

    def ready(self, reads: list[Region], writes: list[Region], track: int) -> tuple[float, int]:
        """The earliest start on ``track`` allowed by data dependencies, and the instruction that sets it."""
        return self.ready_both(reads, writes, track)[1]

    def ready_both(
        self, reads: list[Region], writes: list[Region], track: int
    ) -> tuple[tuple[float, int], tuple[float, int]]:
        """:meth:`ready` for the reads alone (RAW), and for the reads and writes (as :meth:`ready`), in one pass."""
        self._write_regions(reads, writes)
        best_reads, who_reads, best, who = _ready_all(
            self._ends, self._codes, self._sum_ends, self._sum_codes, self._pool, self._grids, self._regions,
            len(reads), len(writes), self._tracks, track, self.sync_ns,
        )  # fmt: skip
        return (best_reads, who_reads), (best, who)

    def commit(
        self,
        reads: list[Region],
        writes: list[Region],
        end: float,
        index: int,
        track: int,
        visible: float | None = None,
    ) -> None:
        """Record that instruction ``index`` on ``track`` reads until ``end`` and writes results readable at ``visible``
        (default ``end``)."""
        visible = end if visible is None else visible
        self.reserve(index + 1)
        self._tracks[index] = track
        self._write_regions(reads, writes)
        first = 0
        while True:
            status, first = _commit_all(
                self._ends, self._codes, self._sum_ends, self._sum_codes, self._pool, self._grids, self._regions,
                len(reads), len(writes), first, end, visible, index + 1,
            )  # fmt: skip
            if status == _DONE:
                return
            if status == _NEEDS_SLOTS:
                region = self._regions[first]
                self._more_slots(max(len(self._pool), 2 * int(region[2] - region[1])))
            else:
                self._longer()

    def _more_slots(self, count: int) -> None:
        """Add ``count`` free slots to the pool."""
        old = len(self._pool)
        pool = np.zeros((old + count, self._pool.shape[1]), dtype=SEGMENT)
        pool[:old] = self._pool
        meta = pool[:, -1]  # a view: writes go to the pool
        new = np.arange(old, old + count, dtype=np.int32)
        meta["start"][old:] = np.append(new[1:], meta["id"][0])  # each new slot links to the next, the last to the head
        meta["id"][0] = old
        meta["start"][0] += count
        self._pool = pool

    def _longer(self) -> None:
        """Double the segments each slot can hold."""
        old = self._pool.shape[1]
        pool = np.zeros((len(self._pool), 2 * (old - 3) + 3), dtype=SEGMENT)
        pool[:, : old - 1] = self._pool[:, :-1]
        pool[:, -1] = self._pool[:, -1]
        self._pool = pool

    def split_cells(self, storage: Storage) -> int:
        """Cells of ``storage``'s maps whose bytes have records of their own now (0: every access so far was whole
        cells)."""
        g = self._grid_of.get(storage.uid)
        if g is None:
            return 0
        offset, rows, cols = (int(x) for x in self._grids[g, :3])
        summaries, shift = int(self._grids[g, 5]), int(self._grids[g, 6])
        codes = self._codes[offset : offset + 2 * rows * cols].reshape(2, cols, rows)
        blocks = ((rows - 1) >> shift) + 1
        held = self._sum_codes[summaries : summaries + 2 * cols * blocks].reshape(2, cols, blocks) == _CELLS
        whole = self._sum_codes[summaries + 2 * cols * blocks : summaries + 2 * cols * blocks + 2]
        held[whole != _CELLS] = False  # a map whose whole-grid summary holds: every block and cell stale
        own = np.repeat(held, 1 << shift, axis=2)[:, :, :rows]  # the rows of summarised blocks: stale cells
        return int(np.count_nonzero(codes[own] < 0))
