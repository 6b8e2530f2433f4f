"""Checks of what the public entry points are given, and of what a kernel returns.

Plain API misuse (a kernel that is not callable, inputs that are not a sequence or a
mapping, a budget that is not a number) is a ``TypeError`` or ``ValueError`` naming the
argument. What concerns the kernel itself is a :class:`~nkisim.errors.KernelError` at
the kernel's line.
"""

from __future__ import annotations

import ast
import inspect
import math
import os
import sys
import textwrap
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from nkisim.errors import ExecutionError, KernelError, MemoryKindError, SourceLoc
from nkisim.hw import HwConfig
from nkisim.memory import Tensor, to_dtype
from nkisim.memory.space import describe

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_EXAMPLES_DIR = _PACKAGE_DIR + "examples" + os.sep

#: The values ``check=`` takes.
CHECK_MODES = ("strict", "warn", "off")


def check_kernel(entry: str, kernel: object) -> None:
    """``kernel`` is an ``@nki.jit`` kernel or a function."""
    if isinstance(kernel, type) or not callable(kernel):
        raise TypeError(
            f"{entry}: kernel must be an @nki.jit kernel or a kernel function, got {type(kernel).__name__} "
            f"{_short(kernel)}"
        )


def check_inputs(entry: str, inputs: object) -> None:
    """``inputs`` is a sequence of positional arguments, a mapping of keyword arguments, or one array."""
    if isinstance(inputs, Mapping):
        bad = [key for key in inputs if not isinstance(key, str)]
        if bad:
            raise TypeError(f"{entry}: inputs given as a mapping must be keyed by argument name, got key {bad[0]!r}")
        for name, value in inputs.items():
            _check_input(entry, repr(name), value)
        return
    if isinstance(inputs, np.ndarray):
        return
    if isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes)):
        for index, value in enumerate(inputs):
            _check_input(entry, str(index), value)
        return
    if type(inputs).__name__ == "_Both":  # positional and keyword arguments of a kernel call
        return
    raise TypeError(
        f"{entry}: inputs must be a list or tuple of the kernel's arguments or a dict of them by name, "
        f"got {type(inputs).__name__} {_short(inputs)}"
        + (" (pass [] for a kernel without arguments)" if inputs is None else "")
    )


def check_rank_inputs(entry: str, inputs: object, ranks: object) -> None:
    """With ``ranks=N``: ``N`` a positive integer and ``inputs`` a sequence of ``N`` inputs, one per rank."""
    if isinstance(ranks, bool) or not isinstance(ranks, int):
        raise TypeError(f"{entry}: ranks must be a positive integer (or None), got {ranks!r:.60}")
    if ranks < 1:
        raise ValueError(f"{entry}: ranks must be a positive integer (or None), got {ranks}")
    if isinstance(inputs, (str, bytes, Mapping, np.ndarray)) or not isinstance(inputs, Sequence):
        raise TypeError(
            f"{entry}: with ranks={ranks}, inputs must be a list of {ranks} inputs (one list or dict of the "
            f"kernel's arguments per rank), got {type(inputs).__name__} {_short(inputs)}"
        )
    if len(inputs) != ranks:
        raise ValueError(f"{entry}: ranks={ranks} but inputs holds {len(inputs)} rank's inputs; give one per rank")
    for rank, rank_inputs in enumerate(inputs):
        check_inputs(f"{entry} (rank {rank})", rank_inputs)


def _check_input(entry: str, name: str, value: object) -> None:
    """One argument: a ``(shape, dtype)`` pair must have a shape of non-negative integers.

    Anything else may be a kernel argument (arrays, Python scalars and lists for static arguments).
    """
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], (tuple, list))
        and _names_a_dtype(value[1])
    ):
        shape = value[0]
        bad = [d for d in shape if isinstance(d, bool) or not isinstance(d, (int, np.integer))]
        if bad:
            raise TypeError(f"{entry}: input {name} {_short(value)}: a shape holds integers, got {_short(bad[0])}")
        if any(d < 0 for d in shape):
            raise ValueError(f"{entry}: input {name} {_short(value)}: the shape {tuple(shape)} has a negative size")


def _names_a_dtype(value: object) -> bool:
    """``value`` is an NKI data type (so a ``(shape, dtype)`` pair is meant); other pairs are plain arguments."""
    try:
        to_dtype(value)
    except (TypeError, ValueError):
        return False
    return True


def check_target(entry: str, target: object) -> None:
    """``target`` is None, a name or path, or an ``HwConfig`` (the name itself is checked when loaded)."""
    if target is None or isinstance(target, (str, os.PathLike, HwConfig)):
        return
    raise TypeError(
        f"{entry}: target must be a generation name such as 'trn2', the path of a .toml file or an HwConfig, "
        f"got {type(target).__name__} {_short(target)}"
    )


def check_budget(entry: str, max_instructions: object, timeout: object) -> None:
    """``max_instructions`` is a positive integer or None; ``timeout`` a positive number of seconds or None."""
    if max_instructions is not None:
        if isinstance(max_instructions, bool) or not isinstance(max_instructions, (int, np.integer)):
            raise TypeError(
                f"{entry}: max_instructions must be a positive integer or None, got "
                f"{type(max_instructions).__name__} {_short(max_instructions)}"
            )
        if max_instructions <= 0:
            raise ValueError(f"{entry}: max_instructions must be a positive integer or None, got {max_instructions}")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating)):
            raise TypeError(
                f"{entry}: timeout must be a positive number of seconds or None, got {type(timeout).__name__} "
                f"{_short(timeout)}"
            )
        if not timeout > 0 or not math.isfinite(timeout):
            raise ValueError(f"{entry}: timeout must be a positive number of seconds or None, got {timeout}")


