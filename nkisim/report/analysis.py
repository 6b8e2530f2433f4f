"""What bounds a kernel: critical path, utilisation, semaphore waits and per-line costs.

These answer the questions a hardware profile answers: how busy each engine was,
how much of the Tensor Engine's peak the kernel used (MFU), how much of the DMA
bandwidth, which chain of instructions set the total time and which engine or
queue dominates it, how long engines sat waiting on semaphores, and which kernel
lines cost the time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from nkisim.hw import HwConfig
from nkisim.sim import Timeline


def engine_class(track: str) -> str:
    """The engine a track belongs to: ``DMA q3`` and ``core1 DMA q3`` are both ``DMA``."""
    name = track.split(" ", 1)[1] if track.startswith("core") and " " in track else track
    return "DMA" if name.startswith("DMA") else name


@dataclass
class LineCost:
    """The instructions one kernel line issued, and what they cost.

    Attributes:
        source: ``file:line`` of the kernel call.
        instructions: how many instructions it issued.
        busy_ns: their summed engine (or DMA transfer) time.
        wait_ns: their summed time waiting for producers.
        critical_ns: the part of the critical path they make up.
        engines: busy time per engine.
    """

    source: str
    instructions: int = 0
    busy_ns: float = 0.0
    wait_ns: float = 0.0
    critical_ns: float = 0.0
    engines: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def critical_path(tl: Timeline) -> list[int]:
    """Indices of the chain of instructions that ends last, first to last.

    Each step goes to what set the instruction's start: the producer whose result
    it waited for, or else the instruction before it on the same engine or queue.
    """
    if not len(tl):
        return []
    index = max(range(len(tl)), key=tl.end_ns.__getitem__)
    path = []
    while index >= 0:
        path.append(index)
        index = tl.pred[index]
    return path[::-1]


def critical_time_by_engine(tl: Timeline, path: list[int]) -> dict[str, float]:
    """Time on the critical path spent in each engine class (the rest is waiting)."""
    spent: dict[str, float] = defaultdict(float)
    for i in path:
        spent[engine_class(tl.track[i])] += tl.end_ns[i] - tl.start_ns[i]
    return dict(spent)


def line_costs(tl: Timeline, path: list[int]) -> list[LineCost]:
    """Per kernel line totals, costliest first."""
    lines: dict[str, LineCost] = {}
    on_path = set(path)
    for i in range(len(tl)):
        source = str(tl.source[i])
        line = lines.get(source)
        if line is None:
            line = lines[source] = LineCost(source)
        line.instructions += 1
        line.busy_ns += tl.busy_ns[i]
        line.wait_ns += tl.wait_ns[i]
        line.engines[engine_class(tl.track[i])] += tl.busy_ns[i]
        if i in on_path:
            line.critical_ns += tl.end_ns[i] - tl.start_ns[i]
    return sorted(lines.values(), key=lambda c: (-c.critical_ns, -c.busy_ns))


def peak_flops_per_ns(hw: HwConfig) -> float:
    """Tensor Engine peak: one multiply-add per PE per cycle (bf16/fp16/fp8 rate)."""
    return 2.0 * hw.tensor.rows * hw.tensor.columns * hw.tensor.clock_ghz


def wait_by_engine(tl: Timeline) -> dict[str, float]:
    """Time each engine class sat idle waiting on semaphores for its producers."""
    waits: dict[str, float] = defaultdict(float)
    for track, wait in zip(tl.track, tl.wait_ns):
        waits[engine_class(track)] += wait
    return dict(waits)
