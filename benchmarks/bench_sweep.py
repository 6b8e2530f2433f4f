"""Wall time of a 120-point sweep in this process, on a process pool and on a Dask cluster.

    python benchmarks/bench_sweep.py [--workers 2]

The sweep is nkisim/examples/tune_matmul.py (matmul_optimized's block sizes on trn1 and
trn2, timing only). Every executor must give the same records, bit for bit.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import time
from collections.abc import Callable

from nkisim.examples.tune_matmul import report, tune


def timed(label: str, run: Callable[[], object], reference: list | None) -> list:
    start = time.perf_counter()
    table = run()
    wall = time.perf_counter() - start
    records = [(r.params, r.target, r.total_ns, r.instruction_count, r.error) for r in table]  # type: ignore[attr-defined]
    same = "reference" if reference is None else ("identical" if records == reference else "DIFFERENT")
    print(f"{label:<28}{wall:>9.1f} s{len(records) / wall:>10.1f} points/s   {same}")
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(f"{'executor':<28}{'wall':>11}{'rate':>17}   records")
    reference = timed("in-process", lambda: tune(progress=False), None)
    with concurrent.futures.ProcessPoolExecutor(args.workers) as pool:
        timed(f"process pool, {args.workers} workers", lambda: tune(pool, progress=False), reference)
    try:
        from distributed import Client, LocalCluster
    except ModuleNotFoundError:
        print("Dask distributed is not installed (pip install 'nkisim[cluster]'): skipped")
        return
    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        timed(f"Dask LocalCluster, {args.workers} workers", lambda: tune(client, progress=False), reference)
        print(report(tune(client, progress=False)))


if __name__ == "__main__":
    main()
