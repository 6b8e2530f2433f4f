"""``@nki.jit`` kernels and ``nkisim.run``: binding arguments, running the kernel, collecting outputs."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from nkisim.errors import CapacityError, KernelError, OperandError, SourceLoc, TargetError
from nkisim.frontend.blas import single_threaded_blas
from nkisim.frontend.context import (
    KernelContext,
    PrintLog,
    current_recorder,
    enter,
    is_running,
    keeping_operands,
    leave,
)
from nkisim.frontend.frameworks import adapter, framework_of
from nkisim.frontend.loops import AFFINE_ORDERS
from nkisim.frontend.loops import affine_order as run_affine_in
from nkisim.frontend.validate import (
    check_budget,
    check_inputs,
    check_kernel,
    check_mode,
    check_rank_inputs,
    check_target,
    collect,
    translate,
)
from nkisim.hw import HwConfig, load_target
from nkisim.isa.spec import needs
from nkisim.memory import Tensor, to_dtype
from nkisim.memory.liveness import PlanDivergedError, TilePlan
from nkisim.memory.system import INPUT_BUFFER, BorrowedInputWritten, MemorySystem
from nkisim.report import Profile
from nkisim.sim.checks import CHECK_MODES, Findings
from nkisim.sim.machine import DEFAULT_MAX_INSTRUCTIONS, Budget
from nkisim.sim.multicore import Launch, SharedHbmMemory, merge_timelines

#: The sanitizer mode of a run that names none (see :func:`run`).
DEFAULT_CHECK = "warn"


def default_check() -> str:
    """The sanitizer mode of runs that name none: ``NKISIM_CHECK`` if set, else :data:`DEFAULT_CHECK`."""
    mode = os.environ.get("NKISIM_CHECK", "").strip().lower() or DEFAULT_CHECK
    if mode not in CHECK_MODES:
        raise ValueError(f"NKISIM_CHECK must be one of {', '.join(CHECK_MODES)}, got {mode!r}")
    return mode


@dataclass(frozen=True)
class RunResult:
    """What a simulated kernel run gives back.

    Attributes:
        outputs: what the kernel returns, with tensors as numpy arrays (an array, a tuple of them, or None);
            with ``ranks=N``, a list of what each rank returns.
        profile: the simulated timeline and its summary.
        target: the hardware generation simulated.
    """

    outputs: Any
    profile: Profile
    target: str


class Kernel:
    """An NKI kernel: a Python function traced and simulated instruction by instruction.

    Call it with numpy arrays to get its outputs, or pass it to :func:`nkisim.run`
    for the profile too. Inside another kernel it is inlined.
    """

    def __init__(self, func: Callable[..., Any], platform_target: str | None = None, **options: Any) -> None:
        self.func = func
        self.platform_target = platform_target
        self.options = options
        #: The launch grid: ``()`` for a plain call, ``(n,)`` for ``kernel[n]``.
        self.grid: tuple[int, ...] = ()
        functools.update_wrapper(self, func)

    def __getitem__(self, grid: Any) -> Kernel:
        """``kernel[n]``: launch on ``n`` NeuronCores of a Logical NeuronCore (LNC), 1 or 2.

        With ``kernel[2]`` (trn2, trn3) two programs run, ``nl.program_id(0)`` 0 and 1,
        sharing the inputs and every ``nl.shared_hbm`` tensor; each has its own SBUF,
        PSUM, private HBM, engines and timeline.
        """
        dims = grid if isinstance(grid, tuple) else (grid,)
        if len(dims) != 1 or not isinstance(dims[0], (int, np.integer)) or isinstance(dims[0], bool):
            raise OperandError(f"kernel[{grid!r}]: the launch grid is one integer, the LNC size (1 or 2)")
        if int(dims[0]) not in (1, 2):
            raise OperandError(f"kernel[{grid!r}]: a launch runs on 1 or 2 NeuronCores (LNC=1 or LNC=2)")
        launched = Kernel(self.func, self.platform_target, **self.options)
        launched.grid = (int(dims[0]),)
        return launched

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if is_running():
            return self.func(*args, **kwargs)
        framework = framework_of((*args, *kwargs.values()))
        if framework != "numpy":
            return adapter(framework).call(self, *args, **kwargs)
        return run(self, _as_inputs(args, kwargs)).outputs

    def __repr__(self) -> str:
        grid = f"[{self.grid[0]}]" if self.grid else ""
        return f"<nki kernel {self.func.__qualname__}{grid}>"


def _target(name: str | HwConfig | None) -> HwConfig:
    check_target("target", name)
    try:
        return load_target(name)
    except (ValueError, OSError) as exc:
        raise TargetError(str(exc)) from None


def jit(func: Callable[..., Any] | None = None, mode: str = "auto", **kwargs: Any) -> Any:
    """Decorate an NKI kernel: ``@nki.jit`` or ``@nki.jit(platform_target="trn2")``.

    The target is, in order: ``nkisim.run(target=)``, ``platform_target``, the
    ``NEURON_PLATFORM_TARGET_OVERRIDE`` environment variable, then ``trn1``.
    ``mode`` is accepted for compatibility; nkisim always simulates. ``check=`` sets the
    kernel's sanitizer mode (``"strict"``, ``"warn"``, ``"off"``; see :func:`run`).
    ``spill=False`` makes automatic SBUF tiles that do not fit an error instead of spilling
    them to device memory (docs/semantics.md, "Spilling").
    """
    platform_target = kwargs.pop("platform_target", None)
    if platform_target is not None:
        _target(platform_target)  # reject unknown names early
    if "check" in kwargs:
        check_mode("nki.jit", kwargs["check"])
    if func is None:
        return lambda f: Kernel(f, platform_target, mode=mode, **kwargs)
    return Kernel(func, platform_target, mode=mode, **kwargs)


def _as_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if args and kwargs:
        return _Both(args, kwargs)
    return kwargs if kwargs else args


@dataclass
class _Both:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class ArraySpec(NamedTuple):
    """An input known only by its shape and dtype (for timing without values)."""

    shape: tuple[int, ...]
    dtype: Any


def run(
    kernel: Kernel | Callable[..., Any],
    inputs: Sequence[Any] | Mapping[str, Any] = (),
    *,
    target: str | HwConfig | None = None,
    max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS,
    timeout: float | None = None,
    check: str | None = None,
    affine_order: str = "in-order",
    operands: bool = True,
    ranks: int | None = None,
) -> RunResult:
    """Simulate ``kernel`` on ``inputs`` and return its outputs and profile.

    Args:
        kernel: an ``@nki.jit`` kernel or a plain kernel function.
        inputs: positional arguments (a sequence) or keyword arguments (a mapping).
            Arrays are numpy arrays of NKI dtypes (ml_dtypes for bfloat16 and fp8);
            other values (ints, floats, None) are passed through unchanged. With ``ranks=N``,
            a sequence of ``N`` such inputs, those of rank 0 first.
        target: ``trn1``, ``inf2``, ``trn2``, ``trn3`` (or an ``HwConfig``); by default
            the kernel's ``platform_target``, the environment, then ``trn1``.
        max_instructions: the most instructions one core may issue before the run stops
            with a :class:`~nkisim.errors.BudgetError` (None: no limit).
        timeout: seconds of wall time after which the run stops with a ``BudgetError``
            (None, the default: no limit).
        check: the sanitizer (docs/checks.md): ``"strict"`` stops at the first finding the
            hardware leaves undefined with a :class:`~nkisim.errors.CheckError`; ``"warn"``
            reports findings as :class:`~nkisim.errors.CheckWarning`; ``"off"`` checks only
            the hardware's rules. By default the kernel's ``@nki.jit(check=)``, else ``"warn"``.
            Findings are in ``profile.diagnostics``. The environment variable ``NKISIM_CHECK``
            changes the default (for instance to run a whole test suite under ``strict``).
        affine_order: ``"in-order"`` (the default), ``"reversed"`` or ``"shuffled"``: the order
            the iterations of ``nl.affine_range`` loops run in, to expose order dependence.
        operands: keep each instruction's operand summary (the operands the Perfetto trace
            shows, ``profile.timeline.args``). They are kept once per call site and distinct
            operands; a kernel whose operands differ at every instruction (a scalar that
            changes each iteration) keeps a profile of about 50 bytes per instruction only
            with ``operands=False``.

    Raises:
        KernelError: the kernel breaks a rule (its subclasses name which), at the kernel's line.
        TypeError, ValueError: an argument of ``run`` itself is malformed.
    """
    _check_call("nkisim.run", kernel, inputs, target, max_instructions, timeout, check, affine_order, operands, ranks)
    budget = Budget(max_instructions, timeout, time.monotonic())
    with run_affine_in(affine_order), keeping_operands(operands):
        ctxs, returned = _simulate(kernel, inputs, target, compute=True, budget=budget, check=check, ranks=ranks)
    func = kernel.func if isinstance(kernel, Kernel) else kernel
    outputs = collect(returned, func) if ranks is None else [collect(r, func) for r in returned]
    result = RunResult(outputs, _profile_of(ctxs), ctxs[0].hw.name)
    for bucket in _COLLECTORS.get():
        bucket.append(result.profile)
    return result


#: The open ``collect_profiles`` buckets of this thread or task (a context variable: no run elsewhere reaches them).
_COLLECTORS: ContextVar[tuple[list[Profile], ...]] = ContextVar("nkisim_collectors", default=())


@contextlib.contextmanager
def collect_profiles() -> Iterator[list[Profile]]:
    """Collect the profile of every simulated run inside the ``with`` block, in order.

    This reaches runs made through framework operators (``torch.ops...``, JAX
    callbacks) and direct kernel calls, which return only outputs. Only the runs of this
    thread (or asyncio task) are collected: runs that other threads make meanwhile stay out::

        with nkisim.collect_profiles() as profiles:
            loss = model(x).sum()
        print(sum(p.total_ns for p in profiles))
    """
    bucket: list[Profile] = []
    token = _COLLECTORS.set((*_COLLECTORS.get(), bucket))
    try:
        yield bucket
    finally:
        _COLLECTORS.reset(token)


def profile(
    kernel: Kernel | Callable[..., Any],
    inputs: Sequence[Any] | Mapping[str, Any] = (),
    *,
    target: str | HwConfig | None = None,
    max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS,
    timeout: float | None = None,
    check: str | None = None,
    affine_order: str = "in-order",
    operands: bool = True,
    ranks: int | None = None,
) -> Profile:
    """The simulated timeline of ``kernel``; inputs may be arrays or ``(shape, dtype)`` pairs.

    When any input is given by shape and dtype alone, no values are computed (as a
    hardware benchmark ignores input values): the timeline is the same as
    :func:`run` gives for arrays of those shapes, and the run is much faster.
    ``target``, ``max_instructions``, ``timeout``, ``check``, ``affine_order``, ``operands`` and ``ranks``
    are as for :func:`run`.
    """
    _check_call(
        "nkisim.profile", kernel, inputs, target, max_instructions, timeout, check, affine_order, operands, ranks
    )
    abstract = False
    for rank_inputs in [inputs] if ranks is None else inputs:  # type: ignore[union-attr]
        args, kwargs = _split(rank_inputs)
        abstract = abstract or any(_as_spec(v) is not None for v in (*args, *kwargs.values()))
    budget = Budget(max_instructions, timeout, time.monotonic())
    with run_affine_in(affine_order), keeping_operands(operands):
        ctxs, _ = _simulate(kernel, inputs, target, compute=not abstract, budget=budget, check=check, ranks=ranks)
    return _profile_of(ctxs)


def _check_call(
    entry: str,
    kernel: object,
    inputs: object,
    target: object,
    max_instructions: object,
    timeout: object,
    check: object = None,
    order: object = "in-order",
    operands: object = True,
    ranks: object = None,
) -> None:
    check_kernel(entry, kernel)
    if order not in AFFINE_ORDERS:
        raise ValueError(f"{entry}: affine_order must be one of {', '.join(map(repr, AFFINE_ORDERS))}, got {order!r}")
    if ranks is None:
        check_inputs(entry, inputs)
    else:
        check_rank_inputs(entry, inputs, ranks)
    check_target(entry, target)
    check_budget(entry, max_instructions, timeout)
    if check is not None:
        check_mode(entry, check)
    if not isinstance(operands, bool):
        raise TypeError(f"{entry}: operands must be True or False, got {type(operands).__name__} {operands!r:.60}")


def output_specs(
    kernel: Kernel | Callable[..., Any], inputs: Sequence[Any] | Mapping[str, Any], *, target: Any = None
) -> Any:
    """Shapes and dtypes of what ``kernel`` returns, traced without computing values."""
    _check_call("nkisim.output_specs", kernel, inputs, target, None, None)
    abstract_inputs = _abstract(inputs)
    _, returned = _simulate(kernel, abstract_inputs, target, compute=False, check="off")
    return _collect_specs(returned)


def _simulate(
    kernel: Kernel | Callable[..., Any],
    inputs: Any,
    target: str | HwConfig | None,
    compute: bool,
    budget: Budget | None = None,
    check: str | None = None,
    ranks: int | None = None,
) -> tuple[list[KernelContext], Any]:
    """Run the kernel; one context per program, and what program 0 returned (with ``ranks``: each rank's)."""
    if not isinstance(kernel, Kernel):
        kernel = Kernel(kernel)
    mode = check if check is not None else kernel.options.get("check", default_check())
    findings = Findings(mode) if mode != "off" else None
    hw = _target(target if target is not None else kernel.platform_target)
    per_rank = [_split(inputs)] if ranks is None else [_split(r) for r in inputs]
    cores = kernel.grid[0] if kernel.grid else 1
    programs = cores * len(per_rank)
    budget = budget if budget is not None else Budget(start=time.monotonic())
    prints = PrintLog()

    recorder = current_recorder()

    # large inputs are read in place by a run that is not recorded, unless the kernel is known to write one
    borrow = recorder is None and not _writes_inputs(kernel)

    def attempt(plans: list[TilePlan] | None) -> tuple[list[KernelContext], Any]:
        prints.restart()
        if recorder is not None:
            recorder.restart()
        if ranks is not None or programs > 1:
            ctxs, returns = _simulate_launch(
                kernel, hw, per_rank, cores, compute, plans, budget, prints, findings, borrow=borrow
            )
            return ctxs, returns if ranks is not None else returns[0]
        args, kwargs = per_rank[0]
        plan = plans[0] if plans else None
        return _simulate_one(kernel, hw, args, kwargs, compute, plan, budget, prints, findings, borrow=borrow)

    def eager_then_liveness() -> tuple[list[KernelContext], Any]:
        try:
            return attempt(None)
        except CapacityError as eager_error:
            # the traceback holds the failed run's machines (every memory of every program): free them first
            eager_error.__traceback__ = None
            spill = bool(kernel.options.get("spill", True))
            return _with_compiler_liveness(attempt, programs, eager_error, spill)

    with single_threaded_blas():
        try:
            try:
                return eager_then_liveness()
            except BorrowedInputWritten:  # the kernel writes a borrowed input: all of it again, every input copied
                with contextlib.suppress(TypeError):  # a callable that cannot be weakly referenced: not remembered
                    _WRITES_INPUTS[_kernel_key(kernel)] = True
            # outside the handler: its traceback holds the abandoned run's machines, freed before the run again
            borrow = False
            return eager_then_liveness()
        except Exception as exc:
            clear = translate(exc, _kernel_loc(kernel))
            if clear is None:
                raise
            raise clear from exc


def _with_compiler_liveness(
    attempt: Callable[[list[TilePlan] | None], tuple[list[KernelContext], Any]],
    programs: int,
    eager_error: CapacityError,
    spill: bool = True,
) -> tuple[list[KernelContext], Any]:
    """Run again, freeing tiles after their last use as the compiler does (see ``nkisim.memory.liveness``).

    A recording run learns each tile's lifetime; the third run allocates by it and, with
    ``spill``, spills the automatic SBUF tiles that still do not fit. If the kernel then still
    does not fit, that run's error is raised (the eager run's without ``spill``); if it behaves
    differently between runs, the eager run's error stands. If the recording run, which has room
    for every automatic tile, stops at an error of the kernel's own further on (an assert, an
    instruction the target refuses), that error is raised: NKI traces the whole kernel before it
    allocates memory, so a kernel author sees that error, not a full memory.
    """
    plans = [TilePlan(recording=True, spill=spill) for _ in range(programs)]
    try:
        attempt(plans)
    except CapacityError:  # while recording only explicit placements can collide: the eager error names the memory
        raise eager_error from None
    except MemoryError:  # the host ran out of memory (CapacityError is one too, above): that stopped the run
        raise
    except Exception as kernel_error:
        first = str(eager_error).splitlines()[0].split(". ")[0]  # where, and what did not fit
        kernel_error.add_note(
            f"nkisim: found when the kernel ran again with tiles freed after their last use, as the compiler "
            f"allocates them; a first run had stopped earlier at {first}"
        )
        kernel_error.__suppress_context__ = True  # the note names the first run's error; no second traceback
        raise
    for plan in plans:
        plan.recording = False
    try:
        return attempt(plans)
    except CapacityError:
        if spill:  # what still does not fit when tiles spill (a placed tile): the eager error may be another memory's
            raise
        raise eager_error from None
    except PlanDivergedError:
        raise eager_error from None


def _simulate_one(
    kernel: Kernel,
    hw: HwConfig,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    compute: bool,
    plan: TilePlan | None = None,
    budget: Budget | None = None,
    prints: PrintLog | None = None,
    findings: Findings | None = None,
    borrow: bool = False,
) -> tuple[list[KernelContext], Any]:
    """One program's run; ``borrow`` reads large inputs in place (``MemorySystem.hbm_tensor_from``)."""
    ctx = KernelContext(
        hw, compute=compute, grid=kernel.grid, plan=plan, budget=budget, prints=prints, findings=findings
    )
    ctx.kernel_name = kernel.func.__qualname__
    bound = _bind(kernel, args, kwargs)
    for name, value in bound.arguments.items():
        bound.arguments[name] = _to_hbm(ctx, name, value, kernel, borrow)
    ctx.memory.defer_hbm_poison = ctx.memory.poison  # this run's HBM is its own: made whole below
    token = enter(ctx)
    with _restart_if_signal_caught([ctx.memory]):
        try:
            returned = kernel.func(*bound.args, **bound.kwargs)
            ctx.memory.settle_outputs()
        finally:
            leave(token)
    return [ctx], returned


@contextlib.contextmanager
def _restart_if_signal_caught(memories: list[MemorySystem]) -> Iterator[None]:
    """Raise :class:`BorrowedInputWritten` at the end of a run whose kernel caught it (and went on or then failed):
    the run is not the kernel's and must start again with copies."""
    try:
        yield
    except Exception:
        if any(memory.borrow_broken for memory in memories):
            raise BorrowedInputWritten("") from None
        raise
    if any(memory.borrow_broken for memory in memories):
        raise BorrowedInputWritten("")


def _simulate_launch(
    kernel: Kernel,
    hw: HwConfig,
    per_rank: list[tuple[tuple[Any, ...], dict[str, Any]]],
    cores: int,
    compute: bool,
    plans: list[TilePlan] | None = None,
    budget: Budget | None = None,
    prints: PrintLog | None = None,
    findings: Findings | None = None,
    borrow: bool = False,
) -> tuple[list[KernelContext], list[Any]]:
    """Ranks of ``cores`` programs each, taking turns (nkisim.sim.multicore); what each rank returned.

    The cores of a rank (``kernel[2]``) share its inputs and its shared HBM; with ``borrow``, each rank's
    large inputs are read in place, as by :func:`_simulate_one`, and a write into any of them by any core
    of any rank starts the whole launch again with copies.
    """
    if cores > 1 and not hw.capabilities.lnc2_collectives:
        raise TargetError(
            f"kernel[{cores}] runs on {cores} NeuronCores (LNC={cores}), which {needs('lnc2_collectives')}; "
            f"{hw.name} has one NeuronCore per logical core",
            loc=_kernel_loc(kernel),
        )
    launch = Launch(cores * len(per_rank), cores)
    ctxs = [
        KernelContext(
            hw,
            compute=compute,
            program_id=pid % cores,
            num_programs=cores,
            launch=launch,
            grid=kernel.grid,
            plan=plans[pid] if plans else None,
            budget=budget,
            prints=prints,
            findings=findings,
            rank=pid // cores,
        )
        for pid in range(launch.programs)
    ]
    bodies = []
    for rank, (args, kwargs) in enumerate(per_rank):
        bound = _bind(kernel, args, kwargs)
        first = ctxs[rank * cores]
        memory = first.memory
        assert isinstance(memory, SharedHbmMemory)
        with memory.unshared():  # the inputs are shared by passing the same tensors to the rank's cores
            for name, value in bound.arguments.items():
                bound.arguments[name] = _to_hbm(first, name, value, kernel, borrow)
        for ctx in ctxs[rank * cores : (rank + 1) * cores]:
            ctx.memory.borrowed = memory.borrowed  # a write by any core into a borrowed input is seen
        bodies += [_program(kernel, ctx, bound) for ctx in ctxs[rank * cores : (rank + 1) * cores]]
    for ctx in ctxs:
        ctx.kernel_name = kernel.func.__qualname__
    with _restart_if_signal_caught([ctx.memory for ctx in ctxs]):
        returns = launch.run(bodies)
    return ctxs, returns[::cores]


def _program(kernel: Kernel, ctx: KernelContext, bound: inspect.BoundArguments) -> Callable[[], Any]:
    def program() -> Any:
        token = enter(ctx)
        try:
            return kernel.func(*bound.args, **bound.kwargs)
        finally:
            leave(token)

    return program


def _profile_of(ctxs: list[KernelContext]) -> Profile:
    """One profile; with several programs, their timelines side by side (``core<i> <engine>``, ``rank<r> <engine>``)."""
    first = ctxs[0]
    timelines = [ctx.machine.timeline for ctx in ctxs]
    timeline = timelines[0] if len(ctxs) == 1 else merge_timelines(timelines, first.num_programs)
    diagnostics = [d for ctx in ctxs if ctx.machine.checker is not None for d in ctx.machine.checker.diagnostics]
    return Profile(timeline, first.hw, first.kernel_name, diagnostics)


def _as_spec(value: Any) -> ArraySpec | None:
    if isinstance(value, ArraySpec):
        return value
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], (tuple, list))
        and all(isinstance(d, (int, np.integer)) for d in value[0])
        and not isinstance(value[1], (tuple, list, int))
    ):
        return ArraySpec(tuple(int(d) for d in value[0]), value[1])
    return None


