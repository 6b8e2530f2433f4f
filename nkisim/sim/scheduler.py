"""Turns the program, in order, into a timeline on per-engine in-order queues.

* Compute engines (Sync, Tensor, Vector, Scalar, GpSimd) each run their own
  instructions in program order, one at a time: an instruction starts when its
  engine is free and its producers are done. Waiting on a producer from another
  engine or queue costs a semaphore latency.
* DMAs go to one of the core's DMA queues (the one free earliest), are in order
  within a queue, wait the fixed trigger latency, then move their bytes at the
  core's aggregate DMA bandwidth, which concurrent transfers share.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from nkisim.errors import SourceLoc
from nkisim.hw import QUEUED_ENGINES, Engine, HwConfig
from nkisim.isa import Cost
from nkisim.memory import Region
from nkisim.sim.deps import AccessTracker


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


@dataclass
class Timeline:
    """The scheduled program as parallel columns, one entry per instruction."""

    opcode: list[str] = field(default_factory=list)
    track: list[str] = field(default_factory=list)
    start_ns: list[float] = field(default_factory=list)
    end_ns: list[float] = field(default_factory=list)
    busy_ns: list[float] = field(default_factory=list)
    source: list[SourceLoc] = field(default_factory=list)
    producer: list[int] = field(default_factory=list)
    #: What set the start: the producer when data was late, else the previous instruction on the track (-1: none).
    pred: list[int] = field(default_factory=list)
    #: Time the engine or queue sat idle before this instruction, waiting for its producers.
    wait_ns: list[float] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.opcode)


class Scheduler:
    """Assigns each instruction, in program order, a start and end time."""

    def __init__(self, hw: HwConfig) -> None:
        self.hw = hw
        self.tracker = AccessTracker(hw.sync.semaphore_latency_ns)
        self._track_ids: dict[str, int] = {}
        self.timeline = Timeline()
        self._engine_free = {e: 0.0 for e in QUEUED_ENGINES}
        self._queue_free = [0.0] * hw.dma.queues
        self._dma_bandwidth = BandwidthCalendar()
        self._last_on_track: dict[str, int] = {}

    def earliest_start(self, engine: Engine, reads: list[Region], writes: list[Region]) -> float:
        """When an instruction could start now (its data ready, its engine or queue free), without placing it."""
        if engine is Engine.dma:
            queue = min(range(len(self._queue_free)), key=self._queue_free.__getitem__)
            track, free = f"DMA q{queue}", self._queue_free[queue]
        else:
            track, free = engine.title, self._engine_free[engine]
        ready, _ = self.tracker.ready(reads, writes, self._track_ids.get(track, len(self._track_ids)))
        return max(ready, free)

    def schedule(
        self,
        opcode: str,
        engine: Engine,
        cost: Cost,
        reads: list[Region],
        writes: list[Region],
        source: SourceLoc,
        not_before: float = 0.0,
    ) -> tuple[float, float]:
        """Place one instruction on the timeline; returns its (start, end) in ns.

        ``not_before`` holds it back until another core is ready too (``core_barrier``, ``sendrecv``).
        """
        tl = self.timeline
        if engine is Engine.dma:
            queue = min(range(len(self._queue_free)), key=self._queue_free.__getitem__)
            track = f"DMA q{queue}"
        else:
            queue = -1
            track = engine.title
        track_id = self._track_ids.setdefault(track, len(self._track_ids))
        ready, producer = self.tracker.ready(reads, writes, track_id)
        if not_before > ready:
            ready, producer = not_before, -1
        free = self._queue_free[queue] if queue >= 0 else self._engine_free[engine]
        start = max(ready, free)
        if queue >= 0:
            data_start = self._dma_bandwidth.book(start + cost.latency_ns, cost.busy_ns)
            end = data_start + cost.busy_ns
            self._queue_free[queue] = end
        else:
            end = start + cost.busy_ns + cost.latency_ns
            self._engine_free[engine] = start + cost.busy_ns
        index = len(tl)
        previous = self._last_on_track.get(track, -1)
        self._last_on_track[track] = index
        tl.pred.append(producer if ready > free else previous)
        tl.wait_ns.append(max(0.0, ready - free))
        self.tracker.commit(reads, writes, end, index, track_id)
        tl.opcode.append(opcode)
        tl.track.append(track)
        tl.start_ns.append(start)
        tl.end_ns.append(end)
        tl.busy_ns.append(cost.busy_ns)
        tl.source.append(source)
        tl.producer.append(producer)
        tl.bytes.append(cost.bytes)
        tl.flops.append(cost.flops)
        return start, end
