"""The Mamba-style selective scan: nkisim wall time, plain numpy on the same data, simulated time.

    python benchmarks/bench_mamba.py [--channels 512] [--length 256] [--states 16] [--repeat 3]

The defaults are the shape of the public fused-Mamba tutorial's first measurement
(batch 1, 512 channels, sequence 256, state 16, float32).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import nkisim
from nkisim.examples.mamba import selective_scan


def numpy_scan(delta: np.ndarray, u: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The same recurrence in vectorised numpy, one time step at a time (float32)."""
    h = np.zeros((delta.shape[0], a.shape[1]), np.float32)
    y = np.empty_like(delta)
    for t in range(delta.shape[1]):
        h = np.exp(delta[:, t, None] * a) * h + (delta[:, t, None] * u[:, t, None]) * b[:, t]
        y[:, t] = h @ c[:, t]
    return y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=512)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--states", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target", default="trn1")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    delta = (np.abs(rng.standard_normal((args.channels, args.length))) * 0.1).astype(np.float32)
    u = rng.standard_normal((args.channels, args.length)).astype(np.float32)
    a = -np.abs(rng.standard_normal((args.channels, args.states))).astype(np.float32)
    b = rng.standard_normal((args.states, args.length)).astype(np.float32)
    c = rng.standard_normal((args.states, args.length)).astype(np.float32)
    inputs = [delta, u, a, b, c]

    nkisim.run(selective_scan, inputs, target=args.target)  # warm-up (numba compilation)
    sim_times, np_times = [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = nkisim.run(selective_scan, inputs, target=args.target)
        sim_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        expected = numpy_scan(*inputs)
        np_times.append(time.perf_counter() - start)
    sim_s, np_s = statistics.median(sim_times), statistics.median(np_times)
    profile = result.profile
    err = float(np.max(np.abs(result.outputs - expected)))
    print(f"selective scan {args.channels}x{args.length}, {args.states} states, float32, {args.target}")
    print(
        f"  nkisim wall   {sim_s * 1e3:9.1f} ms  ({profile.instruction_count} instructions, "
        f"{profile.instruction_count / sim_s:,.0f} instructions/s)"
    )
    print(f"  numpy wall    {np_s * 1e3:9.1f} ms  (max abs difference {err:.2e})")
    print(f"  simulated     {profile.total_ns / 1e3:9.1f} us  on {profile.target}, bound by {profile.bottleneck}")
    print(f"  device time   {profile.device_ns / 1e3:9.1f} us  (with the launch's start-up and tear-down)")
    if (args.channels, args.length, args.states, args.target) == (512, 256, 16, "trn1"):
        print("  (the public tutorial's own fused kernel measured 172.93 us at this shape on trn1)")


if __name__ == "__main__":
    main()
