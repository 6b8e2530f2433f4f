"""The running kernel: its memories, engines and timeline, and how one call becomes an instruction."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from pydantic import ValidationError

from nkisim.errors import KernelError, OperandError, SourceLoc, TargetError
from nkisim.frontend.launch import Launch, Peer, SharedHbmMemory
from nkisim.hw import Engine, HwConfig
from nkisim.isa import REGISTRY, Check, EngineState, InstructionSpec
from nkisim.isa.common import check_common
from nkisim.memory import MemorySystem, Tensor
from nkisim.memory.liveness import TilePlan
from nkisim.sim import Scheduler


class ExecutionError(KernelError):
    """An instruction failed while computing its result (a bug report is welcome)."""


class KernelContext:
    """Everything one kernel run owns: memories, engine state and the scheduler.

    Attributes:
        compute: when False, only the timeline is built (shapes and dtypes are enough).
    """

    def __init__(
        self,
        hw: HwConfig,
        compute: bool = True,
        program_id: int = 0,
        num_programs: int = 1,
        launch: Launch | None = None,
        grid: tuple[int, ...] = (),
        plan: TilePlan | None = None,
    ) -> None:
        self.hw = hw
        self.compute = compute
        self.memory = (
            MemorySystem(hw, poison=compute, plan=plan)
            if launch is None
            else SharedHbmMemory(hw, launch, program_id, compute, plan)
        )
        self.state = EngineState(hw.sbuf.partitions, hw.nc_version)
        self.scheduler = Scheduler(hw)
        self.program_id = program_id
        self.num_programs = num_programs
        #: The launch grid (``kernel[2]``: ``(2,)``; a plain call: ``()``).
        self.grid = grid
        #: This program's link to the other one in an LNC=2 launch, else None.
        self.peer = Peer(launch, program_id) if launch is not None else None
        self.kernel_name = ""

    def emit(self, name: str, kwargs: dict[str, Any], loc: SourceLoc) -> None:
        """Validate, execute and schedule one ``nisa.<name>`` call."""
        spec = REGISTRY[name]
        try:
            ops = spec.operands(**kwargs)
        except ValidationError as exc:
            raise _operand_error(spec, self.hw, loc, exc) from None
        engine = self._engine(spec, ops, loc)
        chk = Check(spec.name, engine, self.hw, loc)
        if self.hw.nc_version < spec.min_nc_version:
            chk.fail(TargetError, "", f"needs NeuronCore-v{spec.min_nc_version} or newer")
        check_common(ops, chk)
        if spec.validate is not None:
            spec.validate(ops, chk)
        if self.compute:
            try:
                spec.semantics(ops, self.state)
            except KernelError:
                raise
            except Exception as exc:  # a bug in nkisim, reported at the kernel's line
                raise ExecutionError(
                    f"failed: {type(exc).__name__}: {exc}",
                    loc=loc,
                    instruction=f"nisa.{name}",
                    engine=engine.title,
                    target=self.hw.name,
                ) from exc
        reads, writes = ops.accessed()
        self.memory.issued(len(self.scheduler.timeline), reads, writes)
        read_regions = [t.region for _, t in reads]
        write_regions = [t.region for _, t in writes]
        for _, t in (*reads, *writes):
            read_regions.extend(t.offset_regions)  # a dynamic .ap() view reads its offset tile or register
        extra = getattr(type(ops), "extra_accesses", None)
        if extra is not None:  # registers, and HBM operands of sequencer instructions
            more_reads, more_writes = extra(ops)
            read_regions += more_reads
            write_regions += more_writes
        cost = spec.cost(ops, self.hw, engine)
        not_before = 0.0
        synchronise = getattr(type(ops), "synchronise", None)
        if synchronise is not None:  # core_barrier, sendrecv: meet the other program
            arrival = self.scheduler.earliest_start(engine, read_regions, write_regions)
            not_before, cost = synchronise(ops, self.peer, arrival, cost, self.compute, chk)
        self.scheduler.schedule(
            name, engine, cost, read_regions, write_regions, loc, not_before=not_before, args=_summary(ops)
        )
        if self.peer is not None:
            self.peer.yield_turn()
        hook = _PROGRESS.get()
        if hook is not None and len(self.scheduler.timeline) % PROGRESS_EVERY == 0:
            hook(len(self.scheduler.timeline))

    def _engine(self, spec: InstructionSpec, ops: Any, loc: SourceLoc) -> Engine:
        requested = ops.engine if "engine" in spec.operands.model_fields else Engine.unknown
        if requested is Engine.unknown:
            return spec.choose_engine(ops, self.hw) if spec.choose_engine else spec.engines[0]
        if requested not in spec.engines:
            raise OperandError(
                f"{requested.title} is not one of this instruction's engines ({spec.engine_names})",
                loc=loc,
                instruction=f"nisa.{spec.name}",
                target=self.hw.name,
                operand="engine",
            )
        return requested


def _summary(ops: Any) -> tuple[tuple[str, object], ...]:
    """The operands for the profile: tensors as (buffer, dtype, shape), other values as they are."""
    return tuple(
        (key, (value.buffer.value, value.dtype, value.shape) if isinstance(value, Tensor) else value)
        for key, value in ops.__dict__.items()
        if value is not None and key != "name" and not isinstance(value, (list, tuple))
    )


def _operand_error(spec: InstructionSpec, hw: HwConfig, loc: SourceLoc, exc: ValidationError) -> OperandError:
    err = exc.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else ""
    if err["type"] == "extra_forbidden":
        rule = "is not an argument of this instruction"
    elif err["type"] == "missing":
        rule = "is a required argument"
    else:
        rule = f"got {type(err.get('input')).__name__} {_short(err.get('input'))}: {err['msg']}"
    return OperandError(rule, loc=loc, instruction=f"nisa.{spec.name}", target=hw.name, operand=field)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_CURRENT: ContextVar[KernelContext | None] = ContextVar("nkisim_kernel", default=None)
_PROGRESS: ContextVar[Callable[[int], None] | None] = ContextVar("nkisim_progress", default=None)
#: How many instructions pass between calls of a progress hook.
PROGRESS_EVERY = 4096


@contextlib.contextmanager
def progress_hook(hook: Callable[[int], None]) -> Iterator[None]:
    """Call ``hook(instructions so far)`` every ``PROGRESS_EVERY`` instructions while kernels run."""
    token = _PROGRESS.set(hook)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def current_context() -> KernelContext:
    """The kernel being run, or a clear error when called outside one."""
    ctx = _CURRENT.get()
    if ctx is None:
        raise KernelError("nki calls only work inside a kernel run by nkisim.run() or a @nki.jit kernel call")
    return ctx


def enter(ctx: KernelContext) -> object:
    return _CURRENT.set(ctx)


def leave(token: object) -> None:
    _CURRENT.reset(token)  # type: ignore[arg-type]


def is_running() -> bool:
    return _CURRENT.get() is not None
