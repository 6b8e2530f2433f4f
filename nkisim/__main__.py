"""Command line.

``python -m nkisim demo`` runs the demo kernels and prints their check and profile.
``python -m nkisim run kernel.py:function --inputs a.npy b.npy`` runs a kernel file as
written for NKI (``import nki``, through :func:`nkisim.install_nki_alias`) and prints
its outputs' shapes and dtypes and its profile.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import math
import os
import runpy
import sys
import time
from pathlib import Path as _Path
from typing import Any

import numpy as np

import nkisim
from nkisim.compat.alias import is_installed
from nkisim.frontend.context import progress_hook
from nkisim.frontend.simulate import run_capturing, written_inputs
from nkisim.hw import generation_names, load_target
from nkisim.memory import dtype_name, to_dtype
from nkisim.sim.machine import DEFAULT_MAX_INSTRUCTIONS
from nkisim.sweeps.cli import add_sweep_command, sweep_command

#: ``python -m nkisim demo <model>``: the other machine models' demos, by module.
_MODEL_DEMOS = {"gpsimd": "nkisim.gpsimd.demo", "tpc": "nkisim.tpc.demo"}


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


# -- run: a kernel file written for NKI ------------------------------------------------


class UsageError(Exception):
    """A bad command line argument (reported without a traceback)."""


def load_kernel(spec: str) -> Any:
    """The kernel ``function`` of ``path/to/kernel.py:function``, loaded with the ``nki`` alias active.

    Without ``:function`` the file must define exactly one ``@nki.jit`` kernel.
    """
    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        path, name = spec, ""
    if not os.path.isfile(path):
        raise UsageError(f"no kernel file {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    try:
        namespace = runpy.run_path(path, run_name="__nkisim_kernel__")
    except SyntaxError as exc:
        where = f"{os.path.basename(exc.filename or path)}:{exc.lineno}"
        raise UsageError(f"{where}: syntax error in the kernel file: {exc.msg}") from None
    except (ImportError, KeyboardInterrupt, nkisim.KernelError):
        raise
    except Exception as exc:
        raise UsageError(f"{_where(exc)}loading {path} failed: {type(exc).__name__}: {exc}") from None
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    if name:
        if not callable(namespace.get(name)):
            raise UsageError(f"{path} defines no function {name!r}")
        return namespace[name]
    kernels = [v for v in namespace.values() if isinstance(v, nkisim.Kernel)]
    if len(kernels) != 1:
        raise UsageError(f"{path} defines {len(kernels)} @nki.jit kernels; name one as {path}:function")
    return kernels[0]


def _dtype(name: str) -> np.dtype:
    try:
        return to_dtype(name)
    except TypeError as exc:
        raise UsageError(str(exc)) from None


def read_inputs(files: list[str], shapes: list[str], seed: int, capacity: int | None = None) -> list[np.ndarray]:
    """Arrays from ``.npy``/``.npz`` files (``file.npy:bfloat16`` casts), then random ones for ``128x512:float32``.

    ``capacity`` bounds the bytes of each random input (the target's HBM).
    """
    arrays: list[np.ndarray] = []
    for item in files:
        path, dtype = (item, "") if os.path.isfile(item) else item.rsplit(":", 1) if ":" in item else (item, "")
        if not os.path.isfile(path):
            raise UsageError(f"no input file {path!r}")
        try:
            loaded = np.load(path)
            values = [loaded[k] for k in loaded.files] if isinstance(loaded, np.lib.npyio.NpzFile) else [loaded]
        except (OSError, ValueError, EOFError) as exc:
            raise UsageError(f"cannot read input file {path!r} as .npy or .npz: {exc}") from None
        arrays += [v.astype(_dtype(dtype)) if dtype else v for v in values]
    rng = np.random.default_rng(seed)
    for spec in read_specs(shapes, capacity):
        shape, dt = spec.shape, np.dtype(spec.dtype)
        if dt.kind in "iub":
            arrays.append(rng.integers(0 if dt.kind in "ub" else -8, 9, size=shape).astype(dt))
        else:
            arrays.append(rng.standard_normal(shape).astype(dt))
    return arrays


def read_specs(shapes: list[str], capacity: int | None = None) -> list[nkisim.ArraySpec]:
    """``128x512:bfloat16`` items as (shape, dtype) inputs; a timing-only profile runs on these alone.

    Every dim is a positive integer; with ``capacity``, an input may take at most that many bytes.
    """
    specs = []
    for item in shapes:
        dims, _, dtype = item.partition(":")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise UsageError(f"--shapes {item!r} is not like 128x512:float32") from None
        if any(d <= 0 for d in shape):
            raise UsageError(f"--shapes {item!r}: every dim must be a positive integer")
        dt = _dtype(dtype or "float32")
        nbytes = math.prod(shape) * dt.itemsize
        if capacity is not None and nbytes > capacity:
            raise UsageError(
                f"--shapes {item!r} needs {nbytes:,} bytes, more than the target's {capacity:,} bytes of HBM"
            )
        specs.append(nkisim.ArraySpec(shape, dt))
    return specs


def _where(exc: BaseException) -> str:
    """``file:line: `` of the innermost frame of the traceback outside nkisim, or nothing."""
    tb, found = exc.__traceback__, ""
    package = os.path.dirname(os.path.abspath(nkisim.__file__)) + os.sep
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith(package) and not filename.startswith("<frozen"):
            found = f"{os.path.basename(filename)}:{tb.tb_lineno}: "
        tb = tb.tb_next
    return found


def _capacity(target: str | None) -> int:
    try:
        return load_target(target).hbm.capacity_bytes
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None


def _keyword_args(items: list[str]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--arg {item!r} is not NAME=VALUE")
        try:
            kwargs[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            kwargs[key] = text
    return kwargs


def _named_outputs(outputs: Any) -> list[tuple[str, Any]]:
    if isinstance(outputs, tuple):
        return [(f"output_{i}", o) for i, o in enumerate(outputs)]
    if isinstance(outputs, dict):
        return [(f"output_{k}", o) for k, o in outputs.items()]
    return [] if outputs is None else [("output", outputs)]


def run_file(args: argparse.Namespace) -> int:
    """``python -m nkisim run``: load the file with the alias, run the kernel, report and save."""
    installed_here = not is_installed()
    nkisim.install_nki_alias()
    try:
        kernel = load_kernel(args.kernel)
        inputs = read_inputs(args.inputs, args.shapes, args.seed, _capacity(args.target))
        kwargs = _keyword_args(args.arg)
        result, tensors = run_capturing(kernel, tuple(inputs), kwargs, args.target, **_run_options(args))
    finally:
        if installed_here:
            nkisim.uninstall_nki_alias()
    func = kernel.func if isinstance(kernel, nkisim.Kernel) else kernel
    try:
        passed = dict(inspect.signature(func).bind(*inputs, **kwargs).arguments)
    except TypeError:
        passed = {}
    named = _named_outputs(result.outputs)
    named += [(f"input_{k}", v) for k, (_, v) in written_inputs(passed, tensors).items()]
    print(f"{getattr(func, '__qualname__', args.kernel)} on {result.target}:")
    if not named:
        print("  the kernel returned nothing and wrote no input")
    for name, value in named:
        if isinstance(value, np.ndarray):
            print(f"  {name}: {dtype_name(value.dtype)}[{', '.join(map(str, value.shape))}]")
        else:
            print(f"  {name}: {value!r}")
    print()
    print(result.profile.summary())
    if args.trace:
        result.profile.to_perfetto(args.trace)
        print(f"Perfetto trace written to {args.trace} (open it at https://ui.perfetto.dev)")
    if args.save:
        _save(args.save, named)
    return 0


def _save(path: str, named: list[tuple[str, Any]]) -> None:
    """Save arrays to ``.npz``; bfloat16 and fp8 (which ``np.load`` cannot name) as their exact float32 values."""
    arrays, widened = {}, []
    for name, value in named:
        if not isinstance(value, np.ndarray):
            continue
        if value.dtype.kind == "V":  # ml_dtypes types
            widened.append(f"{name} ({dtype_name(value.dtype)})")
            value = value.astype(np.float32)
        arrays[name] = value
    np.savez(path, **arrays)
    note = f"; saved as float32: {', '.join(widened)}" if widened else ""
    print(f"outputs saved to {path}{note}")


def _add_run_command(commands: Any) -> None:
    run_cmd = commands.add_parser(
        "run",
        help="run a kernel file written for NKI ('import nki') and print its outputs and profile",
        description="Run a kernel file unchanged: 'import nki' is aliased to nkisim while it loads and runs "
        "(refused if a real NKI is installed).",
    )
    run_cmd.add_argument("kernel", help="path/to/kernel.py:function (':function' may be left out for a sole kernel)")
    run_cmd.add_argument("--inputs", nargs="*", default=[], help="input arrays: .npy/.npz files; a.npy:bfloat16 casts")
    run_cmd.add_argument("--shapes", nargs="*", default=[], help="random inputs after --inputs, like 128x512:float32")
    run_cmd.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    run_cmd.add_argument("--arg", action="append", default=[], help="a keyword argument NAME=VALUE (Python literal)")
    run_cmd.add_argument("--target", default=None, help=f"hardware generation ({', '.join(generation_names())})")
    run_cmd.add_argument("--trace", default=None, help="write a Perfetto trace here")
    run_cmd.add_argument("--save", default=None, help="save outputs (and inputs the kernel wrote) to this .npz")
    _add_run_options(run_cmd)


def _add_run_options(cmd: Any) -> None:
    """The sanitizer and budget options of ``run`` and ``profile``."""
    cmd.add_argument(
        "--check",
        choices=("strict", "warn", "off"),
        default=None,
        help="the sanitizer (docs/checks.md): strict stops at the first error, warn reports (default), off",
    )
    cmd.add_argument(
        "--affine-order",
        choices=("in-order", "reversed", "shuffled"),
        default="in-order",
        help="the order affine_range iterations run in, to expose order dependence (docs/checks.md)",
    )
    cmd.add_argument(
        "--max-instructions",
        type=_budget_count,
        default=DEFAULT_MAX_INSTRUCTIONS,
        help=f"stop after this many instructions per core, 0 for no limit (default {DEFAULT_MAX_INSTRUCTIONS:,})",
    )
    cmd.add_argument("--timeout", type=float, default=None, help="stop after this many seconds of wall time")
    cmd.add_argument("--traceback", action="store_true", help="show the Python traceback of an error")


def _budget_count(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative (0 means no limit)")
    return value or None


def _run_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout {args.timeout} must be a positive number of seconds")
    return {
        "check": args.check,
        "max_instructions": args.max_instructions,
        "timeout": args.timeout,
        "affine_order": args.affine_order,
    }


class _Progress:
    """A one-line progress report on stderr for long simulations (instructions so far and their rate)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.shown = False

    def __call__(self, count: int) -> None:
        elapsed = time.perf_counter() - self.start
        if elapsed < 1.0:
            return
        self.shown = True
        print(
            f"\r  simulating: {count:,} instructions, {elapsed:.1f} s ({count / elapsed:,.0f}/s)",
            end="",
            file=sys.stderr,
            flush=True,
        )

    def done(self) -> None:
        if self.shown:
            print(file=sys.stderr)


def profile_file(args: argparse.Namespace) -> int:
    """``python -m nkisim profile``: the timeline of a kernel on shapes (no values) or on input files."""
    installed_here = not is_installed()
    nkisim.install_nki_alias()
    progress = _Progress()
    try:
        kernel = load_kernel(args.kernel)
        inputs: list[Any] = read_inputs(args.inputs, [], args.seed) + read_specs(args.shapes, _capacity(args.target))
        kwargs = _keyword_args(args.arg)
        func = kernel.func if isinstance(kernel, nkisim.Kernel) else kernel
        try:
            bound = inspect.signature(func).bind(*inputs, **kwargs).arguments
        except TypeError as exc:
            raise UsageError(f"the inputs do not fit {func.__qualname__}: {exc}") from None
        with progress_hook(progress):
            profile = nkisim.profile(kernel, dict(bound), target=args.target, **_run_options(args))
    finally:
        progress.done()
        if installed_here:
            nkisim.uninstall_nki_alias()
    print(profile.table(lines=args.lines))
    if args.html:
        profile.to_html(args.html)
        print(f"HTML report written to {args.html}")
    if args.trace:
        profile.to_perfetto(args.trace)
        print(f"Perfetto trace written to {args.trace} (open it at https://ui.perfetto.dev)")
    return 0


def _add_profile_command(commands: Any) -> None:
    cmd = commands.add_parser(
        "profile",
        help="profile a kernel file on shapes alone (no values computed) and print where the time goes",
        description="Profile a kernel: with --shapes only, the timing model runs without computing values.",
    )
    cmd.add_argument("kernel", help="path/to/kernel.py:function")
    cmd.add_argument("--shapes", nargs="*", default=[], help="inputs by shape and dtype, like 4096x8192:bfloat16")
    cmd.add_argument("--inputs", nargs="*", default=[], help="input arrays (.npy/.npz), before the --shapes ones")
    cmd.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    cmd.add_argument("--arg", action="append", default=[], help="a keyword argument NAME=VALUE (Python literal)")
    cmd.add_argument("--target", default=None, help=f"hardware generation ({', '.join(generation_names())})")
    cmd.add_argument("--lines", type=int, default=10, help="kernel lines to list (default 10)")
    cmd.add_argument("--html", default=None, help="write an HTML report with an SVG timeline here")
    cmd.add_argument("--trace", default=None, help="write a Perfetto trace here")
    _add_run_options(cmd)


def sweep_file(args: argparse.Namespace) -> int:
    """``python -m nkisim sweep``: a kernel over parameter values and generations (see docs/sweeps.md)."""

    def inputs(a: argparse.Namespace) -> list[Any]:
        return read_inputs(a.inputs, [], a.seed) + read_specs(a.shapes)

    try:
        return sweep_command(args, load_kernel, inputs)
    except ValueError as exc:  # a malformed --param or --workers
        raise UsageError(str(exc)) from None


_COMMANDS = {"run": run_file, "profile": profile_file, "sweep": sweep_file}


def _run_command(args: argparse.Namespace) -> int:
    try:
        return _COMMANDS[args.command](args)
    except (UsageError, ImportError) as exc:
        if getattr(args, "traceback", False):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except nkisim.KernelError as exc:
        if getattr(args, "traceback", False):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1


def bench(repeat: int, tutorial: bool, clock: str) -> int:
    """Run ``benchmarks/bench_core.py`` of the source checkout this package was loaded from."""
    script = _Path(nkisim.__file__).resolve().parent.parent / "benchmarks" / "bench_core.py"
    if not script.is_file():
        print(f"error: {script} not found; python -m nkisim bench runs from a source checkout", file=sys.stderr)
        return 2
    argv = [str(script), "--repeat", str(repeat), "--clock", clock, *(["--tutorial"] if tutorial else [])]
    saved = sys.argv
    sys.argv = argv
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nkisim", description="nkisim: simulate NKI kernels on a CPU")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_cmd = commands.add_parser("demo", help="run the demo kernels and print their check and profile")
    demo_cmd.add_argument(
        "model", nargs="?", choices=("nki", *_MODEL_DEMOS), default="nki", help="which machine model (default: nki)"
    )
    demo_cmd.add_argument("--target", choices=generation_names(), default=None, help="hardware generation")
    demo_cmd.add_argument("--trace", default="nkisim_demo.perfetto.json", help="Perfetto trace path ('' for none)")
    commands.add_parser("isa-doc", help="print the instruction table of docs/isa.md")
    bench_cmd = commands.add_parser(
        "bench", help="print the speed figures of benchmarks/bench_core.py (needs a source checkout)"
    )
    bench_cmd.add_argument("--repeat", type=int, default=5, help="timed runs per figure (default: 5)")
    bench_cmd.add_argument("--tutorial", action="store_true", help="also profile the 4096x8192x8192 tutorial matmul")
    bench_cmd.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="wall time or process CPU time")
    _add_run_command(commands)
    _add_profile_command(commands)
    add_sweep_command(commands, generation_names())
    args = parser.parse_args(argv)
    if args.command in _COMMANDS:
        return _run_command(args)
    if args.command == "bench":
        return bench(args.repeat, args.tutorial, args.clock)
    if args.command == "isa-doc":
        from nkisim.isa.catalog import isa_markdown

        print(isa_markdown(), end="")
        return 0
    if args.model in _MODEL_DEMOS:
        return importlib.import_module(_MODEL_DEMOS[args.model]).main()
    return demo(args.target, args.trace or None)


if __name__ == "__main__":
    sys.exit(main())
