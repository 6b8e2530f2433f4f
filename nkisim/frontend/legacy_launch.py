"""Running ``neuronxcc.nki`` kernels: ``@nki.jit``, SPMD launch grids, ``nki.simulate_kernel``.

A legacy kernel launched on a grid (``kernel[4, 2](a)``) runs once per program, with
``nl.program_id(axis)`` its index along each axis. The programs are independent and
share the kernel's inputs and every ``nl.shared_hbm``/``nl.hbm`` tensor (the ``k``-th one
each program allocates is one tensor, as the compiler allocates it once).

Programs run on the physical NeuronCores of a logical core: two on targets with the
``lnc2_collectives`` capability (trn2, trn3), else one. The programs placed on one core run
one after another on that core's machine, as the compiler lays them out in one instruction
stream, so independent programs overlap on its engines; each core has its own SBUF, PSUM,
engines and timeline. Placement is blocked by program index, or follows ``nl.nc(2)`` in a
grid dimension (``kernel[nl.nc(2) * 2, 2]``: the core is the outer part of that axis).
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nkisim.errors import CapacityError, OperandError, SourceLoc, TargetError
from nkisim.frontend.annotations import TensorAnnotation
from nkisim.frontend.blas import single_threaded_blas
from nkisim.frontend.context import KernelContext, PrintLog, enter, is_running, leave
from nkisim.frontend.frameworks import framework_of, from_numpy, to_numpy, write_back
from nkisim.frontend.jit import ArraySpec, _kernel_loc, _target, _to_hbm, _with_compiler_liveness, default_check, run
from nkisim.frontend.legacy_tile import as_tile
from nkisim.frontend.validate import collect, translate
from nkisim.hw import HwConfig
from nkisim.memory import Buffer, MemorySystem, Tensor
from nkisim.memory.liveness import TilePlan
from nkisim.memory.views import bytes_differ
from nkisim.report import Profile
from nkisim.sim.checks import Findings
from nkisim.sim.machine import Budget
from nkisim.sim.multicore import merge_timelines

# -- launch grids ------------------------------------------------------------------------


@dataclass(frozen=True)
class nc:
    """``nl.nc(n)``: ``n`` physical NeuronCores, a factor of a grid dimension."""

    n: int

    def __mul__(self, other: int) -> spmd_dim:
        return spmd_dim(self, other)

    def __rmul__(self, other: int) -> spmd_dim:
        return spmd_dim(other, self)


@dataclass(frozen=True)
class spmd_dim:
    """``nl.spmd_dim(nl.nc(2), 2)``: a grid dimension whose outer (or inner) factor is the core."""

    outer: Any
    inner: Any

    @property
    def size(self) -> int:
        return _factor(self.outer) * _factor(self.inner)

    def core(self, i: int) -> int:
        """The core of index ``i`` along this dimension."""
        if isinstance(self.outer, nc):
            return i // _factor(self.inner)
        if isinstance(self.inner, nc):
            return i % self.inner.n
        return 0


def _factor(value: Any) -> int:
    return value.n if isinstance(value, nc) else int(value)


def parse_grid(grid: Any) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    """The grid's sizes and its dimensions as given (ints or :class:`spmd_dim`)."""
    dims = grid if isinstance(grid, tuple) else (grid,)
    sizes = []
    for d in dims:
        if isinstance(d, nc):
            d = spmd_dim(d, 1)
        size = d.size if isinstance(d, spmd_dim) else d
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise OperandError(f"kernel[{grid!r}]: each grid dimension is a positive integer or nl.spmd_dim")
        sizes.append(int(size))
    return tuple(sizes), tuple(spmd_dim(d, 1) if isinstance(d, nc) else d for d in dims)


# -- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProgramSpan:
    """One program of a launch: its grid index, the core it ran on and its simulated interval."""

    index: tuple[int, ...]
    core: int
    start_ns: float
    end_ns: float
    instructions: int


@dataclass(frozen=True)
class LegacyRunResult:
    """What a legacy launch gives back: outputs, the profile of all cores, and each program's span."""

    outputs: Any
    profile: Profile
    target: str
    programs: tuple[ProgramSpan, ...] = field(default=())

    @property
    def total_ns(self) -> float:
        return self.profile.total_ns


class _GridMemory(MemorySystem):
    """One core's memories; HBM tensors a program allocates are matched with other programs' by order."""

    def __init__(self, hw: HwConfig, poison: bool, shared: list[Tensor], plan: TilePlan | None = None) -> None:
        super().__init__(hw, poison=poison, plan=plan)
        self.shared = shared
        self.count = 0
        self.sharing = False

    def new_tensor(self, shape: tuple[int, ...], dtype: np.dtype, buffer: Buffer, *args: Any, **kwargs: Any) -> Tensor:
        if not self.sharing or buffer not in (Buffer.shared_hbm, Buffer.hbm):
            return super().new_tensor(shape, dtype, buffer, *args, **kwargs)
        index, self.count = self.count, self.count + 1
        if index == len(self.shared):
            self.shared.append(super().new_tensor(shape, dtype, buffer, *args, **kwargs))
        return self.shared[index]


