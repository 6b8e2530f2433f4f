"""Running the points of a sweep: in this process, on any ``concurrent.futures`` executor, or on Dask.

Each point is one :func:`nkisim.profile` call (values computed when the inputs are
arrays, timing only when they are ``(shape, dtype)`` pairs). A point runs in a worker
as a :class:`Task`: the kernel or factory travels as cloudpickle bytes (by reference
when its module is importable there, by value otherwise), so lambdas, closures and
kernels defined in a notebook or ``__main__`` work on process pools and clusters too.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import inspect
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle

from nkisim.errors import KernelError
from nkisim.frontend import Kernel, profile
from nkisim.sweeps.points import Point, expand
from nkisim.sweeps.table import SweepRecord, SweepTable


@dataclass(frozen=True)
class Task:
    """One point, ready to run anywhere.

    Attributes:
        kernel: the kernel or factory, or its cloudpickle bytes when ``pickled``.
        pickled: whether ``kernel`` holds cloudpickle bytes.
        factory: whether ``kernel`` is a factory (called with the point's parameters to make the kernel).
        inputs: the kernel's inputs (arrays, or ``(shape, dtype)`` pairs for a timing-only run).
        point: the parameters and target.
    """

    kernel: Any
    pickled: bool
    factory: bool
    inputs: Sequence[Any] | Mapping[str, Any]
    point: Point


def run_point(task: Task) -> SweepRecord:
    """Run one point and describe the result; an error of the kernel becomes the record's ``error``."""
    start = time.perf_counter()
    point = task.point
    try:
        kernel, keywords = _kernel_of(task)
        result = profile(kernel, _inputs(kernel, task.inputs, keywords), target=point.target)
        return SweepRecord(
            params=point.params,
            target=result.target,
            total_ns=float(result.total_ns),
            instruction_count=int(result.instruction_count),
            mfu=_mfu(result),
            engine_busy_ns={k: float(v) for k, v in result.engine_busy_ns.items()},
            wall_s=time.perf_counter() - start,
        )
    except KernelError as exc:
        message = str(exc)
    except Exception as exc:  # an assert in the kernel, a factory that fails: recorded, the sweep goes on
        message = f"{type(exc).__name__}: {exc}"
    return SweepRecord(point.params, _target_name(point), error=_one_line(message), wall_s=time.perf_counter() - start)


def _kernel_of(task: Task) -> tuple[Kernel, dict[str, Any]]:
    obj = _unpickle(task.kernel) if task.pickled else task.kernel
    if not task.factory:
        return obj, dict(task.point.params)
    made = obj(**task.point.params)
    if not callable(made):
        raise TypeError(f"the factory returned {type(made).__name__}, not a kernel")
    return (made if isinstance(made, Kernel) else Kernel(made)), {}


@functools.lru_cache(maxsize=8)
def _unpickle(payload: bytes) -> Any:
    """The kernel of a task; kept, since every point of a sweep ships the same bytes."""
    return cloudpickle.loads(payload)


def _inputs(kernel: Kernel, inputs: Sequence[Any] | Mapping[str, Any], keywords: dict[str, Any]) -> Any:
    """The inputs with the point's parameters as keyword arguments of the kernel."""
    if not keywords:
        return inputs
    if isinstance(inputs, Mapping):
        return {**inputs, **keywords}
    bound = inspect.signature(kernel.func).bind_partial(*inputs)
    return {**bound.arguments, **keywords}


def _mfu(result: Any) -> float | None:
    try:
        return float(result.mfu)
    except Exception:  # a profile with no matmul work or no peak figure has no MFU
        return None


def _target_name(point: Point) -> str:
    return point.target if point.target is not None else "default"


def _one_line(message: str) -> str:
    return " ".join(message.split())


# -- the sweep ------------------------------------------------------------------------------


def sweep(
    kernel_or_factory: Kernel | Callable[..., Any],
    inputs: Sequence[Any] | Mapping[str, Any] = (),
    *,
    params: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]] | None = None,
    targets: Sequence[str] | str | None = None,
    executor: Any = None,
    progress: bool | None = None,
    results: str | os.PathLike[str] | None = None,
) -> SweepTable:
    """Simulate a kernel at many points: every setting of ``params`` on every target.

    Args:
        kernel_or_factory: an ``@nki.jit`` kernel, whose parameters are passed as keyword
            arguments, or a factory (a plain function) called with each point's parameters
            as keyword arguments that returns the kernel to run.
        inputs: the kernel's inputs, as for :func:`nkisim.profile`: arrays (values computed),
            or ``(shape, dtype)`` pairs (timing only, much faster).
        params: parameter name to the values to try (their Cartesian product), or a list of
            settings (each a mapping of name to value).
        targets: generations to simulate on (``["trn1", "trn2"]``); by default the kernel's own.
        executor: None to run here, one point after another; any ``concurrent.futures.Executor``
            (e.g. a ``ProcessPoolExecutor``); or a Dask ``distributed.Client``.
        progress: show a progress bar (points done, failures, time left); by default when
            standard error is a terminal.
        results: a JSON-lines file that receives each record as it finishes; points already
            recorded there are not run again (resuming an interrupted sweep).

    Returns:
        A :class:`SweepTable` with one record per point, in the order of the points (targets
        outermost). A point that fails is recorded with its error; it never stops the sweep.
    """
    if not callable(kernel_or_factory):
        raise TypeError(
            f"nkisim.sweep: expected a kernel or a factory function, got {type(kernel_or_factory).__name__}"
        )
    points = expand(params, targets)
    done = _read_results(results, {p.key for p in points})
    todo = [p for p in points if p.key not in done]
    executor = _executor_of(executor)
    factory = not isinstance(kernel_or_factory, Kernel)
    shipped = _ship(kernel_or_factory) if executor is not None else kernel_or_factory

    def task(point: Point) -> Task:
        return Task(shipped, executor is not None, factory, inputs, point)

    with _progress(len(points), len(points) - len(todo), progress) as bar, _results_sink(results) as sink:
        failed = sum(not r.ok for r in done.values())

        def finished(point: Point, record: SweepRecord) -> None:
            nonlocal failed
            done[point.key] = record
            failed += not record.ok
            sink(point.key, record)
            bar.update(1)
            bar.set_postfix(failed=failed, refresh=False)

        if executor is None:
            for point in todo:
                finished(point, run_point(task(point)))
        else:
            futures = {executor.submit(run_point, task(point)): point for point in todo}
            for future in concurrent.futures.as_completed(futures):
                point = futures[future]
                finished(point, _outcome(future, point))
    return SweepTable([done[p.key] for p in points])


