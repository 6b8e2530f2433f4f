"""``python -m nkisim sweep FILE:KERNEL --param NAME=V1,V2 --target trn1,trn2 --shapes ...``."""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from nkisim.sweeps.runner import sweep


def add_sweep_command(commands: Any, generations: list[str]) -> None:
    """Register the ``sweep`` subcommand on an argparse subparsers object."""
    cmd = commands.add_parser(
        "sweep",
        help="simulate a kernel over parameter values and generations, and report the fastest",
        description="Sweep a kernel (an @nki.jit kernel taking the parameters as keyword arguments, or a "
        "factory function returning the kernel) over every combination of --param values on each --target.",
    )
    cmd.add_argument("kernel", help="path/to/file.py:function")
    cmd.add_argument("--param", action="append", default=[], help="NAME=V1,V2,... (repeat for more parameters)")
    cmd.add_argument("--target", default=None, help=f"comma-separated generations ({', '.join(generations)})")
    cmd.add_argument("--shapes", nargs="*", default=[], help="inputs by shape and dtype (timing only), 1024x1024:bf16")
    cmd.add_argument("--inputs", nargs="*", default=[], help="input arrays (.npy/.npz), before the --shapes ones")
    cmd.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    cmd.add_argument("--workers", type=int, default=1, help="run on a pool of this many processes")
    cmd.add_argument("--scheduler", default=None, help="address of a Dask scheduler to run on (needs nkisim[cluster])")
    cmd.add_argument("--results", default=None, help="JSON-lines file of records; points already in it are skipped")
    cmd.add_argument("--csv", default=None, help="write every record to this CSV file")
    cmd.add_argument("--plot", default=None, help="write an HTML chart of time against each parameter")
    bar = cmd.add_mutually_exclusive_group()
    bar.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    bar.add_argument("--no-progress", action="store_true", help="no progress bar")


def parse_param(text: str) -> tuple[str, list[Any]]:
    """``tile=128,256`` -> ("tile", [128, 256]); values are Python literals where they parse, else strings."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip() or not values.strip():
        raise ValueError(f"--param {text!r} is not like NAME=V1,V2")
    return name.strip(), [_literal(v.strip()) for v in values.split(",")]


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


@contextlib.contextmanager
def _executor(workers: int, scheduler: str | None) -> Iterator[Any]:
    if scheduler:
        try:
            from distributed import Client
        except ModuleNotFoundError as exc:
            raise ImportError("--scheduler needs Dask distributed: pip install 'nkisim[cluster]'") from exc
        with Client(scheduler) as client:
            yield client
    elif workers > 1:
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            yield pool
    else:
        yield None


def sweep_command(
    args: argparse.Namespace, load: Callable[[str], Any], inputs: Callable[[argparse.Namespace], Any]
) -> int:
    """Run the ``sweep`` subcommand; ``load`` finds the kernel of FILE:function, ``inputs`` builds the inputs.

    Raises:
        ValueError: a malformed ``--param`` or ``--workers``.
    """
    if args.workers < 1:
        raise ValueError(f"--workers {args.workers} must be at least 1")
    params = dict(parse_param(p) for p in args.param) or None
    targets = [t.strip() for t in args.target.split(",")] if args.target else None
    kernel = load(args.kernel)
    with _executor(args.workers, args.scheduler) as executor:
        table = sweep(
            kernel,
            inputs(args),
            params=params,
            targets=targets,
            executor=executor,
            progress=True if args.progress else (False if args.no_progress else None),
            results=args.results,
        )
    print(table.summary())
    for record in table.failures[:5]:
        print(f"  failed {record.target} {record.params}: {record.error}")
    if args.csv:
        table.to_csv(args.csv)
        print(f"records written to {args.csv}")
    if args.plot:
        table.plot(args.plot)
        print(f"chart written to {args.plot}")
    return 0 if any(r.ok for r in table) else 1
