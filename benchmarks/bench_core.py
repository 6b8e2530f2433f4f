"""Wall time of nkisim next to plain numpy on the same data, and simulated instructions per second.

    python benchmarks/bench_core.py [--repeat 5]

(a) a 4096x4096 float32 tensor add in 128x512 tiles (the seed kernel), and
(b) a 1024x1024x1024 tiled matmul (128x128 stationary, 512-wide moving, K in PSUM),
in float32 and bfloat16. Times are the median of the repeats after one warm-up run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

import nkisim
from nkisim.examples.matmul import matmul_tiled
from nkisim.examples.tensor_add import nki_tensor_add


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    result = fn()  # warm-up: numba compilation, first-touch page faults
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def bench(name: str, kernel: Any, inputs: list[np.ndarray], reference: Callable[[], np.ndarray], repeat: int) -> None:
    sim_s, result = median_time(lambda: nkisim.run(kernel, inputs), repeat)
    np_s, expected = median_time(reference, repeat)
    err = float(np.max(np.abs(result.outputs.astype(np.float64) - expected.astype(np.float64))))
    count = result.profile.instruction_count
    print(
        f"{name:<34}{sim_s * 1e3:>10.1f}{np_s * 1e3:>10.1f}{sim_s / np_s:>8.1f}x"
        f"{count:>8}{count / sim_s:>12,.0f}{result.profile.total_ns / 1e3:>12.1f}{err:>11.2e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"{'workload':<34}{'nkisim ms':>10}{'numpy ms':>10}{'ratio':>9}{'instrs':>8}{'instrs/s':>12}"
        f"{'sim us':>12}{'max err':>11}"
    )
    a = rng.standard_normal((4096, 4096), dtype=np.float32)
    b = rng.standard_normal((4096, 4096), dtype=np.float32)
    bench("(a) add 4096x4096 f32, 128x512", nki_tensor_add, [a, b], lambda: a + b, args.repeat)
    for dtype in (np.float32, ml_dtypes.bfloat16):
        lhs_t = rng.standard_normal((1024, 1024)).astype(dtype)
        rhs = rng.standard_normal((1024, 1024)).astype(dtype)

        def reference(lhs_t: np.ndarray = lhs_t, rhs: np.ndarray = rhs) -> np.ndarray:
            return (lhs_t.astype(np.float32).T @ rhs.astype(np.float32)).astype(lhs_t.dtype)

        name = f"(b) matmul 1024^3 {np.dtype(dtype).name}"
        bench(name, matmul_tiled, [lhs_t, rhs], reference, args.repeat)


if __name__ == "__main__":
    main()
