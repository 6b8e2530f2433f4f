"""The sanitizer's view of ``affine_range``: iterations that may run in any order.

NKI lets the compiler reorder and overlap the iterations of an ``affine_range`` loop,
so an iteration may not depend on another, except through associative accumulation
(matmuls adding into one PSUM tile, DMA writes with ``dst_rmw_op``). nkisim runs the
iterations in program order, where such a dependency silently works; here it is
reported.

Each instruction issued inside an ``affine_range`` loop is an *event* that remembers
the loop iterations it ran in. Shadow arrays hold, per byte, the event that last wrote
it and (on chip) the event that last read it. An instruction then finds:

- ``loop-carried-dependency``: it reads bytes an earlier iteration of an enclosing
  ``affine_range`` wrote (unless both accumulate into them);
- ``race``: it writes on-chip bytes an earlier iteration read (the buffer is reused
  while that iteration may still need it), or HBM bytes an earlier iteration wrote.

Only accesses through one allocation are compared: a tile allocated inside the loop
gets its own buffer in every iteration on hardware, even where nkisim's allocator
reuses the bytes of an earlier iteration's tile. Bytes written outside every active
loop carry the event of an older, finished loop (or none), which never matches a
running one, so they are not reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nkisim.errors import SourceLoc
from nkisim.memory import Storage, Tensor

#: ``(severity, check, rule)``: how the tracker hands a finding to the checker.
Report = Callable[[str, str, str], None]


@dataclass(frozen=True, slots=True)
class LoopFrame:
    """One running iteration of one ``affine_range`` loop.

    Attributes:
        instance: which execution of a loop statement (unique in the run).
        position: the iteration's place in the order it ran (0, 1, ...).
        value: the loop variable's value in this iteration.
        loc: the ``for`` line of the loop.
    """

    instance: int
    position: int
    value: int
    loc: SourceLoc


@dataclass(frozen=True, slots=True)
class Event:
    """One instruction issued inside ``affine_range`` loops."""

    frames: tuple[LoopFrame, ...]
    loc: SourceLoc
    instruction: str
    accumulates: bool
    #: The allocations (``Tensor.uid``) it touched: bytes a later allocation reuses are not shared.
    tiles: frozenset[int]


def _carried(earlier: tuple[LoopFrame, ...], now: tuple[LoopFrame, ...]) -> tuple[LoopFrame, LoopFrame] | None:
    """The frames of the outermost loop both ran in, at different iterations; None if there is none."""
    for a, b in zip(earlier, now):
        if a.instance != b.instance:
            return None
        if a.position != b.position:
            return (a, b) if a.position < b.position else None
    return None


class LoopTracker:
    """The ``affine_range`` loops running now, and the shadow maps of who wrote and read each byte."""

    def __init__(self) -> None:
        self.frames: tuple[LoopFrame, ...] = ()
        self._instances = 0
        self._events: list[Event | None] = [None]  # event 0: not written or read in a loop
        self._writes: dict[int, np.ndarray] = {}
        self._reads: dict[int, np.ndarray] = {}

    # -- the loops ----------------------------------------------------------------------

    def enter(self) -> int:
        """A new execution of an ``affine_range`` loop; its instance number."""
        self._instances += 1
        return self._instances

    def iterate(self, instance: int, position: int, value: int, loc: SourceLoc) -> None:
        """Iteration ``position`` (loop variable ``value``) of loop ``instance`` begins."""
        frames = [f for f in self.frames if f.instance != instance]
        self.frames = (*frames, LoopFrame(instance, position, value, loc))

    def leave(self, instance: int) -> None:
        self.frames = tuple(f for f in self.frames if f.instance != instance)

    @property
    def active(self) -> bool:
        return bool(self.frames)

    # -- the accesses --------------------------------------------------------------------

    def access(
        self,
        instruction: str,
        loc: SourceLoc,
        reads: list[tuple[str, Tensor]],
        writes: list[tuple[str, Tensor]],
        accumulates: bool,
        report: Report,
    ) -> None:
        """Check one instruction's accesses against earlier iterations, then record them.

        ``accumulates``: the instruction adds onto its destination (its spec says so). A
        read-modify-write of one tile (``dst`` is also an input) accumulates too.
        """
        written = {(id(t.storage), t.region) for _, t in writes}
        read = {(id(t.storage), t.region) for _, t in reads}
        rmw = bool(written & read)
        event_id = len(self._events)
        tiles = frozenset(t.uid for _, t in (*reads, *writes))
        self._events.append(Event(self.frames, loc, instruction, accumulates or rmw, tiles))
        for name, t in reads:
            folds = accumulates or (id(t.storage), t.region) in written
            self._check(self._view(self._writes, t), instruction, name, t, folds, "read", report)
        for name, t in writes:
            folds = accumulates or (id(t.storage), t.region) in read
            how = "write" if t.buffer.is_on_chip else "write HBM"
            self._check(
                self._view(self._reads if t.buffer.is_on_chip else self._writes, t),
                instruction,
                name,
                t,
                folds,
                how,
                report,
            )
        for _, t in reads:
            if t.buffer.is_on_chip:
                self._view(self._reads, t)[...] = event_id
        for _, t in writes:
            self._view(self._writes, t)[...] = event_id

    def _check(
        self, stamps: np.ndarray, instruction: str, name: str, t: Tensor, accumulates: bool, how: str, report: Report
    ) -> None:
        if stamps.size == 0:
            return
        low, high = int(stamps.min()), int(stamps.max())
        if high == 0:
            return
        ids = (high,) if low == high else tuple(int(e) for e in np.unique(stamps) if e)
        for event_id in ids:
            earlier = self._events[event_id]
            assert earlier is not None
            if t.uid not in earlier.tiles:
                continue  # another allocation at these bytes: the compiler gives each its own buffer
            pair = _carried(earlier.frames, self.frames)
            if pair is None or (accumulates and earlier.accumulates):
                continue
            report(*_finding(how, instruction, name, t, earlier, pair))
            return

    def _view(self, shadows: dict[int, np.ndarray], t: Tensor) -> np.ndarray:
        """The shadow stamps of every byte ``t`` touches (a dynamic view: its whole region)."""
        storage = t.storage
        shadow = shadows.get(storage.uid)
        if shadow is None or shadow.shape != storage.bytes.shape:
            shadow = shadows[storage.uid] = np.zeros(storage.bytes.shape, dtype=np.int32)
        if t.is_dynamic:
            r = t.region
            return shadow[r.r0 : r.r1, r.b0 : r.b1]
        array = t.array
        size = shadow.itemsize
        return np.ndarray(
            (*array.shape, t.itemsize),
            np.int32,
            buffer=shadow,
            offset=t.byte_offset * size,
            strides=(*(s * size for s in array.strides), size),
        )


def _storage_name(storage: Storage) -> str:
    return storage.kind.upper()


def _finding(
    how: str, instruction: str, name: str, t: Tensor, earlier: Event, pair: tuple[LoopFrame, LoopFrame]
) -> tuple[str, str, str]:
    then, now = pair
    loop = f"affine_range loop at {now.loc}"
    what = f"{_storage_name(t.storage)} tile {t.name!r}"
    iterations = f"iteration {then.value} ({earlier.instruction} at {earlier.loc})"
    if how == "read":
        rule = (
            f"{name} reads {what}, which {iterations} of the {loop} wrote: a loop-carried dependency, but "
            f"affine_range iterations may run in any order; use sequential_range, or give each iteration its "
            f"own tile (iteration {now.value} reads it)"
        )
        return "error", "loop-carried-dependency", rule
    if how == "write":
        rule = (
            f"{name} overwrites {what}, which {iterations} of the {loop} read: the iterations may overlap, so "
            f"the earlier one can see the new values; allocate the tile inside the loop or use sequential_range "
            f"(iteration {now.value} writes it)"
        )
        return "error", "race", rule
    rule = (
        f"{name} writes {what}, which {iterations} of the {loop} also wrote: affine_range iterations may run "
        f"in any order, so which value stays is undefined (iteration {now.value} writes it)"
    )
    return "error", "race", rule
