"""The execution core: one NeuronCore's memories, engine state and timeline, and the walk of one instruction.

The front end traces a kernel and hands each call over as an :class:`Instruction`
record. :meth:`Machine.issue` then does, in this order:

1. **operands**: bind the arguments to the spec's operand model (NKI's names and defaults);
2. **engine**: the requested engine, the spec's choice, or its default;
3. **validate**: the target has what the spec requires, the common rules, the spec's own rules;
4. **execute**: the spec's numpy semantics over the operands' memory views (skipped in a
   shapes-only profile);
5. **accesses**: the regions read and written (tensor operands, dynamic offsets, and the spec's
   declared ``extra_accesses``), which tile lifetimes and dependency tracking use;
6. **cost**: the spec's cost formula over the target's numbers;
7. **schedule**: place it on its engine's or DMA queue's timeline, after the spec's
   ``synchronise`` hook (if any) has met the other cores of a multi-core launch.

An operand in a spilled SBUF or PSUM tile (:mod:`nkisim.memory.system`) adds the compiler's
spill traffic around the instruction: before it, a ``spill_reload`` DMA of the bytes it reads
from the tile (from the next-tier memory: device memory for SBUF, SBUF for PSUM), which it
waits for; after it, a ``spill_save`` DMA of the bytes it writes back to that memory, which
later reads of those bytes wait for.
Both run on the spill queue (:data:`~nkisim.sim.scheduler.SPILL_TRACK`) and appear on the
timeline with the instruction's kernel line.

The placement of step 7 waits until the next instruction is issued (or the timeline is
read), so that :meth:`Machine.depend` can still add scheduling edges to the latest
instruction. Steps 1-6 happen at once, so values are there as soon as the call returns;
the order of placements, and so every time, is the same as placing at once. An
instruction with a ``synchronise`` hook is placed at once: the other core has already
been told when it arrives.

Every per-instruction hook is a field of :class:`~nkisim.isa.spec.InstructionSpec`; the machine
knows no instruction by name. Another instruction set (another kind of engine) brings its own
registry of specs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import ValidationError

from nkisim.errors import BudgetError, ExecutionError, KernelError, OperandError, SourceLoc, TargetError
from nkisim.hw import Engine, HwConfig
from nkisim.isa import NKI_INSTRUCTIONS, Check, Cost, EngineState, InstructionSpec
from nkisim.isa.common import check_common
from nkisim.isa.dma import dma_cost
from nkisim.isa.spec import Peer, missing_capability, needs
from nkisim.memory import ON_CHIP_BUFFERS, MemorySystem, Region, Tensor
from nkisim.memory.dtypes import logging as conversions_to
from nkisim.memory.dtypes import stop_logging as stop_conversions
from nkisim.memory.system import BROKEN, BorrowedInputWritten
from nkisim.sim.checks import Checker
from nkisim.sim.plans import MAX_PLANS, Plan, bind, call_key, cost_of, make_plan, setup_region, with_operands
from nkisim.sim.program import Recorder
from nkisim.sim.scheduler import Scheduler, Timeline

#: How many instructions pass between calls of a progress hook.
PROGRESS_EVERY = 4096

#: The default instruction budget of one run (per core): a timeline of this many
#: instructions takes a few GiB of host memory.
DEFAULT_MAX_INSTRUCTIONS = 5_000_000

#: How many instructions pass between two looks at the clock for a wall-time budget.
_CLOCK_EVERY = 256

#: The scheduler rows one plan keeps, one per source line (and unit); calls from further lines make theirs each time.
MAX_ROWS_PER_PLAN = 256


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits that stop a runaway kernel with a :class:`~nkisim.errors.BudgetError`.

    Attributes:
        max_instructions: instructions one core may issue (None: no limit).
        timeout: seconds of wall time from ``start`` (None: no limit); checked every few
            hundred instructions, so a Python loop that issues none is not stopped.
        start: the ``time.monotonic()`` the run started at.
    """

    max_instructions: int | None = DEFAULT_MAX_INSTRUCTIONS
    timeout: float | None = None
    start: float = 0.0

    @property
    def deadline(self) -> float | None:
        return None if self.timeout is None else self.start + self.timeout


