"""Dependency tracking on the actual bytes each instruction reads and writes, exact to the byte.

Each instruction touches rectangles of a storage (SBUF, PSUM, an HBM tensor): rows
``[r0, r1)`` by bytes ``[b0, b1)`` (:class:`~nkisim.memory.Region`, the bounding box of
a view). For every byte the tracker knows the last instruction that wrote it (and when
its result is readable) and the read that finishes latest (and which instruction made
it). An instruction may start only after

* the last writer of every byte it reads (RAW),
* the last writer and the latest reader of every byte it writes (WAW, WAR).

Two maps hold these, one for writes and one for reads. A map is a grid of cells (one
row by ``granule`` bytes: 64 on chip, coarser in a large HBM tensor); a cell that every
access so far covered whole keeps one record. A cell that an access covers in part (a
tile placed at an address off the granule, or a slice of a tile) is *split*: it points
to a slot of a pool holding a short sorted list of byte segments, each with its own
record. An access that covers a split cell whole can merge it back: a write always
does, a read when it ends last. Neighbouring segments with equal records are merged.
So tiles at any byte offset never share a record, and aligned kernels pay no more than
for a plain grid. The cell loops are compiled with numba.
"""

from __future__ import annotations

import numba
import numpy as np

from nkisim.memory import Region, Storage

#: Which map of a grid: the last writes, or the latest reads (a read keeps a later end already recorded).
WRITES, READS = 0, 1
#: One segment of a split cell: bytes from ``start`` (relative to the cell) to the next segment's start,
#: with the record (``end``; ``id`` = instruction index + 1, 0 = none).
SEGMENT = np.dtype([("end", np.float64), ("id", np.int32), ("start", np.int32)])
#: Segments a pool row holds to begin with (it doubles when a cell needs more).
FIRST_LONGEST = 4

#: Cells of one HBM tensor's map at most (before its granule grows): the same budget as the on-chip grids.
HBM_CELLS = 1 << 18
#: Bytes per cell on chip.
ON_CHIP_GRANULE = 64

# return codes of _assign
_DONE, _NEEDS_SLOTS, _NEEDS_LONGER = 0, 1, 2

# The pool is one array of SEGMENT, rows of ``longest + 3``. Row s >= 1 is a slot: its segments, two spare
# places (painting a range adds at most two), and in the last column its count (``id``) and, while free, the
# next free slot (``start``). Row 0 is scratch for painting; its last column holds the first free slot (``id``)
# and how many are free (``start``).


@numba.njit(cache=True, nogil=True, inline="never")
def _scan_split(
    pool: np.ndarray,
    s: int,
    lo: int,
    hi: int,
    tracks: np.ndarray,
    track: int,
    sync_ns: float,
    best: float,
    who: int,
):
    """:func:`_scan` over the segments of slot ``s`` that meet bytes ``[lo, hi)`` of their cell.

    Kept out of line, so that the cell loop of :func:`_scan` stays as tight as a plain grid's.
    """
    n = pool[s, pool.shape[1] - 1].id
    for k in range(n):
        if pool[s, k].start >= hi:
            break
        if k + 1 < n and pool[s, k + 1].start <= lo:
            continue
        producer = pool[s, k].id - 1
        if producer >= 0:
            t = pool[s, k].end
            if tracks[producer] != track:
                t += sync_ns
            if t > best:
                best = t
                who = producer
    return best, who


@numba.njit(cache=True, nogil=True)
def _scan(
    ends: np.ndarray,
    codes: np.ndarray,
    m: int,
    pool: np.ndarray,
    granule: int,
    r0: int,
    r1: int,
    b0: int,
    b1: int,
    tracks: np.ndarray,
    track: int,
    sync_ns: float,
    best: float,
    who: int,
):
    """The latest ``end`` in map ``m`` over the bytes, plus ``sync_ns`` where the producer is on another track.

    ``codes`` above 0 are an instruction index + 1, 0 none, below 0 a split cell's slot.
    Bytes are visited row by row, in address order; the first of equal maxima wins.
    """
    if r1 <= r0 or b1 <= b0:
        return best, who
    c0 = b0 // granule
    c1 = (b1 + granule - 1) // granule
    flat_ends = ends.reshape(-1)  # flat indices: no per-row views, which cost more than a narrow row's cells
    flat_codes = codes.reshape(-1)
    cols = codes.shape[2]
    for r in range(r0, r1):
        row = (m * codes.shape[1] + r) * cols
        for i in range(row + c0, row + c1):
            code = flat_codes[i]
            if code > 0:
                producer = code - 1
                t = flat_ends[i]
                if tracks[producer] != track:
                    t += sync_ns
                if t > best:
                    best = t
                    who = producer
            elif code < 0:
                base = (i - row) * granule
                best, who = _scan_split(pool, -code, b0 - base, b1 - base, tracks, track, sync_ns, best, who)
    return best, who


