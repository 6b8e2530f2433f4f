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
for a plain grid. The maps are stored a column of rows at a time (a tile spans many
partitions and few cells). A column whose rows all hold one record, the usual case
(tiles span every partition), keeps it in a *summary* instead of its cells: it is checked
or recorded in one step, and a new storage needs no clearing, as every column starts as the
summary "no record". An access to some rows of a summarised column first writes the summary
to its cells. The cell loops are compiled with numba, and one compiled call answers (or
records) all of an instruction's regions.
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
#: Cells of both maps the arena holds at first (48 MiB of address space: SBUF's maps and a few HBM tensors').
FIRST_ARENA_CELLS = 1 << 22
#: Instructions whose track the tracker has room for at first (it doubles when more come).
FIRST_INSTRUCTIONS = 1024
#: Below this many rows a region's cells are visited one by one rather than a column at a time.
SHORT_COLUMN = 8
#: Bytes per cell on chip.
ON_CHIP_GRANULE = 64

#: A column summary's code when the column's cells hold its records (else the code every row of it holds).
_CELLS = -1

# return codes of _assign
_DONE, _NEEDS_SLOTS, _NEEDS_LONGER = 0, 1, 2

# The pool is one array of SEGMENT, rows of ``longest + 3``. Row s >= 1 is a slot: its segments, two spare
# places (painting a range adds at most two), and in the last column its count (``id``) and, while free, the
# next free slot (``start``). Row 0 is scratch for painting; its last column holds the first free slot (``id``)
# and how many are free (``start``).


@numba.njit(cache=True, nogil=True, inline="never")
def _scan_split(
    pool: np.ndarray, s: int, lo: int, hi: int, tracks: np.ndarray, track: int, sync_ns: float
) -> tuple[float, int]:
    """The latest record (plus ``sync_ns`` off ``track``) of slot ``s``'s segments that meet bytes ``[lo, hi)``.

    The first of equal maxima in address order wins; ``(-1.0, -1)`` when no segment has a record.
    Kept out of line, so that the cell loop of :func:`_scan` stays as tight as a plain grid's.
    """
    best, who = -1.0, -1
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
def _uniform(column: np.ndarray, r0: int, r1: int) -> bool:
    """Whether ``column[r0:r1]`` holds one code (a branch-free pass the compiler vectorises)."""
    run = column[r0:r1]  # indices from 1 up: the compiler then knows they are not negative, and vectorises
    first = run[0]
    differ = 0
    for r in range(1, len(run)):
        differ |= run[r] != first
    return differ == 0


@numba.njit(cache=True, nogil=True)
def _fill_column(column_ends: np.ndarray, column_codes: np.ndarray, r0: int, r1: int, end: float, ident: int) -> None:
    """Give cells ``r0..r1`` of a column the record (end, ident)."""
    run_ends, run_codes = column_ends[r0:r1], column_codes[r0:r1]
    for r in range(len(run_ends)):
        run_ends[r] = end
    for r in range(len(run_codes)):
        run_codes[r] = ident


@numba.njit(cache=True, nogil=True)
def _unsummarise(
    ends: np.ndarray, codes: np.ndarray, sum_ends: np.ndarray, sum_codes: np.ndarray, m: int, c: int
) -> None:
    """Give every row of column ``c`` of map ``m`` its summary's record; the cells hold the column's records then."""
    code = sum_codes[m, c]
    if code != _CELLS:
        _fill_column(ends[m, c], codes[m, c], 0, codes.shape[2], sum_ends[m, c], code)
        sum_codes[m, c] = _CELLS


