"""A fingerprint of what nkisim computes: to show that a change to the simulator changed nothing.

    python benchmarks/fingerprint.py [--verbose]

Runs the example kernels of ``nkisim.examples`` and the small-tile kernels of
``benchmarks/small_kernels.py`` on trn1, trn2 and trn3, in full runs and shapes-only
profiles, and hashes the output bytes, every timeline record (opcode, track, start,
end, busy, producer, wait, bytes, flops, operands) and the sanitizer's findings. An
error a kernel raises on a target is hashed by its message. Prints one digest per
case and a total; equal totals before and after a change mean identical results.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import nkisim
from nkisim.errors import KernelError
from nkisim.examples import matmul as mm
from nkisim.examples.attention import causal_attention
from nkisim.examples.cumsum import cumsum_rows
from nkisim.examples.layernorm import layernorm
from nkisim.examples.mamba import selective_scan
from nkisim.examples.pooling import avg_pool2d
from nkisim.examples.rmsnorm import rmsnorm
from nkisim.examples.softmax import softmax_rows
from nkisim.examples.tensor_add import nki_tensor_add
from nkisim.examples.transpose import transpose2d

sys.path.insert(0, str(Path(__file__).resolve().parent))
from small_kernels import engine_mix, vector_chain

TARGETS = ("trn1", "trn2", "trn3")


def _cases() -> list[tuple[str, Any, Callable[[], list[Any] | dict[str, Any]]]]:
    """(name, kernel, inputs) of every case; inputs are made fresh from fixed seeds."""

    def rng(seed: int) -> np.random.Generator:
        return np.random.default_rng(seed)

    def normal(seed: int, *shape: int, dtype: Any = np.float32) -> np.ndarray:
        return rng(seed).standard_normal(shape).astype(dtype)

    bf16 = ml_dtypes.bfloat16
    cases: list[tuple[str, Any, Callable[[], Any]]] = [
        ("tensor_add f32", nki_tensor_add, lambda: [normal(1, 256, 1024), normal(2, 256, 1024)]),
        (
            "tensor_add bf16",
            nki_tensor_add,
            lambda: [normal(3, 256, 1024, dtype=bf16), normal(4, 256, 1024, dtype=bf16)],
        ),
        ("transpose bf16", transpose2d, lambda: [normal(5, 256, 384, dtype=bf16)]),
        ("transpose f32", transpose2d, lambda: [normal(6, 128, 256)]),
        ("avg_pool2d", avg_pool2d, lambda: {"x": normal(7, 64, 16, 24), "pool": 2}),
        ("rmsnorm", rmsnorm, lambda: [normal(8, 256, 300), normal(9, 300)]),
        ("softmax bf16", softmax_rows, lambda: [normal(10, 256, 513, dtype=bf16)]),
        ("layernorm", layernorm, lambda: [normal(11, 256, 1300), normal(12, 1300), normal(13, 1300)]),
        ("cumsum", cumsum_rows, lambda: [normal(14, 50, 600)]),
        ("attention", causal_attention, lambda: [normal(15, 64, 256), normal(16, 64, 256), normal(17, 256, 64)]),
        (
            "selective_scan",
            selective_scan,
            lambda: [
                np.abs(normal(18, 256, 300)) * np.float32(0.1),
                normal(19, 256, 300),
                -np.abs(normal(20, 256, 3)),
                normal(21, 3, 300),
                normal(22, 3, 300),
            ],
        ),
        ("vector_chain", vector_chain, lambda: {"a": normal(23, 128, 64), "b": normal(24, 128, 64), "steps": 300}),
        ("engine_mix", engine_mix, lambda: {"a": normal(25, 512, 64), "w": normal(26, 128, 64), "steps": 60}),
    ]
    for kernel, shape, kwargs in (
        (mm.matmul_basic, (100, 64, 300), {}),
        (mm.matmul_tiled, (256, 256, 1024), {}),
        (mm.matmul_hoisted, (256, 256, 1024), {}),
        (mm.matmul_blocked, (256, 256, 1024), {"blocks_n": 2}),
        (mm.matmul_optimized, (512, 256, 1024), {"blocks_m": 2, "blocks_n": 2, "blocks_k": 2}),
    ):
        for dtype in (np.float32, bf16):
            k, m, n = shape

            def make(k: int = k, m: int = m, n: int = n, dtype: Any = dtype, kwargs: dict = kwargs) -> dict[str, Any]:
                return {"lhsT": normal(k + m, k, m, dtype=dtype), "rhs": normal(k + n, k, n, dtype=dtype), **kwargs}

            cases.append((f"{kernel.__name__} {np.dtype(dtype).name}", kernel, make))
    return cases


def _timeline(digest: Any, profile: Any) -> None:
    tl = profile._tl
    columns = (tl.opcode, tl.track, tl.start_ns, tl.end_ns, tl.busy_ns, tl.producer, tl.pred, tl.wait_ns)
    for row in zip(*columns, tl.bytes, tl.flops, tl.args, map(str, tl.source), strict=True):
        digest.update(repr(row).encode())
    for finding in profile.diagnostics:
        digest.update(repr(finding).encode())


def fingerprint(name: str, kernel: Any, make: Callable[[], Any], target: str) -> str:
    """The digest of one case on one target: a full run, then a shapes-only profile."""
    digest = hashlib.sha256()
    inputs = make()
    try:
        result = nkisim.run(kernel, inputs, target=target)
        for out in result.outputs if isinstance(result.outputs, tuple) else (result.outputs,):
            array = np.ascontiguousarray(out)
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(array.tobytes())
        _timeline(digest, result.profile)
        shapes = (
            {k: ((v.shape, v.dtype) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
            if isinstance(inputs, dict)
            else [(v.shape, v.dtype) for v in inputs]
        )
        _timeline(digest, nkisim.profile(kernel, shapes, target=target))
    except KernelError as exc:
        digest.update(f"{type(exc).__name__}: {exc}".encode())
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print each case's digest")
    args = parser.parse_args()
    total = hashlib.sha256()
    for name, kernel, make in _cases():
        for target in TARGETS:
            value = fingerprint(name, kernel, make, target)
            total.update(value.encode())
            if args.verbose:
                print(f"{name:<28}{target:<6}{value}")
    print(f"fingerprint {total.hexdigest()[:32]}")


if __name__ == "__main__":
    main()
