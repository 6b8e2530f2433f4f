"""TPC simulation speed: ReLU and row softmax over 1M float32 elements on gaudi2, against plain numpy.

Prints the simulator's wall time (best of 3), the simulated kernel cycles and time, and the ratio of
the wall time to numpy's for the same computation. Run: ``python benchmarks/bench_tpc.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from timing import run_times

import nkisim.tpc as tpc
from nkisim.examples.tpc_relu import ReluFwdGlue
from nkisim.examples.tpc_softmax import RowGlue


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    return min(run_times(fn, repeat, warm_up=False)[0])


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    x = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    cases = [
        ("relu", ReluFwdGlue("f32"), lambda: np.maximum(x, 0)),
        ("softmax", RowGlue("softmax_fwd", "f32"), lambda: numpy_softmax(x)),
    ]
    print(f"TPC simulation of 1M float32 elements ({x.shape[0]}x{x.shape[1]}) on gaudi2")
    print(f"{'kernel':10}{'sim wall s':>12}{'numpy ms':>10}{'ratio':>8}{'cycles':>10}{'sim us':>9}{'instrs':>10}")
    for name, glue, reference in cases:
        tpc.run(glue, [x])  # compile numba, warm caches
        result = tpc.run(glue, [x])
        wall = best_of(lambda g=glue: tpc.run(g, [x]))
        base = best_of(reference, repeat=20)
        print(
            f"{name:10}{wall:12.3f}{base * 1e3:10.3f}{wall / base:8.0f}{result.cycles:10d}"
            f"{result.total_ns / 1000:9.2f}{result.instructions:10d}"
        )


if __name__ == "__main__":
    main()
