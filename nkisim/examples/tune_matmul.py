"""Tune the blocked matmul's block sizes on trn1 and trn2 with a sweep.

:func:`~nkisim.examples.matmul.matmul_optimized` takes three block counts: how many
128-row tiles of M, 512-column tiles of N and 128-deep tiles of K each loaded slab
holds. Larger blocks reuse each load more but need more SBUF. The sweep tries every
combination on a 2048 x 2048 x 2048 bfloat16 problem (timing only, no values) and
reports the fastest against the kernel's default blocks::

    python -m nkisim.examples.tune_matmul            # in this process
    python -m nkisim.examples.tune_matmul --workers 2
"""

from __future__ import annotations

import argparse
import concurrent.futures
from typing import Any

import ml_dtypes

from nkisim.examples.matmul import matmul_optimized
from nkisim.sweeps import SweepTable, sweep

#: The problem: lhsT [K, M] and rhs [K, N], timing only.
SHAPES = {"lhsT": ((2048, 2048), ml_dtypes.bfloat16), "rhs": ((2048, 2048), ml_dtypes.bfloat16)}
#: Every block count that tiles the problem: 5 x 3 x 4 = 60 points per target.
PARAMS = {"blocks_m": [1, 2, 4, 8, 16], "blocks_n": [1, 2, 4], "blocks_k": [1, 2, 4, 8]}
#: The kernel's own defaults.
DEFAULT = {"blocks_m": 16, "blocks_n": 2, "blocks_k": 8}
TARGETS = ["trn1", "trn2"]


def tune(executor: object = None, progress: bool | None = None, shapes: dict[str, Any] | None = None) -> SweepTable:
    """Sweep the block sizes on each target; returns the table of every point.

    ``shapes`` replaces the problem (default :data:`SHAPES`); on a smaller one, the block counts
    that do not tile it are recorded as failed points.
    """
    problem = SHAPES if shapes is None else shapes
    return sweep(matmul_optimized, problem, params=PARAMS, targets=TARGETS, executor=executor, progress=progress)


def report(table: SweepTable) -> str:
    """The default and the best blocks of each target, and the speed-up."""
    lines = []
    for target in TARGETS:
        default = next(r for r in table if r.target == target and r.params == DEFAULT)
        best = table.best(target)
        base = f"default {default.total_ns / 1e3:.1f} us" if default.ok else f"default failed ({default.error})"
        gain = f", {default.total_ns / best.total_ns:.2f}x faster" if default.ok else ""
        lines.append(f"{target}: {base}; best {best.total_ns / 1e3:.1f} us at {best.params}{gain}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1, help="processes to run the points on")
    parser.add_argument("--plot", default=None, help="write the chart here (HTML)")
    args = parser.parse_args()
    if args.workers > 1:
        with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
            table = tune(pool)
    else:
        table = tune()
    print(f"{len(table)} points, {len(table.failures)} failed")
    print(report(table))
    if args.plot:
        table.plot(args.plot)


if __name__ == "__main__":
    main()
