"""nkisim's simulated time for the matmul tutorial's four tiers, next to the published measurements.

    python benchmarks/bench_calibration.py [--size 4096 8192 8192] [--html DIR]

The public NKI matrix-multiplication tutorial reports [4096, 8192] @ [8192, 8192] in
bfloat16 on trn1 at 51.80 ms (tiled), 42.96 ms (hoisted loads), 22.07 ms (blocked free
dimension) and 6.97 ms (fully optimised). nkisim runs its own kernels of the same
structure (nkisim.examples.matmul) on shapes alone, with nkisim.profile.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import nkisim
from nkisim.examples import matmul as mm

PUBLISHED_MS = {
    "matmul_tiled": 51.80,
    "matmul_hoisted": 42.96,
    "matmul_blocked": 22.07,
    "matmul_optimized": 6.97,
}
KERNELS = (mm.matmul_tiled, mm.matmul_hoisted, mm.matmul_blocked, mm.matmul_optimized)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, nargs=3, default=(4096, 8192, 8192), metavar=("M", "K", "N"))
    parser.add_argument("--target", default="trn1")
    parser.add_argument("--html", type=Path, default=None, help="write an HTML report and a Perfetto trace per tier")
    args = parser.parse_args()
    m, k, n = args.size
    shapes = [((k, m), "bfloat16"), ((k, n), "bfloat16")]
    print(f"matmul [{m}, {k}] @ [{k}, {n}] bfloat16 on {args.target}")
    print(
        f"{'kernel':<18}{'simulated ms':>13}{'published ms':>14}{'ratio':>8}{'MFU':>7}{'bound by':>10}"
        f"{'instrs':>9}{'wall s':>8}"
    )
    for kernel in KERNELS:
        start = time.perf_counter()
        profile = nkisim.profile(kernel, shapes, target=args.target)
        wall = time.perf_counter() - start
        name = kernel.__name__
        simulated = profile.device_ns / 1e6  # the tutorial times the whole execution (docs/timing.md)
        published = PUBLISHED_MS[name] if (m, k, n, args.target) == (4096, 8192, 8192, "trn1") else None
        ratio = f"{simulated / published:8.2f}" if published else f"{'-':>8}"
        shown = f"{published:14.2f}" if published else f"{'-':>14}"
        print(
            f"{name:<18}{simulated:13.2f}{shown}{ratio}{100 * profile.mfu:6.1f}%{profile.bottleneck:>10}"
            f"{profile.instruction_count:>9}{wall:8.1f}"
        )
        if args.html:
            args.html.mkdir(parents=True, exist_ok=True)
            profile.to_html(args.html / f"{name}.html")
            profile.to_perfetto(args.html / f"{name}.perfetto.json.gz")


if __name__ == "__main__":
    main()
