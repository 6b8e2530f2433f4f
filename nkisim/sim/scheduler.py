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

import bisect
from collections.abc import Sequence

from nkisim.errors import SourceLoc
from nkisim.hw import QUEUED_ENGINES, Engine, HwConfig
from nkisim.isa import Cost
from nkisim.memory import Region
from nkisim.sim.deps import AccessTracker
from nkisim.sim.timeline import Operands, Timeline

__all__ = ["BandwidthCalendar", "Scheduler", "Timeline"]

#: Sites one scheduler remembers by the identity of their operand summary.
MAX_SITES = 4096

#: The track of the spill transfers (the profiler's ``qSyncSpillReload`` queue).
SPILL_TRACK = "DMA spill"


class BandwidthCalendar:
    """Busy intervals of a shared resource; a booking takes the first gap that fits."""

    def __init__(self) -> None:
        self._starts: list[float] = []
        self._ends: list[float] = []

    def book(self, earliest: float, duration: float) -> float:
        """Reserve ``duration`` at or after ``earliest``; returns the start."""
        starts, ends = self._starts, self._ends
        i = bisect.bisect_right(ends, earliest)
        start = earliest
        while i < len(starts) and starts[i] < start + duration:
            start = max(start, ends[i])
            i += 1
        self._insert(i, start, start + duration)
        return start

    def copy(self) -> BandwidthCalendar:
        twin = BandwidthCalendar()
        twin._starts, twin._ends = list(self._starts), list(self._ends)
        return twin

    def _insert(self, i: int, start: float, end: float) -> None:
        starts, ends = self._starts, self._ends
        if i > 0 and ends[i - 1] >= start:
            i -= 1
            start = starts[i]
            del starts[i], ends[i]
        if i < len(starts) and starts[i] <= end:
            end = max(end, ends[i])
            del starts[i], ends[i]
        starts.insert(i, start)
        ends.insert(i, end)