# -- the kernel object ------------------------------------------------------------------------


class LegacyKernel:
    """A ``neuronxcc.nki`` kernel: call it with numpy arrays, launch it on a grid with ``kernel[4, 2]``."""

    def __init__(self, func: Callable[..., Any], mode: str = "auto", platform_target: Any = None, **options: Any):
        self.func = func
        self.mode = mode
        self.platform_target = platform_target
        self.options = options
        self.grid: Any = ()
        functools.update_wrapper(self, func)

    def __getitem__(self, grid: Any) -> LegacyKernel:
        parse_grid(grid)
        launched = LegacyKernel(self.func, self.mode, self.platform_target, **self.options)
        launched.grid = grid
        return launched

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the kernel; torch tensors and JAX arrays are taken as numpy and the outputs given back as theirs
        (eagerly: the call is not traced into a JAX or torch graph)."""
        if is_running():
            return self.func(*args, **kwargs)
        framework = framework_of((*args, *kwargs.values()))
        if framework == "numpy":
            return run_legacy(self, args, kwargs).outputs
        host_args = tuple(to_numpy(a, framework) for a in args)
        host_kwargs = {k: to_numpy(v, framework) for k, v in kwargs.items()}
        outputs = run_legacy(self, host_args, host_kwargs).outputs
        # an output passed as an argument was written in its numpy form: a copy when the tensor is not contiguous
        for passed, host in (*zip(args, host_args), *((kwargs[k], host_kwargs[k]) for k in kwargs)):
            if isinstance(host, np.ndarray) and passed is not host:
                now = to_numpy(passed, framework)
                if now.shape == host.shape and not np.array_equal(now, host, equal_nan=True):
                    write_back(passed, host, framework)
        return from_numpy(outputs, framework)

    def __repr__(self) -> str:
        return f"<neuronxcc.nki kernel {self.func.__qualname__}{list(parse_grid(self.grid)[0]) if self.grid else ''}>"


def as_kernel(kernel: Any) -> LegacyKernel:
    if isinstance(kernel, LegacyKernel):
        return kernel
    func = getattr(kernel, "func", kernel)
    if not callable(func):
        raise TypeError(f"expected a kernel function, got {kernel!r}")
    launched = LegacyKernel(func, platform_target=getattr(kernel, "platform_target", None))
    return launched


def _placement(sizes: tuple[int, ...], dims: tuple[Any, ...], cores: int) -> list[tuple[tuple[int, ...], int]]:
    """Each program's grid index and core."""
    indices = list(np.ndindex(*sizes)) if sizes else [()]
    annotated = [a for a, d in enumerate(dims) if isinstance(d, spmd_dim)]
    placed = []
    for flat, idx in enumerate(indices):
        core = sum(dims[a].core(idx[a]) for a in annotated) % cores if annotated else flat * cores // len(indices)
        placed.append((tuple(int(i) for i in idx), core))
    return placed


def run_legacy(
    kernel: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    target: Any = None,
    check: str | None = None,
    compute: bool = True,
) -> LegacyRunResult:
    """Simulate a legacy kernel launch; arrays passed in that the kernel wrote are updated in place.

    With ``compute=False`` inputs may be given by shape and dtype, and no values are computed.
    """
    kernel = as_kernel(kernel)
    hw = _target(target if target is not None else kernel.platform_target)
    mode = check if check is not None else kernel.options.get("check", default_check())
    findings = Findings(mode) if mode != "off" else None
    sizes, dims = parse_grid(kernel.grid) if kernel.grid != () else ((), ())
    multi = math.prod(sizes) > 1
    cores = 2 if multi and hw.capabilities.lnc2_collectives else 1
    if any(isinstance(d, spmd_dim) for d in dims) and cores < 2:
        cores = 1
    budget = Budget(start=time.monotonic())
    placement = _placement(sizes, dims, cores)
    prints = PrintLog()

    def attempt(plans: list[TilePlan] | None) -> tuple[list[KernelContext], Any]:
        prints.restart()
        shared: list[Tensor] = []
        ctxs = []
        for core in range(cores):
            memory = _GridMemory(hw, compute, shared, plans[core] if plans else None)
            ctx = KernelContext(hw, compute, grid=sizes, budget=budget, findings=findings, memory=memory, prints=prints)
            ctx.kernel_name = kernel.func.__qualname__
            ctx.num_programs = max(math.prod(sizes), 1)
            ctxs.append(ctx)
        return ctxs, _launch(kernel, ctxs, placement, args, kwargs)

    with single_threaded_blas():
        try:
            try:
                ctxs, (bound, returned, spans) = attempt(None)
            except CapacityError as eager_error:  # as nkisim.run: free tiles after their last use, then retry
                spill = bool(kernel.options.get("spill", True))
                ctxs, (bound, returned, spans) = _with_compiler_liveness(attempt, cores, eager_error, spill)
        except Exception as exc:
            clear = translate(exc, _kernel_loc(kernel))  # type: ignore[arg-type]
            if clear is None:
                raise
            raise clear from exc
    _write_back(kernel.func, args, kwargs, bound)
    timeline = ctxs[0].machine.timeline if cores == 1 else merge_timelines([c.machine.timeline for c in ctxs])
    diagnostics = [d for c in ctxs if c.machine.checker is not None for d in c.machine.checker.diagnostics]
    profile = Profile(timeline, hw, kernel.func.__qualname__, diagnostics)
    return LegacyRunResult(collect(returned, kernel.func), profile, hw.name, tuple(spans))


