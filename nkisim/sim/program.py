"""Recorded programs: one kernel run kept as the steps that set values, to run again on new inputs.

A kernel's instruction stream, its addresses, its timeline and the sanitizer's findings
about memory and access patterns depend on the shapes, dtypes and other arguments of
its inputs, not on their values, unless an instruction makes them depend on values (a
register loaded from a tensor steering a loop, a run-time offset, an index that may be
out of range). A :class:`Recorder` attached to a run's machine keeps, in program order,
every step that sets values:

* each instruction's semantics with its operand model, whose tensors are *detached*
  copies of the run's views: the same memory views, without keeping the run's tiles
  alive (so recording frees tiles and places new ones exactly as a plain run does);
* each fill outside an instruction: the NaN-poisoning of a new tensor, ``nl.zeros`` of
  an HBM tensor, a lazily filled tile's values (:meth:`Machine.store`), and the
  printing of ``nl.device_print`` (:meth:`Machine.effect`);
* the sanitizer's findings that do not depend on values, in the order they were made;
* the state a replay starts from: the engines' accumulators and generators, each sequencer
  register's value when the program first uses it, and the PSUM accumulation marks.

A :class:`Program` replays them over the same memory image: it copies new inputs into
the input buffers, resets what the run started from (engine state, PSUM accumulation
marks), runs the steps, and copies the outputs out. The findings that do depend on
values (saturating conversions, activation inputs out of range) are made again from the
replay's own conversions. The timeline is the recorded one. A program holds one memory
image, so one replay runs at a time (a lock per program).

A run that cannot be replayed exactly gets a :attr:`Recorder.reason` instead: the first
value-dependent instruction (:attr:`~nkisim.isa.spec.InstructionSpec.value_dependent`, or
an operand with a run-time offset) or a multi-core launch.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nkisim.errors import Diagnostic, SourceLoc
from nkisim.hw import HwConfig
from nkisim.isa import EngineState, InstructionSpec
from nkisim.isa.registers import VirtualRegister
from nkisim.memory import Storage, Tensor
from nkisim.memory.dtypes import logging as conversions_to
from nkisim.memory.dtypes import stop_logging as stop_conversions
from nkisim.sim.checks import Checker, Findings

if TYPE_CHECKING:
    from nkisim.sim.machine import Machine

#: One replay step: ``fn(a, b)``.
Step = tuple[Callable[[Any, Any], Any], Any, Any]
#: Per step, what the sanitizer needs after it: (opcode, line, values computed from never-written elements),
#: or None for a step that is not an instruction.
Tail = tuple[str, SourceLoc, int] | None


class Recorder:
    """Records one single-core run as replay steps (see the module docstring).

    Attributes:
        reason: why the run cannot be replayed (None while it can).
    """

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """Forget what was recorded: a new attempt at the run begins (the liveness retry runs it again)."""
        self.reason: str | None = None
        self.machine: Machine | None = None
        self.steps: list[Step] = []
        self.tails: list[Tail] = []
        self.inputs: list[np.ndarray] = []
        self.initial_state: EngineState | None = None
        #: PSUM accumulation marks under every PSUM tile, by rectangle: reset before each replay.
        self.psum_marks: dict[tuple[int, int, int, int, int], np.ndarray] = {}
        #: The storages those marks are in, by uid (a replay forgets what they knew of their marks).
        self.psum_storages: dict[int, Storage] = {}
        #: The checker the replay's findings go to, made again by each replay (None: no sanitizer).
        self.checker: Checker | None = None
        #: Each sequencer register the program uses, with its bits when first used: set again before each replay.
        self.registers: dict[int, tuple[VirtualRegister, int | None]] = {}
        self._bases: dict[int, Tensor] = {}

    def refuse(self, reason: str) -> None:
        """The run cannot be replayed exactly; keep the first reason and stop recording."""
        if self.reason is None:
            self.reason = reason
            self.steps, self.tails, self._bases = [], [], {}

    # -- hooks (the machine, its memory and its checker call them) ----------------------

    def attach(self, machine: Machine) -> None:
        """Record ``machine``: its memory's fills and its checker's findings."""
        if self.machine is not None or machine.peer is not None:
            self.refuse("runs on several NeuronCores (a multi-core launch), which is not recorded")
            return
        self.machine = machine
        self.initial_state = _copy_state(machine.state)
        machine.memory.recorder = self
        if machine.checker is not None:
            self.checker = Checker(machine.checker.findings, machine.hw)
            machine.checker.on_report = self.report

    def instruction(self, spec: InstructionSpec, ops: Any, loc: SourceLoc) -> None:
        """An instruction passed its rules and is about to execute."""
        if self.reason is not None:
            return
        why = spec.value_dependent(ops) if spec.value_dependent is not None else None
        if why is None and _dynamic_operand(ops.__dict__.values()):
            why = "addresses an operand at a run-time offset read from tensor data"
        if why is not None:
            self.refuse(f"nisa.{spec.name} at {loc} {why}")
            return
        for value in ops.__dict__.values():
            if value.__class__ is VirtualRegister and id(value) not in self.registers:
                self.registers[id(value)] = (value, value._bits)
        self.steps.append((spec.semantics, _detach_ops(ops, self._bases), self.machine.state))  # type: ignore[union-attr]
        checker = self.machine.checker  # type: ignore[union-attr]
        self.tails.append((spec.name, loc, checker._carried_values) if checker is not None else None)

    def filled(self, view: np.ndarray, byte: int) -> None:
        """Every byte of ``view`` was set to ``byte`` (a new tensor's poison)."""
        self._step(np.ndarray.fill, view, byte)

    def placed_input(self, view: np.ndarray) -> None:
        """A kernel input was copied into ``view``."""
        if self.reason is None:
            self.inputs.append(view)

    def allocated(self, tensor: Tensor) -> None:
        """A new on-chip tile: under a PSUM tile, the accumulation marks start cleared on every replay."""
        marks = tensor.storage.acc_flags
        if marks is None or self.reason is not None:
            return
        r = tensor.region
        key = (r.storage.uid, r.r0, r.r1, r.b0, r.b1)
        if key not in self.psum_marks:
            self.psum_marks[key] = marks[r.r0 : r.r1, r.b0 // 2 : -(-r.b1 // 2)]  # a mark per two bytes
            self.psum_storages[r.storage.uid] = r.storage

    def stored(self, array: np.ndarray, value: Any) -> None:
        """``array[...] = value`` outside an instruction."""
        self._step(_assign, array, np.array(value, copy=True) if isinstance(value, np.ndarray) else value)

    def effect(self, action: Callable[[Any], None], argument: Any) -> None:
        """``action(argument)`` outside an instruction (a print)."""
        self._step(_apply, action, argument)

    def report(self, severity: str, check: str, loc: SourceLoc, instruction: str, rule: str) -> None:
        """A finding that does not depend on values."""
        self._step(_report, self.checker, (severity, check, loc, instruction, rule))

    def _step(self, fn: Callable[[Any, Any], Any], a: Any, b: Any) -> None:
        if self.reason is None:
            self.steps.append((fn, a, b))
            self.tails.append(None)


class Program:
    """A recorded run, replayed on new input values of the same shapes and dtypes.

    Args:
        recorder: what the run recorded (it must have a machine and no ``reason``).
        outputs: what the run returned, with its HBM outputs as views of the run's memory.
        mode: the sanitizer mode (``"strict"``, ``"warn"``) or ``"off"``.
    """

    def __init__(self, recorder: Recorder, outputs: Any, mode: str) -> None:
        machine = recorder.machine
        assert machine is not None and recorder.reason is None and recorder.initial_state is not None
        self.hw: HwConfig = machine.hw
        self.mode = mode
        self._steps = recorder.steps
        self._tails = recorder.tails
        self._inputs = recorder.inputs
        self._marks = list(recorder.psum_marks.values())
        self._psum_storages = list(recorder.psum_storages.values())
        self._registers = list(recorder.registers.values())
        self._state = machine.state
        self._initial_state = recorder.initial_state
        self._checker = recorder.checker if mode != "off" else None
        self._outputs = outputs
        self._lock = threading.Lock()
        machine.memory.recorder = None
        if machine.checker is not None:
            machine.checker.on_report = None

    @property
    def steps(self) -> int:
        """How many steps a replay runs (instructions, fills, findings)."""
        return len(self._steps)

    def run(self, inputs: Sequence[np.ndarray]) -> tuple[Any, list[Diagnostic]]:
        """Replay on ``inputs`` (the input arrays in placement order); the outputs (copies) and the findings."""
        with self._lock:
            state = self._state
            state.__dict__.update(_copy_state(self._initial_state).__dict__)
            for marks in self._marks:
                marks.fill(0)
            for storage in self._psum_storages:
                storage.acc_known = None
            for register, bits in self._registers:
                register._bits = bits
            for view, values in zip(self._inputs, inputs):
                view[...] = values
            checker = self._checker
            if checker is None:
                for fn, a, b in self._steps:
                    fn(a, b)
                diagnostics: list[Diagnostic] = []
            else:
                checker.__init__(Findings(self.mode), self.hw)  # type: ignore[misc]
                self._run_checked(checker)
                diagnostics = checker.diagnostics
            return _copied(self._outputs), diagnostics

    def _run_checked(self, checker: Checker) -> None:
        """The steps, with the sanitizer's findings about conversions made from the replay's values."""
        log = checker.conversions
        token = conversions_to(log)
        try:
            for (fn, a, b), tail in zip(self._steps, self._tails):
                fn(a, b)
                if tail is not None and (log.saturated or log.nan or log.outside):
                    opcode, loc, carried = tail
                    checker._carried_values = carried
                    checker.converted(opcode, loc)
        finally:
            stop_conversions(token)


def _copy_state(state: EngineState) -> EngineState:
    """A copy of ``state``'s registers and generators (its capabilities are shared: they do not change)."""
    return copy.deepcopy(state, {id(state.capabilities): state.capabilities})


# -- steps --------------------------------------------------------------------------------


def _assign(array: np.ndarray, value: Any) -> None:
    array[...] = value


def _apply(action: Callable[[Any], None], argument: Any) -> None:
    action(argument)


def _report(checker: Checker, finding: tuple[str, str, SourceLoc, str, str]) -> None:
    checker.report(*finding)


def _copied(outputs: Any) -> Any:
    """``outputs`` with every array copied out of the program's memory."""
    if isinstance(outputs, np.ndarray):
        return outputs.copy()
    if isinstance(outputs, tuple):
        return tuple(_copied(item) for item in outputs)
    if isinstance(outputs, list):
        return [_copied(item) for item in outputs]
    if isinstance(outputs, dict):
        return {key: _copied(item) for key, item in outputs.items()}
    return outputs


# -- detached operands ----------------------------------------------------------------------


def _dynamic_operand(values: Any) -> bool:
    for value in values:
        if isinstance(value, Tensor):
            if value.is_dynamic:
                return True
        elif isinstance(value, (list, tuple)) and _dynamic_operand(value):
            return True
    return False


def _slots(cls: type) -> list[Any]:
    """The slot descriptors of ``cls`` and its bases (``__weakref__`` left out)."""
    found = _SLOTS.get(cls)
    if found is None:
        found = _SLOTS[cls] = [
            klass.__dict__[name]
            for klass in cls.__mro__
            for name in klass.__dict__.get("__slots__", ())
            if name != "__weakref__"
        ]
    return found


_SLOTS: dict[type, list[Any]] = {}


def _detach(t: Tensor, bases: dict[int, Tensor]) -> Tensor:
    """A copy of view ``t`` over the same bytes that keeps no tile of the run alive.

    Its base (the allocation's root view, which a tile's liveness follows) is a detached
    copy too, one per allocation; the uid is kept, as PSUM accumulation follows it.
    """
    clone = object.__new__(t.__class__)
    for slot in _slots(t.__class__):  # a static view sets every slot (Tensor.__init__)
        slot.__set__(clone, slot.__get__(t))
    base = t._base
    if base is not None:
        kept = bases.get(base.uid)
        if kept is None:
            kept = bases[base.uid] = _detach(base, bases)
        clone._base = kept
    return clone


def _detach_value(value: Any, bases: dict[int, Tensor], memo: dict[int, Any]) -> Any:
    if isinstance(value, Tensor):
        done = memo.get(id(value))
        if done is None:
            done = memo[id(value)] = _detach(value, bases)
        return done
    if isinstance(value, (list, tuple)) and any(isinstance(v, (Tensor, list, tuple)) for v in value):
        return type(value)(_detach_value(v, bases, memo) for v in value)
    return value


def _detach_ops(ops: Any, bases: dict[int, Tensor]) -> Any:
    """A copy of the operand model whose tensors are detached (see :func:`_detach`)."""
    memo: dict[int, Any] = {}
    clone = object.__new__(ops.__class__)
    values = {key: _detach_value(value, bases, memo) for key, value in ops.__dict__.items()}
    set_ = object.__setattr__
    set_(clone, "__dict__", values)
    set_(clone, "__pydantic_fields_set__", set(ops.__pydantic_fields_set__))
    set_(clone, "__pydantic_extra__", ops.__pydantic_extra__)
    set_(clone, "__pydantic_private__", ops.__pydantic_private__)
    return clone
