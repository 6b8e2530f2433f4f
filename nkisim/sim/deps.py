"""Dependency tracking on the actual bytes each instruction reads and writes.

Every storage (SBUF, PSUM, each HBM tensor) is covered by a grid of cells: one row
per partition (or a few HBM rows) by a few dozen bytes. Each cell remembers when
its last write and its latest read finish, and which instructions those were. An
instruction may start only after

* the last writer of every cell it reads (RAW),
* the last writer and the readers of every cell it writes (WAW, WAR).

Cells are aligned to the allocation granule, so distinct tiles never share one; two
slices of one tile that share a cell are ordered conservatively. The cell loops are
compiled with numba: one pass per region instead of several numpy reductions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from nkisim.memory import Region, Storage


@numba.njit(cache=True, nogil=True)
def _latest(
    ends: np.ndarray,
    ids: np.ndarray,
    r0: int,
    r1: int,
    c0: int,
    c1: int,
    tracks: np.ndarray,
    track: int,
    sync_ns: float,
    best: float,
    who: int,
):
    """The latest ``end`` over the cells, plus ``sync_ns`` where the producer is on another track."""
    for r in range(r0, r1):
        for c in range(c0, c1):
            producer = ids[r, c] - 1  # ids hold index + 1, so that fresh (zeroed) cells mean "none"
            if producer < 0:
                continue
            t = ends[r, c]
            if tracks[producer] != track:
                t += sync_ns
            if t > best:
                best = t
                who = producer
    return best, who


@numba.njit(cache=True, nogil=True)
def _latest_for_write(
    write_end: np.ndarray,
    writer: np.ndarray,
    read_end: np.ndarray,
    reader: np.ndarray,
    r0: int,
    r1: int,
    c0: int,
    c1: int,
    tracks: np.ndarray,
    track: int,
    sync_ns: float,
    best: float,
    who: int,
):
    """:func:`_latest` over the last writers, then over the readers, of the cells (one call for WAW and WAR)."""
    best, who = _latest(write_end, writer, r0, r1, c0, c1, tracks, track, sync_ns, best, who)
    return _latest(read_end, reader, r0, r1, c0, c1, tracks, track, sync_ns, best, who)


@numba.njit(cache=True, nogil=True)
def _record_read(ends: np.ndarray, ids: np.ndarray, r0: int, r1: int, c0: int, c1: int, end: float, index: int) -> None:
    for r in range(r0, r1):
        for c in range(c0, c1):
            if ends[r, c] < end:
                ends[r, c] = end
                ids[r, c] = index + 1


@dataclass
class _Grid:
    write_end: np.ndarray
    writer: np.ndarray
    read_end: np.ndarray
    reader: np.ndarray
    row_granule: int
    col_granule: int

    def cells(self, region: Region) -> tuple[int, int, int, int]:
        rg, cg = self.row_granule, self.col_granule
        r0, r1, c0, c1 = region.r0 // rg, -(-region.r1 // rg), region.b0 // cg, -(-region.b1 // cg)
        rows, cols = self.writer.shape
        if r0 < 0 or c0 < 0 or r1 > rows or c1 > cols:
            # clamped: the numba loops do no bounds checks, and a region past the grid would read stray memory
            r0, r1 = min(max(r0, 0), rows), min(max(r1, 0), rows)
            c0, c1 = min(max(c0, 0), cols), min(max(c1, 0), cols)
        return r0, r1, c0, c1


class AccessTracker:
    """Answers "when may this instruction start?" and records when it is done.

    A producer on another engine or queue is waited for through a semaphore, which
    costs ``sync_ns`` more than waiting on the same in-order queue.
    """

    def __init__(self, sync_ns: float) -> None:
        self._grids: dict[int, _Grid] = {}
        self.sync_ns = sync_ns
        self._tracks = np.zeros(1024, dtype=np.int32)

    def _grid(self, storage: Storage) -> _Grid:
        grid = self._grids.get(storage.uid)
        if grid is None:
            shape = (-(-storage.rows // storage.row_granule), -(-storage.row_bytes // storage.col_granule))
            grid = _Grid(
                write_end=np.zeros(shape),
                writer=np.zeros(shape, dtype=np.int64),
                read_end=np.zeros(shape),
                reader=np.zeros(shape, dtype=np.int64),
                row_granule=storage.row_granule,
                col_granule=storage.col_granule,
            )
            self._grids[storage.uid] = grid
        return grid

    def ready(self, reads: list[Region], writes: list[Region], track: int) -> tuple[float, int]:
        """The earliest start on ``track`` allowed by data dependencies, and the instruction that sets it."""
        return self.ready_both(reads, writes, track)[1]

    def ready_both(
        self, reads: list[Region], writes: list[Region], track: int
    ) -> tuple[tuple[float, int], tuple[float, int]]:
        """:meth:`ready` for the reads alone (RAW), and for the reads and writes (as :meth:`ready`), in one pass."""
        best, producer = 0.0, -1
        tracks, sync = self._tracks, self.sync_ns
        for region in reads:
            grid = self._grid(region.storage)
            cells = grid.cells(region)
            best, producer = _latest(grid.write_end, grid.writer, *cells, tracks, track, sync, best, producer)
        after_reads = (best, producer)
        for region in writes:
            grid = self._grid(region.storage)
            cells = grid.cells(region)
            best, producer = _latest_for_write(
                grid.write_end, grid.writer, grid.read_end, grid.reader, *cells, tracks, track, sync, best, producer
            )
        return after_reads, (best, producer)

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
        if index >= len(self._tracks):
            self._tracks = np.concatenate([self._tracks, np.zeros_like(self._tracks)])
        self._tracks[index] = track
        for region in reads:
            grid = self._grid(region.storage)
            _record_read(grid.read_end, grid.reader, *grid.cells(region), end, index)
        for region in writes:
            grid = self._grid(region.storage)
            r0, r1, c0, c1 = grid.cells(region)
            grid.write_end[r0:r1, c0:c1] = visible
            grid.writer[r0:r1, c0:c1] = index + 1
