"""The scheduler's placement loop, compiled: a batch of instructions placed in program order in one call.

:class:`~nkisim.sim.scheduler.Scheduler` keeps its state in the arrays of :class:`PlacementState`
and hands each batch over as columns (:class:`Batch`); :func:`place_batch` then does for each
instruction what the scheduler's rules say (docs/timing.md): the data dependencies (the
compiled scans of :mod:`nkisim.sim.deps`), the ``depends_on`` edges and barriers, the
dependent-instruction overhead, LoadStationary, activation-table loads, shared ports, the
DMA queues and the calendars of the DMA engines, and it records the instruction's accesses.
Each time is computed by the same float operations, in the same order, as the rules state,
so the timeline is the same to the last bit whatever the batch size.

Lanes: ``0 .. queues-1`` are the DMA queues, ``queues`` the spill queue, and the compute
tracks (an engine, or one unit of a replicated engine) follow in order of first use.
A lane gets its timeline track number when its first instruction is placed.
"""

from __future__ import annotations

import numba
import numpy as np

from nkisim.sim.deps import _DONE, _commit_all, _ready_all

#: The SHA-256 of ``deps.py`` (newlines as ``\n``) that this file was last changed with. numba caches
#: :func:`place_batch` with the dependency scans of ``deps.py`` compiled into it, but invalidates that cache
#: only when this file changes; ``tests/test_placement.py`` fails until this is brought up to date after a change
#: to ``deps.py``, so that both files change together and no stale cache outlives the change.
DEPS_SHA256 = "9b3b3760b06eb8e8e6af3bb5d1ef335132868e7274d3840458017b7636c1f1ab"

# PlacementState.scalars (float64)
LOAD_STATIONARY_FREE, MATMUL_START = 0, 1
# PlacementState.flags (int64)
STATIONARY_SET, ST_G, ST_R0, ST_R1, ST_B0, ST_B1, ST_WRITER, TABLE, TRACKS, ALL_DMA = range(10)
#: Per-engine-value columns of PlacementState.engine_ns.
DEPENDENT_NS, ACCESS_NS = 0, 1
#: Calendar 0 stands for every DMA engine while all transfers have used them all; 1.. are the engines.
ALL_ENGINES = 0


@numba.njit(cache=True, nogil=True)
def _book(starts: np.ndarray, ends: np.ndarray, counts: np.ndarray, c: int, earliest: float, duration: float) -> float:
    """Reserve ``duration`` at or after ``earliest`` in calendar ``c`` (busy intervals, sorted, merged when they
    touch); returns the start: the first gap that fits."""
    n = counts[c]
    s, e = starts[c], ends[c]
    lo, hi = 0, n  # bisect_right(ends, earliest)
    while lo < hi:
        mid = (lo + hi) // 2
        if earliest < e[mid]:
            hi = mid
        else:
            lo = mid + 1
    i = lo
    start = earliest
    while i < n and s[i] < start + duration:
        start = max(start, e[i])
        i += 1
    end = start + duration
    first = start
    if i > 0 and e[i - 1] >= first:  # merge with the interval before
        i -= 1
        first = s[i]
        _remove(s, e, i, n)
        n -= 1
    if i < n and s[i] <= end:  # and the one after
        end = max(end, e[i])
        _remove(s, e, i, n)
        n -= 1
    for j in range(n, i, -1):  # make room at i
        s[j] = s[j - 1]
        e[j] = e[j - 1]
    s[i] = first
    e[i] = end
    counts[c] = n + 1
    return start


@numba.njit(cache=True, nogil=True, inline="always")
def _remove(s: np.ndarray, e: np.ndarray, i: int, n: int) -> None:
    """Remove interval ``i`` of ``n``."""
    for j in range(i, n - 1):
        s[j] = s[j + 1]
        e[j] = e[j + 1]