def _abstract(inputs: Any) -> Any:
    def spec(value: Any) -> Any:
        if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, Tensor):
            return ArraySpec(tuple(value.shape), value.dtype)
        return value

    args, kwargs = _split(inputs)
    return _Both(tuple(spec(v) for v in args), {k: spec(v) for k, v in kwargs.items()})


def _split(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(inputs, _Both):
        return inputs.args, inputs.kwargs
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, np.ndarray):
        return (inputs,), {}
    return tuple(inputs), {}


def _bind(kernel: Kernel, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
    signature = inspect.signature(kernel.func)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise KernelError(
            f"cannot bind inputs to {kernel.func.__qualname__}{signature}: {exc}", loc=_kernel_loc(kernel)
        ) from None
    return bound


def _kernel_loc(kernel: Kernel) -> SourceLoc:
    code = kernel.func.__code__
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)


def _to_hbm(ctx: KernelContext, name: str, value: Any, kernel: Kernel, borrow: bool = False) -> Any:
    spec = _as_spec(value)
    if spec is None and isinstance(value, (tuple, list)) and any(isinstance(v, np.ndarray) for v in value):
        return type(value)(_to_hbm(ctx, f"{name}[{i}]", v, kernel, borrow) for i, v in enumerate(value))
    if spec is None and not isinstance(value, np.ndarray):
        return value
    try:
        dtype = to_dtype(value.dtype if spec is None else spec.dtype)
    except TypeError as exc:
        raise OperandError(str(exc), loc=_kernel_loc(kernel), operand=f"input {name!r}") from None
    if spec is not None:
        if ctx.compute:
            raise OperandError(
                "is given by shape and dtype only; nkisim.run needs arrays (nkisim.profile takes shapes)",
                loc=_kernel_loc(kernel),
                operand=f"input {name!r}",
            )
        return ctx.memory.new_tensor(spec.shape, dtype, INPUT_BUFFER, name)
    return ctx.memory.hbm_tensor_from(value, dtype, name, borrow)


#: Kernel functions (unwrapped) found to write one of their inputs: their runs copy every input at once.
#: A weak map, so that it keeps no kernel alive; it only saves such a kernel's later runs the restart.
_WRITES_INPUTS: weakref.WeakKeyDictionary[Callable[..., Any], bool] = weakref.WeakKeyDictionary()


def _kernel_key(kernel: Kernel) -> Callable[..., Any]:
    return inspect.unwrap(kernel.func)


def _writes_inputs(kernel: Kernel) -> bool:
    try:
        return _WRITES_INPUTS.get(_kernel_key(kernel), False)
    except TypeError:  # not weakly referenceable
        return True


def _collect_specs(returned: Any) -> Any:
    if isinstance(returned, Tensor):
        return ArraySpec(returned.shape, returned.dtype)
    if isinstance(returned, (tuple, list)):
        return tuple(_collect_specs(item) for item in returned)
    return returned