class Scheduler:
    """Assigns each instruction, in program order, a start and end time."""

    def __init__(self, hw: HwConfig) -> None:
        self.hw = hw
        self.tracker = AccessTracker(hw.sync.semaphore_latency_ns)
        self.timeline = Timeline()
        self._dma_tracks = [f"DMA q{queue}" for queue in range(hw.dma.queues)]
        #: Track names by (engine value, unit): enum members hash through a Python call, their values do not.
        self._compute_tracks: dict[tuple[int, int | None], str] = {}
        #: When each compute track (an engine, or one unit of a replicated engine) is free.
        self._engine_free: dict[str, float] = {}
        self._queue_free = [0.0] * hw.dma.queues
        self._spill_free = 0.0  # when the spill queue is free
        # While every transfer has used all DMA engines their calendars are identical: keep one.
        self._all_dma_engines: BandwidthCalendar | None = BandwidthCalendar()
        self._dma_engines: list[BandwidthCalendar] = []
        self._last_on_track: dict[str, int] = {}
        self._stationary: object = None
        self._load_stationary_free = 0.0
        self._matmul_start = 0.0
        self._table: str | None = None
        self._port_free = {port.name: 0.0 for port in hw.ports}
        #: The shared memory ports of each engine, by engine value.
        self._ports = {e.value: [p for p in hw.ports if e.name in p.engines] for e in QUEUED_ENGINES}
        #: :meth:`_static_ns` by (engine value, field): constants of ``hw``, worked out once per run.
        self._static: dict[tuple[int, str], float] = {}
        self._access_ns: dict[int, float] = {}  # the access latency of each engine, by engine value
        #: Timeline sites by the identity of an operand summary and the rest of the site (the entry keeps the summary).
        self._sites: dict[tuple[object, ...], tuple[Operands, type, type, int]] = {}

    def _track(self, engine: Engine, unit: int | None) -> tuple[str, int]:
        """The track an instruction runs on, and its DMA queue (-1 for a compute engine).

        A replicated engine (several cores of one kind) has one in-order track per ``unit``.
        """
        if engine is Engine.dma:
            free = self._queue_free
            queue = free.index(min(free))  # the first of the queues free earliest
            return self._dma_tracks[queue], queue
        key = (engine._value_, unit)
        track = self._compute_tracks.get(key)
        if track is None:
            track = self._compute_tracks[key] = engine.title if unit is None else f"{engine.title} {unit}"
        return track, -1

    def earliest_start(
        self, engine: Engine, reads: list[Region], writes: list[Region], unit: int | None = None
    ) -> float:
        """When an instruction could start now (its data ready, its engine or queue free), without placing it."""
        track, queue = self._track(engine, unit)
        free = self._queue_free[queue] if queue >= 0 else self._engine_free.get(track, 0.0)
        track_id = self.timeline.known_track(track)
        ready, _ = self.tracker.ready(reads, writes, len(self.timeline.tracks) if track_id is None else track_id)
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
    ) -> tuple[float, float]:
        """Place one instruction on the timeline; returns its (start, end) in ns.

        ``not_before`` holds it back until another core is ready too (``core_barrier``, ``sendrecv``);
        ``unit`` picks one instance of a replicated engine (its own in-order track); ``after``
        lists instructions it waits for besides its data producers (``depends_on`` edges).
        """
        tl = self.timeline
        track, queue = self._track(engine, unit)
        track_id = tl.track_number(track)
        (_, read_producer), (ready, producer) = self.tracker.ready_both(reads, writes, track_id)
        for edge in after:
            needed = self.edge_ready(edge, track_id)
            if needed > ready:
                ready, producer = needed, edge
        previous = self._last_on_track.get(track, -1)
        if not_before > ready:
            ready, producer = not_before, -1
        if queue >= 0:
            free = self._queue_free[queue]
            start, end = self._place_dma(queue, max(ready, free), cost)
            busy = cost.busy_ns
        else:
            if producer >= 0 and producer == previous and read_producer == previous:
                # reading the result of the instruction just before on this engine
                ready += self._static_ns(engine, "dependent_overhead_cycles")
            free = self._engine_free.get(track, 0.0)
            start, busy = self._place_compute(engine, track, ready, free, cost, reads, writes)
            end = start + busy + cost.latency_ns
        # results are readable an SBUF/PSUM access latency after the last write
        if queue >= 0:
            visible = end
        else:
            latency = self._access_ns.get(engine._value_)
            if latency is None:
                latency = self._access_ns[engine._value_] = self._static_ns(engine, "access_latency_cycles")
            visible = end + latency
        index = len(tl)
        self._last_on_track[track] = index
        pred = producer if ready > free else previous
        self.tracker.commit(reads, writes, end, index, track_id, visible)
        wait = max(0.0, ready - free)
        nbytes, flops = cost.bytes, cost.flops
        # a call with the very operand summary of an earlier one from its line has its site: no need to hash the summary
        site_key = (id(args), opcode, source.file, source.line, source.function, nbytes, flops)
        known = self._sites.get(site_key)
        if known is not None and known[0] is args and known[1] is nbytes.__class__ and known[2] is flops.__class__:
            site = known[3]
        else:
            site = tl.site_number(opcode, source, nbytes, flops, args)
            if len(self._sites) < MAX_SITES:
                self._sites[site_key] = (args, nbytes.__class__, flops.__class__, site)
        tl.append(opcode, track_id, start, end, busy, wait, source, producer, pred, nbytes, flops, args, site)
        return start, end

    def schedule_spill(
        self,
        opcode: str,
        cost: Cost,
        reads: list[Region],
        writes: list[Region],
        source: SourceLoc,
        after: Sequence[int],
    ) -> int:
        """Place a spill transfer on the spill queue, after its data and the instructions ``after``; returns its index.

        It is a DMA like any other (the fixed latency, then its bytes over the DMA engines it
        uses), in order on :data:`SPILL_TRACK`.
        """
        tl = self.timeline
        track_id = tl.track_number(SPILL_TRACK)
        ready, producer = self.tracker.ready(reads, writes, track_id)
        for edge in after:
            needed = self.edge_ready(edge, track_id)
            if needed > ready:
                ready, producer = needed, edge
        free = self._spill_free
        start = max(ready, free)
        end = self._spill_free = self._book_dma(start, cost)
        index = len(tl)
        pred = producer if ready > free else self._last_on_track.get(SPILL_TRACK, -1)
        self._last_on_track[SPILL_TRACK] = index
        self.tracker.commit(reads, writes, end, index, track_id)
        site = tl.site_number(opcode, source, cost.bytes, cost.flops, ())
        busy, wait = cost.busy_ns, max(0.0, ready - free)
        tl.append(opcode, track_id, start, end, busy, wait, source, producer, pred, cost.bytes, cost.flops, (), site)
        return index

    def _static_ns(self, engine: Engine, cycles_field: str) -> float:
        """A per-engine static cost in ns (the Tensor Engine has none of these)."""
        key = (engine._value_, cycles_field)
        ns = self._static.get(key)
        if ns is None:
            ns = (
                0.0
                if engine is Engine.tensor
                else getattr(self.hw.engine(engine), cycles_field) / self.hw.clock_ghz(engine)
            )
            self._static[key] = ns
        return ns

    def _place_compute(
        self,
        engine: Engine,
        track: str,
        ready: float,
        free: float,
        cost: Cost,
        reads: list[Region],
        writes: list[Region],
    ) -> tuple[float, float]:
        """Start and occupancy of a compute instruction, after its setup stage and shared ports."""
        busy = cost.busy_ns
        start = max(ready, free)
        key = None
        if isinstance(cost.setup_key, Region):  # the tile, and which instruction last wrote it
            key = (cost.setup_key, self.tracker.ready([cost.setup_key], [], 0)[1])
        if cost.setup_ns and (key is None or key != self._stationary):
            # LoadStationary runs on its own stage, in the background of the previous matmul.
            load_start = max(ready, self._load_stationary_free, self._matmul_start)
            self._load_stationary_free = load_start + cost.setup_ns
            start = max(start, self._load_stationary_free)
        if engine is Engine.tensor:  # a transpose or another load replaces the stationary tile
            self._stationary = key
        if engine is Engine.scalar and cost.table is not None and cost.table != self._table:
            busy += self.hw.scalar.table_load_ns  # no table is loaded when the kernel starts
            self._table = cost.table
        engine_ports = self._ports[engine._value_]
        if engine_ports:
            memories = {r.storage.kind for r in reads}
            memories.update(r.storage.kind for r in writes)
            ports = [p.name for p in engine_ports if p.memory in memories]
            for port in ports:
                start = max(start, self._port_free[port])
            for port in ports:
                self._port_free[port] = start + busy
        self._engine_free[track] = start + busy
        if engine is Engine.tensor:
            self._matmul_start = start
        return start, busy

    def _place_dma(self, queue: int, start: float, cost: Cost) -> tuple[float, float]:
        """Book the transfer on each DMA engine it uses; it ends when the last of them does."""
        end = self._queue_free[queue] = self._book_dma(start, cost)
        return start, end

    def _book_dma(self, start: float, cost: Cost) -> float:
        """Book a transfer starting at ``start`` on the DMA engines it uses; returns when the last is done."""
        engines = self.hw.dma.engines
        first, count = cost.dma_engines or (0, engines)
        earliest = start + cost.latency_ns
        if self._all_dma_engines is not None:
            if count == engines:
                return self._all_dma_engines.book(earliest, cost.busy_ns) + cost.busy_ns
            self._dma_engines = [self._all_dma_engines.copy() for _ in range(engines)]
            self._all_dma_engines = None
        end = earliest
        for engine in range(first, first + count):
            booked = self._dma_engines[engine % engines].book(earliest, cost.busy_ns)
            end = max(end, booked + cost.busy_ns)
        return end