@numba.njit(cache=True, nogil=True)
def _scan(
    ends: np.ndarray,
    codes: np.ndarray,
    sum_ends: np.ndarray,
    sum_codes: np.ndarray,
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
) -> tuple[float, int]:
    """The latest ``end`` in map ``m`` over the bytes, plus ``sync_ns`` where the producer is on another track.

    ``codes`` above 0 are an instruction index + 1, 0 none, below 0 a split cell's slot. Of equal
    maxima, the first in address order (row by row) wins; ``(-1.0, -1)`` when no byte has a record.
    Cells are visited a column of rows at a time (the maps' memory order); a cell holding the same
    code as the one above it holds the same record (an instruction records one time in a map), so
    it cannot win and costs one comparison. A summarised column is its summary in every row.
    """
    best, who, best_pos = -1.0, -1, 0
    if r1 <= r0 or b1 <= b0:
        return best, who
    cols = codes.shape[1]
    if r1 - r0 < SHORT_COLUMN:  # few rows (a batch-1 HBM tensor is one row of many cells): in address order
        rows = codes.shape[2]
        flat_codes, flat_ends = codes[m].reshape(-1), ends[m].reshape(-1)  # cell (c, r) at c * rows + r
        column_sums, column_sum_ends = sum_codes[m], sum_ends[m]
        for r in range(r0, r1):
            left = 0
            for c in range(b0 // granule, (b1 + granule - 1) // granule):
                summary = column_sums[c]
                code = summary if summary != _CELLS else flat_codes[c * rows + r]
                if code == left or code == 0:  # the record of the cell before it, or none
                    left = code
                    continue
                left = code
                if code > 0:
                    producer = code - 1
                    t = column_sum_ends[c] if summary != _CELLS else flat_ends[c * rows + r]
                    if tracks[producer] != track:
                        t += sync_ns
                else:
                    base = c * granule
                    t, producer = _scan_split(pool, -code, b0 - base, b1 - base, tracks, track, sync_ns)
                if producer >= 0 and t > best:
                    best, who = t, producer
        return best, who
    for c in range(b0 // granule, (b1 + granule - 1) // granule):
        summary = sum_codes[m, c]
        if summary != _CELLS:  # one record in every row: decided as the first row of the region
            if summary > 0:
                producer = summary - 1
                t = sum_ends[m, c]
                if tracks[producer] != track:
                    t += sync_ns
                pos = r0 * cols + c
                if t > best or (t == best and pos < best_pos):
                    best, who, best_pos = t, producer, pos
            continue
        column_codes = codes[m, c]
        column_ends = ends[m, c]
        above = 0
        # a column of one record (the usual case: a tile written whole) is decided by its first cell
        stop = r0 + 1 if _uniform(column_codes, r0, r1) else r1
        for r in range(r0, stop):
            code = column_codes[r]
            if code == above:
                continue
            above = code
            if code > 0:
                producer = code - 1
                t = column_ends[r]
                if tracks[producer] != track:
                    t += sync_ns
            elif code == 0:
                continue
            else:
                base = c * granule
                t, producer = _scan_split(pool, -code, b0 - base, b1 - base, tracks, track, sync_ns)
                if producer < 0:
                    continue
            pos = r * cols + c
            if t > best or (t == best and pos < best_pos):
                best, who, best_pos = t, producer, pos
    return best, who


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
def _merge_back(ends: np.ndarray, codes: np.ndarray, m: int, c: int, r: int, pool: np.ndarray, s: int) -> None:
    """A slot left with one segment: its record goes back to the cell, the slot to the free list."""
    meta = pool.shape[1] - 1
    if pool[s, meta].id == 1:
        ends[m, c, r] = pool[s, 0].end
        codes[m, c, r] = pool[s, 0].id
        pool[s, meta].start = pool[0, meta].id
        pool[0, meta].id = s
        pool[0, meta].start += 1


@numba.njit(cache=True, nogil=True)
def _partial(
    ends: np.ndarray, codes: np.ndarray, m: int, c: int, r: int, pool: np.ndarray, width: int, lo: int, hi: int,
    end: float, ident: int,
) -> None:  # fmt: skip
    """Record an access to bytes ``[lo, hi)`` of cell ``c`` of row ``r``, not all of it: split the cell if it is
    whole."""
    meta = pool.shape[1] - 1
    keep_later = m == READS
    code = codes[m, c, r]
    if code >= 0:
        if keep_later and ends[m, c, r] >= end:
            return
        s = pool[0, meta].id  # take a free slot
        pool[0, meta].id = pool[s, meta].start
        pool[0, meta].start -= 1
        pool[s, meta].id = 1
        pool[s, 0].start = 0
        pool[s, 0].end = ends[m, c, r]
        pool[s, 0].id = code
        codes[m, c, r] = -s
    else:
        s = -code
    _paint(pool, s, width, lo, hi, end, ident, keep_later)
    _merge_back(ends, codes, m, c, r, pool, s)


@numba.njit(cache=True, nogil=True, inline="never")
def _whole_split(
    ends: np.ndarray, codes: np.ndarray, m: int, c: int, r: int, pool: np.ndarray, width: int, end: float, ident: int
) -> None:
    """Record an access to all of split cell ``c`` of row ``r`` (out of line, as :func:`_scan_split`)."""
    s = -codes[m, c, r]
    if m == READS:
        _paint(pool, s, width, 0, width, end, ident, True)
    else:
        pool[s, pool.shape[1] - 1].id = 1
        pool[s, 0].end = end
        pool[s, 0].id = ident
    _merge_back(ends, codes, m, c, r, pool, s)


@numba.njit(cache=True, nogil=True)
def _assign(
    ends: np.ndarray,
    codes: np.ndarray,
    sum_ends: np.ndarray,
    sum_codes: np.ndarray,
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

    A column whose every row the access covers whole keeps (or becomes) a summary when it holds
    one record; the other columns it touches get their cells first.
    Returns ``_DONE``, or before changing any record ``_NEEDS_SLOTS`` / ``_NEEDS_LONGER``
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
    rows = codes.shape[2]
    # summaries stay only on columns this access covers whole in every row, outside the few-row path
    whole_rows = r0 == 0 and r1 == rows and r1 - r0 >= SHORT_COLUMN
    for c in range(c0, c1):
        if not whole_rows or c in (first, last):
            _unsummarise(ends, codes, sum_ends, sum_codes, m, c)
    if first >= 0 or last >= 0:
        needed = 0
        for c in (first, last):
            if c < 0:
                continue
            for r in range(r0, r1):
                code = codes[m, c, r]
                if code >= 0:
                    if not (keep_later and ends[m, c, r] >= end):
                        needed += 1
                elif pool[-code, meta].id + 2 > meta:
                    return _NEEDS_LONGER
        if needed > pool[0, meta].start:
            return _NEEDS_SLOTS
    cols = codes.shape[1]
    last_width = row_bytes - (cols - 1) * granule
    any_split = pool.shape[0] - 1 != pool[0, meta].start
    if r1 - r0 < SHORT_COLUMN and inner1 > inner0:  # few rows: a row at a time, cell by cell (strided)
        flat_codes, flat_ends = codes[m].reshape(-1), ends[m].reshape(-1)  # cell (c, r) at c * rows + r
        for r in range(r0, r1):
            cells = range(inner0 * rows + r, inner1 * rows, rows)
            if any_split:
                for i in cells:
                    if flat_codes[i] < 0:
                        c = i // rows
                        _whole_split(ends, codes, m, c, r, pool, last_width if c == cols - 1 else granule, end, ident)
            if keep_later:
                for i in cells:
                    if flat_codes[i] >= 0 and flat_ends[i] < end:
                        flat_ends[i] = end
                        flat_codes[i] = ident
            else:
                for i in cells:
                    flat_ends[i] = end
                    flat_codes[i] = ident
        inner1 = inner0  # done
    for c in range(inner0, inner1):
        summary = sum_codes[m, c]
        if summary != _CELLS:  # every row holds one record (whole_rows): it stays one
            if not keep_later or sum_ends[m, c] < end:
                sum_ends[m, c] = end
                sum_codes[m, c] = ident
            continue
        column_codes = codes[m, c]
        column_ends = ends[m, c]
        if any_split:
            negative = 0
            for r in range(r0, r1):
                negative += column_codes[r] >> 31  # -1 per split cell: a sum the compiler vectorises
            if negative:  # split cells (rare): record on them first, out of line
                for r in range(r0, r1):
                    if column_codes[r] < 0:
                        _whole_split(ends, codes, m, c, r, pool, last_width if c == cols - 1 else granule, end, ident)
        if keep_later and column_codes[r0] >= 0 and _uniform(column_codes, r0, r1):
            later = column_ends[r0] < end  # one record, and so one end, in the whole column
            if whole_rows:
                sum_ends[m, c] = end if later else column_ends[r0]
                sum_codes[m, c] = ident if later else column_codes[r0]
            elif later:
                _fill_column(column_ends, column_codes, r0, r1, end, ident)
        elif keep_later:  # a read keeps a later end; split cells hold codes < 0 and stay as they are
            for r in range(r0, r1):
                if column_codes[r] >= 0 and column_ends[r] < end:
                    column_ends[r] = end
                    column_codes[r] = ident
        elif whole_rows:  # a write replaces every record (split cells have just merged back)
            sum_ends[m, c] = end
            sum_codes[m, c] = ident
        else:
            _fill_column(column_ends, column_codes, r0, r1, end, ident)
    for c in (first, last):
        if c >= 0:
            base = c * granule
            width = min(granule, row_bytes - base)
            lo = max(b0 - base, 0)
            hi = min(b1 - base, width)
            for r in range(r0, r1):
                _partial(ends, codes, m, c, r, pool, width, lo, hi, end, ident)
    return _DONE


@numba.njit(cache=True, nogil=True)
def _maps(ends: np.ndarray, codes: np.ndarray, grids: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray]:
    """Grid ``g``'s two maps, ``[map, cell, row]`` views of the arena (rows vary fastest: a tile spans many
    partitions and few cells)."""
    offset, rows, cols = grids[g, 0], grids[g, 1], grids[g, 2]
    size = 2 * rows * cols
    return ends[offset : offset + size].reshape(2, cols, rows), codes[offset : offset + size].reshape(2, cols, rows)


@numba.njit(cache=True, nogil=True)
def _summaries(sum_ends: np.ndarray, sum_codes: np.ndarray, grids: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray]:
    """Grid ``g``'s column summaries, ``[map, cell]`` views (code :data:`_CELLS`: the cells hold the records)."""
    offset, cols = grids[g, 5], grids[g, 2]
    return sum_ends[offset : offset + 2 * cols].reshape(2, cols), sum_codes[offset : offset + 2 * cols].reshape(2, cols)


@numba.njit(cache=True, nogil=True)
def _bounds(grids: np.ndarray, regions: np.ndarray, k: int) -> tuple[int, int, int, int]:
    """Region ``k``'s rows and bytes, clamped to its storage (the cell loops do no bounds checks)."""
    g = regions[k, 0]
    rows, row_bytes = grids[g, 1], grids[g, 4]
    r0 = min(max(regions[k, 1], 0), rows)
    r1 = min(max(regions[k, 2], 0), rows)
    b0 = min(max(regions[k, 3], 0), row_bytes)
    b1 = min(max(regions[k, 4], 0), row_bytes)
    return r0, r1, b0, b1


@numba.njit(cache=True, nogil=True)
def _ready_all(
    ends: np.ndarray,
    codes: np.ndarray,
    sum_ends: np.ndarray,
    sum_codes: np.ndarray,
    pool: np.ndarray,
    grids: np.ndarray,
    regions: np.ndarray,
    n_reads: int,
    n_writes: int,
    tracks: np.ndarray,
    track: int,
    sync_ns: float,
) -> tuple[float, int, float, int]:
    """The latest producer of the reads alone (RAW), then of the reads and writes (RAW, WAW, WAR)."""
    best, who = 0.0, -1
    best_reads, who_reads = best, who
    for k in range(n_reads + n_writes):
        if k == n_reads:
            best_reads, who_reads = best, who
        g = regions[k, 0]
        e, c = _maps(ends, codes, grids, g)
        se, sc = _summaries(sum_ends, sum_codes, grids, g)
        r0, r1, b0, b1 = _bounds(grids, regions, k)
        t, producer = _scan(e, c, se, sc, WRITES, pool, grids[g, 3], r0, r1, b0, b1, tracks, track, sync_ns)
        if t > best:  # an earlier region wins a tie
            best, who = t, producer
        if k >= n_reads:
            t, producer = _scan(e, c, se, sc, READS, pool, grids[g, 3], r0, r1, b0, b1, tracks, track, sync_ns)
            if t > best:
                best, who = t, producer
    if n_writes == 0:
        best_reads, who_reads = best, who
    return best_reads, who_reads, best, who


@numba.njit(cache=True, nogil=True)
def _commit_all(
    ends: np.ndarray,
    codes: np.ndarray,
    sum_ends: np.ndarray,
    sum_codes: np.ndarray,
    pool: np.ndarray,
    grids: np.ndarray,
    regions: np.ndarray,
    n_reads: int,
    n_writes: int,
    first: int,
    end: float,
    visible: float,
    ident: int,
) -> tuple[int, int]:
    """Record regions ``first..`` (reads until ``end``, writes readable at ``visible``).

    Returns ``(_DONE, -1)``, or the status of the first region that needs the pool to grow and its index
    (nothing of that region or after it is recorded yet).
    """
    for k in range(first, n_reads + n_writes):
        g = regions[k, 0]
        e, c = _maps(ends, codes, grids, g)
        se, sc = _summaries(sum_ends, sum_codes, grids, g)
        r0, r1, b0, b1 = _bounds(grids, regions, k)
        m, at = (READS, end) if k < n_reads else (WRITES, visible)
        status = _assign(e, c, se, sc, m, pool, grids[g, 3], grids[g, 4], r0, r1, b0, b1, at, ident)
        if status != _DONE:
            return status, k
    return _DONE, -1


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

    Every storage's write map and read map live in one arena (``ends``, ``codes``), and their column
    summaries in another (``sum_ends``, ``sum_codes``), described by a row of ``grids``: (offset, rows,
    cells per row, granule, row bytes, summary offset); the pool of segment lists is shared. An
    instruction's regions are written to one small array, so that answering and
    recording cost one compiled call each, whatever the number of operands.
    """

    def __init__(self, sync_ns: float) -> None:
        self.sync_ns = sync_ns
        self._grid_of: dict[int, int] = {}  # storage uid -> row of _grids
        #: The kind of each grid's storage (``sbuf``, ``psum``, ``hbm``...), by row of _grids.
        self.kinds: list[str] = []
        self._grids = np.zeros((8, 6), dtype=np.int64)
        self._used = 0  # cells of the arena in use
        self._ends = np.zeros(0)
        self._codes = np.zeros(0, dtype=np.int32)
        self._sums_used = 0  # column summaries in use
        self._sum_ends = np.zeros(0)
        self._sum_codes = np.zeros(0, dtype=np.int32)
        self._pool = np.zeros((1, FIRST_LONGEST + 3), dtype=SEGMENT)
        self._more_slots(63)
        self._tracks = np.zeros(FIRST_INSTRUCTIONS, dtype=np.int32)
        self._regions = np.zeros((8, 5), dtype=np.int64)
        # the lists whose regions _regions holds (the scheduler asks and then records with the same lists)
        self._filled: tuple[list[Region], list[Region]] | None = None

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
            # cleared: a new grid's columns start summarised as "no record", and a column's cells are written
            # before they are read (_unsummarise), so only the pages of cells some access reached are touched.
            capacity = max(self._used + size, 2 * len(self._ends), FIRST_ARENA_CELLS)
            ends, codes = np.empty(capacity), np.empty(capacity, dtype=np.int32)
            ends[: self._used] = self._ends[: self._used]
            codes[: self._used] = self._codes[: self._used]
            self._ends, self._codes = ends, codes
        if self._sums_used + 2 * cols > len(self._sum_ends):
            capacity = max(self._sums_used + 2 * cols, 2 * len(self._sum_ends))
            sum_ends, sum_codes = np.empty(capacity), np.empty(capacity, dtype=np.int32)
            sum_ends[: self._sums_used] = self._sum_ends[: self._sums_used]
            sum_codes[: self._sums_used] = self._sum_codes[: self._sums_used]
            self._sum_ends, self._sum_codes = sum_ends, sum_codes
        self._sum_ends[self._sums_used : self._sums_used + 2 * cols] = 0.0
        self._sum_codes[self._sums_used : self._sums_used + 2 * cols] = 0  # every column: no record
        self._grids[g] = (self._used, rows, cols, granule, row_bytes, self._sums_used)
        self._used += size
        self._sums_used += 2 * cols
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
        summaries = int(self._grids[g, 5])
        codes = self._codes[offset : offset + 2 * rows * cols].reshape(2, cols, rows)
        own = self._sum_codes[summaries : summaries + 2 * cols].reshape(2, cols) == _CELLS  # the others' cells: stale
        return int(np.count_nonzero(codes[own] < 0))
