"""The kernel being traced: which machine its ``nki`` calls go to, and how a call becomes an instruction record."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from nkisim.errors import KernelError, SourceLoc
from nkisim.hw import HwConfig
from nkisim.memory import MemorySystem
from nkisim.memory.liveness import TilePlan
from nkisim.sim import Instruction, Machine
from nkisim.sim.checks import Checker, Findings
from nkisim.sim.machine import Budget
from nkisim.sim.multicore import Launch, Peer, SharedHbmMemory


class PrintLog:
    """``nl.device_print`` output, printed once per run even when the liveness retry runs the kernel again.

    Each attempt counts its prints; an attempt prints only those past the number an
    earlier attempt already printed (the attempts run the same program, so the
    first prints are the same).
    """

    def __init__(self) -> None:
        self.printed = 0
        self._count = 0

    def restart(self) -> None:
        """A new attempt at the same run begins."""
        self._count = 0

    def claim(self) -> bool:
        """Count one ``device_print`` of this attempt; True when it has not been printed yet."""
        self._count += 1
        if self._count > self.printed:
            self.printed = self._count
            return True
        return False


class KernelContext:
    """One traced program: the machine that runs its instructions, and its place in the launch.

    Attributes:
        machine: the core the program runs on (memories, engine state, timeline).
        program_id: this program's index in the launch grid (``nl.program_id(0)``).
        num_programs: programs in the launch.
        grid: the launch grid (``kernel[2]``: ``(2,)``; a plain call: ``()``).
        kernel_name: the traced function's qualified name, for the profile.
        prints: the run's ``nl.device_print`` log (shared by its attempts and programs).
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
        budget: Budget | None = None,
        prints: PrintLog | None = None,
        findings: Findings | None = None,
        memory: MemorySystem | None = None,
    ) -> None:
        if memory is None:
            memory = (
                MemorySystem(hw, poison=compute, plan=plan)
                if launch is None
                else SharedHbmMemory(hw, launch, program_id, compute, plan)
            )
        peer = Peer(launch, program_id) if launch is not None else None
        checker = Checker(findings, hw) if findings is not None else None
        self.machine = Machine(
            hw,
            compute=compute,
            memory=memory,
            peer=peer,
            on_progress=_PROGRESS.get(),
            budget=budget,
            checker=checker,
            operands=_OPERANDS.get(),
        )
        #: ``nl.device_print`` output already shown in this run.
        self.prints = prints if prints is not None else PrintLog()
        self.program_id = program_id
        self.num_programs = num_programs
        self.grid = grid
        self.kernel_name = ""
        #: An instruction held back by the legacy front end until the next one is issued
        #: (``acc += nisa.nc_matmul(...)`` retargets a matmul into ``acc`` before it issues).
        self.deferred: Instruction | None = None

    @property
    def hw(self) -> HwConfig:
        return self.machine.hw

    @property
    def memory(self) -> MemorySystem:
        return self.machine.memory

    @property
    def compute(self) -> bool:
        return self.machine.compute

    def emit(self, name: str, kwargs: dict[str, Any], loc: SourceLoc) -> None:
        """Hand one ``nisa.<name>`` call to the machine."""
        if self.deferred is not None:
            self.flush_deferred()
        self.machine.issue(Instruction(name, kwargs, loc))

    def defer(self, name: str, kwargs: dict[str, Any], loc: SourceLoc) -> None:
        """Hold ``nisa.<name>`` back until the next instruction (or :meth:`flush_deferred`)."""
        if self.deferred is not None:
            self.flush_deferred()
        self.deferred = Instruction(name, kwargs, loc)

    def flush_deferred(self) -> None:
        """Issue the instruction held back by :meth:`defer`, if any."""
        held, self.deferred = self.deferred, None
        if held is None:
            return
        try:
            self.machine.issue(held)
        except KernelError as exc:  # raised later than the call: point at the call's line, name the instruction
            exc.loc = held.loc
            exc.instruction = exc.instruction or f"nisa.{held.opcode}"
            exc.args = (exc._format(),)
            raise


_CURRENT: ContextVar[KernelContext | None] = ContextVar("nkisim_kernel", default=None)
_PROGRESS: ContextVar[Callable[[int], None] | None] = ContextVar("nkisim_progress", default=None)
_OPERANDS: ContextVar[bool] = ContextVar("nkisim_operands", default=True)


@contextlib.contextmanager
def keeping_operands(keep: bool) -> Iterator[None]:
    """Whether kernels started inside keep each instruction's operand summary on their timeline."""
    token = _OPERANDS.set(keep)
    try:
        yield
    finally:
        _OPERANDS.reset(token)


@contextlib.contextmanager
def progress_hook(hook: Callable[[int], None]) -> Iterator[None]:
    """Call ``hook(instructions so far)`` every ``PROGRESS_EVERY`` instructions of kernels started inside."""
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
