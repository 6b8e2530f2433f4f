"""The kernel being traced: which machine its ``nki`` calls go to, and how a call becomes an instruction record."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from nkisim.errors import KernelError, SourceLoc
from nkisim.hw import HwConfig
from nkisim.memory import MemorySystem, Tensor, same_bytes
from nkisim.memory.liveness import TilePlan
from nkisim.sim import Instruction, Machine
from nkisim.sim.checks import Checker, Findings
from nkisim.sim.machine import Budget
from nkisim.sim.multicore import Launch, Peer, SharedHbmMemory
from nkisim.sim.program import Recorder


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
        rank: the program's rank in a replica-group launch (``ncc.rank_id()``); 0 otherwise.
        num_ranks: the ranks of the launch (1 unless ``nkisim.run(..., ranks=N)``).
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
        rank: int = 0,
    ) -> None:
        if memory is None:
            memory = (
                MemorySystem(hw, poison=compute, plan=plan)
                if launch is None
                else SharedHbmMemory(hw, launch, program_id, compute, plan, rank=rank)
            )
        peer = Peer(launch, program_id, rank) if launch is not None else None
        if launch is None:  # one core: every use of a tile's bytes goes through its machine
            memory.defer_poison = memory.poison
        checker = Checker(findings, hw, values_known=compute) if findings is not None else None
        self.machine = Machine(
            hw,
            compute=compute,
            memory=memory,
            peer=peer,
            on_progress=_PROGRESS.get(),
            budget=budget,
            checker=checker,
            operands=_OPERANDS.get(),
            recorder=_RECORDER.get(),
        )
        #: ``nl.device_print`` output already shown in this run.
        self.prints = prints if prints is not None else PrintLog()
        self.program_id = program_id
        self.num_programs = num_programs
        self.rank = rank
        self.num_ranks = launch.ranks if launch is not None else 1
        self.grid = grid
        self.kernel_name = ""
        #: An instruction held back by the legacy front end until the next one is issued
        #: (``acc += nisa.nc_matmul(...)`` retargets a matmul into ``acc`` before it issues).
        self.deferred: Instruction | None = None
        #: On-chip tiles whose fill waits for their first use, by allocation (``uid``): the tile
        #: (weakly: a tile never used is never filled), the value and the line that asked for it.
        self.lazy_fills: dict[int, tuple[weakref.ref[Tensor], Any, SourceLoc]] = {}
        #: A weak reference to this context, one for every instruction handle (a handle must not keep a finished
        #: run's memory alive).
        self.weak = weakref.ref(self)
        #: The loops that run on the device (``nl.fori_loop``, ``nl.while_loop``, ``nl.dynamic_range``)
        #: the kernel is inside now, outermost first, as (loop number, iteration).
        self.dynamic_scope: tuple[tuple[int, int], ...] = ()
        #: Dynamic loops started so far (each gets the next number).
        self.dynamic_loops = 0

    @property
    def hw(self) -> HwConfig:
        return self.machine.hw

    @property
    def memory(self) -> MemorySystem:
        return self.machine.memory

    @property
    def compute(self) -> bool:
        return self.machine.compute

    def emit(self, name: str, kwargs: dict[str, Any], loc: SourceLoc) -> int:
        """Hand one ``nisa.<name>`` call to the machine; returns its index in program order."""
        if self.deferred is not None:
            self.flush_deferred()
        if self.lazy_fills:
            self._fill_before(kwargs)
        return self.machine.issue(Instruction(name, kwargs, loc))

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
            if self.lazy_fills:
                self._fill_before(held.arguments)
            self.machine.issue(held)
        except KernelError as exc:  # raised later than the call: point at the call's line, name the instruction
            exc.loc = held.loc
            exc.instruction = exc.instruction or f"nisa.{held.opcode}"
            exc.args = (exc._format(),)
            raise

    # -- fills issued at first use ---------------------------------------------------------

    def fill_later(self, tile: Tensor, value: Any, loc: SourceLoc) -> None:
        """Fill ``tile`` with ``value`` by a ``memset`` issued just before the first instruction that uses it.

        The values are set at once (so printing the tile shows them); only the instruction waits.
        A tile no instruction ever uses is never filled, and :meth:`start_accumulation` may
        drop the fill altogether.
        """
        if self.compute:
            self.machine.store(tile.array, value)
        self.lazy_fills[tile.uid] = (weakref.ref(tile), value, loc)

    def start_accumulation(self, target: Tensor) -> bool:
        """A matmul is about to accumulate into all of ``target``: drop a zero fill waiting for it.

        A matmul accumulating into a PSUM tile that nothing has written yet starts a new
        accumulation group (it overwrites), which equals zeros plus the product: the
        ``memset`` is not needed, as the compiler does not emit it. True when one was dropped.
        """
        entry = self.lazy_fills.get(target.uid)
        if entry is None or entry[1] != 0:
            return False
        tile = entry[0]()
        if tile is None or not same_bytes(target, tile):
            return False
        del self.lazy_fills[target.uid]
        return True

    def _fill_before(self, arguments: dict[str, Any]) -> None:
        """Issue the fills of tiles an instruction is about to use (read or written, whole or in part)."""
        fills = self.lazy_fills
        for tensor in _tensors(arguments.values()):
            for used in (tensor, *tensor.index_tensors):
                entry = fills.pop(used.uid, None)
                if entry is None:
                    continue
                tile = entry[0]()
                if tile is not None:
                    self.machine.issue(Instruction("memset", {"dst": tile, "value": entry[1]}, entry[2]))


def _tensors(values: Any) -> Iterator[Tensor]:
    for value in values:
        if isinstance(value, Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensors(value)


_CURRENT: ContextVar[KernelContext | None] = ContextVar("nkisim_kernel", default=None)
_PROGRESS: ContextVar[Callable[[int], None] | None] = ContextVar("nkisim_progress", default=None)
_OPERANDS: ContextVar[bool] = ContextVar("nkisim_operands", default=True)
_RECORDER: ContextVar[Recorder | None] = ContextVar("nkisim_recorder", default=None)


@contextlib.contextmanager
def recording(recorder: Recorder) -> Iterator[None]:
    """Record the kernels started inside into ``recorder`` (``nkisim.compile``)."""
    token = _RECORDER.set(recorder)
    try:
        yield
    finally:
        _RECORDER.reset(token)


def current_recorder() -> Recorder | None:
    """The recorder of the runs started here, if a program is being compiled."""
    return _RECORDER.get()


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


#: The running kernel's context, or None outside a run: the context variable's own method, for the calls made per
#: instruction and per tile (``running_context() or current_context()`` raises the clear error instead of None).
running_context = _CURRENT.get


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
