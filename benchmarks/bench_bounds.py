"""What taking one part of a run away would buy: the bounds in docs/performance.md ("Bounds").

::

    python benchmarks/bench_bounds.py [--repeat 9]

Each experiment replaces one part of nkisim in this process only (the ``affine_range`` loop tracker, the
matmul's semantics, the allocator's next fit) and times (a) or (d) of ``bench_core.py`` with and without it,
in CPU ms, the minimum of ``--repeat`` runs after a warm-up. The replaced parts change timelines or drop
checks: these are measurements of where the time goes, never a way to run kernels. It also times (a)'s
memory pattern in plain numpy: the add into a tile of a rotating SBUF and the store, the add computed
straight into the output block, and the numpy tile loop.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from typing import Any

import numpy as np
from bench_core import add_loop, host_line, nki_tensor_add
from small_kernels import engine_mix
from timing import run_times

import nkisim
import nkisim.memory.space as space
import nkisim.sim.loops as loops
from nkisim.isa import REGISTRY
from nkisim.isa.kernels import binary_f32
from nkisim.isa.vector import BINARY_F32_CODES

#: Rounds of each experiment, the run as is and the run without the part taken in turn.
ROUNDS = 3


def best(fn: Callable[[], Any], repeat: int) -> float:
    """The fastest of ``repeat`` calls after a warm-up, in CPU ms."""
    return min(run_times(fn, repeat, time.process_time)[0]) * 1e3


@contextmanager
def replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name`` is ``value`` inside the block (``owner``: a class, or a frozen instance such as a spec)."""
    put = setattr if isinstance(owner, type) else object.__setattr__
    original = owner.__dict__[name]
    put(owner, name, value)
    try:
        yield
    finally:
        put(owner, name, original)


def lean_matmul(ops: Any, state: Any) -> None:
    ops.dst.array[...] = ops.stationary.array.T @ ops.moving.array


def first_fit(original: Callable[..., Any]) -> Callable[..., Any]:
    def allocate(self: Any, *args: Any) -> Any:
        self._cursor = self._floor
        return original(self, *args)

    return allocate


def memory_pattern(a: np.ndarray, b: np.ndarray, repeat: int) -> tuple[float, float, float]:
    """(a)'s array work in plain numpy: through a rotating SBUF, fused into the output, and the tile loop."""
    pitch = 192 * 1024 + 64  # an SBUF partition and the cache line nkisim pads it by
    sbuf = np.ones((128, pitch), np.uint8)
    code = BINARY_F32_CODES[np.add]
    blocks = [(slice(m, m + 128), slice(n, n + 512)) for m in range(0, 4096, 128) for n in range(0, 4096, 512)]

    def rotating() -> None:
        out = np.empty_like(a)
        for i, block in enumerate(blocks):
            tile = np.ndarray((128, 512), np.float32, sbuf, (i * 3 + 2) % 90 * 2048, (pitch, 4))
            binary_f32(code, tile, a[block], b[block])
            out[block] = tile

    def fused() -> None:
        out = np.empty_like(a)
        for block in blocks:
            binary_f32(code, out[block], a[block], b[block])

    return best(rotating, repeat), best(fused, repeat), best(lambda: add_loop(a, b), repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    repeat = parser.parse_args().repeat
    warnings.simplefilter("ignore")  # the lean matmul leaves tiles the sanitizer then reports
    print(host_line(time.process_time))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4096, 4096), dtype=np.float32)
    b = rng.standard_normal((4096, 4096), dtype=np.float32)
    mix = [rng.standard_normal((1024, 64)).astype(np.float32), rng.standard_normal((128, 64)).astype(np.float32)]
    runs: dict[str, Callable[[], Any]] = {
        "(a) full": lambda: nkisim.run(nki_tensor_add, [a, b]),
        "(a) shapes-only": lambda: nkisim.profile(nki_tensor_add, [(a.shape, a.dtype)] * 2),
        "(d) full": lambda: nkisim.run(engine_mix, mix),
        "(d) shapes-only": lambda: nkisim.profile(engine_mix, [(x.shape, x.dtype) for x in mix]),
    }
    no_tracker = lambda: replaced(loops.LoopTracker, "access", lambda *args: None)  # noqa: E731
    experiments: list[tuple[str, str, Callable[[], AbstractContextManager[Any]]]] = [
        ("(a) full", "without the loop tracker", no_tracker),
        ("(a) shapes-only", "without the loop tracker", no_tracker),
        (
            "(d) full",
            "matmul cut to stationary.T @ moving",
            lambda: replaced(REGISTRY["nc_matmul"], "semantics", lean_matmul),
        ),
        (
            "(d) full",
            "first fit (other addresses)",
            lambda: replaced(space.OnChipMemory, "allocate", first_fit(space.OnChipMemory.allocate)),
        ),
    ]
    for run in runs:
        kernel, inputs = (nki_tensor_add, [a, b]) if run.startswith("(a)") else (engine_mix, mix)
        if run.endswith("full"):
            off = partial(nkisim.run, kernel, inputs, check="off")
        else:
            off = partial(nkisim.profile, kernel, [(x.shape, x.dtype) for x in inputs], check="off")
        experiments.append((run, 'check="off"', partial(nullcontext, off)))
    print(f"{'run':<18}{'experiment':<40}{'as is ms':>10}{'without ms':>12}")
    for run, label, patch in experiments:
        as_is, without = [], []
        for _ in range(ROUNDS):  # in turn: this machine's speed drifts between runs
            as_is.append(best(runs[run], repeat))
            with patch() as other:
                without.append(best(other or runs[run], repeat))
        print(f"{run:<18}{label:<40}{min(as_is):>10.1f}{min(without):>12.1f}")
    rotating, fused, loop = memory_pattern(a, b, repeat)
    print(
        f"(a)'s array work in numpy: through a rotating SBUF {rotating:.1f} ms, fused into the output "
        f"{fused:.1f} ms, the tile loop {loop:.1f} ms"
    )


if __name__ == "__main__":
    main()
