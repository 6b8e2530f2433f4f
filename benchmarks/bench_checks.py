"""The sanitizer's cost: wall time of the same runs under check="off", "warn" and "strict".

    python benchmarks/bench_checks.py [--repeat 5]

The workloads of bench_core.py: (a) a 4096x4096 float32 add in 128x512 tiles and (b) a
1024^3 float32 tiled matmul, plus (c) an affine_range kernel of small tiles, where the loop
tracking does the most work per instruction. Times are medians after one warm-up run.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
from timing import run_times

import nkisim
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl
from nkisim.examples.matmul import matmul_tiled
from nkisim.examples.tensor_add import nki_tensor_add


def small_tiles(a: Any) -> Any:
    """One 128x64 tile per affine_range iteration: load, scale, add, store."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        t = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a[rows])
        s = nl.ndarray((128, a.shape[1]), a.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=s, data=t, op0=nl.multiply, operand0=2.0)
        nisa.tensor_tensor(dst=s, data1=s, data2=t, op=nl.add)
        nisa.dma_copy(dst=out[rows], src=s)
    return out


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    return statistics.median(run_times(fn, repeat)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4096, 4096), dtype=np.float32)
    b = rng.standard_normal((4096, 4096), dtype=np.float32)
    lhs_t = rng.standard_normal((1024, 1024), dtype=np.float32)
    rhs = rng.standard_normal((1024, 1024), dtype=np.float32)
    x = rng.standard_normal((128 * 500, 64), dtype=np.float32)
    workloads = [
        ("(a) add 4096x4096 f32, 128x512", nki_tensor_add, [a, b]),
        ("(b) matmul 1024^3 f32", matmul_tiled, [lhs_t, rhs]),
        ("(c) 500 affine iterations 128x64", small_tiles, [x]),
    ]
    print(f"{'workload':<36}{'instrs':>8}{'off ms':>10}{'warn ms':>10}{'strict ms':>11}{'strict/off':>12}")
    for name, kernel, inputs in workloads:
        count = nkisim.run(kernel, inputs, check="off").profile.instruction_count
        times = {
            mode: median_time(lambda m=mode, k=kernel, x=inputs: nkisim.run(k, x, check=m), args.repeat)
            for mode in ("off", "warn", "strict")
        }
        print(
            f"{name:<36}{count:>8}{times['off'] * 1e3:>10.1f}{times['warn'] * 1e3:>10.1f}"
            f"{times['strict'] * 1e3:>11.1f}{times['strict'] / times['off']:>11.2f}x"
        )


if __name__ == "__main__":
    main()
