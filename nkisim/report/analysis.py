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

import numpy as np

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
    index = int(np.argmax(tl.column("end_ns")))  # the first of equal ends, as max() picks
    pred = tl.pred
    path = []
    while index >= 0:
        path.append(index)
        index = pred[index]
    return path[::-1]


def track_classes(tl: Timeline) -> tuple[list[str], np.ndarray]:
    """The engine classes of the timeline's tracks in order of first use, and each track's class number."""
    names: dict[str, int] = {}
    numbers = [names.setdefault(engine_class(track), len(names)) for track in tl.tracks]
    return list(names), np.array(numbers, dtype=np.intp)


def critical_time_by_engine(tl: Timeline, path: list[int]) -> dict[str, float]:
    """Time on the critical path spent in each engine class (the rest is waiting)."""
    spent: dict[str, float] = defaultdict(float)
    tracks, track_id, start, end = tl.tracks, tl.track_id, tl.start_ns, tl.end_ns
    for i in path:
        spent[engine_class(tracks[track_id[i]])] += end[i] - start[i]
    return dict(spent)


def line_costs(tl: Timeline, path: list[int]) -> list[LineCost]:
    """Per kernel line totals, costliest first.

    Sums run over the instructions in program order (``np.bincount`` adds its weights in
    order), so each total is the same float a loop over the instructions gives.
    """
    if not len(tl):
        return []
    line_numbers: dict[str, int] = {}
    line_of_site = np.array(
        [line_numbers.setdefault(str(site.source), len(line_numbers)) for site in tl.sites], dtype=np.intp
    )
    lines = len(line_numbers)
    line = line_of_site[tl.column("site_id")]
    busy, wait = tl.column("busy_ns"), tl.column("wait_ns")
    counts = np.bincount(line, minlength=lines)
    busy_sum = np.bincount(line, weights=busy, minlength=lines)
    wait_sum = np.bincount(line, weights=wait, minlength=lines)
    on_path = np.asarray(path, dtype=np.intp)
    duration = tl.column("end_ns")[on_path] - tl.column("start_ns")[on_path]
    critical = np.bincount(line[on_path], weights=duration, minlength=lines)
    classes, class_of_track = track_classes(tl)
    pair = line * len(classes) + class_of_track[tl.column("track_id")]
    pair_busy = np.bincount(pair, weights=busy, minlength=lines * len(classes))
    pairs, first = np.unique(pair, return_index=True)
    costs = [
        LineCost(source, int(counts[i]), float(busy_sum[i]), float(wait_sum[i]), float(critical[i]))
        for source, i in line_numbers.items()
    ]
    for p in pairs[np.argsort(first, kind="stable")].tolist():  # each line's engines in order of first use
        costs[p // len(classes)].engines[classes[p % len(classes)]] = float(pair_busy[p])
    return sorted(costs, key=lambda c: (-c.critical_ns, -c.busy_ns))


def peak_flops_per_ns(hw: HwConfig) -> float:
    """Tensor Engine peak: one multiply-add per PE per cycle (bf16/fp16/fp8 rate)."""
    return 2.0 * hw.tensor.rows * hw.tensor.columns * hw.tensor.clock_ghz


def wait_by_engine(tl: Timeline) -> dict[str, float]:
    """Time each engine class sat idle waiting on semaphores for its producers."""
    if not len(tl):
        return {}
    classes, class_of_track = track_classes(tl)
    per_class = class_of_track[tl.column("track_id")]
    waits = np.bincount(per_class, weights=tl.column("wait_ns"), minlength=len(classes))
    present = np.bincount(per_class, minlength=len(classes))
    return {name: float(waits[i]) for i, name in enumerate(classes) if present[i]}