@numba.njit(cache=True, nogil=True)
def _book_dma(
    cal_starts: np.ndarray,
    cal_ends: np.ndarray,
    cal_counts: np.ndarray,
    flags: np.ndarray,
    engines: int,
    start: float,
    busy: float,
    latency: float,
    first: int,
    count: int,
) -> float:
    """Book a transfer starting at ``start`` on the DMA engines it uses; returns when the last of them is done."""
    earliest = start + latency
    if flags[ALL_DMA]:
        if count == engines:
            return _book(cal_starts, cal_ends, cal_counts, ALL_ENGINES, earliest, busy) + busy
        for c in range(1, engines + 1):  # from now on each engine keeps its own calendar
            n = cal_counts[ALL_ENGINES]
            cal_starts[c, :n] = cal_starts[ALL_ENGINES, :n]
            cal_ends[c, :n] = cal_ends[ALL_ENGINES, :n]
            cal_counts[c] = n
        flags[ALL_DMA] = 0
    end = earliest
    for engine in range(first, first + count):
        booked = _book(cal_starts, cal_ends, cal_counts, 1 + engine % engines, earliest, busy)
        end = max(end, booked + busy)
    return end


@numba.njit(cache=True, nogil=True)
def place_batch(
    begin: int,
    n: int,
    base: int,
    lane_in: np.ndarray,
    engine_in: np.ndarray,
    cost_in: np.ndarray,
    table_in: np.ndarray,
    dma_in: np.ndarray,
    reg_off: np.ndarray,
    n_reads: np.ndarray,
    regions: np.ndarray,
    setup_regions: np.ndarray,
    edge_off: np.ndarray,
    edges: np.ndarray,
    scalars: np.ndarray,
    flags: np.ndarray,
    lane_free: np.ndarray,
    lane_track: np.ndarray,
    lane_last: np.ndarray,
    queues: int,
    engine_ns: np.ndarray,
    engine_ports: np.ndarray,
    port_free: np.ndarray,
    port_kind: np.ndarray,
    grid_kind: np.ndarray,
    table_load_ns: float,
    cal_starts: np.ndarray,
    cal_ends: np.ndarray,
    cal_counts: np.ndarray,
    dma_engines: int,
    ends: np.ndarray,
    codes: np.ndarray,
    sum_ends: np.ndarray,
    sum_codes: np.ndarray,
    pool: np.ndarray,
    grids: np.ndarray,
    tracks: np.ndarray,
    placed_end: np.ndarray,
    sync_ns: float,
    out_f: np.ndarray,
    out_i: np.ndarray,
) -> tuple[int, int, int]:
    """Place instructions ``begin .. n-1`` of a batch whose first is timeline entry ``base``.

    Per instruction: ``lane_in`` (-1: the DMA queue free earliest), ``engine_in`` (engine value),
    ``cost_in`` (busy, latency, setup, not_before), ``table_in`` (-1: none), ``dma_in`` (first DMA
    engine and count), its regions ``regions[reg_off[k]:reg_off[k+1]]`` (rows of (grid, r0, r1, b0, b1),
    the first ``n_reads[k]`` read), its stationary region ``setup_regions[k]`` (grid -1: none) and the
    instructions it waits for ``edges[edge_off[k]:edge_off[k+1]]`` (their ends: ``placed_end``, the
    timeline's, before ``base``; ``out_f`` from it on). Writes ``out_f[k]`` (start, end,
    busy, wait, visible) and ``out_i[k]`` (producer, pred, track).

    Returns ``(_DONE, n, -1)``, or the status of a commit that needs the dependency pool to grow with
    the instruction and region it stopped at (that instruction is placed, its regions before that one
    recorded).
    """
    for k in range(begin, n):
        index = base + k
        lane = lane_in[k]
        if lane < 0:  # the first of the DMA queues free earliest
            lane = 0
            for q in range(1, queues):
                if lane_free[q] < lane_free[lane]:
                    lane = q
        track = lane_track[lane]
        if track < 0:
            track = lane_track[lane] = flags[TRACKS]
            flags[TRACKS] += 1
        r0, r1 = reg_off[k], reg_off[k + 1]
        nr = n_reads[k]
        _, who_reads, ready, producer = _ready_all(
            ends, codes, sum_ends, sum_codes, pool, grids, regions[r0:r1], nr, r1 - r0 - nr, tracks, track, sync_ns
        )
        for j in range(edge_off[k], edge_off[k + 1]):
            edge = edges[j]
            edge_end = out_f[edge - base, 1] if edge >= base else placed_end[edge]
            needed = edge_end if tracks[edge] == track else edge_end + sync_ns
            if needed > ready:
                ready, producer = needed, edge
        previous = lane_last[lane]
        busy = cost_in[k, 0]
        latency = cost_in[k, 1]
        not_before = cost_in[k, 3]
        if not_before > ready:
            ready, producer = not_before, -1
        free = lane_free[lane]
        if lane <= queues:  # a DMA queue or the spill queue
            start = max(ready, free)
            end = _book_dma(
                cal_starts, cal_ends, cal_counts, flags, dma_engines, start, busy, latency, dma_in[k, 0], dma_in[k, 1]
            )
            lane_free[lane] = end
            visible = end
        else:
            ev = engine_in[k]
            if producer >= 0 and producer == previous and who_reads == previous:
                ready += engine_ns[ev, DEPENDENT_NS]
            start = max(ready, free)
            setup_ns = cost_in[k, 2]
            has_key = setup_regions[k, 0] >= 0
            writer = -1
            if has_key:  # the stationary tile, and which instruction last wrote it
                writer = _ready_all(
                    ends, codes, sum_ends, sum_codes, pool, grids, setup_regions[k : k + 1], 1, 0, tracks, 0, sync_ns
                )[3]
            if setup_ns != 0.0:
                same = (
                    has_key
                    and flags[STATIONARY_SET] == 1
                    and flags[ST_G] == setup_regions[k, 0]
                    and flags[ST_R0] == setup_regions[k, 1]
                    and flags[ST_R1] == setup_regions[k, 2]
                    and flags[ST_B0] == setup_regions[k, 3]
                    and flags[ST_B1] == setup_regions[k, 4]
                    and flags[ST_WRITER] == writer
                )
                if not same:  # LoadStationary runs on its own stage, in the background of the previous matmul
                    load_start = max(max(ready, scalars[LOAD_STATIONARY_FREE]), scalars[MATMUL_START])
                    scalars[LOAD_STATIONARY_FREE] = load_start + setup_ns
                    start = max(start, scalars[LOAD_STATIONARY_FREE])
            is_tensor = ev == 1
            if is_tensor:  # a transpose or another load replaces the stationary tile
                flags[STATIONARY_SET] = 1 if has_key else 0
                for f in range(5):
                    flags[ST_G + f] = setup_regions[k, f]
                flags[ST_WRITER] = writer
            if ev == 2 and table_in[k] >= 0 and table_in[k] != flags[TABLE]:
                busy += table_load_ns  # no table is loaded when the kernel starts
                flags[TABLE] = table_in[k]
            if engine_ports[ev, 0] >= 0:
                for j in range(engine_ports.shape[1]):
                    p = engine_ports[ev, j]
                    if p >= 0 and _touches(regions, r0, r1, grid_kind, port_kind[p]):
                        start = max(start, port_free[p])
                for j in range(engine_ports.shape[1]):
                    p = engine_ports[ev, j]
                    if p >= 0 and _touches(regions, r0, r1, grid_kind, port_kind[p]):
                        port_free[p] = start + busy
            lane_free[lane] = start + busy
            if is_tensor:
                scalars[MATMUL_START] = start
            end = start + busy + latency
            # results are readable an SBUF/PSUM access latency after the last write
            visible = end + engine_ns[ev, ACCESS_NS]
        lane_last[lane] = index
        out_f[k, 0] = start
        out_f[k, 1] = end
        out_f[k, 2] = busy
        out_f[k, 3] = max(0.0, ready - free)
        out_f[k, 4] = visible
        out_i[k, 0] = producer
        out_i[k, 1] = producer if ready > free else previous
        out_i[k, 2] = track
        tracks[index] = track
        status, at = _commit_all(
            ends, codes, sum_ends, sum_codes, pool, grids, regions[r0:r1], nr, r1 - r0 - nr, 0, end, visible, index + 1
        )
        if status != _DONE:
            return status, k, at
    return _DONE, n, -1


@numba.njit(cache=True, nogil=True, inline="always")
def _touches(regions: np.ndarray, r0: int, r1: int, grid_kind: np.ndarray, kind: int) -> bool:
    """Whether one of ``regions[r0:r1]`` lies in a memory of ``kind``."""
    for r in range(r0, r1):  # noqa: SIM110 (a generator in any() is slower under numba)
        if grid_kind[regions[r, 0]] == kind:
            return True
    return False
