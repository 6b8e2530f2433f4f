"""Wall time of nkisim next to plain numpy on the same data, and simulated instructions per second.

    python benchmarks/bench_core.py [--repeat 5] [--tutorial] [--clock wall|cpu]
    python -m nkisim bench [--repeat 5] [--tutorial] [--clock wall|cpu]    (the same, from a checkout)

(a) a 4096x4096 float32 tensor add in 128x512 tiles (the seed kernel), and
(b) a 1024x1024x1024 tiled matmul (128x128 stationary, 512-wide moving, K in PSUM),
in float32 and bfloat16, and (e) a gather of 128 rows of a 4096x512 float32 table by an index tile, scattered
back to the same rows (``vector_offset`` DMAs, 32 times: a permutation copies the table). Times are the median
of the repeats after one warm-up run.
Next to whole-array numpy, ``loop ms`` is a plain numpy loop over the same tiles
(the floor for a simulator that executes tile by tile) and ``/loop`` nkisim's ratio to it.

Below each of (a) and (b), the row ``replay (compiled, same signature)`` is the same
kernel through ``nkisim.compile`` (compiled once with these inputs, outside the timing)
called again with them: the recorded program replayed on the input values.

Then the per-instruction figures: simulated instructions per second of small-tile
kernels (``benchmarks/small_kernels.py``) in a full run, shapes-only, and replayed
(``nkisim.compile``, same signature, with values), the same for (c) launched on two
NeuronCores (``kernel[2]`` on trn2, whose programs take turns after every instruction), the
bytes a finished profile retains per instruction, and the bytes per instruction at the
peak of a run (above the memory that does not grow with the instruction count).
``--tutorial`` adds the shapes-only profile of the matmul tutorial's [4096, 8192] @
[8192, 8192] bfloat16 (``matmul_tiled``, about 99k instructions).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import nkisim
from nkisim.examples.matmul import matmul_tiled
from nkisim.examples.tensor_add import nki_tensor_add
from nkisim.frontend.blas import single_threaded_blas

sys.path.insert(0, str(Path(__file__).resolve().parent))
from small_kernels import TILE, engine_mix, row_shuffle, vector_chain
from timing import host_line, run_times


@dataclass(frozen=True)
class MemoryFigures:
    """What :func:`memory_per_instruction` measured."""

    instructions: int
    retained: float
    peak: float
    fixed: float


#: The clock the figures are measured with: wall time (``--clock wall``, the default) or this
#: process's CPU time (``--clock cpu``, steadier on a shared machine; numpy's own threads count too).
CLOCK: Callable[[], float] = time.perf_counter


def median_time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = run_times(fn, repeat, CLOCK)
    return statistics.median(times), result


def add_loop(a: np.ndarray, b: np.ndarray, tile: tuple[int, int] = (128, 512)) -> np.ndarray:
    """``a + b`` by a numpy loop over the kernel's 128x512 tiles."""
    out = np.empty_like(a)
    for r in range(0, a.shape[0], tile[0]):
        for c in range(0, a.shape[1], tile[1]):
            block = (slice(r, r + tile[0]), slice(c, c + tile[1]))
            out[block] = a[block] + b[block]
    return out


