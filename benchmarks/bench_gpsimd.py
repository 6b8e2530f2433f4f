"""GPSIMD custom-op ReLU in three versions: wall time, simulated time, and the ratio to numpy.

    python benchmarks/bench_gpsimd.py [--elements 1048576] [--element-sample 65536] [--repeat 3]

For each version (element accessor, TCM on one core, TCM on 8 cores) on 1M float32 elements,
prints the wall time of the simulation, the simulated kernel time on trn1, and the wall time
over that of ``np.maximum(x, 0)`` on the same data. The element-accessor version runs a Python
loop per element (the model's slowness), so it runs on ``--element-sample`` elements and its
times are scaled linearly to the full size (the output says so).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import nkisim.gpsimd as gpsimd
from nkisim.examples.gpsimd_relu import make_libraries


def _best(fn: object, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 20)
    parser.add_argument("--element-sample", type=int, default=1 << 16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    x = np.random.default_rng(0).standard_normal(args.elements).astype(np.float32)
    numpy_s = _best(lambda: np.maximum(x, 0), max(args.repeat, 20))
    print(f"np.maximum(x, 0) on {x.size} float32: {numpy_s * 1e3:.3f} ms wall")
    print(f"{'version':20s} {'wall ms':>10s} {'simulated us':>13s} {'wall / numpy':>13s}")
    for name, op in make_libraries().items():
        data = x
        scale = 1.0
        if name == "relu_element" and args.element_sample < x.size:
            data = x[: args.element_sample]
            scale = x.size / data.size
        result = gpsimd.run(op, [data])
        assert np.array_equal(result.outputs, np.maximum(data, 0)), name
        wall = _best(lambda op=op, data=data: gpsimd.run(op, [data]), 1 if scale > 1 else args.repeat) * scale
        launch = result.profile.instructions[0].duration_ns
        simulated = launch + (result.total_ns - launch) * scale
        note = f"  (ran {data.size} elements, scaled x{scale:.0f})" if scale > 1 else ""
        print(f"{name:20s} {wall * 1e3:10.1f} {simulated / 1e3:13.1f} {wall / numpy_s:12.1f}x{note}")


if __name__ == "__main__":
    main()