def check_mode(entry: str, check: object) -> None:
    """``check`` is ``"strict"``, ``"warn"`` or ``"off"``."""
    if check not in CHECK_MODES:
        raise ValueError(f"{entry}: check must be one of {', '.join(map(repr, CHECK_MODES))}, got {check!r}")


def _short(value: object) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real message
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


# -- what a kernel returns --------------------------------------------------------------


def collect(returned: Any, func: Callable[..., Any]) -> Any:
    """The kernel's outputs for the caller: HBM tensors as numpy arrays of the run's own host bytes.

    Raises:
        MemoryKindError: the kernel returns an SBUF or PSUM tile (a view of on-chip memory
            that is gone when the run ends).
    """
    if isinstance(returned, Tensor):
        if returned.buffer.is_on_chip:
            raise MemoryKindError(
                f"the kernel returns {returned.buffer.value.upper()} tile {returned.name!r} "
                f"{describe(returned.shape, returned.dtype)}; on-chip memory does not outlive the kernel: "
                "copy the tile to an HBM tensor (nl.ndarray(..., buffer=nl.shared_hbm) and nisa.dma_copy) "
                "and return that",
                loc=return_location(func),
            )
        array = returned.array  # the run's own HBM bytes: nothing else refers to them
        # ... unless it is an input read in place (or a broadcast view): the caller gets bytes of its own
        return array if array.flags.writeable else array.copy()
    if isinstance(returned, (tuple, list)):
        return tuple(collect(item, func) for item in returned)
    if isinstance(returned, dict):
        return {key: collect(item, func) for key, item in returned.items()}
    return returned


def return_location(func: Callable[..., Any]) -> SourceLoc:
    """The line of ``func``'s return statement when it has one, else its ``def`` line."""
    code = func.__code__
    loc = SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)
    try:
        lines, first = inspect.getsourcelines(func)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return loc
    body = tree.body[0] if tree.body else None
    returns = [
        node for node in ast.walk(body) if body is not None if isinstance(node, ast.Return) and node.value is not None
    ]
    if len(returns) == 1:
        return SourceLoc(code.co_filename, first + returns[0].lineno - 1, code.co_name)
    return loc


# -- errors that escape the kernel -------------------------------------------------------


def translate(exc: BaseException, kernel_loc: SourceLoc) -> BaseException | None:
    """A clear replacement for an exception that escaped a kernel run, or None to let it pass.

    A ``RecursionError`` becomes a :class:`KernelError` at the deepest kernel line; any
    other exception raised inside nkisim itself (not in the kernel's code) becomes an
    :class:`ExecutionError` at the kernel line that called into nkisim.
    """
    if isinstance(exc, KernelError) or not isinstance(exc, Exception):
        return None
    frames = _frames(exc.__traceback__)
    kinds = [_kind(frame) for frame in frames]
    user = [i for i, kind in enumerate(kinds) if kind == "user"]
    where = frames[user[-1]] if user else None
    loc = (
        kernel_loc
        if where is None
        else SourceLoc(where.f_code.co_filename, _line(exc.__traceback__, where), where.f_code.co_name)
    )
    if isinstance(exc, RecursionError):
        return KernelError(
            f"the kernel recursed past Python's limit of {sys.getrecursionlimit()} frames "
            "(an endless recursion in the kernel or a helper it calls?)",
            loc=loc,
        )
    inside = [i for i, kind in enumerate(kinds) if kind == "nkisim"]
    if not inside or (user and user[-1] > inside[-1]):
        return None  # raised by the kernel's own code: the user's traceback is the right report
    return ExecutionError(f"failed inside nkisim: {type(exc).__name__}: {exc}", loc=loc)


#: Libraries whose frames belong to whoever called them.
_LIBRARIES = frozenset({"numpy", "ml_dtypes", "pydantic", "pydantic_core", "numba", "threadpoolctl", "typing"})


def _kind(frame: types.FrameType) -> str:
    """``nkisim`` (the simulator itself), ``library`` (numpy and friends) or ``user`` (the kernel's code)."""
    filename = frame.f_code.co_filename
    if filename.startswith(_PACKAGE_DIR) and not filename.startswith(_EXAMPLES_DIR):
        return "nkisim"
    module = str(frame.f_globals.get("__name__", ""))
    if module.split(".")[0] in _LIBRARIES or filename.startswith("<frozen"):
        return "library"
    return "user"


def _frames(tb: types.TracebackType | None) -> list[types.FrameType]:
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _line(tb: types.TracebackType | None, frame: types.FrameType) -> int:
    line = frame.f_lineno
    while tb is not None:
        if tb.tb_frame is frame:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


__all__ = [
    "CHECK_MODES",
    "check_budget",
    "check_inputs",
    "check_kernel",
    "check_mode",
    "check_target",
    "collect",
    "return_location",
    "translate",
]