@numba.njit(cache=True, nogil=True)
def _scan_for_write(
    ends: np.ndarray,
    codes: np.ndarray,
    pool: np.ndarray,
    granule: int,
    r0: int,
    r1: int,
    b0: int,
    b1: int,
    tracks: np.ndarray,
    track: int,
    sync_ns: float,
    best: float,
    who: int,
):
    """:func:`_scan` over the last writers, then over the readers, of the bytes (one call for WAW and WAR)."""
    best, who = _scan(ends, codes, WRITES, pool, granule, r0, r1, b0, b1, tracks, track, sync_ns, best, who)
    return _scan(ends, codes, READS, pool, granule, r0, r1, b0, b1, tracks, track, sync_ns, best, who)


@numba.njit(cache=True, nogil=True)
def _emit(tmp: np.ndarray, n: int, start: int, end: float, ident: int) -> int:
    """Append a segment to ``tmp[:n]``, or extend the last one when its record is the same."""
    if n > 0 and tmp[n - 1].end == end and tmp[n - 1].id == ident:
        return n
    tmp[n].start = start
    tmp[n].end = end
    tmp[n].id = ident
    return n + 1


@numba.njit(cache=True, nogil=True)
def _paint(pool: np.ndarray, s: int, width: int, lo: int, hi: int, end: float, ident: int, keep_later: bool) -> None:
    """Give bytes ``[lo, hi)`` of slot ``s`` the record (end, ident); with ``keep_later`` only where it is later.

    The new list is built in row 0, the scratch row, then copied back.
    """
    meta = pool.shape[1] - 1
    n = pool[s, meta].id
    out = 0
    tmp = pool[0]
    for k in range(n):
        start = pool[s, k].start
        stop = pool[s, k + 1].start if k + 1 < n else width
        e = pool[s, k].end
        i = pool[s, k].id
        if start < lo:
            out = _emit(tmp, out, start, e, i)
        a = max(start, lo)
        if a < min(stop, hi):
            later = keep_later and e >= end
            out = _emit(tmp, out, a, e if later else end, i if later else ident)
        if stop > hi:
            out = _emit(tmp, out, max(start, hi), e, i)
    for k in range(out):
        pool[s, k] = tmp[k]
    pool[s, meta].id = out


@numba.njit(cache=True, nogil=True)
def _merge_back(ends: np.ndarray, codes: np.ndarray, m: int, r: int, c: int, pool: np.ndarray, s: int) -> None:
    """A slot left with one segment: its record goes back to the cell, the slot to the free list."""
    meta = pool.shape[1] - 1
    if pool[s, meta].id == 1:
        ends[m, r, c] = pool[s, 0].end
        codes[m, r, c] = pool[s, 0].id
        pool[s, meta].start = pool[0, meta].id
        pool[0, meta].id = s
        pool[0, meta].start += 1


@numba.njit(cache=True, nogil=True)
def _partial(
    ends: np.ndarray, codes: np.ndarray, m: int, r: int, c: int, pool: np.ndarray, width: int, lo: int, hi: int,
    end: float, ident: int,
) -> None:  # fmt: skip
    """Record an access to bytes ``[lo, hi)`` of cell ``c``, not all of it: split the cell if it is whole."""
    meta = pool.shape[1] - 1
    keep_later = m == READS
    code = codes[m, r, c]
    if code >= 0:
        if keep_later and ends[m, r, c] >= end:
            return
        s = pool[0, meta].id  # take a free slot
        pool[0, meta].id = pool[s, meta].start
        pool[0, meta].start -= 1
        pool[s, meta].id = 1
        pool[s, 0].start = 0
        pool[s, 0].end = ends[m, r, c]
        pool[s, 0].id = code
        codes[m, r, c] = -s
    else:
        s = -code
    _paint(pool, s, width, lo, hi, end, ident, keep_later)
    _merge_back(ends, codes, m, r, c, pool, s)


