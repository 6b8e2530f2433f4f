"""Compiler-style tile liveness: a tile's bytes are free after its last use.

nkisim runs a kernel eagerly, so a tile's bytes normally return to the allocator
only when the kernel drops its last Python reference. The NKI compiler sees the
whole kernel and reuses a tile's bytes after its last *use*, and it places
automatically allocated tiles around the tiles a kernel places itself
(``nl.ndarray(address=...)``). Kernels written for the compiler can hold every
tile in a list for the whole kernel, or place tiles over bytes an earlier tile
still occupies but never touches again, and fit only that way.

When eager allocation runs out of room, the kernel is traced again with
:class:`TilePlan` recording: automatic tiles go above the real memory, so
nothing collides, and each allocation's first and last instruction is noted.
A third run allocates with the plan: tiles past their last use are freed, and an
automatic tile avoids the explicit placements its lifetime will meet. An automatic
SBUF tile that still does not fit is spilled (:class:`TilePlan` ``spill``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: How much larger on-chip memories are while recording (automatic tiles live above the real size).
RECORDING_SCALE = 16


@dataclass
class TileRecord:
    """One on-chip allocation of a recorded run: what it was, when it lived, where it was placed."""

    what: tuple[str, tuple[int, ...], str]
    first: int
    last: int
    #: ``(partition_offset, partitions, byte_offset, nbytes)`` of an explicit placement, else None.
    placed: tuple[int, int, int, int] | None = None

    def lives_during(self, start: int, end: int) -> bool:
        return self.first <= end and start <= self.last


@dataclass
class TilePlan:
    """The allocations of one program, per on-chip memory (``sbuf``, ``psum``), in creation order.

    ``recording``: this run fills the plan; otherwise it allocates by it. ``spill``: an
    automatic SBUF tile that still does not fit goes to the next-tier memory, as the
    compiler spills it (see :mod:`nkisim.memory.system`); False keeps it an error.
    """

    recording: bool
    spill: bool = True
    tiles: dict[str, list[TileRecord]] = field(default_factory=lambda: {"sbuf": [], "psum": []})


class PlanDivergedError(Exception):
    """A run allocated differently from the recorded one (the kernel is not deterministic)."""
