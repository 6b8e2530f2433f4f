"""The narrow float conversions of ``nkisim.memory.narrow_floats``: every float32 against ml_dtypes, and their speed.

::

    python benchmarks/check_float_tables.py [--types float8_e4m3fn,float8_e5m2] [--sample]

For each one-byte float type and bfloat16 it converts all 2^32 float32 bit patterns (``--sample``: every
257th) with :func:`nkisim.memory.narrow_floats.narrow` (:func:`~nkisim.memory.narrow_floats.to_bfloat16`) and
with ml_dtypes, and prints how many results
differ (0 is the claim of the module), then times both directions on a 128 x 512 tile laid
out as an SBUF view (rows 192 KiB apart): ml_dtypes' ``astype`` against nkisim's; then float16 and
bfloat16 to float32 on such a tile, with adjacent elements and with a step of two. Last, the
CPU time of ``nkisim.run`` on the 1024^3 tiled matmul example (``matmul_tiled``, 128 instructions)
with float8_e4m3 inputs, next to bfloat16. About 40 s a type for the whole check on a 2-core machine.
"""

from __future__ import annotations

import argparse
import time
import timeit

import ml_dtypes
import numpy as np
from tqdm import tqdm

import nkisim
from nkisim.examples.matmul import matmul_tiled
from nkisim.memory.narrow_floats import BYTE_FLOATS, narrow, to_bfloat16, widen

CHUNK = 1 << 24
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def convert(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """nkisim's float32 to ``dtype`` conversion."""
    return to_bfloat16(values) if dtype == BFLOAT16 else narrow(values, dtype)


def mismatches(dtype: np.dtype, step: int) -> int:
    """Float32 bit patterns (every ``step``-th) whose conversion differs from ml_dtypes'."""
    bad = 0
    for start in tqdm(range(0, 1 << 32, CHUNK), desc=str(dtype), unit="chunk", leave=False):
        bits = np.arange(start, start + CHUNK, step, dtype=np.uint64).astype(np.uint32)
        values = bits.view(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            expected = values.astype(dtype).view(np.uint8)
        bad += int(np.count_nonzero(convert(values, dtype).view(np.uint8) != expected))
    return bad


def speed(dtype: np.dtype) -> str:
    """Microseconds per 128 x 512 tile, each direction, ml_dtypes vs nkisim."""
    memory = np.zeros(128 * 196608, np.uint8)
    tile = np.ndarray((128, 512), dtype, memory, 4096, (196608, 1))
    values = np.random.default_rng(0).standard_normal((128, 512)).astype(np.float32)
    tile[...] = values.astype(dtype)
    widen(tile), convert(values, dtype)  # compile
    with np.errstate(over="ignore", invalid="ignore"):
        times = [
            min(timeit.repeat(fn, number=20, repeat=5)) / 20 * 1e6
            for fn in (
                lambda: tile.astype(np.float32),
                lambda: widen(tile),
                lambda: values.astype(dtype),
                lambda: convert(values, dtype),
            )
        ]
    return (
        f"to float32 {times[0]:7.1f} -> {times[1]:5.1f} us ({times[0] / times[1]:4.1f}x)   "
        f"from float32 {times[2]:7.1f} -> {times[3]:5.1f} us ({times[2] / times[3]:4.1f}x)"
    )


def two_byte_speed(dtype: np.dtype, step: int) -> str:
    """Microseconds to read a 128 x 512 SBUF tile of ``dtype`` (elements ``step`` apart) as float32."""
    memory = np.random.default_rng(0).integers(0, 256, size=128 * 196608, dtype=np.uint8)
    tile = np.ndarray((128, 512), dtype, memory, 4096, (196608, step * dtype.itemsize))
    widen(tile)  # compile
    slow, fast = (
        min(timeit.repeat(fn, number=20, repeat=5)) / 20 * 1e6
        for fn in (lambda: tile.astype(np.float32), lambda: widen(tile))
    )
    return f"{dtype.name:<15} step {step}: to float32 {slow:7.1f} -> {fast:5.1f} us ({slow / fast:4.1f}x)"


def kernel_ms(dtype: np.dtype, repeat: int = 5) -> float:
    """Median CPU milliseconds of ``nkisim.run(matmul_tiled)`` on 1024 x 1024 inputs of ``dtype``, after a warm-up."""
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1024, 1024)).astype(dtype) for _ in range(2)]
    nkisim.run(matmul_tiled, inputs)
    times = []
    for _ in range(repeat):
        began = time.process_time()
        nkisim.run(matmul_tiled, inputs)
        times.append(time.process_time() - began)
    return sorted(times)[repeat // 2] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [*sorted(str(t) for t in BYTE_FLOATS), "bfloat16"]
    parser.add_argument("--types", default=",".join(names), help="comma-separated; default: " + ", ".join(names))
    parser.add_argument("--sample", action="store_true", help="every 257th float32 instead of all")
    args = parser.parse_args()
    for name in args.types.split(","):
        dtype = np.dtype(getattr(ml_dtypes, name))
        began = time.perf_counter()
        bad = mismatches(dtype, 257 if args.sample else 1)
        checked = "every 257th float32" if args.sample else "all 2^32 float32"
        print(f"{name:<15} {bad} differences from ml_dtypes over {checked} ({time.perf_counter() - began:.0f} s)")
        print(f"{'':<15} 128x512 SBUF tile: {speed(dtype)}")
    for dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
        for step in (1, 2):
            print(two_byte_speed(dtype, step))
    fp8, bf16 = (kernel_ms(np.dtype(t)) for t in (ml_dtypes.float8_e4m3, ml_dtypes.bfloat16))
    print(f"matmul_tiled 1024^3, CPU time of nkisim.run: float8_e4m3 {fp8:.1f} ms, bfloat16 {bf16:.1f} ms")


if __name__ == "__main__":
    main()