@numba.njit(cache=True, nogil=True, inline="never")
def _whole_split(
    ends: np.ndarray, codes: np.ndarray, m: int, r: int, c: int, pool: np.ndarray, width: int, end: float, ident: int
) -> None:
    """Record an access to all of split cell ``c`` (out of line, as :func:`_scan_split`)."""
    s = -codes[m, r, c]
    if m == READS:
        _paint(pool, s, width, 0, width, end, ident, True)
    else:
        pool[s, pool.shape[1] - 1].id = 1
        pool[s, 0].end = end
        pool[s, 0].id = ident
    _merge_back(ends, codes, m, r, c, pool, s)


@numba.njit(cache=True, nogil=True)
def _assign(
    ends: np.ndarray,
    codes: np.ndarray,
    m: int,
    pool: np.ndarray,
    granule: int,
    row_bytes: int,
    r0: int,
    r1: int,
    b0: int,
    b1: int,
    end: float,
    ident: int,
) -> int:
    """Record (end, ident) on the bytes in map ``m``: a write replaces, a read keeps a later end.

    Returns ``_DONE``, or before changing anything ``_NEEDS_SLOTS`` / ``_NEEDS_LONGER``
    when the pool must first grow (more slots, longer segment lists).
    """
    if r1 <= r0 or b1 <= b0:
        return _DONE
    keep_later = m == READS
    c0 = b0 // granule
    c1 = (b1 + granule - 1) // granule
    left_cut = b0 % granule != 0
    right_cut = b1 % granule != 0 and b1 != row_bytes
    # the cells covered in part: the first and the last (one cell when both ends fall in it)
    first = c0 if left_cut else -1
    last = c1 - 1 if right_cut and not (left_cut and c1 - 1 == c0) else -1
    inner0 = c0 + 1 if left_cut else c0
    inner1 = max(inner0, c1 - 1 if right_cut else c1)
    meta = pool.shape[1] - 1
    if first >= 0 or last >= 0:
        needed = 0
        for r in range(r0, r1):
            for c in (first, last):
                if c < 0:
                    continue
                code = codes[m, r, c]
                if code >= 0:
                    if not (keep_later and ends[m, r, c] >= end):
                        needed += 1
                elif pool[-code, meta].id + 2 > meta:
                    return _NEEDS_LONGER
        if needed > pool[0, meta].start:
            return _NEEDS_SLOTS
    if pool.shape[0] - 1 == pool[0, meta].start:  # no cell of this storage is split: plain fills
        if keep_later:
            map_ends, map_codes = ends[m], codes[m]
            for r in range(r0, r1):
                for c in range(inner0, inner1):
                    if map_ends[r, c] < end:
                        map_ends[r, c] = end
                        map_codes[r, c] = ident
        else:
            ends[m, r0:r1, inner0:inner1] = end
            codes[m, r0:r1, inner0:inner1] = ident
        if first < 0 and last < 0:
            return _DONE
        inner0 = inner1  # the inner cells are done; the partial ones follow
    cols = codes.shape[2]
    last_width = row_bytes - (cols - 1) * granule
    flat_ends = ends.reshape(-1)
    flat_codes = codes.reshape(-1)
    for r in range(r0, r1):
        row = (m * codes.shape[1] + r) * cols
        negative = 0
        for i in range(row + inner0, row + inner1):
            negative += flat_codes[i] >> 31  # -1 per split cell: a sum the compiler vectorises
        if negative:  # split cells (rare): record on them first, out of line
            for i in range(row + inner0, row + inner1):
                if flat_codes[i] < 0:
                    c = i - row
                    _whole_split(ends, codes, m, r, c, pool, last_width if c == cols - 1 else granule, end, ident)
        if keep_later:  # a read keeps a later end; split cells hold codes < 0 and stay as they are
            for i in range(row + inner0, row + inner1):
                if flat_codes[i] >= 0 and flat_ends[i] < end:
                    flat_ends[i] = end
                    flat_codes[i] = ident
        else:  # a write replaces every record (split cells have just merged back)
            for i in range(row + inner0, row + inner1):
                flat_ends[i] = end
            for i in range(row + inner0, row + inner1):
                flat_codes[i] = ident
        for c in (first, last):
            if c >= 0:
                base = c * granule
                width = min(granule, row_bytes - base)
                lo = max(b0 - base, 0)
                hi = min(b1 - base, width)
                _partial(ends, codes, m, r, c, pool, width, lo, hi, end, ident)
    return _DONE


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def granule_of(storage: Storage) -> int:
    """Bytes per cell of a storage's maps: 64 on chip; an HBM tensor's rows in at most :data:`HBM_CELLS` cells."""
    if storage.kind != "hbm":
        return ON_CHIP_GRANULE
    return max(ON_CHIP_GRANULE, _next_pow2(-(-storage.rows * storage.row_bytes // HBM_CELLS)))


class _Grid:
    """The write map and the read map of one storage, and the pool of segment lists they share.

    ``ends[m]`` and ``codes[m]`` are map ``m``'s cells: a code above 0 is the record's
    instruction index + 1, 0 means none, and below 0 the cell is split into the segments
    of pool slot ``-code``.
    """

    __slots__ = ("codes", "ends", "granule", "pool", "row_bytes", "rows")

    def __init__(self, storage: Storage) -> None:
        self.rows, self.row_bytes = storage.rows, storage.row_bytes
        self.granule = granule_of(storage)
        shape = (2, self.rows, -(-self.row_bytes // self.granule))
        self.ends = np.zeros(shape)
        self.codes = np.zeros(shape, dtype=np.int32)
        self.pool = np.zeros((1, FIRST_LONGEST + 3), dtype=SEGMENT)
        self._more_slots(63)

    def bounds(self, region: Region) -> tuple[int, int, int, int]:
        """The region's rows and bytes, clamped to the storage (the numba loops do no bounds checks)."""
        r0, r1, b0, b1 = region.r0, region.r1, region.b0, region.b1
        if r0 < 0 or b0 < 0 or r1 > self.rows or b1 > self.row_bytes:
            r0, r1 = min(max(r0, 0), self.rows), min(max(r1, 0), self.rows)
            b0, b1 = min(max(b0, 0), self.row_bytes), min(max(b1, 0), self.row_bytes)
        return r0, r1, b0, b1

    def assign(self, m: int, region: Region, end: float, ident: int) -> None:
        """Record an access in map ``m``, growing the pool first when it must."""
        r0, r1, b0, b1 = self.bounds(region)
        while status := _assign(
            self.ends, self.codes, m, self.pool, self.granule, self.row_bytes, r0, r1, b0, b1, end, ident
        ):
            if status == _NEEDS_SLOTS:
                self._more_slots(max(len(self.pool), 2 * (r1 - r0)))
            else:
                self._longer()

    def _more_slots(self, count: int) -> None:
        """Add ``count`` free slots."""
        old = len(self.pool)
        pool = np.zeros((old + count, self.pool.shape[1]), dtype=SEGMENT)
        pool[:old] = self.pool
        meta = pool[:, -1]  # a view: writes go to the pool
        new = np.arange(old, old + count, dtype=np.int32)
        meta["start"][old:] = np.append(new[1:], meta["id"][0])  # each new slot links to the next, the last to the head
        meta["id"][0] = old
        meta["start"][0] += count
        self.pool = pool

    def _longer(self) -> None:
        """Double the segments each slot can hold."""
        old = self.pool.shape[1]
        pool = np.zeros((len(self.pool), 2 * (old - 3) + 3), dtype=SEGMENT)
        pool[:, : old - 1] = self.pool[:, :-1]
        pool[:, -1] = self.pool[:, -1]
        self.pool = pool

    @property
    def split_cells(self) -> int:
        """How many cells hold segments now."""
        return len(self.pool) - 1 - int(self.pool[0, -1]["start"])


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
            grid = self._grids[storage.uid] = _Grid(storage)
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
            r0, r1, b0, b1 = grid.bounds(region)
            best, producer = _scan(
                grid.ends, grid.codes, WRITES, grid.pool, grid.granule, r0, r1, b0, b1, tracks, track, sync, best,
                producer,
            )  # fmt: skip
        after_reads = (best, producer)
        for region in writes:
            grid = self._grid(region.storage)
            r0, r1, b0, b1 = grid.bounds(region)
            best, producer = _scan_for_write(
                grid.ends, grid.codes, grid.pool, grid.granule, r0, r1, b0, b1, tracks, track, sync, best, producer
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
        for m, regions, at in ((READS, reads, end), (WRITES, writes, visible)):
            for region in regions:
                grid = self._grid(region.storage)
                r0, r1, b0, b1 = grid.bounds(region)
                if _assign(
                    grid.ends, grid.codes, m, grid.pool, grid.granule, grid.row_bytes, r0, r1, b0, b1, at, index + 1
                ):
                    grid.assign(m, region, at, index + 1)  # the pool must grow first

    def split_cells(self, storage: Storage) -> int:
        """Cells of ``storage`` whose bytes have records of their own now (0: every access so far was whole cells)."""
        grid = self._grids.get(storage.uid)
        return 0 if grid is None else grid.split_cells
