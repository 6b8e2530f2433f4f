"""Command line: ``python -m nkisim demo`` runs the demo kernels and prints their check and profile."""

from __future__ import annotations

import argparse
import sys

import numpy as np

import nkisim
from nkisim.hw import generation_names


def demo(target: str | None, trace: str | None) -> int:
    """Run the tiled tensor add and a * b * (a + b) on a modelled NeuronCore."""
    from ml_dtypes import bfloat16

    from nkisim.examples.tensor_add import mul_add_mul, nki_tensor_add

    rng = np.random.default_rng(0)
    ok = True
    for dtype in (np.float32, bfloat16):
        a = rng.standard_normal((256, 1024)).astype(dtype)
        b = rng.standard_normal((256, 1024)).astype(dtype)
        result = nkisim.run(nki_tensor_add, [a, b], target=target)
        expected = (a.astype(np.float32) + b.astype(np.float32)).astype(dtype)
        exact = bool(np.array_equal(result.outputs, expected))
        ok &= exact
        print(f"nki_tensor_add {np.dtype(dtype).name}[256, 1024]: {'exact match with numpy' if exact else 'MISMATCH'}")
        print(result.profile.summary(), end="\n\n")
        if trace and dtype is np.float32:
            result.profile.to_perfetto(trace)
            print(f"Perfetto trace written to {trace} (open it at https://ui.perfetto.dev)\n")
    a = rng.standard_normal((256, 1024), dtype=np.float32)
    b = rng.standard_normal((256, 1024), dtype=np.float32)
    composed = mul_add_mul(a, b)
    exact = bool(np.array_equal(composed, a * b * (a + b)))
    ok &= exact
    print(f"a * b * (a + b) with the simulated add: {'exact match with numpy' if exact else 'MISMATCH'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nkisim", description="nkisim: simulate NKI kernels on a CPU")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_cmd = commands.add_parser("demo", help="run the demo kernels and print their check and profile")
    demo_cmd.add_argument("--target", choices=generation_names(), default=None, help="hardware generation")
    demo_cmd.add_argument("--trace", default="nkisim_demo.perfetto.json", help="Perfetto trace path ('' for none)")
    commands.add_parser("isa-doc", help="print the instruction table of docs/isa.md")
    args = parser.parse_args(argv)
    if args.command == "isa-doc":
        from nkisim.isa.catalog import isa_markdown

        print(isa_markdown(), end="")
        return 0
    return demo(args.target, args.trace or None)


if __name__ == "__main__":
    sys.exit(main())