def _launch(
    kernel: LegacyKernel,
    ctxs: list[KernelContext],
    placement: list[tuple[tuple[int, ...], int]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[inspect.BoundArguments, Any, list[ProgramSpan]]:
    signature = inspect.signature(kernel.func)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise OperandError(
            f"cannot bind inputs to {kernel.func.__qualname__}{signature}: {exc}", loc=_loc(kernel)
        ) from None
    for name, value in bound.arguments.items():
        bound.arguments[name] = as_tile(_to_hbm(ctxs[0], name, value, kernel))  # type: ignore[arg-type]
    returned: Any = None
    spans = []
    for flat, (index, core) in enumerate(placement):
        ctx = ctxs[core]
        memory = ctx.memory
        assert isinstance(memory, _GridMemory)
        memory.sharing, memory.count = True, 0
        ctx.program_id = flat
        ctx.grid_index = index  # type: ignore[attr-defined]
        first = len(ctx.machine.timeline)
        token = enter(ctx)
        try:
            result = kernel.func(*bound.args, **bound.kwargs)
            ctx.flush_deferred()
        finally:
            leave(token)
            memory.sharing = False
        if flat == 0:
            returned = result
        spans.append(_span(ctx, index, core, first))
    return bound, returned, spans


def _span(ctx: KernelContext, index: tuple[int, ...], core: int, first: int) -> ProgramSpan:
    tl = ctx.machine.timeline
    starts, ends = tl.start_ns[first:], tl.end_ns[first:]
    if not starts:
        return ProgramSpan(index, core, 0.0, 0.0, 0)
    return ProgramSpan(index, core, float(min(starts)), float(max(ends)), len(starts))


def _loc(kernel: LegacyKernel) -> SourceLoc:
    code = kernel.func.__code__
    return SourceLoc(code.co_filename, code.co_firstlineno, code.co_name)


def _write_back(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], bound: Any) -> None:
    """Arrays passed in whose HBM tensors the kernel wrote get the new values (outputs passed as arguments)."""
    passed = inspect.signature(func).bind(*args, **kwargs).arguments
    for name, original in passed.items():
        tensor = bound.arguments.get(name)
        if not (isinstance(original, np.ndarray) and isinstance(tensor, Tensor) and original.flags.writeable):
            continue
        now = np.ascontiguousarray(tensor.array)
        if original.shape == now.shape and bytes_differ(original, now):
            same_size = original.dtype.itemsize == now.dtype.itemsize
            np.copyto(original, now.view(original.dtype) if same_size else now, casting="unsafe")


# -- entry points ---------------------------------------------------------------------------


def jit(func: Callable[..., Any] | None = None, mode: str = "auto", **kwargs: Any) -> Any:
    """``@nki.jit``, ``@nki.jit(mode="simulation", platform_target="trn2")``: a :class:`LegacyKernel`.

    Every ``mode`` (``"auto"``, ``"simulation"``, ``"baremetal"``, ``"torchxla"``, ``"jax"``)
    simulates on nkisim. A kernel given again (``nki.jit(kernel, ...)``) is re-wrapped.
    """
    platform_target = kwargs.pop("platform_target", None)
    if platform_target is not None:
        _target(platform_target)

    def wrap(f: Callable[..., Any]) -> LegacyKernel:
        inner = getattr(f, "func", f)
        target = platform_target if platform_target is not None else getattr(f, "platform_target", None)
        return LegacyKernel(inner, mode, target, **kwargs)

    return wrap if func is None else wrap(func)


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``kernel`` (or ``kernel[grid]``) on numpy arrays in nkisim and return its outputs."""
    return run_legacy(kernel, args, kwargs).outputs


class LatencyStats:
    """``benchmark_result.nc_latency``: the simulated latency; every percentile is the same number."""

    def __init__(self, total_ns: float) -> None:
        self.total_ns = total_ns

    def get_latency_percentile(self, percentile: int) -> float:
        """The simulated kernel latency in microseconds (a simulation has no run-to-run spread)."""
        if percentile not in (0, 1, 10, 25, 50, 90, 99, 100):
            raise ValueError(f"available percentiles are 0, 1, 10, 25, 50, 90, 99, 100, not {percentile}")
        return self.total_ns / 1000.0


@dataclass
class BenchmarkResult:
    nc_latency: LatencyStats
    profile: Profile


class ProfiledKernel(LegacyKernel):
    """A kernel decorated by ``nki.benchmark`` or ``nki.profile``: calling it runs it and keeps the profile.

    The numbers are nkisim's simulated latency, not a hardware measurement. ``save_trace_name``
    writes the simulated timeline as a Perfetto trace (JSON) to that path.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Simulate the kernel once; arguments such as ``nt.tensor[[128, 512], nl.bfloat16]`` stand for inputs of that
        shape and dtype, and the run is then on shapes alone (and returns None)."""
        if is_running():
            return self.func(*args, **kwargs)
        args, kwargs = tuple(_spec_of(a) for a in args), {k: _spec_of(v) for k, v in kwargs.items()}
        compute = not any(isinstance(v, ArraySpec) for v in (*args, *kwargs.values()))
        result = run_legacy(self, args, kwargs, compute=compute)
        self.benchmark_result = BenchmarkResult(LatencyStats(result.profile.total_ns), result.profile)
        self.profile = result.profile
        trace = self.options.get("save_trace_name")
        if trace:
            result.profile.to_perfetto(trace)
        if self.mode == "benchmark":  # neuron-bench prints its statistics; these are simulated, and say so
            us = self.benchmark_result.nc_latency.get_latency_percentile(50)
            print(
                f"nkisim benchmark of {self.func.__qualname__} on {result.target} (simulated, one run: every "
                f"percentile is the same): latency p50 {us:.2f} us, p99 {us:.2f} us"
            )
        return result.outputs if compute else None


def _spec_of(value: Any) -> Any:
    """A typing annotation with a shape and a dtype as the input it describes; anything else as it is.

    Raises:
        OperandError: an annotation without a dtype, or whose shape is not of integers.
    """
    if not isinstance(value, TensorAnnotation):
        return value
    form = "nt.tensor[[128, 512], nl.bfloat16]"
    if value.dtype is None:
        raise OperandError(f"the input {value!r} has no dtype: give shape and dtype, as {form}")
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in value.shape):
        raise OperandError(f"the input {value!r} needs a shape of positive integers, as {form}")
    return ArraySpec(tuple(int(d) for d in value.shape), value.dtype)


def benchmark(kernel: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """``@nki.benchmark(warmup=, iters=, ...)``: simulate once; ``.benchmark_result.nc_latency`` is simulated."""

    def wrap(f: Callable[..., Any]) -> ProfiledKernel:
        return ProfiledKernel(getattr(f, "func", f), "benchmark", kwargs.pop("platform_target", None), **kwargs)

    return wrap if kernel is None else wrap(kernel)


def profile(func: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """``@nki.profile(save_trace_name=..., ...)``: simulate once, keep ``.profile``, write a Perfetto trace."""
    return benchmark(func, **kwargs)


def baremetal(kernel: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """``@nki.baremetal``: runs on nkisim like ``nki.jit``."""
    return jit(kernel, mode="baremetal", **kwargs)


def program_index(axis: int) -> int:
    """This program's index along ``axis`` of the launch grid."""
    from nkisim.frontend.context import current_context

    ctx = current_context()
    index = getattr(ctx, "grid_index", ())
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not 0 <= axis < max(len(index), 1):
        raise OperandError(f"nl.program_id: axis {axis!r} is not an axis of the launch grid {list(ctx.grid) or [1]}")
    return index[axis] if index else 0


def grid_size(axes: Any = None) -> int:
    """Programs along ``axes`` (all axes when None)."""
    from nkisim.frontend.context import current_context

    grid = tuple(current_context().grid)
    if axes is None:
        return math.prod(grid)
    items = axes if isinstance(axes, (tuple, list)) else (axes,)
    for a in items:
        if not isinstance(a, (int, np.integer)) or not 0 <= a < max(len(grid), 1):
            raise OperandError(f"nl.num_programs: axis {a!r} is not an axis of the launch grid {list(grid) or [1]}")
    return math.prod(grid[a] if grid else 1 for a in items)


__all__ = [
    "LegacyKernel",
    "LegacyRunResult",
    "ProgramSpan",
    "TargetError",
    "jit",
    "nc",
    "run",
    "simulate_kernel",
    "spmd_dim",
]