class Instruction(NamedTuple):
    """One traced instruction call, as the front end hands it to the machine.

    A named tuple: made once per instruction, at a quarter of a frozen dataclass's cost.

    Attributes:
        opcode: the instruction's registry name (``tensor_tensor``, ``dma_copy``, ...).
        arguments: the call's arguments by NKI's argument names.
        loc: the kernel line that made the call.
        unit: which instance of a replicated engine runs it (one of several cores of one kind, each
            an in-order track of its own: ``GpSimd 3``); None for the NeuronCore's single engines.
    """

    opcode: str
    arguments: dict[str, Any]
    loc: SourceLoc
    unit: int | None = None


class Machine:
    """One core: memories, engine state and timeline, and the instruction walk.

    Args:
        hw: the generation simulated.
        compute: when False, only the timeline is built (shapes and dtypes are enough).
        memory: the core's memories (by default its own; a multi-core launch shares HBM).
        peer: this core's link to the other cores of a multi-core launch, else None.
        registry: the instruction specs this machine runs, by name.
        on_progress: called with the instruction count every :data:`PROGRESS_EVERY` instructions.
        budget: the instruction and wall-time limits (by default :data:`DEFAULT_MAX_INSTRUCTIONS`, no timeout).
        checker: the sanitizer of this core (``check="strict"`` or ``"warn"``), or None.
        operands: keep each instruction's operand summary on the timeline (``Timeline.args``,
            the Perfetto trace); without them a profile's memory stays bounded by the
            instruction count even when operands differ from one instruction to the next.
        recorder: records every step that sets values, to replay the run on new inputs
            (:mod:`nkisim.sim.program`); None (the default) records nothing.
    """

    def __init__(
        self,
        hw: HwConfig,
        *,
        compute: bool = True,
        memory: MemorySystem | None = None,
        peer: Peer | None = None,
        registry: Mapping[str, InstructionSpec] = NKI_INSTRUCTIONS,
        on_progress: Callable[[int], None] | None = None,
        budget: Budget | None = None,
        checker: Checker | None = None,
        operands: bool = True,
        recorder: Recorder | None = None,
    ) -> None:
        self.hw = hw
        self.operands = operands
        self.compute = compute
        self.memory = memory if memory is not None else MemorySystem(hw, poison=compute)
        self.state = EngineState(hw.sbuf.partitions, hw.capabilities)
        self.scheduler = Scheduler(hw)
        self.peer = peer
        self.registry = registry
        self.on_progress = on_progress
        self.budget = budget if budget is not None else Budget(start=time.monotonic())
        self._limit = self.budget.max_instructions
        self._next_check = 0  # the instruction count at which _checkpoint runs next
        self.checker = checker
        #: Plans by call key (nkisim.sim.plans): what each operand geometry decided, for this machine.
        self._plans: dict[tuple[object, ...], Plan] = {}
        #: The latest instruction, issued but not yet placed: the arguments of ``Scheduler.schedule``.
        self._pending: tuple[Any, ...] | None = None
        #: Instructions the pending one must wait for (:meth:`depend`, and its spill refills).
        self._pending_after: list[int] = []
        #: The spill saves that follow the pending instruction: (cost, the spilled regions it writes).
        self._pending_saves: list[tuple[Cost, Region]] = []
        #: Kernel instructions issued so far (the timeline also holds spill transfers).
        self._issued = 0
        if checker is not None:
            self.memory.on_allocate = checker.allocated
            self.memory.on_spill = checker.spilled
        self.recorder = recorder
        if recorder is not None:
            recorder.attach(self)

    @property
    def timeline(self) -> Timeline:
        """Every instruction issued so far, scheduled."""
        if self._pending is not None:
            self._place()
        return self.scheduler.timeline

    def issue(self, instruction: Instruction) -> int:
        """Validate, execute, account and cost one instruction; returns its index in program order.

        It is placed on the timeline when the next instruction is issued or the timeline is read.
        """
        borrowed = self.memory.borrowed
        if borrowed and BROKEN in borrowed:  # an input is read in place, and a write into it was tried
            self.check_running()
        if self._pending is not None:
            self._place()
        spec = self.registry[instruction.opcode]
        loc = instruction.loc
        if self.scheduler.count >= self._next_check:
            self._checkpoint(spec, loc)
        arguments = instruction.arguments
        key = call_key(instruction.opcode, arguments)
        # registers and views at run-time offsets read bytes the operands do not show, some while validated; a
        # planned call (a key) has only static views
        memory = self.memory
        if (memory.unpoisoned or memory.deferred or memory.hbm_unpoisoned) and (
            spec.extra_accesses is not None or (key is None and _has_dynamic_view(arguments))
        ):
            memory.settle_pending()
        if memory.deferred and spec.reads_values is None:  # its checks and semantics see the tiles' own bytes
            memory.deferred.make_all()
        plan = self._plans.get(key) if key is not None else None
        if plan is None:
            ops = self._operands(spec, instruction)
            engine = self._engine(spec, ops, loc)
            self._validate(spec, ops, Check(spec.name, engine, self.hw, loc, spec.namespace))
            tensor_reads, tensor_writes = ops.accessed()
            adds = spec.accumulates(ops) if spec.accumulates is not None else False
        else:
            if plan.lazy and not self.compute and self.recorder is None:
                ops = None  # shapes only: made if the sanitizer asks (Checker.before)
            elif plan.template is not None:
                ops = bind(plan, spec, arguments)
            else:
                ops = self._operands(spec, instruction)
            engine = plan.engine
            adds = plan.adds
            if plan.reads is None or plan.writes is None:
                tensor_reads, tensor_writes = ops.accessed()
            else:  # the plain arguments, and their regions (one loop: a comprehension is a call)
                tensor_reads, reads = [], []
                for name in plan.reads:
                    t = arguments[name]
                    tensor_reads.append((name, t))
                    reads.append(t._region or t.region)  # the property's memo, read directly
                tensor_writes, writes = [], []
                for name in plan.writes:
                    t = arguments[name]
                    tensor_writes.append((name, t))
                    writes.append(t._region or t.region)
        self._check_own_tiles(spec, loc, tensor_reads, tensor_writes)
        if borrowed:
            self.memory.check_writes(tensor_writes)
        if memory.plan is None:  # MemorySystem.issued without a tile plan to record, without the call
            memory.sbuf.now = memory.psum.now = self._issued + 1
        else:
            memory.issued(self._issued, tensor_reads, tensor_writes)
        self._issued += 1
        checker = self.checker
        if checker is not None:
            checker.before(spec, engine, loc, ops, tensor_reads, tensor_writes, adds, plan, arguments)
        if self.compute:
            waits = self._may_wait(spec, ops) if spec.copies is not None and memory.defer_poison else None
            if memory.unpoisoned:  # here, so that a tile is left unfilled only when its values come
                memory.settle_poison(tensor_reads, tensor_writes, spec.overwrites, ops)
            if memory.hbm_unpoisoned and (plan is None or not plan.on_chip):
                memory.settle_hbm_poison(tensor_reads, tensor_writes, spec.overwrites, ops)
            if self.recorder is not None:
                self.recorder.instruction(spec, ops, loc)
            given = ops
            if memory.deferred:
                assert spec.reads_values is not None  # else made above
                substitutes = memory.deferred.settle(ops, spec.reads_values(ops), tensor_reads, tensor_writes)
                if substitutes is not None:
                    given = with_operands(ops, substitutes)
            if waits is None or not memory.deferred.defer(*waits):
                self._execute(spec, given, engine, loc)
        if checker is not None:
            checker.after(spec, engine, tensor_writes)
        if plan is None or plan.reads is None or plan.writes is None or spec.extra_accesses is not None:
            reads, writes = self._accesses(spec, ops, tensor_reads, tensor_writes)
        # else a plan's operands are static views (call_key): their regions, above, are all the instruction accesses
        if self.memory.spilled:
            self._spill_traffic(loc, tensor_reads, tensor_writes)
        index = self.scheduler.count
        if plan is not None and plan.direct:  # queued with its site's row, made once
            unit = instruction.unit
            rows = plan.rows
            row_key = id(loc) if unit is None else (id(loc), unit)  # the entry keeps its line: its id is not reused
            known = rows.get(row_key)
            if known is not None and known[0] is loc:
                row = known[1]
            else:
                assert plan.cost is not None
                row = self.scheduler.row(spec.name, engine, plan.cost, loc, len(reads), 0.0, plan.summary, unit)
                if len(rows) < MAX_ROWS_PER_PLAN:
                    rows[row_key] = (loc, row)
            setup = None if plan.setup_operand is None else setup_region(plan, ops, arguments)
            self._pending = (row, reads, writes, setup, loc)
            if self.peer is not None:
                self.peer.yield_turn()
            return index
        if plan is None:
            cost = spec.cost(ops, self.hw, engine)
            summary = _summary(ops) if self.operands else ()
            if key is not None and len(self._plans) < MAX_PLANS:
                self._plans[key] = make_plan(spec, arguments, ops, engine, cost, summary)
        else:
            cost = cost_of(plan, ops) if plan.cost is not None else spec.cost(ops, self.hw, engine)
            summary = plan.summary
        if spec.synchronise is not None:
            arrival = self.scheduler.earliest_start(engine, reads, writes, instruction.unit)
            chk = Check(spec.name, engine, self.hw, loc, spec.namespace)
            not_before, cost = spec.synchronise(ops, self.peer, arrival, cost, self.compute, chk)
            after, self._pending_after = self._pending_after, []
            self.scheduler.schedule(
                spec.name, engine, cost, reads, writes, loc, not_before=not_before, args=summary,
                unit=instruction.unit, after=after,
            )  # fmt: skip
            self._save_spilled(index, loc)
        else:
            self._pending = (spec.name, engine, cost, reads, writes, loc, summary, instruction.unit)
        if self.peer is not None:
            self.peer.yield_turn()
        return index

    def check_running(self) -> None:
        """Raise :class:`BorrowedInputWritten` again when the kernel caught it: the run must stop and start again.

        Every instruction checks it; so do the kernel's other visible effects (``nl.device_print``).
        """
        if self.memory.borrow_broken:
            raise BorrowedInputWritten("")

    def _place(self) -> None:
        """Place the pending instruction on the timeline, after the producers :meth:`depend` gave it."""
        pending, after = self._pending, self._pending_after
        assert pending is not None
        self._pending = None
        if after:
            self._pending_after = []
        if len(pending) == 5:  # a direct plan's call (see issue)
            row, reads, writes, setup, loc = pending
            self.scheduler.queue(row, reads, writes, setup, after)
        else:
            opcode, engine, cost, reads, writes, loc, summary, unit = pending
            self.scheduler.schedule(opcode, engine, cost, reads, writes, loc, args=summary, unit=unit, after=after)
        if self._pending_saves:
            self._save_spilled(self.scheduler.count - 1, loc)

    def _spill_traffic(self, loc: SourceLoc, reads: list[tuple[str, Tensor]], writes: list[tuple[str, Tensor]]) -> None:
        """Place the refills of the spilled bytes the instruction reads; keep the saves of those it writes.

        One transfer per operand view in a spilled tile, of the view's bytes (elements x item size),
        costed as a DMA over the engines serving its partitions: between device memory and SBUF
        for an SBUF tile, between SBUF and PSUM for a PSUM tile (our estimate of the compiler's copy).
        """
        spilled = self.memory.spilled
        for _, t in reads:
            if t.storage.uid in spilled:
                refill = self.scheduler.schedule_spill("spill_reload", self._spill_cost(t), [t.region], [], loc, ())
                self._pending_after.append(refill)
        for _, t in writes:
            if t.storage.uid in spilled:
                self._pending_saves.append((self._spill_cost(t), t.region))

    def _spill_cost(self, t: Tensor) -> Cost:
        """The transfer of a spilled view's bytes to or from its next-tier memory (device memory for SBUF)."""
        return dma_cost(self.hw, t.size * t.itemsize, views=(t,), hbm=t.storage.kind == "sbuf")

    def _save_spilled(self, index: int, loc: SourceLoc) -> None:
        """Place the spill saves of instruction ``index``: each starts after it and writes the spilled bytes."""
        saves, self._pending_saves = self._pending_saves, []
        for cost, region in saves:
            self.scheduler.schedule_spill("spill_save", cost, [], [region], loc, (index,))

    def depend(self, consumer: int, producer: int) -> float | None:
        """Make instruction ``consumer`` start only after instruction ``producer`` has ended.

        Waiting on a producer in another engine or queue costs the semaphore latency, as a
        data dependency does. The latest instruction, not yet placed, takes the edge as a
        dependency; one already placed cannot move, so the edge holds only when it
        already starts late enough.

        Returns:
            None when the edge holds; else the start ``consumer`` would need (in ns).
        """
        if self._pending is not None and consumer == self.scheduler.count and producer < consumer:
            self._pending_after.append(producer)
            return None
        # read the placed instructions without placing the pending one: an edge into it may still come
        placed = self.scheduler.timeline
        timeline = placed if producer < len(placed) else self.timeline
        needed = self.scheduler.edge_ready(producer, timeline.track_id[consumer])
        return None if timeline.start_ns[consumer] >= needed else needed

    def _checkpoint(self, spec: InstructionSpec, loc: SourceLoc) -> None:
        """Before the next instruction: report progress, enforce the budget, and set the next check."""
        count = self.scheduler.count
        budget = self.budget
        elapsed = time.monotonic() - budget.start
        where = f"{spec.qualname}: "
        if self._limit is not None and count >= self._limit:
            raise BudgetError(
                f"{where}the kernel reached its budget of {self._limit:,} instructions "
                f"(max_instructions={self._limit}) after {elapsed:.1f} s; an endless loop? "
                "pass a larger max_instructions= (or None) for a longer kernel",
                instructions=count,
                elapsed=elapsed,
                loc=loc,
            )
        if budget.timeout is not None and elapsed > budget.timeout:
            raise BudgetError(
                f"{where}the kernel ran past its timeout={budget.timeout:g} s after {count:,} instructions "
                f"({elapsed:.1f} s); an endless loop? pass a larger timeout= (or None) for a longer kernel",
                instructions=count,
                elapsed=elapsed,
                loc=loc,
            )
        if self.on_progress is not None and count and count % PROGRESS_EVERY == 0:
            self.on_progress(count)
        step = PROGRESS_EVERY - count % PROGRESS_EVERY
        if budget.timeout is not None:
            step = min(step, _CLOCK_EVERY - count % _CLOCK_EVERY)
        self._next_check = count + step if self._limit is None else min(count + step, self._limit)

    def store(self, array: Any, value: Any) -> None:
        """Set ``array`` (a view of this core's memory) to ``value`` outside any instruction.

        The front end's immediate values (an HBM tensor of ``nl.zeros``, a lazily filled tile's
        values) go through here, so that a recorded program sets them again when replayed.
        """
        self.memory.settle_pending()
        array[...] = value
        if self.recorder is not None:
            self.recorder.stored(array, value)

    def effect(self, action: Callable[[Any], None], argument: Any) -> None:
        """Run ``action(argument)`` now (``nl.device_print``), and at this point of every replay."""
        self.memory.settle_pending()
        action(argument)
        if self.recorder is not None:
            self.recorder.effect(action, argument)

    # -- the steps ----------------------------------------------------------------------

    def _operands(self, spec: InstructionSpec, instruction: Instruction) -> Any:
        try:
            return spec.operands(**instruction.arguments)
        except ValidationError as exc:
            raise _operand_error(spec, self.hw, instruction.loc, exc) from None

    def _engine(self, spec: InstructionSpec, ops: Any, loc: SourceLoc) -> Engine:
        requested = ops.engine if "engine" in spec.operands.model_fields else Engine.unknown
        if requested is Engine.unknown:
            return spec.choose_engine(ops, self.hw) if spec.choose_engine else spec.engines[0]
        if requested not in spec.engines:
            raise OperandError(
                f"{requested.title} is not one of this instruction's engines ({spec.engine_names})",
                loc=loc,
                instruction=spec.qualname,
                target=self.hw.name,
                operand="engine",
            )
        return requested

    def _validate(self, spec: InstructionSpec, ops: Any, chk: Check) -> None:
        if (missing := missing_capability(spec, self.hw)) is not None:
            chk.fail(TargetError, "", needs(missing))
        check_common(ops, chk)
        if spec.validate is not None:
            spec.validate(ops, chk)

    def _execute(self, spec: InstructionSpec, ops: Any, engine: Engine, loc: SourceLoc) -> None:
        checker = self.checker
        token = None if checker is None else conversions_to(checker.conversions)
        try:
            spec.semantics(ops, self.state)
        except KernelError:
            raise
        except Exception as exc:  # a bug in nkisim, reported at the kernel's line
            if self.memory.borrowed and _refused_write(exc):
                self.memory.broke_borrow()  # a write into an input read in place, by a way check_writes does not see
            raise ExecutionError(
                f"failed: {type(exc).__name__}: {exc}",
                loc=loc,
                instruction=spec.qualname,
                engine=engine.title,
                target=self.hw.name,
            ) from exc
        finally:
            if token is not None:
                stop_conversions(token)
        if checker is not None:
            checker.converted(spec.name, loc)

    def _may_wait(self, spec: InstructionSpec, ops: Any) -> tuple[Tensor, Tensor] | None:
        """``(dst, src)`` when this copy's values may wait in HBM (:mod:`nkisim.memory.deferred`): a plain copy from
        HBM into a whole new automatic SBUF tile (one whose poison is not made yet), in a run that records no
        program; else None."""
        if self.recorder is not None:
            return None
        pair = spec.copies(ops)  # type: ignore[misc]
        if pair is None:
            return None
        dst, src = pair
        if (
            dst._base is None
            and dst.uid in self.memory.unpoisoned
            and dst.storage is self.memory.sbuf.storage
            and src.buffer not in ON_CHIP_BUFFERS
        ):
            return pair
        return None

    def _accesses(
        self,
        spec: InstructionSpec,
        ops: Any,
        reads: list[tuple[str, Tensor]],
        writes: list[tuple[str, Tensor]],
    ) -> tuple[list[Region], list[Region]]:
        """The regions read and written: the tensor operands', dynamic offsets, and the spec's extra accesses."""
        read_regions = [t.region for _, t in reads]
        write_regions = [t.region for _, t in writes]
        for _, t in (*reads, *writes):
            if t.__class__ is not Tensor:  # a dynamic .ap() view reads its offset tile or register
                read_regions.extend(t.offset_regions)
        if spec.extra_accesses is not None:
            more_reads, more_writes = spec.extra_accesses(ops)
            read_regions += more_reads
            write_regions += more_writes
        return read_regions, write_regions

    def _check_own_tiles(
        self,
        spec: InstructionSpec,
        loc: SourceLoc,
        reads: list[tuple[str, Tensor]],
        writes: list[tuple[str, Tensor]],
    ) -> None:
        """Every on-chip operand is a tile of this core's SBUF, PSUM or spill store (not kept from an earlier run)."""
        sbuf, psum, spilled = self.memory.sbuf.storage, self.memory.psum.storage, self.memory.spilled
        for name, t in (*reads, *writes):
            storage = t.storage
            if storage is sbuf or storage is psum:
                continue
            if t.buffer in ON_CHIP_BUFFERS and storage.kind in ("sbuf", "psum") and storage.uid not in spilled:
                raise OperandError(
                    f"{t.name!r} is a {t.buffer.value.upper()} tile of another run (kept from an earlier kernel run, "
                    "or another core's); on-chip tiles live only in the run that allocated them",
                    loc=loc,
                    instruction=spec.qualname,
                    target=self.hw.name,
                    operand=name,
                )


def _has_dynamic_view(arguments: Mapping[str, Any]) -> bool:
    """Whether an argument, or a tensor in a list or tuple argument, is a view at run-time offsets."""
    for value in arguments.values():
        if isinstance(value, (list, tuple)):
            if any(isinstance(item, Tensor) and item.is_dynamic for item in value):
                return True
        elif isinstance(value, Tensor) and value.is_dynamic:
            return True
    return False


def _refused_write(exc: Exception) -> bool:
    """Whether ``exc`` is numpy's or numba's refusal to write a read-only array."""
    text = str(exc)
    return "read-only" in text or "readonly" in text


def _summary(ops: Any) -> tuple[tuple[str, object], ...]:
    """The operands for the profile: tensors as (buffer, dtype, shape), other values as they are."""
    return tuple(
        [
            (key, (value.buffer.value, value.dtype, value.shape) if isinstance(value, Tensor) else value)
            for key, value in ops.__dict__.items()
            if value is not None and key != "name" and not isinstance(value, (list, tuple))
        ]
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
    return OperandError(rule, loc=loc, instruction=spec.qualname, target=hw.name, operand=field)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