def shuffle_loop(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """:func:`row_shuffle` by numpy: 128 rows at a time, gathered by index and scattered back to the same rows."""
    out = np.empty_like(table)
    for start in range(0, len(index), 128):
        rows = index[start : start + 128, 0]
        out[rows] = table[rows]
    return out


def matmul_loop(lhs_t: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``lhs_t.T @ rhs`` with :func:`matmul_tiled`'s blocking: 128x512 result blocks, K in 128-row steps."""
    (k_size, m_size), n_size = lhs_t.shape, rhs.shape[1]
    out = np.empty((m_size, n_size), dtype=lhs_t.dtype)
    for m in range(0, m_size, 128):
        for n in range(0, n_size, 512):
            acc = np.zeros((128, 512), dtype=np.float32)
            for k in range(0, k_size, 128):
                stationary = lhs_t[k : k + 128, m : m + 128].astype(np.float32)
                moving = rhs[k : k + 128, n : n + 512].astype(np.float32)
                acc += stationary.T @ moving
            out[m : m + 128, n : n + 512] = acc.astype(lhs_t.dtype)
    return out


def bench(
    name: str,
    kernel: Any,
    inputs: list[np.ndarray],
    reference: Callable[[], np.ndarray],
    loop: Callable[[], np.ndarray],
    repeat: int,
) -> None:
    sim_s, result = median_time(lambda: nkisim.run(kernel, inputs), repeat)
    with single_threaded_blas():  # as nkisim holds BLAS while it runs: one thread, the same work
        np_s, expected = median_time(reference, repeat)
        loop_s, _ = median_time(loop, repeat)
    prog = nkisim.compile(kernel, inputs)
    replay_s, replayed = median_time(lambda: prog(inputs), repeat)
    count = result.profile.instruction_count
    for label, seconds, outputs in (
        (name, sim_s, result.outputs),
        ("  replay (compiled, same signature)", replay_s, replayed.outputs),
    ):
        err = float(np.max(np.abs(outputs.astype(np.float64) - expected.astype(np.float64))))
        print(
            f"{label:<36}{seconds * 1e3:>10.1f}{np_s * 1e3:>10.1f}{seconds / np_s:>8.1f}x{loop_s * 1e3:>9.1f}"
            f"{seconds / loop_s:>7.2f}x{count:>8}{count / seconds:>12,.0f}{result.profile.total_ns / 1e3:>12.1f}"
            f"{err:>11.2e}"
        )


def rates(name: str, kernel: Any, inputs: list[np.ndarray], repeat: int, target: str | None = None) -> None:
    """Simulated instructions per second of a full run, a shapes-only profile, and a replay with values.

    A two-core launch (``kernel[2]``) is not recorded, so it has no replay column."""
    shapes = [(x.shape, x.dtype) for x in inputs]
    full_s, result = median_time(lambda: nkisim.run(kernel, inputs, target=target), repeat)
    shape_s, profile = median_time(lambda: nkisim.profile(kernel, shapes, target=target), repeat)
    count = result.profile.instruction_count
    assert profile.instruction_count == count
    line = f"{name:<36}{count:>8}{full_s * 1e3:>10.1f}{count / full_s:>12,.0f}"
    line += f"{shape_s * 1e3:>10.1f}{count / shape_s:>12,.0f}"
    prog = nkisim.compile(kernel, inputs, target=target)
    if prog.replayable:
        replay_s, _ = median_time(lambda: prog(inputs), repeat)
        line += f"{replay_s * 1e3:>11.1f}{count / replay_s:>12,.0f}"
    print(line)


def memory_per_instruction(kernel: Any, inputs: dict[str, Any], steps: tuple[int, int]) -> MemoryFigures:
    """Bytes per instruction a shapes-only profile retains once finished, and at its peak while running.

    The kernel runs with ``steps`` of two sizes. The peak of a run includes memory that does
    not grow with the instruction count (the SBUF/PSUM storage, the dependency grids), so the
    peak per instruction is the slope between the two sizes; ``fixed`` is the rest.
    """
    figures = []
    for count in steps:
        specs = {**inputs, "steps": count}
        nkisim.profile(kernel, specs)  # warm-up: imports, caches
        gc.collect()
        tracemalloc.start()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        profile = nkisim.profile(kernel, specs)
        peak = tracemalloc.get_traced_memory()[1]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        figures.append((profile.instruction_count, after - before, peak - before))
    (n1, _, peak1), (n2, retained2, peak2) = figures
    slope = (peak2 - peak1) / (n2 - n1)
    return MemoryFigures(n2, retained2 / n2, slope, peak1 - slope * n1)


def tutorial() -> None:
    """The matmul tutorial's size, shapes only."""
    shapes = [((8192, 4096), "bfloat16"), ((8192, 8192), "bfloat16")]
    start = CLOCK()
    profile = nkisim.profile(matmul_tiled, shapes)
    wall = CLOCK() - start
    count = profile.instruction_count
    print(
        f"tutorial matmul_tiled [4096, 8192] @ [8192, 8192] bf16, shapes only: {count} instructions "
        f"in {wall:.2f} s ({count / wall:,.0f} instrs/s), simulated {profile.total_ns / 1e6:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tutorial", action="store_true", help="also profile the 4096x8192x8192 tutorial matmul")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="wall time or process CPU time")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"clock: {args.clock} time (median of {args.repeat} runs after a warm-up)")
    print(host_line(CLOCK))
    rng = np.random.default_rng(0)
    print(
        f"{'workload':<36}{'nkisim ms':>10}{'numpy ms':>10}{'ratio':>9}{'loop ms':>9}{'/loop':>8}{'instrs':>8}"
        f"{'instrs/s':>12}{'sim us':>12}{'max err':>11}"
    )
    a = rng.standard_normal((4096, 4096), dtype=np.float32)
    b = rng.standard_normal((4096, 4096), dtype=np.float32)
    bench("(a) add 4096x4096 f32, 128x512", nki_tensor_add, [a, b], lambda: a + b, lambda: add_loop(a, b), args.repeat)
    for dtype in (np.float32, ml_dtypes.bfloat16):
        lhs_t = rng.standard_normal((1024, 1024)).astype(dtype)
        rhs = rng.standard_normal((1024, 1024)).astype(dtype)

        def reference(lhs_t: np.ndarray = lhs_t, rhs: np.ndarray = rhs) -> np.ndarray:
            return (lhs_t.astype(np.float32).T @ rhs.astype(np.float32)).astype(lhs_t.dtype)

        def loop(lhs_t: np.ndarray = lhs_t, rhs: np.ndarray = rhs) -> np.ndarray:
            return matmul_loop(lhs_t, rhs)

        name = f"(b) matmul 1024^3 {np.dtype(dtype).name}"
        bench(name, matmul_tiled, [lhs_t, rhs], reference, loop, args.repeat)
    table = rng.standard_normal((4096, 512), dtype=np.float32)
    index = rng.permutation(4096).astype(np.int32).reshape(-1, 1)
    bench(
        "(e) row gather+scatter 4096x512 f32",
        row_shuffle,
        [table, index],
        table.copy,
        lambda: shuffle_loop(table, index),
        args.repeat,
    )

    print()
    print(
        f"{'small tiles (128x64)':<36}{'instrs':>8}{'full ms':>10}{'instrs/s':>12}{'shapes ms':>10}{'instrs/s':>12}"
        f"{'replay ms':>11}{'instrs/s':>12}"
    )
    print(f"{'':<78}(replay: compiled, same signature)")
    x = rng.standard_normal((128, 64), dtype=np.float32)
    y = rng.standard_normal((128, 64), dtype=np.float32)
    rows = rng.standard_normal((1024, 64), dtype=np.float32)
    rates("(c) 2000 tensor_tensor", vector_chain, [x, y], args.repeat)
    rates("(d) DMA/Tensor/Vector/Scalar mix", engine_mix, [rows, x], args.repeat)
    rates("(c) on two cores (kernel[2], trn2)", vector_chain[2], [x, y], args.repeat, target="trn2")
    tile = (TILE, "float32")
    mem = memory_per_instruction(vector_chain, {"a": tile, "b": tile}, (1000, 4000))
    print(
        f"retained by a finished profile: {mem.retained:,.0f} B per instruction ({mem.instructions} instructions, "
        f"(c) shapes-only); peak while running: {mem.peak:,.0f} B per instruction above {mem.fixed / 2**20:,.1f} MiB"
    )
    if args.tutorial:
        tutorial()


if __name__ == "__main__":
    main()
