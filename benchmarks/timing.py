"""The timer the benchmark scripts share."""

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
