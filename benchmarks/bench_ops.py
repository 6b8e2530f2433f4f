"""The cost of one simulated instruction, by kind: what the per-instruction figure (d) of bench_core.py is made of.

    python benchmarks/bench_ops.py [--repeat 11] [--steps 2000]

Each kernel issues ``steps`` instructions of one kind on [128, 64] tiles that stay the same (no tile is
allocated in the loop), as ``benchmarks/small_kernels.py``'s ``engine_mix`` does per step: a DMA load of an
HBM block, a DMA store to one, a matmul into PSUM, a Vector Engine add, a Scalar Engine activation and a
PSUM-to-SBUF copy; and a kernel that only allocates tiles (two per step, SBUF and PSUM). It prints the CPU
time per instruction (per tile for the allocations) of a shapes-only profile and of a full run, and their
difference, the semantics: the minimum of ``repeat`` runs after a warm-up, as the machine's noise only adds.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from timing import host_line, run_times

import nkisim
import nkisim.nki as nki
import nkisim.nki.isa as nisa
import nkisim.nki.language as nl

TILE = (128, 64)


def _loaded(a: Any) -> Any:
    tile = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=a[0:128])
    return tile


@nki.jit
def loads(a, steps):
    tile = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
    for i in range(steps):
        start = i % (a.shape[0] // 128) * 128
        nisa.dma_copy(dst=tile, src=a[start : start + 128])
    return a


@nki.jit
def stores(a, steps):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    tile = _loaded(a)
    for i in range(steps):
        start = i % (a.shape[0] // 128) * 128
        nisa.dma_copy(dst=out[start : start + 128], src=tile)
    return out


@nki.jit
def matmuls(a, steps):
    tile = _loaded(a)
    acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
    for _ in range(steps):
        nisa.nc_matmul(dst=acc, stationary=tile, moving=tile)
    return a


@nki.jit
def adds(a, steps):
    tile = _loaded(a)
    out = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
    for _ in range(steps):
        nisa.tensor_tensor(dst=out, data1=tile, data2=tile, op=nl.add)
    return a


@nki.jit
def activations(a, steps):
    tile = _loaded(a)
    out = nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
    for _ in range(steps):
        nisa.activation(dst=out, op=nl.exp, data=tile, scale=0.5)
    return a


@nki.jit
def psum_copies(a, steps):
    tile = _loaded(a)
    acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=tile, moving=tile)
    out = nl.ndarray((64, 64), dtype=a.dtype, buffer=nl.sbuf)
    for _ in range(steps):
        nisa.tensor_copy(dst=out, src=acc)
    return a


@nki.jit
def allocations(a, steps):
    for _ in range(steps // 2):
        nl.ndarray(TILE, dtype=a.dtype, buffer=nl.sbuf)
        nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
    _loaded(a)
    return a


KERNELS = (
    ("DMA load, HBM block to SBUF", loads),
    ("DMA store, SBUF to HBM block", stores),
    ("nc_matmul into PSUM", matmuls),
    ("tensor_tensor add", adds),
    ("activation exp", activations),
    ("tensor_copy PSUM to SBUF", psum_copies),
    ("tile allocation (per tile)", allocations),
)


def fastest(fn: Callable[[], Any], repeat: int) -> float:
    return min(run_times(fn, repeat, time.process_time)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 64), dtype=np.float32)
    shape = (a.shape, a.dtype)  # the profile's description of a
    print(host_line(time.process_time))
    print(f"CPU time per instruction, [128, 64] float32 tiles, min of {args.repeat} runs of {args.steps} steps")
    print(f"{'instruction':<32}{'shapes-only us':>16}{'full us':>10}{'semantics us':>14}")
    for label, kernel in KERNELS:
        # the same kernel without its loop, taken away: what is left is the loop's instructions
        empty_full = fastest(lambda k=kernel: nkisim.run(k, {"a": a, "steps": 0}), args.repeat)
        empty_shapes = fastest(lambda k=kernel: nkisim.profile(k, {"a": shape, "steps": 0}), args.repeat)
        full = fastest(lambda k=kernel: nkisim.run(k, {"a": a, "steps": args.steps}), args.repeat) - empty_full
        shapes_only = fastest(lambda k=kernel: nkisim.profile(k, {"a": shape, "steps": args.steps}), args.repeat)
        shapes_only -= empty_shapes
        per = 1e6 / args.steps
        print(f"{label:<32}{shapes_only * per:>16.1f}{full * per:>10.1f}{(full - shapes_only) * per:>14.1f}")


if __name__ == "__main__":
    main()
