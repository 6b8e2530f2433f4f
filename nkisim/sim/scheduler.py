"""Turns the program, in order, into a timeline on per-engine in-order queues.

* Compute engines (Sync, Tensor, Vector, Scalar, GpSimd) each run their own
  instructions in program order, one at a time: an instruction starts when its
  engine is free and its producers' results are visible. Waiting on a producer in
  another engine or queue costs a semaphore latency; reading the result of the
  instruction just before on the same engine costs the static dependent-instruction
  overhead. Results become visible an SBUF/PSUM access latency after the last write.
* The Tensor Engine loads a new stationary tile (LoadStationary) in the background,
  overlapping the previous matmul; a matmul that reuses the last stationary tile
  needs no load.
* The Scalar Engine loads an activation table before the first activation that needs one
  and whenever the function changes.
* On NeuronCore-v2, Vector and GpSimd share one SBUF port and Vector and Scalar one
  PSUM port: instructions on such a pair never overlap on that memory.
* DMAs go to one of the core's DMA queues (the one free earliest), in order within a
  queue. Each waits the fixed trigger latency, then occupies each DMA engine it is
  spread over for its share of the bytes; the engines are shared by all queues, and
  a transfer completes when its last engine does.
* The compiler's spill transfers (a spilled SBUF tile's refills and saves) run in
  order on a queue of their own, ``DMA spill``, over the same DMA engines.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nkisim.errors import SourceLoc
from nkisim.hw import QUEUED_ENGINES, Engine, HwConfig
from nkisim.isa import Cost
from nkisim.memory import Region
from nkisim.sim import placement
from nkisim.sim.deps import _DONE, _NEEDS_SLOTS, _commit_all
from nkisim.sim.timeline import Operands, Timeline
from nkisim.sim.tracker import AccessTracker

__all__ = ["BATCH", "SPILL_TRACK", "Scheduler", "Timeline"]

#: Sites one scheduler remembers by the identity of their operand summary.
MAX_SITES = 4096

#: The track of the spill transfers (the profiler's ``qSyncSpillReload`` queue).
SPILL_TRACK = "DMA spill"

#: Instructions waiting to be placed at most; reading the timeline places them at once.
BATCH = 1024

#: Compute lanes and intervals per DMA engine calendar there is room for at first (each doubles when needed).
FIRST_COMPUTE_LANES, FIRST_CALENDAR = 8, 64

#: The stationary region of an instruction that names none.
_NO_REGION = (-1, 0, 0, 0, 0)

#: Read at every instruction: an enum's class attribute costs ~0.15 us in Python 3.11.
_DMA_ENGINE = Engine.dma

#: What a queued instruction shares with every call of its site (:meth:`Scheduler.row`): lane (-1: the DMA
#: queue free earliest), engine value, activation table (-1: none), first DMA engine, DMA engine count, site,
#: regions read; then busy, latency, setup and not-before times in ns.
Row = tuple[int, int, int, int, int, int, int, float, float, float, float]
_INTS = 7


def _stationary(cost: Cost) -> Region | None:
    """The region a cost names as its stationary tile (``setup_key``), if it is one."""
    key = cost.setup_key
    return key if isinstance(key, Region) else None


class Scheduler:
    """Assigns each instruction, in program order, a start and end time.

    :meth:`schedule` queues an instruction; the queue is placed by one compiled call
    (:func:`nkisim.sim.placement.place_batch`) when it holds :data:`BATCH` instructions or
    when anything reads the result (:attr:`timeline`, :meth:`earliest_start`,
    :meth:`edge_ready`). The times are those of placing each instruction at once.
    """

    def __init__(self, hw: HwConfig) -> None:
        self.hw = hw
        self.tracker = AccessTracker(hw.sync.semaphore_latency_ns)
        self._timeline = Timeline()
        self._queues = hw.dma.queues
        self._dma_engines = hw.dma.engines
        #: Track names by lane: the DMA queues, the spill queue, then the compute tracks in order of first use.
        self._lane_names = [f"DMA q{queue}" for queue in range(self._queues)] + [SPILL_TRACK]
        #: Compute lanes by (engine value, unit): enum members hash through a Python call, their values do not.
        self._lane_of: dict[tuple[int, int | None], int] = {}
        lanes = len(self._lane_names) + FIRST_COMPUTE_LANES
        self._lane_free = np.zeros(lanes)
        self._lane_track = np.full(lanes, -1, dtype=np.int64)
        self._lane_last = np.full(lanes, -1, dtype=np.int64)
        self._scalars = np.zeros(2)
        self._flags = np.zeros(10, dtype=np.int64)
        self._flags[placement.ST_G] = -1
        self._flags[placement.TABLE] = -1
        self._flags[placement.ALL_DMA] = 1
        self._tables: dict[str, int] = {}
        engine_values = max(e.value for e in Engine) + 1
        #: Per engine value: the dependent-instruction overhead and the access latency in ns (NaN: not worked out).
        self._engine_ns = np.full((engine_values, 2), np.nan)
        #: Memory kinds by number (a port's memory, a storage's kind).
        self._kinds: dict[str, int] = {}
        ports = hw.ports
        self._port_free = np.zeros(max(1, len(ports)))
        self._port_kind = np.array([self._kind(p.memory) for p in ports] or [-1], dtype=np.int64)
        self._engine_ports = np.full((engine_values, max(1, len(ports))), -1, dtype=np.int64)
        for engine in QUEUED_ENGINES:
            mine = [i for i, p in enumerate(ports) if engine.name in p.engines]
            self._engine_ports[engine.value, : len(mine)] = mine
        self._grid_kind = np.zeros(0, dtype=np.int64)
        calendars = 1 + hw.dma.engines
        self._cal_starts = np.zeros((calendars, FIRST_CALENDAR))
        self._cal_ends = np.zeros((calendars, FIRST_CALENDAR))
        self._cal_counts = np.zeros(calendars, dtype=np.int64)
        #: Timeline sites by the identity of an operand summary and the rest of the site (the entry keeps the summary).
        self._sites: dict[tuple[object, ...], tuple[Operands, type, type, int]] = {}
        #: Instructions scheduled so far, placed or queued.
        self.count = 0
        self._clear_batch()

    def _clear_batch(self) -> None:
        #: The rows of the queued instructions: each distinct row once (by identity: a planned site's row is one
        #: object), and its position for each instruction.
        self._rows: list[Row] = []
        self._row_at: dict[int, int] = {}
        self._row_ids: list[int] = []
        # flat lists (numpy converts them twice as fast as lists of tuples): 5 per region
        self._regions: list[int] = []
        self._region_ends: list[int] = [0]
        # the few instructions with a stationary region or depends_on edges, by position in the batch
        self._setup_at: list[int] = []
        self._setup: list[int] = []
        self._edges_at: list[int] = []
        self._edge_counts: list[int] = []
        self._edges: list[int] = []

    @property
    def timeline(self) -> Timeline:
        """Every instruction scheduled so far, placed."""
        if self._row_ids:
            self.flush()
        return self._timeline

    def _kind(self, name: str) -> int:
        return self._kinds.setdefault(name, len(self._kinds))

    def _lane(self, engine: Engine, unit: int | None) -> int:
        """The lane of a compute engine (or one unit of a replicated engine), made on first use."""
        key = (engine._value_, unit)
        lane = self._lane_of.get(key)
        if lane is not None:
            return lane
        lane = self._lane_of[key] = len(self._lane_names)
        self._lane_names.append(engine.title if unit is None else f"{engine.title} {unit}")
        if lane >= len(self._lane_free):
            grow = len(self._lane_free)
            self._lane_free = np.concatenate([self._lane_free, np.zeros(grow)])
            self._lane_track = np.concatenate([self._lane_track, np.full(grow, -1, dtype=np.int64)])
            self._lane_last = np.concatenate([self._lane_last, np.full(grow, -1, dtype=np.int64)])
        if np.isnan(self._engine_ns[engine.value, 0]):
            self._engine_ns[engine.value] = (
                self._static_ns(engine, "dependent_overhead_cycles"),
                self._static_ns(engine, "access_latency_cycles"),
            )
        return lane

    def _dma_lane(self) -> int:
        free = self._lane_free[: self._queues].tolist()
        return free.index(min(free))  # the first of the queues free earliest

    def earliest_start(
        self, engine: Engine, reads: list[Region], writes: list[Region], unit: int | None = None
    ) -> float:
        """When an instruction could start now (its data ready, its engine or queue free), without placing it."""
        tl = self.timeline
        lane = self._dma_lane() if engine is _DMA_ENGINE else self._lane_of.get((engine._value_, unit))
        free = 0.0 if lane is None else float(self._lane_free[lane])
        track = -1 if lane is None else int(self._lane_track[lane])
        ready, _ = self.tracker.ready(reads, writes, len(tl.tracks) if track < 0 else track)
        return max(ready, free)

    def edge_ready(self, producer: int, track_id: int) -> float:
        """The earliest start on track ``track_id`` of an instruction that waits for instruction ``producer`` to end.

        As for a data dependency, a producer on another track is waited for through a semaphore.
        """
        tl = self.timeline
        end = tl.end_ns[producer]
        return end if tl.track_id[producer] == track_id else end + self.tracker.sync_ns

    def schedule(
        self,
        opcode: str,
        engine: Engine,
        cost: Cost,
        reads: list[Region],
        writes: list[Region],
        source: SourceLoc,
        not_before: float = 0.0,
        args: Operands = (),
        unit: int | None = None,
        after: Sequence[int] = (),
    ) -> int:
        """Queue one instruction for the timeline; returns its index.

        ``not_before`` holds it back until another core is ready too (``core_barrier``, ``sendrecv``);
        ``unit`` picks one instance of a replicated engine (its own in-order track); ``after``
        lists instructions it waits for besides its data producers (``depends_on`` edges).
        """
        row = self.row(opcode, engine, cost, source, len(reads), not_before, args, unit)
        return self.queue(row, reads, writes, _stationary(cost), after)

    def row(
        self,
        opcode: str,
        engine: Engine,
        cost: Cost,
        source: SourceLoc,
        n_reads: int,
        not_before: float = 0.0,
        args: Operands = (),
        unit: int | None = None,
    ) -> Row:
        """What an instruction shares with every call of its site: its lane, costs, site (see :meth:`queue`)."""
        lane = -1 if engine is _DMA_ENGINE else self._lane(engine, unit)
        nbytes, flops = cost.bytes, cost.flops
        # a call with the very operand summary of an earlier one from its line has its site: no need to hash the summary
        site_key = (id(args), opcode, source.file, source.line, source.function, nbytes, flops)
        known = self._sites.get(site_key)
        if known is not None and known[0] is args and known[1] is nbytes.__class__ and known[2] is flops.__class__:
            site = known[3]
        else:
            site = self._timeline.site_number(opcode, source, nbytes, flops, args)
            if len(self._sites) < MAX_SITES:
                self._sites[site_key] = (args, nbytes.__class__, flops.__class__, site)
        return self._row(lane, engine._value_, cost, site, n_reads, not_before)

    def _row(self, lane: int, engine: int, cost: Cost, site: int, n_reads: int, not_before: float) -> Row:
        table = cost.table
        table_id = -1 if table is None else self._tables.setdefault(table, len(self._tables))
        first, count = cost.dma_engines or (0, self._dma_engines)
        return (
            lane, engine, table_id, first, count, site, n_reads, cost.busy_ns, cost.latency_ns, cost.setup_ns,
            not_before,
        )  # fmt: skip

    def schedule_spill(
        self,
        opcode: str,
        cost: Cost,
        reads: list[Region],
        writes: list[Region],
        source: SourceLoc,
        after: Sequence[int],
    ) -> int:
        """Queue a spill transfer on the spill queue, after its data and the instructions ``after``; returns its index.

        It is a DMA like any other (the fixed latency, then its bytes over the DMA engines it
        uses), in order on :data:`SPILL_TRACK`.
        """
        site = self._timeline.site_number(opcode, source, cost.bytes, cost.flops, ())
        row = self._row(self._queues, Engine.dma.value, cost, site, len(reads), 0.0)
        return self.queue(row, reads, writes, _stationary(cost), after)

    def queue(
        self, row: Row, reads: list[Region], writes: list[Region], setup: Region | None, after: Sequence[int]
    ) -> int:
        """Queue one instruction for the timeline: its :meth:`row`, the regions it reads (as many as the row says)
        and writes, its stationary region, and the instructions it waits for besides its data producers; returns
        its index."""
        index = self.count
        self.count = index + 1
        at = self._row_at.get(id(row))
        if at is None:
            at = self._row_at[id(row)] = len(self._rows)
            self._rows.append(row)
        ids = self._row_ids
        ids.append(at)
        rows, tracker = self._regions, self.tracker
        grid_of = tracker._grid_of
        for region in (*reads, *writes):
            storage, r0, r1, b0, b1 = region
            g = grid_of.get(storage.uid)
            if g is None:  # a new storage
                rows.extend(tracker.row(region))
            else:  # what tracker.row gives, without the call
                rows.extend((g, r0, r1, b0, b1))
        self._region_ends.append(len(rows) // 5)
        if setup is not None:
            self._setup_at.append(len(ids) - 1)
            self._setup.extend(tracker.row(setup))
        if after:
            self._edges_at.append(len(ids) - 1)
            self._edge_counts.append(len(after))
            self._edges.extend(after)
        if len(ids) >= BATCH:
            self.flush()
        return index

    def flush(self) -> None:
        """Place every queued instruction, in program order."""
        n = len(self._row_ids)
        if not n:
            return
        tl, tracker = self._timeline, self.tracker
        base = len(tl)
        ids = np.array(self._row_ids, dtype=np.int64)
        ints = np.array([row[:_INTS] for row in self._rows], dtype=np.int64)
        times = np.array([row[_INTS:] for row in self._rows], dtype=np.float64)
        lanes = ints[ids, 0]
        # each DMA books at most one interval of each DMA engine's calendar
        self._make_room(base + n, int(np.count_nonzero((lanes < 0) | (lanes == self._queues))))
        regions = np.array(self._regions, dtype=np.int64).reshape(-1, 5)
        region_ends = np.array(self._region_ends, dtype=np.int64)
        reads = ints[ids, 6]
        setup = np.empty((n, 5), dtype=np.int64)
        setup[:] = _NO_REGION
        if self._setup_at:
            setup[self._setup_at] = np.array(self._setup, dtype=np.int64).reshape(-1, 5)
        edge_ends = np.zeros(n + 1, dtype=np.int64)
        if self._edges_at:
            edge_ends[np.array(self._edges_at) + 1] = self._edge_counts
            np.cumsum(edge_ends, out=edge_ends)
        out_f = np.empty((n, 5))
        out_i = np.empty((n, 3), dtype=np.int64)
        columns = (
            lanes,
            ints[ids, 1],
            times[ids],
            ints[ids, 2],
            ints[ids, 3:5],
            region_ends,
            reads,
            regions,
            setup,
            edge_ends,
            np.array(self._edges, dtype=np.int64),
        )
        # the ends of placed instructions, for depends_on edges (a view: released before the timeline grows)
        placed_end = np.frombuffer(tl.end_ns, dtype=np.float64) if base else np.zeros(0)
        begin = 0
        while begin < n:
            status, k, at = placement.place_batch(
                begin, n, base, *columns, self._scalars, self._flags, self._lane_free, self._lane_track,
                self._lane_last, self._queues, self._engine_ns, self._engine_ports, self._port_free, self._port_kind,
                self._grid_kind, self.hw.scalar.table_load_ns, self._cal_starts, self._cal_ends, self._cal_counts,
                self._dma_engines, tracker._ends, tracker._codes, tracker._sum_ends, tracker._sum_codes, tracker._pool,
                tracker._grids, tracker._tracks, placed_end, tracker.sync_ns, out_f, out_i,
            )  # fmt: skip
            if status == _DONE:
                break
            # the dependency pool must grow: finish recording instruction k's regions, then go on after it
            mine = regions[region_ends[k] : region_ends[k + 1]]
            writes = len(mine) - int(reads[k])
            while status != _DONE:
                if status == _NEEDS_SLOTS:
                    tracker._more_slots(max(len(tracker._pool), 2 * int(mine[at, 2] - mine[at, 1])))
                else:
                    tracker._longer()
                status, at = _commit_all(
                    tracker._ends, tracker._codes, tracker._sum_ends, tracker._sum_codes, tracker._pool, tracker._grids,
                    mine, int(reads[k]), writes, at, out_f[k, 1], out_f[k, 4], base + k + 1,
                )  # fmt: skip
            begin = k + 1
        named = len(tl.tracks)
        if self._flags[placement.TRACKS] > named:
            lanes = np.argsort(self._lane_track)  # every new track in number order
            for lane in lanes[np.searchsorted(self._lane_track[lanes], named) :]:
                tl.track_number(self._lane_names[lane])
        del placed_end
        tl.extend(out_f, out_i, ints[ids, 5])
        self._clear_batch()

    def _make_room(self, total: int, transfers: int) -> None:
        """Grow the per-instruction arrays to ``total`` entries, the calendars for ``transfers`` more intervals, and
        the memory kinds to every storage the tracker knows."""
        tracker = self.tracker
        tracker.reserve(total)
        needed = int(self._cal_counts.max()) + transfers + 1
        if needed > self._cal_starts.shape[1]:
            width = max(needed, 2 * self._cal_starts.shape[1])
            for name in ("_cal_starts", "_cal_ends"):
                old = getattr(self, name)
                grown = np.zeros((old.shape[0], width))
                grown[:, : old.shape[1]] = old
                setattr(self, name, grown)
        kinds = tracker.kinds
        if len(kinds) > len(self._grid_kind):
            self._grid_kind = np.array([self._kind(kind) for kind in kinds], dtype=np.int64)

    def _static_ns(self, engine: Engine, cycles_field: str) -> float:
        """A per-engine static cost in ns (the Tensor Engine has none of these)."""
        if engine is Engine.tensor:
            return 0.0
        return getattr(self.hw.engine(engine), cycles_field) / self.hw.clock_ghz(engine)
