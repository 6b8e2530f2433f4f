"""Multi-program launches: the cores of an LNC=2 launch (``kernel[2]``) and the ranks of a replica group.

A kernel is Python code, so each program is traced by running it: each runs as its own
greenlet (a coroutine with its own stack, in the caller's thread), on its own
:class:`~nkisim.sim.machine.Machine` (its own SBUF, PSUM, private HBM, engines and timeline).
One program runs at a time: after each instruction the machine gives the turn to the next
program that can run (:meth:`Peer.yield_turn`, round robin in program order), so the programs
advance together in program order, as cores running the same kernel do. Passing the turn is a
switch of stacks (well under a microsecond), not of threads (tens of microseconds through the
operating system), and a launch starts no threads. At a synchronisation point (an instruction
spec with a ``synchronise`` hook: ``nisa.core_barrier``, ``nisa.sendrecv``, the
``nki.collectives`` instructions) a program waits until every program of its group reaches
the matching point; they then exchange what they bring (arrival times, data). The order is
deterministic: program 0 always starts, and turns pass in a fixed order.

A launch runs ``ranks x cores`` programs: program ``rank * cores + core`` is core ``core``
of rank ``rank`` (a rank is one logical NeuronCore of ``cores`` physical ones). The cores of
one rank meet at ``core_barrier``/``sendrecv``; a collective meets the same core of each
rank in a replica group's rank list.

``nl.shared_hbm`` tensors are shared by the cores of one rank: the ``k``-th one a program
allocates is the ``k``-th one the other cores of its rank allocate (the compiler allocates
each once per logical core). Each rank's inputs are shared by its cores too. SBUF, PSUM
and private HBM are per program; nothing is shared between ranks but what collectives move.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from greenlet import greenlet

from nkisim.errors import KernelError, ShapeError, SourceLoc
from nkisim.hw import HwConfig
from nkisim.memory import Buffer, MemorySystem, Tensor
from nkisim.memory.liveness import TilePlan
from nkisim.memory.space import describe
from nkisim.sim.timeline import Timeline


class _Aborted(BaseException):
    """Unwinds a program after another one failed (never seen by kernel code's ``except Exception``)."""


@dataclass(frozen=True)
class _Pending:
    group: tuple[int, ...]
    key: tuple[Any, ...]
    payload: Any
    loc: SourceLoc | None


class Launch:
    """The shared state of one multi-program launch: ``ranks`` logical cores of ``cores`` programs each."""

    def __init__(self, programs: int, cores: int | None = None) -> None:
        cores = programs if cores is None else cores
        if programs < 1 or cores < 1 or programs % cores:
            raise ValueError(f"a launch of {programs} programs cannot have {cores} cores per rank")
        self.programs = programs
        self.cores = cores
        self.ranks = programs // cores
        self.returns: list[Any] = [None] * programs
        self.error: BaseException | None = None
        self._turn = 0
        self._finished = [False] * programs
        self._unfinished = programs
        self._waiting: dict[int, _Pending] = {}
        self._results: dict[int, list[Any]] = {}
        self._shared: dict[int, list[Tensor]] = {}
        self._dispatcher: greenlet | None = None

    def describe(self, pid: int) -> str:
        """``program 1`` in an LNC launch of one rank, else ``rank 2`` (or ``rank 2 core 1``)."""
        if self.ranks == 1:
            return f"program {pid}"
        rank, core = divmod(pid, self.cores)
        return f"rank {rank}" if self.cores == 1 else f"rank {rank} core {core}"

    # -- running ------------------------------------------------------------------------

    def run(self, bodies: list[Callable[[], Any]]) -> list[Any]:
        """Run one body per program to completion; re-raise the first error of any.

        The calling greenlet dispatches: it switches to the program whose turn it is, which runs
        until it passes the turn (or waits, or returns) and switches back. Each program runs in a
        copy of the caller's ``contextvars`` context, as a one-core kernel runs in the caller's own:
        the run's options held there (``affine_order``) apply to every core.
        """
        self._dispatcher = greenlet.getcurrent()
        programs = []
        for pid, body in enumerate(bodies):
            program = greenlet(self._program(pid, body))
            program.gr_context = contextvars.copy_context()
            programs.append(program)
        while self.error is None and self._unfinished:
            programs[self._turn].switch()
        for program in programs:  # after an error: unwind the programs that started (their finally blocks run)
            if program and not program.dead:
                program.throw(_Aborted)
        if self.error is not None:
            raise self.error
        return self.returns

    def _program(self, pid: int, body: Callable[[], Any]) -> Callable[[], None]:
        def program() -> None:
            try:
                self.returns[pid] = body()
            except _Aborted:
                return
            except BaseException as exc:  # re-raised by the dispatcher
                if self.error is None:
                    self.error = exc
            self._finish(pid)

        return program

    def _switch_away(self) -> None:
        """Hand control to the dispatcher until this program's turn comes again; unwind if another failed."""
        assert self._dispatcher is not None
        self._dispatcher.switch()
        self._check()

    def _finish(self, pid: int) -> None:
        self._finished[pid] = True
        self._unfinished -= 1
        for waiter, pending in self._waiting.items():
            if pid in pending.group and self.error is None:
                self.error = KernelError(
                    f"{_describe(pending.key)} in {self.describe(waiter)} waits for {self.describe(pid)}, "
                    "which returned without reaching it",
                    loc=pending.loc,
                )
        self._pass_turn(pid)

    def _runnable(self, pid: int) -> bool:
        return not self._finished[pid] and pid not in self._waiting

    def _next_runnable(self, pid: int) -> int | None:
        """The first program after ``pid`` (round robin) that can run, other than ``pid`` itself."""
        for step in range(1, self.programs):
            other = (pid + step) % self.programs
            if self._runnable(other):
                return other
        return None

    def _pass_turn(self, pid: int) -> None:
        """Give the turn away from ``pid``, which cannot run now; a launch where nobody can is deadlocked."""
        other = self._next_runnable(pid)
        if other is not None:
            self._turn = other
        elif self._waiting and self.error is None:
            waits = "; ".join(
                f"{self.describe(w)} at {_describe(p.key)} ({p.loc})" for w, p in sorted(self._waiting.items())
            )
            first = min(self._waiting)
            self.error = KernelError(
                f"every program waits and none can go on, the programs would deadlock: {waits}",
                loc=self._waiting[first].loc,
            )

    def _check(self) -> None:
        if self.error is not None:
            raise _Aborted

    def yield_turn(self, pid: int) -> None:
        """Let the next program that can run take its turn (one instruction at least), then continue."""
        self._check()
        other = self._next_runnable(pid)
        if other is None:
            return
        self._turn = other
        self._switch_away()

    def exchange(
        self, pid: int, group: tuple[int, ...], key: tuple[Any, ...], payload: Any, loc: SourceLoc | None
    ) -> list[Any]:
        """Wait until every program of ``group`` reaches the same point ``key``; their payloads, in group order.

        Raises:
            KernelError: another program of the group waits at a different point, or has returned,
                or every program waits (a deadlock).
        """
        self._check()
        here = _Pending(group, key, payload, loc)
        arrived = {pid: here}
        for other in group:
            if other == pid:
                continue
            pending = self._waiting.get(other)
            if pending is not None and pending.group == group:
                if pending.key != key:
                    raise KernelError(
                        f"{self.describe(pid)} reached {_describe(key)} while {self.describe(other)} waits at "
                        f"{_describe(pending.key)} ({pending.loc}): the programs would deadlock",
                        loc=loc,
                    )
                arrived[other] = pending
            elif self._finished[other]:
                raise KernelError(
                    f"{self.describe(pid)} reached {_describe(key)} but {self.describe(other)} returned "
                    "without reaching it",
                    loc=loc,
                )
        if len(arrived) == len(group):
            payloads = [arrived[member].payload for member in group]
            for member in group:
                if member != pid:
                    del self._waiting[member]
                    self._results[member] = payloads
            return payloads
        self._waiting[pid] = here
        self._pass_turn(pid)
        while pid not in self._results:  # the turn comes back only once the group has met (or on an error)
            self._switch_away()
        return self._results.pop(pid)

    # -- shared HBM ---------------------------------------------------------------------

    def shared_tensor(self, rank: int, index: int, make: Callable[[], Tensor]) -> Tensor:
        """Rank ``rank``'s ``index``-th shared HBM tensor: made by the first of its cores to allocate it."""
        shared = self._shared.setdefault(rank, [])
        if index < len(shared):
            return shared[index]
        tensor = make()
        shared.append(tensor)
        return tensor


def _describe(key: tuple[Any, ...]) -> str:
    name, *rest = key
    if name.startswith("ncc."):
        return name
    return f"nisa.{name}" + (f" (pipe_id={rest[0]})" if rest else "")


class Peer:
    """One program's handle on its launch (what synchronising instructions talk to).

    Attributes:
        program_id: this program's core within its rank (``nl.program_id(0)``).
        num_programs: the cores of a rank (the LNC size).
        rank: this program's rank; ``num_ranks``: the ranks of the launch.
    """

    def __init__(self, launch: Launch, program_id: int, rank: int = 0) -> None:
        self.launch = launch
        self.program_id = program_id
        self.num_programs = launch.cores
        self.rank = rank
        self.num_ranks = launch.ranks
        self._pid = rank * launch.cores + program_id
        self._cores = tuple(rank * launch.cores + core for core in range(launch.cores))

    def exchange(self, key: tuple[Any, ...], payload: Any, loc: SourceLoc | None) -> list[Any]:
        """Block until every core of this rank reaches ``key``; returns their payloads by core."""
        return self.launch.exchange(self._pid, self._cores, key, payload, loc)

    def exchange_ranks(
        self, ranks: tuple[int, ...], key: tuple[Any, ...], payload: Any, loc: SourceLoc | None
    ) -> list[Any]:
        """Block until this core of every rank in ``ranks`` reaches ``key``; their payloads, in ``ranks`` order."""
        group = tuple(rank * self.launch.cores + self.program_id for rank in ranks)
        return self.launch.exchange(self._pid, group, key, payload, loc)

    def yield_turn(self) -> None:
        self.launch.yield_turn(self._pid)


class SharedHbmMemory(MemorySystem):
    """One program's memories; its ``nl.shared_hbm`` allocations are matched with those of its rank's other cores."""

    def __init__(
        self,
        hw: HwConfig,
        launch: Launch,
        program_id: int,
        poison: bool = True,
        plan: TilePlan | None = None,
        rank: int = 0,
    ) -> None:
        super().__init__(hw, poison=poison, plan=plan)
        self.launch = launch
        self.program_id = program_id
        self.rank = rank
        #: False while the kernel's inputs are bound (they are shared by construction).
        self.sharing = True
        self._shared_count = 0

    @contextlib.contextmanager
    def unshared(self) -> Iterator[None]:
        """Allocations made inside are this program's alone (the kernel's inputs, shared by passing them)."""
        self.sharing = False
        try:
            yield
        finally:
            self.sharing = True

    def new_tensor(self, shape: tuple[int, ...], dtype: np.dtype, buffer: Buffer, *args: Any, **kwargs: Any) -> Tensor:
        if buffer is not Buffer.shared_hbm or not self.sharing:
            return super().new_tensor(shape, dtype, buffer, *args, **kwargs)
        index = self._shared_count
        self._shared_count += 1
        tensor = self.launch.shared_tensor(
            self.rank, index, lambda: super(SharedHbmMemory, self).new_tensor(shape, dtype, buffer, *args, **kwargs)
        )
        if tensor.shape != tuple(shape) or tensor.dtype != dtype:
            raise ShapeError(
                f"nl.ndarray: program {self.program_id} allocates shared_hbm tensor number {index} as "
                f"{describe(tuple(shape), dtype)}, but the other program allocated it as "
                f"{describe(tensor.shape, tensor.dtype)}; both programs must allocate the same shared tensors"
            )
        return tensor


def merge_timelines(timelines: list[Timeline], cores: int | None = None) -> Timeline:
    """The programs' timelines side by side, one after the other.

    Tracks are named ``core<i> <engine>`` for the cores of one rank, ``rank<r> <engine>`` for
    ranks of one core each, and ``rank<r> core<i> <engine>`` for ranks of several cores.
    """
    cores = len(timelines) if cores is None else cores
    ranks = len(timelines) // cores
    if ranks == 1:
        prefixes = [f"core{core} " for core in range(cores)]
    elif cores == 1:
        prefixes = [f"rank{rank} " for rank in range(ranks)]
    else:
        prefixes = [f"rank{rank} core{core} " for rank in range(ranks) for core in range(cores)]
    return Timeline.side_by_side(timelines, prefixes)
