"""Dependency tracking on the actual bytes each instruction reads and writes.

Every storage (SBUF, PSUM, each HBM tensor) is covered by a grid of cells: one row
per partition (or a few HBM rows) by a few dozen bytes. Each cell remembers when
its last write and its last read finish and which instruction wrote it. An
instruction may start only after

* the last writer of every cell it reads (RAW),
* the last writer and readers of every cell it writes (WAW, WAR).

Cells are aligned to the allocation granule, so distinct tiles never share one; two
slices of one tile that share a cell are ordered conservatively.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nkisim.memory import Region, Storage


@dataclass
class _Grid:
    write_end: np.ndarray
    read_end: np.ndarray
    writer: np.ndarray
    reader: np.ndarray
    row_granule: int
    col_granule: int

    def cells(self, region: Region) -> tuple[slice, slice]:
        rg, cg = self.row_granule, self.col_granule
        return slice(region.r0 // rg, -(-region.r1 // rg)), slice(region.b0 // cg, -(-region.b1 // cg))


class AccessTracker:
    """Answers "when may this instruction start?" and records when it is done."""

    def __init__(self) -> None:
        self._grids: dict[int, _Grid] = {}

    def _grid(self, storage: Storage) -> _Grid:
        grid = self._grids.get(storage.uid)
        if grid is None:
            shape = (-(-storage.rows // storage.row_granule), -(-storage.row_bytes // storage.col_granule))
            grid = _Grid(
                write_end=np.zeros(shape),
                read_end=np.zeros(shape),
                writer=np.full(shape, -1, dtype=np.int64),
                reader=np.full(shape, -1, dtype=np.int64),
                row_granule=storage.row_granule,
                col_granule=storage.col_granule,
            )
            self._grids[storage.uid] = grid
        return grid

    def ready(self, reads: list[Region], writes: list[Region]) -> tuple[float, int]:
        """The earliest start allowed by data dependencies, and the instruction that sets it (-1: none)."""
        best, producer = 0.0, -1
        for region, is_write in [(r, False) for r in reads] + [(w, True) for w in writes]:
            if region.r1 <= region.r0 or region.b1 <= region.b0:
                continue
            grid = self._grid(region.storage)
            rows, cols = grid.cells(region)
            written = grid.write_end[rows, cols]
            t = float(written.max())
            if t > best:
                best = t
                flat = int(written.argmax())
                producer = int(grid.writer[rows, cols].reshape(-1)[flat])
            if is_write:
                read = grid.read_end[rows, cols]
                read_t = float(read.max())
                if read_t > best:
                    best = read_t
                    producer = int(grid.reader[rows, cols].reshape(-1)[int(read.argmax())])
        return best, producer

    def commit(self, reads: list[Region], writes: list[Region], end: float, index: int) -> None:
        """Record that instruction ``index`` reads and writes these regions until ``end``."""
        for region in reads:
            grid = self._grid(region.storage)
            rows, cols = grid.cells(region)
            later = grid.read_end[rows, cols] < end
            grid.read_end[rows, cols][later] = end
            grid.reader[rows, cols][later] = index
        for region in writes:
            grid = self._grid(region.storage)
            rows, cols = grid.cells(region)
            grid.write_end[rows, cols] = end
            grid.writer[rows, cols] = index
