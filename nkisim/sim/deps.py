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
partitions and few cells). A block of 32 rows of a column that holds one record, the usual
case (tiles span 32, 64 or 128 partitions), keeps it in a *summary* instead of its cells: it
is checked or recorded in one step, and a new storage needs no clearing, as every block starts
as the summary "no record". An access to some rows of a summarised block first writes the
summary to its cells. Above the blocks, each map of a grid has a *whole-grid summary*: while every byte of
the map holds one record (a new storage, or a tensor only ever accessed whole, as a DMA through a run-time
offset accesses it), that record answers in one step however many cells the grid has; an access to part of
the grid first gives every block summary that record. The cell loops are compiled with numba, and one
compiled call answers (or records) all of an instruction's regions. :class:`nkisim.sim.tracker.AccessTracker`
holds the maps and calls them.
"""

from __future__ import annotations

import numba
import numpy as np

#: Which map of a grid: the last writes, or the latest reads (a read keeps a later end already recorded).
WRITES, READS = 0, 1
#: One segment of a split cell: bytes from ``start`` (relative to the cell) to the next segment's start,
#: with the record (``end``; ``id`` = instruction index + 1, 0 = none).
SEGMENT = np.dtype([("end", np.float64), ("id", np.int32), ("start", np.int32)])
#: Segments a pool row holds to begin with (it doubles when a cell needs more).
FIRST_LONGEST = 4

#: Below this many rows a region's cells are visited one by one rather than a column at a time.
SHORT_COLUMN = 8

#: A summary's code when its block's cells hold their records (else the code every row of the block holds).
_CELLS = -1

# return codes of _assign
_DONE, _NEEDS_SLOTS, _NEEDS_LONGER = 0, 1, 2

# The pool is one array of SEGMENT, rows of ``longest + 3``. Row s >= 1 is a slot: its segments, two spare
# places (painting a range adds at most two), and in the last column its count (``id``), how many cells point to
# it (``end``) and, while free, the next free slot (``start``). Row 0 is scratch for painting; its last column
# holds the first free slot (``id``) and how many are free (``start``).
#
# The cells of a run of rows of one column that an access splits alike share one slot: a tile at an address off
# the granule splits the cells at its edges in every partition the same way, and its accesses then paint one slot
# instead of one per partition. A slot some of whose cells an access changes and others not is copied first.


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
def _scan(
    ends: np.ndarray,
    codes: np.ndarray,
    sum_ends: np.ndarray,
    sum_codes: np.ndarray,
    shift: int,
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
    it cannot win and costs one comparison. A summarised block is its summary in every row.
    """
    best, who, best_pos = -1.0, -1, 0
    if r1 <= r0 or b1 <= b0:
        return best, who
    cols = codes.shape[1]
    if r1 - r0 < SHORT_COLUMN:  # few rows (a batch-1 HBM tensor is one row of many cells): in address order
        rows = codes.shape[2]
        flat_codes, flat_ends = codes[m].reshape(-1), ends[m].reshape(-1)  # cell (c, r) at c * rows + r
        for r in range(r0, r1):
            left = 0
            k = r >> shift
            for c in range(b0 // granule, (b1 + granule - 1) // granule):
                summary = sum_codes[m, c, k]
                code = summary if summary != _CELLS else flat_codes[c * rows + r]
                if code == left or code == 0:  # the record of the cell before it, or none
                    left = code
                    continue
                left = code
                if code > 0:
                    producer = code - 1
                    t = sum_ends[m, c, k] if summary != _CELLS else flat_ends[c * rows + r]
                    if tracks[producer] != track:
                        t += sync_ns
                else:
                    base = c * granule
                    t, producer = _scan_split(pool, -code, b0 - base, b1 - base, tracks, track, sync_ns)
                if producer >= 0 and t > best:
                    best, who = t, producer
        return best, who
    for c in range(b0 // granule, (b1 + granule - 1) // granule):
        start = r0
        while start < r1:
            k = start >> shift
            summary = sum_codes[m, c, k]
            if summary != _CELLS:  # one record in every row of the block: decided as its first row in the region
                if summary > 0:
                    producer = summary - 1
                    t = sum_ends[m, c, k]
                    if tracks[producer] != track:
                        t += sync_ns
                    pos = start * cols + c
                    if t > best or (t == best and pos < best_pos):
                        best, who, best_pos = t, producer, pos
                k += 1
                while k << shift < r1 and sum_codes[m, c, k] == summary:  # the next blocks hold that record too
                    k += 1
                start = min(k << shift, r1)
                continue
            stop_run = min((k + 1) << shift, r1)  # the rows of this block and the next ones held in cells
            while stop_run < r1 and sum_codes[m, c, stop_run >> shift] == _CELLS:
                stop_run = min(((stop_run >> shift) + 1) << shift, r1)
            column_codes = codes[m, c]  # views made only for a run of cells: they cost as much as a summary's check
            column_ends = ends[m, c]
            above = 0
            # a run of one record (the usual case: a tile written whole) is decided by its first cell
            stop = start + 1 if _uniform(column_codes, start, stop_run) else stop_run
            for r in range(start, stop):
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
            start = stop_run
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


@numba.njit(cache=True, nogil=True, inline="always")
def _take_slot(pool: np.ndarray, users: int) -> int:
    """A free slot, for ``users`` cells (the caller has made sure one is free)."""
    meta = pool.shape[1] - 1
    s = pool[0, meta].id
    pool[0, meta].id = pool[s, meta].start
    pool[0, meta].start -= 1
    pool[s, meta].end = users
    return s


@numba.njit(cache=True, nogil=True, inline="always")
def _release(pool: np.ndarray, s: int, users: int) -> None:
    """``users`` cells no longer point to slot ``s``: it goes back to the free list when none does."""
    meta = pool.shape[1] - 1
    left = pool[s, meta].end - users
    pool[s, meta].end = left
    if left <= 0:
        pool[s, meta].start = pool[0, meta].id
        pool[0, meta].id = s
        pool[0, meta].start += 1


@numba.njit(cache=True, nogil=True)
def _own_slot(codes: np.ndarray, m: int, c: int, ra: int, rb: int, pool: np.ndarray) -> int:
    """The slot of cells ``ra..rb`` of column ``c`` (all pointing to one), theirs alone: copied if others share it."""
    meta = pool.shape[1] - 1
    s = -codes[m, c, ra]
    users = rb - ra
    if pool[s, meta].end == users:
        return s
    copy = _take_slot(pool, users)
    n = pool[s, meta].id
    for k in range(n):
        pool[copy, k] = pool[s, k]
    pool[copy, meta].id = n
    _release(pool, s, users)
    for r in range(ra, rb):
        codes[m, c, r] = -copy
    return copy


@numba.njit(cache=True, nogil=True)
def _merge_back(
    ends: np.ndarray, codes: np.ndarray, m: int, c: int, ra: int, rb: int, pool: np.ndarray, s: int
) -> None:
    """A slot of cells ``ra..rb`` (theirs alone) left with one segment: its record goes back to the cells, the
    slot to the free list."""
    meta = pool.shape[1] - 1
    if pool[s, meta].id == 1:
        end, ident = pool[s, 0].end, pool[s, 0].id
        for r in range(ra, rb):
            ends[m, c, r] = end
            codes[m, c, r] = ident
        _release(pool, s, rb - ra)


@numba.njit(cache=True, nogil=True)
def _run_end(codes: np.ndarray, m: int, c: int, ra: int, r1: int) -> int:
    """The end of the run of cells from ``ra`` (before ``r1``) holding the code of cell ``ra``."""
    code = codes[m, c, ra]
    rb = ra + 1
    while rb < r1 and codes[m, c, rb] == code:
        rb += 1
    return rb


@numba.njit(cache=True, nogil=True)
def _partial(
    ends: np.ndarray, codes: np.ndarray, m: int, c: int, ra: int, rb: int, pool: np.ndarray, width: int, lo: int,
    hi: int, end: float, ident: int,
) -> None:  # fmt: skip
    """Record an access to bytes ``[lo, hi)`` of cell ``c`` of rows ``ra..rb`` (one code), not all of it: split
    the cells if they are whole (one slot for them all)."""
    keep_later = m == READS
    code = codes[m, c, ra]
    if code >= 0:  # one code, so one record (an instruction records one end in a map)
        if keep_later and ends[m, c, ra] >= end:
            return
        s = _take_slot(pool, rb - ra)
        meta = pool.shape[1] - 1
        pool[s, meta].id = 1
        pool[s, 0].start = 0
        pool[s, 0].end = ends[m, c, ra]
        pool[s, 0].id = code
        for r in range(ra, rb):
            codes[m, c, r] = -s
    else:
        s = _own_slot(codes, m, c, ra, rb, pool)
    _paint(pool, s, width, lo, hi, end, ident, keep_later)
    _merge_back(ends, codes, m, c, ra, rb, pool, s)


@numba.njit(cache=True, nogil=True, inline="never")
def _whole_split(
    ends: np.ndarray, codes: np.ndarray, m: int, c: int, ra: int, rb: int, pool: np.ndarray, width: int, end: float,
    ident: int,
) -> None:  # fmt: skip
    """Record an access to all of split cell ``c`` of rows ``ra..rb``, which share a slot (out of line, as
    :func:`_scan_split`)."""
    if m == READS:
        s = _own_slot(codes, m, c, ra, rb, pool)
        _paint(pool, s, width, 0, width, end, ident, True)
        _merge_back(ends, codes, m, c, ra, rb, pool, s)
    else:
        _release(pool, -codes[m, c, ra], rb - ra)
        for r in range(ra, rb):
            ends[m, c, r] = end
            codes[m, c, r] = ident


@numba.njit(cache=True, nogil=True)
def _split_runs(
    codes: np.ndarray, sum_codes: np.ndarray, m: int, c: int, r0: int, r1: int, shift: int, each_row: bool
) -> int:
    """At most how many slots a read of whole cells ``r0..r1`` of column ``c`` copies: one per run of one split
    code within a block of rows (the blocks are recorded one at a time), or per split cell with ``each_row``.
    A summarised block's cells are stale (the arena is never cleared): they are not counted, nor recorded."""
    runs, above = 0, 0
    block = (1 << shift) - 1
    for r in range(r0, r1):
        if sum_codes[m, c, r >> shift] != _CELLS:
            above = 0
            continue
        code = codes[m, c, r]
        if code < 0 and (each_row or code != above or r & block == 0):
            runs += 1
        above = code
    return runs


@numba.njit(cache=True, nogil=True)
def _assign_cells(
    ends: np.ndarray,
    codes: np.ndarray,
    m: int,
    c: int,
    r0: int,
    r1: int,
    pool: np.ndarray,
    width: int,
    any_split: bool,
    end: float,
    ident: int,
) -> None:
    """Record (end, ident) on all the bytes of cells ``r0..r1`` of column ``c``, held in cells (not summarised)."""
    if r1 <= r0:
        return
    keep_later = m == READS
    column_codes = codes[m, c]
    column_ends = ends[m, c]
    if any_split:
        negative = 0
        for r in range(r0, r1):
            negative += column_codes[r] >> 31  # -1 per split cell: a sum the compiler vectorises
        if negative:  # split cells (rare): record on them first, out of line, a run of one slot at a time
            r = r0
            while r < r1:
                if column_codes[r] < 0:
                    rb = _run_end(codes, m, c, r, r1)
                    _whole_split(ends, codes, m, c, r, rb, pool, width, end, ident)
                    r = rb
                else:
                    r += 1
    if keep_later and column_codes[r0] >= 0 and _uniform(column_codes, r0, r1):
        if column_ends[r0] < end:  # one record, and so one end, in the whole run
            _fill_column(column_ends, column_codes, r0, r1, end, ident)
    elif keep_later:  # a read keeps a later end; split cells hold codes < 0 and stay as they are
        for r in range(r0, r1):
            if column_codes[r] >= 0 and column_ends[r] < end:
                column_ends[r] = end
                column_codes[r] = ident
    else:  # a write replaces every record (split cells have just merged back)
        _fill_column(column_ends, column_codes, r0, r1, end, ident)


@numba.njit(cache=True, nogil=True)
def _assign(
    ends: np.ndarray,
    codes: np.ndarray,
    sum_ends: np.ndarray,
    sum_codes: np.ndarray,
    shift: int,
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

    A block of rows the access covers whole (all of its cell's bytes, every row) keeps its summary, or
    becomes one when it then holds one record; the blocks it covers in part get their cells first.
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
    # the blocks of rows covered whole keep summaries [full0, full1), outside the few-row path; the others get cells
    full0 = (r0 + (1 << shift) - 1) >> shift
    full1 = (r1 >> shift) if r1 < rows else ((rows - 1) >> shift) + 1
    if r1 - r0 < SHORT_COLUMN or full0 >= full1:
        full0 = full1 = 0
    if first >= 0 or last >= 0 or full0 > r0 >> shift or full1 <= (r1 - 1) >> shift:  # some block in part
        # such blocks give their summary's record to their cells (in line: a call per cell of a row of many cells,
        # an HBM tensor's strided view, cost more than the access itself)
        for c in range(c0, c1):
            edge = c in (first, last)
            for k in range(r0 >> shift, ((r1 - 1) >> shift) + 1):
                code = sum_codes[m, c, k]
                if code != _CELLS and (edge or not full0 <= k < full1):
                    held = sum_ends[m, c, k]
                    for r in range(k << shift, min((k + 1) << shift, rows)):
                        ends[m, c, r] = held
                        codes[m, c, r] = code
                    sum_codes[m, c, k] = _CELLS
    any_split = pool.shape[0] - 1 != pool[0, meta].start
    if first >= 0 or last >= 0 or (keep_later and any_split):
        needed = 0  # at most: a slot for each run of cells split or copied
        for c in (first, last):
            if c < 0:
                continue
            above = 0
            for r in range(r0, r1):
                code = codes[m, c, r]
                if code >= 0:
                    if not (keep_later and ends[m, c, r] >= end):
                        needed += 1
                elif code != above:
                    if pool[-code, meta].id + 2 > meta:
                        return _NEEDS_LONGER
                    needed += 1
                above = code
        if keep_later and any_split:  # a read of whole split cells copies a slot other cells share
            for c in range(inner0, inner1):
                needed += _split_runs(codes, sum_codes, m, c, r0, r1, shift, r1 - r0 < SHORT_COLUMN)
        if needed > pool[0, meta].start:
            return _NEEDS_SLOTS
    cols = codes.shape[1]
    last_width = row_bytes - (cols - 1) * granule
    if r1 - r0 < SHORT_COLUMN and inner1 > inner0:  # few rows: a row at a time, cell by cell (strided)
        flat_codes, flat_ends = codes[m].reshape(-1), ends[m].reshape(-1)  # cell (c, r) at c * rows + r
        for r in range(r0, r1):
            cells = range(inner0 * rows + r, inner1 * rows, rows)
            if any_split:
                for i in cells:
                    if flat_codes[i] < 0:
                        c = i // rows
                        w = last_width if c == cols - 1 else granule
                        _whole_split(ends, codes, m, c, r, r + 1, pool, w, end, ident)
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
        width = last_width if c == cols - 1 else granule
        if full0 == full1:
            _assign_cells(ends, codes, m, c, r0, r1, pool, width, any_split, end, ident)
            continue
        # the rows of blocks covered in part (before and after the whole ones) are cells
        if r0 < full0 << shift:
            _assign_cells(ends, codes, m, c, r0, full0 << shift, pool, width, any_split, end, ident)
        if full1 << shift < r1:
            _assign_cells(ends, codes, m, c, full1 << shift, r1, pool, width, any_split, end, ident)
        for k in range(full0, full1):
            if sum_codes[m, c, k] != _CELLS:  # every row of the block holds one record: it stays one
                if not keep_later or sum_ends[m, c, k] < end:
                    sum_ends[m, c, k] = end
                    sum_codes[m, c, k] = ident
                continue
            start, stop = k << shift, min((k + 1) << shift, rows)
            _assign_cells(ends, codes, m, c, start, stop, pool, width, any_split, end, ident)
            if codes[m, c, start] >= 0 and _uniform(codes[m, c], start, stop):  # one record now: summarised
                sum_ends[m, c, k] = ends[m, c, start]
                sum_codes[m, c, k] = codes[m, c, start]
    for c in (first, last):
        if c >= 0:
            base = c * granule
            width = min(granule, row_bytes - base)
            lo = max(b0 - base, 0)
            hi = min(b1 - base, width)
            r = r0
            while r < r1:  # a run of cells holding one code at a time: they stay alike, in one slot
                rb = _run_end(codes, m, c, r, r1)
                _partial(ends, codes, m, c, r, rb, pool, width, lo, hi, end, ident)
                r = rb
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
    """Grid ``g``'s block summaries, ``[map, cell, block]`` views (code :data:`_CELLS`: the cells hold the records)."""
    offset, cols, blocks = grids[g, 5], grids[g, 2], ((grids[g, 1] - 1) >> grids[g, 6]) + 1
    size = 2 * cols * blocks
    return (
        sum_ends[offset : offset + size].reshape(2, cols, blocks),
        sum_codes[offset : offset + size].reshape(2, cols, blocks),
    )


@numba.njit(cache=True, nogil=True)
def _whole(grids: np.ndarray, g: int) -> int:
    """Where grid ``g``'s two whole-grid summaries (one per map) are, after its block summaries."""
    return grids[g, 5] + 2 * grids[g, 2] * (((grids[g, 1] - 1) >> grids[g, 6]) + 1)


@numba.njit(cache=True, nogil=True)
def _scan_whole(
    sum_ends: np.ndarray, sum_codes: np.ndarray, at: int, r0: int, r1: int, b0: int, b1: int, tracks: np.ndarray,
    track: int, sync_ns: float,
) -> tuple[float, int]:  # fmt: skip
    """:func:`_scan` of a map whose every byte holds the record of its whole-grid summary ``at``."""
    code = sum_codes[at]
    if r1 <= r0 or b1 <= b0 or code == 0:
        return -1.0, -1
    producer = code - 1
    t = sum_ends[at]
    if tracks[producer] != track:
        t += sync_ns
    return t, producer


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
    g = regions[0, 0] if n_reads + n_writes else 0
    e, c = _maps(ends, codes, grids, g)  # made again only when a region is on another grid (a reshape is not free)
    se, sc = _summaries(sum_ends, sum_codes, grids, g)
    w = _whole(grids, g)
    for k in range(n_reads + n_writes):
        if k == n_reads:
            best_reads, who_reads = best, who
        if regions[k, 0] != g:
            g = regions[k, 0]
            e, c = _maps(ends, codes, grids, g)
            se, sc = _summaries(sum_ends, sum_codes, grids, g)
            w = _whole(grids, g)
        r0, r1, b0, b1 = _bounds(grids, regions, k)
        for m in range(2 if k >= n_reads else 1):  # WRITES, then for a write READS
            if sum_codes[w + m] != _CELLS:  # one record in the whole map
                t, producer = _scan_whole(sum_ends, sum_codes, w + m, r0, r1, b0, b1, tracks, track, sync_ns)
            else:
                t, producer = _scan(
                    e, c, se, sc, grids[g, 6], m, pool, grids[g, 3], r0, r1, b0, b1, tracks, track, sync_ns
                )
            if t > best:  # an earlier region wins a tie
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
    if first >= n_reads + n_writes:
        return _DONE, -1
    g = regions[first, 0]
    e, c = _maps(ends, codes, grids, g)  # made again only when a region is on another grid
    se, sc = _summaries(sum_ends, sum_codes, grids, g)
    w = _whole(grids, g)
    for k in range(first, n_reads + n_writes):
        if regions[k, 0] != g:
            g = regions[k, 0]
            e, c = _maps(ends, codes, grids, g)
            se, sc = _summaries(sum_ends, sum_codes, grids, g)
            w = _whole(grids, g)
        r0, r1, b0, b1 = _bounds(grids, regions, k)
        if r1 <= r0 or b1 <= b0:
            continue
        m, at = (READS, end) if k < n_reads else (WRITES, visible)
        covers = r0 == 0 and r1 == grids[g, 1] and b0 == 0 and b1 == grids[g, 4]
        if sum_codes[w + m] != _CELLS:  # one record in the whole map
            if covers:  # stays one record: a write replaces it, a read keeps a later end
                if m == WRITES or sum_ends[w + m] < at:
                    sum_ends[w + m] = at
                    sum_codes[w + m] = ident
                continue
            sc[m] = sum_codes[w + m]  # the blocks hold it now (their cells are written before they are read)
            se[m] = sum_ends[w + m]
            sum_codes[w + m] = _CELLS
        status = _assign(e, c, se, sc, grids[g, 6], m, pool, grids[g, 3], grids[g, 4], r0, r1, b0, b1, at, ident)
        if status != _DONE:
            return status, k
        if covers and m == WRITES:  # every byte of the map holds this write's record now
            sum_ends[w + m] = at
            sum_codes[w + m] = ident
    return _DONE, -1
