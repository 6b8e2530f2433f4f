"""Multi-core launches (LNC=2): the two programs of ``kernel[2]`` as threads that take turns.

A kernel is Python code, so each program is traced by running it: each runs in its own
thread, on its own :class:`~nkisim.sim.machine.Machine` (its own SBUF, PSUM, private HBM,
engines and timeline). Only one thread runs at a time: after each instruction the machine
gives the turn to the other program (:meth:`Peer.yield_turn`), so the two advance together
in program order, as two cores running the same kernel do. At a synchronisation point (an
instruction spec with a ``synchronise`` hook: ``nisa.core_barrier``, ``nisa.sendrecv``) a
program waits until the other reaches the matching point; the two then exchange what they
bring (arrival times, data). The order is deterministic: program 0 always starts.

``nl.shared_hbm`` tensors are shared: the ``k``-th one a program allocates is the
``k``-th one the other allocates (the compiler allocates each once for both cores).
The kernel's inputs are shared too. SBUF, PSUM and private HBM are per program.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from nkisim.errors import KernelError, ShapeError, SourceLoc
from nkisim.hw import HwConfig
from nkisim.memory import Buffer, MemorySystem, Tensor
from nkisim.memory.liveness import TilePlan
from nkisim.memory.space import describe
from nkisim.sim.timeline import Timeline


class _Aborted(BaseException):
    """Unwinds a program after the other one failed (never seen by kernel code's ``except Exception``)."""


@dataclass(frozen=True)
class _Pending:
    key: tuple[Any, ...]
    payload: Any
    loc: SourceLoc | None


class Launch:
    """The shared state of one multi-program launch."""

    def __init__(self, programs: int) -> None:
        if programs != 2:
            raise ValueError("a launch runs exactly two programs")
        self.programs = programs
        self.returns: list[Any] = [None] * programs
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._turn = 0
        self._finished = [False] * programs
        self._waiting: dict[int, _Pending] = {}
        self._results: dict[int, list[Any]] = {}
        self._shared: list[Tensor] = []

    # -- running ------------------------------------------------------------------------

    def run(self, bodies: list[Callable[[], Any]]) -> list[Any]:
        """Run one body per program to completion; re-raise the first error of any."""
        threads = [
            threading.Thread(target=self._program, args=(pid, body), name=f"nkisim-core{pid}", daemon=True)
            for pid, body in enumerate(bodies)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.error is not None:
            raise self.error
        return self.returns

    def _program(self, pid: int, body: Callable[[], Any]) -> None:
        try:
            with self._cond:
                self._cond.wait_for(lambda: self._turn == pid or self.error is not None)
                if self.error is not None:
                    return
            self.returns[pid] = body()
        except _Aborted:
            pass
        except BaseException as exc:  # re-raised by the launching thread
            with self._cond:
                if self.error is None:
                    self.error = exc
                self._cond.notify_all()
        finally:
            self._finish(pid)

    def _finish(self, pid: int) -> None:
        with self._cond:
            self._finished[pid] = True
            other = 1 - pid
            pending = self._waiting.get(other)
            if pending is not None and self.error is None:
                self.error = KernelError(
                    f"{pending.key[0]} in program {other} waits for program {pid}, which returned without reaching it",
                    loc=pending.loc,
                )
            self._turn = other
            self._cond.notify_all()

    def _runnable(self, pid: int) -> bool:
        return not self._finished[pid] and pid not in self._waiting

    def _check(self) -> None:
        if self.error is not None:
            raise _Aborted

    def yield_turn(self, pid: int) -> None:
        """Let the other program run its next instruction, then continue."""
        with self._cond:
            self._check()
            other = 1 - pid
            if not self._runnable(other):
                return
            self._turn = other
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._turn == pid or self.error is not None)
            self._check()

    def exchange(self, pid: int, key: tuple[Any, ...], payload: Any, loc: SourceLoc | None) -> list[Any]:
        """Wait until the other program reaches the same synchronisation point; both payloads, by program id.

        Raises:
            KernelError: the other program waits at a different point, or has returned.
        """
        with self._cond:
            self._check()
            other = 1 - pid
            pending = self._waiting.pop(other, None)
            if pending is not None:
                if pending.key != key:
                    raise KernelError(
                        f"program {pid} reached {_describe(key)} while program {other} waits at "
                        f"{_describe(pending.key)} ({pending.loc}): the programs would deadlock",
                        loc=loc,
                    )
                payloads = [payload, pending.payload] if pid == 0 else [pending.payload, payload]
                self._results[other] = payloads
                return payloads
            if self._finished[other]:
                raise KernelError(
                    f"program {pid} reached {_describe(key)} but program {other} returned without reaching it", loc=loc
                )
            self._waiting[pid] = _Pending(key, payload, loc)
            self._turn = other
            self._cond.notify_all()
            self._cond.wait_for(lambda: (pid in self._results and self._turn == pid) or self.error is not None)
            self._check()
            return self._results.pop(pid)

    # -- shared HBM ---------------------------------------------------------------------

    def shared_tensor(self, index: int, make: Callable[[], Tensor]) -> Tensor:
        """The ``index``-th shared HBM tensor: made by the first program to allocate it."""
        with self._cond:
            if index < len(self._shared):
                return self._shared[index]
            tensor = make()
            self._shared.append(tensor)
            return tensor


def _describe(key: tuple[Any, ...]) -> str:
    name, *rest = key
    return f"nisa.{name}" + (f" (pipe_id={rest[0]})" if rest else "")


class Peer:
    """One program's handle on its launch (what synchronising instructions talk to)."""

    def __init__(self, launch: Launch, program_id: int) -> None:
        self.launch = launch
        self.program_id = program_id
        self.num_programs = launch.programs

    def exchange(self, key: tuple[Any, ...], payload: Any, loc: SourceLoc | None) -> list[Any]:
        """Block until every program reaches ``key``; returns their payloads by program id."""
        return self.launch.exchange(self.program_id, key, payload, loc)

    def yield_turn(self) -> None:
        self.launch.yield_turn(self.program_id)


class SharedHbmMemory(MemorySystem):
    """One program's memories; its ``nl.shared_hbm`` allocations are matched with the other program's."""

    def __init__(
        self, hw: HwConfig, launch: Launch, program_id: int, poison: bool = True, plan: TilePlan | None = None
    ) -> None:
        super().__init__(hw, poison=poison, plan=plan)
        self.launch = launch
        self.program_id = program_id
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
            index, lambda: super(SharedHbmMemory, self).new_tensor(shape, dtype, buffer, *args, **kwargs)
        )
        if tensor.shape != tuple(shape) or tensor.dtype != dtype:
            raise ShapeError(
                f"nl.ndarray: program {self.program_id} allocates shared_hbm tensor number {index} as "
                f"{describe(tuple(shape), dtype)}, but the other program allocated it as "
                f"{describe(tensor.shape, tensor.dtype)}; both programs must allocate the same shared tensors"
            )
        return tensor


def merge_timelines(timelines: list[Timeline]) -> Timeline:
    """The cores' timelines side by side, one after the other, on tracks named ``core<i> <engine>``."""
    return Timeline.side_by_side(timelines, [f"core{core} " for core in range(len(timelines))])
