"""What the benchmark scripts share: their timer, and the line that says how fast this machine runs Python."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def run_times(
    fn: Callable[[], Any], repeat: int, clock: Callable[[], float] = time.perf_counter, warm_up: bool = True
) -> tuple[list[float], Any]:
    """The times of ``repeat`` calls of ``fn`` by ``clock``, after one untimed call unless ``warm_up`` is False
    (numba's compilation and first-touch page faults go there), and the last call's result."""
    result = fn() if warm_up else None
    times = []
    for _ in range(repeat):
        start = clock()
        result = fn()
        times.append(clock() - start)
    return times, result


class _Probe:
    __slots__ = ("a", "b")

    def __init__(self, a: int, b: int) -> None:
        self.a = a
        self.b = b


def python_reference(clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds for a million calls that each make a small object and look it up in a dict: plain interpreter work,
    what most of a simulated instruction's overhead is made of. It tells machines apart: the per-instruction rates
    of two machines compare in proportion to it (numpy's tile loops give the ratios their own floor)."""
    table: dict[int, _Probe] = {}

    def step(i: int) -> None:
        table[i & 1023] = _Probe(i, i + 1)

    start = clock()
    for i in range(1_000_000):
        step(i)
    return clock() - start


def host_line(clock: Callable[[], float] = time.perf_counter) -> str:
    """The benchmarks' first line: :func:`python_reference` on this machine (the best of three)."""
    seconds = min(python_reference(clock) for _ in range(3))
    return f"host: 1M Python calls making a small object take {seconds * 1e3:.0f} ms (the interpreter's speed here)"
