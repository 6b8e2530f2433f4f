"""Wall time of the tuning example's 120-point sweep in this process, on a process pool and on Dask.

    python benchmarks/bench_sweep.py [--workers 2] [--problem small|full]

The sweep is nkisim/examples/tune_matmul.py: matmul_optimized's 60 block settings on trn1 and
trn2, timing only. ``--problem full`` is the example's 2048 x 2048 x 2048 problem (every setting
tiles it; several seconds per point). The default ``small`` problem is 512 x 512 x 1024, on which
18 settings per target tile and the rest are recorded as failed points (the kernel's assert), so
the benchmark also shows failures travelling back from the workers. Every executor must give the
same records, bit for bit.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import time
from collections.abc import Callable

import ml_dtypes

from nkisim.examples.tune_matmul import SHAPES, report, tune
from nkisim.sweeps import SweepTable

SMALL = {"lhsT": ((512, 512), ml_dtypes.bfloat16), "rhs": ((512, 1024), ml_dtypes.bfloat16)}


def timed(label: str, run: Callable[[], SweepTable], reference: list | None) -> tuple[list, SweepTable]:
    start = time.perf_counter()
    table = run()
    wall = time.perf_counter() - start
    records = [(r.params, r.target, r.total_ns, r.instruction_count, r.error) for r in table]
    same = "reference" if reference is None else ("identical" if records == reference else "DIFFERENT")
    failed = len(table.failures)
    print(f"{label:<28}{wall:>9.1f} s{len(records) / wall:>10.1f} points/s  {failed:>4} failed   {same}")
    return records, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--problem", choices=("small", "full"), default="small")
    args = parser.parse_args()
    shapes = SMALL if args.problem == "small" else SHAPES
    print(f"{'executor':<28}{'wall':>11}{'rate':>17}{'':>12}   records")
    reference, table = timed("in-process", lambda: tune(progress=False, shapes=shapes), None)
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        timed(f"process pool, {args.workers} workers", lambda: tune(pool, progress=False, shapes=shapes), reference)
    try:
        from distributed import Client, LocalCluster
    except ModuleNotFoundError:
        print("Dask distributed is not installed (pip install 'nkisim[cluster]'): skipped")
    else:
        with (
            LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):
            label = f"Dask LocalCluster, {args.workers} workers"
            timed(label, lambda: tune(client, progress=False, shapes=shapes), reference)
    print(report(table))


if __name__ == "__main__":
    main()