def _ship(obj: Any) -> bytes:
    """cloudpickle bytes of the kernel or factory.

    A function of an installed package (nkisim's examples, a library) travels by
    reference; one from a script, a test file or a notebook travels by value with the
    globals it uses, since a worker process need not be able to import its module.
    """
    func = obj.func if isinstance(obj, Kernel) else obj
    module = sys.modules.get(getattr(func, "__module__", "") or "")
    by_value = module is not None and module.__name__ != "__main__" and not _installed(module)
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(obj)
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)


def _installed(module: Any) -> bool:
    """Whether a module comes from nkisim or an installed distribution (importable in any worker)."""
    name = module.__name__.split(".")[0]
    path = getattr(module, "__file__", None) or ""
    return name == "nkisim" or "site-packages" in path or "dist-packages" in path


def _executor_of(executor: Any) -> Any:
    if executor is None:
        return None
    if hasattr(executor, "get_executor"):  # a Dask distributed.Client
        return executor.get_executor()
    if not callable(getattr(executor, "submit", None)):
        raise TypeError(
            "nkisim.sweep: executor must be None, a concurrent.futures.Executor or a Dask Client, "
            f"got {type(executor).__name__}"
        )
    return executor


def _outcome(future: concurrent.futures.Future[SweepRecord], point: Point) -> SweepRecord:
    """The record a worker returned, or the reason it returned none (a worker died, a task was lost)."""
    try:
        return future.result()
    except Exception as exc:
        # a process pool breaks when a worker dies; Dask gives up on a task whose workers died (KilledWorker)
        died = isinstance(exc, concurrent.futures.BrokenExecutor) or type(exc).__name__ == "KilledWorker"
        what = "worker process died" if died else "worker failed"
        return SweepRecord(point.params, _target_name(point), error=_one_line(f"{what}: {type(exc).__name__}: {exc}"))


# -- progress and results file ------------------------------------------------------------


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kwargs: Any) -> None:
        pass


@contextlib.contextmanager
def _progress(total: int, initial: int, show: bool | None) -> Iterator[Any]:
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        yield _NoBar()
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, initial=initial, desc="sweep", unit="point", dynamic_ncols=True) as bar:
        yield bar


def _read_results(path: str | os.PathLike[str] | None, wanted: set[str]) -> dict[str, SweepRecord]:
    """The records already in a results file, for the points of this sweep."""
    if path is None or not os.path.exists(path):
        return {}
    found: dict[str, SweepRecord] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                key, record = line.rstrip("\n").split("\t", 1)
                if key in wanted:
                    found[key] = SweepRecord.from_json(record)
            except (ValueError, TypeError):  # a line cut short when an earlier sweep was interrupted
                warnings.warn(f"{os.fspath(path)}:{number}: not a sweep record; that point runs again", stacklevel=3)
    return found


@contextlib.contextmanager
def _results_sink(path: str | os.PathLike[str] | None) -> Iterator[Callable[[str, SweepRecord], None]]:
    if path is None:
        yield lambda key, record: None
        return
    with open(path, "a", encoding="utf-8") as fh:

        def write(key: str, record: SweepRecord) -> None:
            fh.write(f"{key}\t{record.to_json()}\n")
            fh.flush()

        yield write
